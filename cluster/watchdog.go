package cluster

import (
	"fmt"
	"slices"
	"sync"
	"time"

	pcluster "github.com/asynkron/protoactor-go/cluster"
	"github.com/rs/zerolog"
)

// zombieSigns is what the watchdog sees of the member at one check.
type zombieSigns struct {
	// SelfBlocked: the member's id is in its own block list.
	SelfBlocked bool
	// BlockedBy is the id of a peer that answered a connection with "blocked" since the
	// last check ("" when none did).
	BlockedBy string
	// TopologySeen: a topology holding the member was published at least once;
	// InTopology: the latest topology holds it.
	TopologySeen, InTopology bool
	// ProviderHealthy: discovery answers and the member is registered.
	ProviderHealthy bool
	// Peers are the other members of the latest topology that discovery reports alive,
	// as gossip shows them; nil when gossip could not be read at this check.
	Peers []peerSigns
}

// peerSigns is what this member's gossip state says about one peer.
type peerSigns struct {
	ID string
	// Heard is when the peer's latest heartbeat reached this member (zero: never).
	Heard time.Time
	// TopologyKnown: the peer's own topology has reached this member; IncludesMe: it
	// holds this member.
	TopologyKnown, IncludesMe bool
}

// zombieCheck decides from successive checks whether the member has been dropped from the
// cluster for good (protoactor never lets a blocked member id back). The signs:
//
//   - its own id is in its own block list;
//   - a peer answered a connection with "blocked";
//   - it is missing from its own member list for absentLimit checks in a row while
//     discovery is healthy;
//   - a peer's own topology, as gossip relays it, has left it out for peerLimit — that
//     peer dropped it (and blocked it);
//   - no peer that discovery reports alive has gossiped to it for peerLimit: they have
//     all dropped it, and gossip only goes to members one holds.
//
// Pure: time is an input. One value per member.
type zombieCheck struct {
	absentLimit int           // checks in a row absent from the own topology, provider healthy
	peerLimit   time.Duration // how long a peer may leave us out, or all peers stay silent

	absent        int
	firstSeen     map[string]time.Time // when each current peer was first seen
	excludedSince map[string]time.Time // since when each peer's topology has left us out
}

func newZombieCheck(absentLimit int, peerLimit time.Duration) *zombieCheck {
	return &zombieCheck{absentLimit: absentLimit, peerLimit: peerLimit,
		firstSeen: map[string]time.Time{}, excludedSince: map[string]time.Time{}}
}

// step takes one check's signs at now and returns why the member is lost, or "" while it
// is not.
func (z *zombieCheck) step(now time.Time, s zombieSigns) string {
	switch {
	case s.SelfBlocked:
		return "the member's own id is in its block list"
	case s.BlockedBy != "":
		return fmt.Sprintf("member %s answered that it has blocked this member", s.BlockedBy)
	}
	if s.TopologySeen && !s.InTopology && s.ProviderHealthy {
		z.absent++
	} else {
		z.absent = 0
	}
	if z.absent >= z.absentLimit {
		return fmt.Sprintf("the member has been missing from its own member list for %d checks while discovery is healthy", z.absent)
	}
	if s.Peers == nil {
		return ""
	}
	z.forgetGone(s.Peers)
	if !s.ProviderHealthy {
		clear(z.excludedSince)
		return ""
	}
	silent := 0
	for _, p := range s.Peers {
		first, ok := z.firstSeen[p.ID]
		if !ok {
			first, z.firstSeen[p.ID] = now, now
		}
		if p.TopologyKnown && !p.IncludesMe {
			since, ok := z.excludedSince[p.ID]
			if !ok {
				since, z.excludedSince[p.ID] = now, now
			}
			if now.Sub(since) >= z.peerLimit {
				return fmt.Sprintf("member %s has left this member out of its topology for %s: it has dropped it", p.ID, now.Sub(since).Round(time.Second))
			}
		} else {
			delete(z.excludedSince, p.ID)
		}
		if now.Sub(latest(first, p.Heard)) >= z.peerLimit {
			silent++
		}
	}
	if len(s.Peers) > 0 && silent == len(s.Peers) {
		return fmt.Sprintf("none of the %d members that discovery reports alive has gossiped to this member for %s: they have dropped it", silent, z.peerLimit)
	}
	return ""
}

// forgetGone drops the state of peers no longer among peers.
func (z *zombieCheck) forgetGone(peers []peerSigns) {
	for id := range z.firstSeen {
		if !slices.ContainsFunc(peers, func(p peerSigns) bool { return p.ID == id }) {
			delete(z.firstSeen, id)
			delete(z.excludedSince, id)
		}
	}
}

func latest(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// watchdog runs zombieCheck every interval against a live member and closes lost once.
// The topology is followed through the actor system's event stream (the member list's own
// fields are not safe to read from another goroutine); gossip state is asked of the gossip
// actor.
type watchdog struct {
	selfID   string
	cluster  *pcluster.Cluster
	healthy  func() bool
	alive    func() map[string]bool // discovery's live member ids; nil: trust the topology
	interval time.Duration
	log      zerolog.Logger

	mu           sync.Mutex
	topologySeen bool
	inTopology   bool
	peers        []string // the latest topology's other members
	blockedBy    string

	lost     chan struct{}
	reason   string // set before lost is closed
	stop     chan struct{}
	done     chan struct{}
	stopOnce sync.Once
}

func newWatchdog(selfID string, healthy func() bool, alive func() map[string]bool, interval time.Duration, log zerolog.Logger) *watchdog {
	return &watchdog{selfID: selfID, healthy: healthy, alive: alive, interval: interval, log: log,
		lost: make(chan struct{}), stop: make(chan struct{}), done: make(chan struct{})}
}

// onTopology is called (synchronously, by the event stream) for every published topology.
func (w *watchdog) onTopology(t *pcluster.ClusterTopology) {
	in := false
	var peers []string
	for _, m := range t.Members {
		if m.Id == w.selfID {
			in = true
		} else {
			peers = append(peers, m.Id)
		}
	}
	w.mu.Lock()
	w.inTopology, w.peers = in, peers
	w.topologySeen = w.topologySeen || in
	w.mu.Unlock()
}

// onBlockedBy is called when a peer answers a connection with "blocked".
func (w *watchdog) onBlockedBy(peer string) {
	w.mu.Lock()
	if w.blockedBy == "" {
		w.blockedBy = peer
	}
	w.mu.Unlock()
}

func (w *watchdog) run() {
	defer close(w.done)
	z := newZombieCheck(absentChecksLimit, peerSilenceLimit)
	t := time.NewTicker(w.interval)
	defer t.Stop()
	for {
		select {
		case <-w.stop:
			return
		case <-t.C:
		}
		if reason := z.step(time.Now(), w.signs()); reason != "" {
			w.reason = reason
			w.log.Error().Str("member", w.selfID).Str("reason", reason).
				Msg("cluster member lost: the cluster has dropped it for good; restart it with a new id")
			close(w.lost)
			return
		}
	}
}

func (w *watchdog) signs() zombieSigns {
	bl := w.cluster.Remote.BlockList()
	// Len takes the block list's lock, which orders this read after every Block so far.
	selfBlocked := bl.Len() > 0 && bl.IsBlocked(w.selfID)
	healthy := w.healthy()
	w.mu.Lock()
	s := zombieSigns{SelfBlocked: selfBlocked, BlockedBy: w.blockedBy, TopologySeen: w.topologySeen,
		InTopology: w.inTopology, ProviderHealthy: healthy}
	w.blockedBy = ""
	peers := w.peers
	w.mu.Unlock()
	s.Peers = w.peerSigns(peers)
	return s
}

// peerSigns reads the gossip state for the given peers, keeping those discovery reports
// alive; nil when gossip does not answer.
func (w *watchdog) peerSigns(peers []string) []peerSigns {
	heartbeats, err := w.cluster.Gossip.GetState(pcluster.HeartbeatKey)
	if err != nil {
		return nil
	}
	topologies, err := w.cluster.Gossip.GetState(pcluster.TopologyKey)
	if err != nil {
		return nil
	}
	var alive map[string]bool
	if w.alive != nil {
		alive = w.alive()
	}
	out := []peerSigns{}
	for _, id := range peers {
		if alive != nil && !alive[id] {
			continue // kept through a recovery window, or leaving: its silence proves nothing
		}
		p := peerSigns{ID: id}
		if hb, ok := heartbeats[id]; ok && hb.LocalTimestampUnixMilliseconds > 0 {
			p.Heard = time.UnixMilli(hb.LocalTimestampUnixMilliseconds)
		}
		if tv, ok := topologies[id]; ok && tv.Value != nil {
			var t pcluster.ClusterTopology
			if tv.Value.UnmarshalTo(&t) == nil {
				p.TopologyKnown = true
				p.IncludesMe = slices.ContainsFunc(t.Members, func(m *pcluster.Member) bool { return m.Id == w.selfID })
			}
		}
		out = append(out, p)
	}
	return out
}

// halt stops the watchdog and waits for it.
func (w *watchdog) halt() {
	w.stopOnce.Do(func() { close(w.stop) })
	<-w.done
}
