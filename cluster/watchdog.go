package cluster

import (
	"fmt"
	"maps"
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
	// BlockedBy are the ids of the peers that answered a connection with "blocked" since
	// the last check (nil when none did).
	BlockedBy []string
	// Paused is the longest stretch since the last check during which the process did not
	// run at all (SIGSTOP, a frozen VM or container); zero when it ran throughout.
	Paused time.Duration
	// TopologySeen: a topology holding the member was published at least once;
	// InTopology: the latest topology holds it.
	TopologySeen, InTopology bool
	// TopologyPeers are the other members of the latest topology.
	TopologyPeers []string
	// ProviderHealthy: discovery answers and the member is registered.
	ProviderHealthy bool
	// Alive are the member ids whose discovery checks passed in discovery's last answer;
	// nil when discovery does not say (in-process discovery, or no answer yet): the
	// topology alone then tells who is live.
	Alive map[string]bool
	// Peers are TopologyPeers as gossip shows them; nil when gossip could not be read at
	// this check.
	Peers []peerSigns
	// Lapsed is when discovery last took the member's registration or TTL refresh after a
	// gap of its TTL or more (its check lapsed meanwhile); zero when it never has, or
	// discovery has no TTL. Answered is when discovery's membership query last answered.
	Lapsed, Answered time.Time
}

// live reports whether id is a member of the live cluster as this member sees it: in its
// latest topology, and passing its check in discovery when discovery says.
func (s *zombieSigns) live(id string) bool {
	return slices.Contains(s.TopologyPeers, id) && (s.Alive == nil || s.Alive[id])
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
// cluster for good (protoactor never lets a blocked member id back: docs/actor-library.md
// §2). The signs:
//
//   - its own id is in its own block list;
//   - the process did not run for pauseLimit (more than its health check's TTL): its check
//     lapsed, and the others dropped and blocked it meanwhile;
//   - a live peer answered a connection with "blocked";
//   - it is missing from its own member list for absentLimit checks in a row while
//     discovery is healthy;
//   - a live peer's own topology, as gossip relays it, held it once and leaves it out
//     now: that peer dropped it and blocked its id (protoactor blocks every member that
//     leaves its topology, docs/actor-library.md §2), so this is final at once;
//   - a live peer's topology has left it out for peerLimit without ever holding it (a
//     peer that dropped it before its topology reached this member);
//   - no live peer has gossiped to it for peerLimit: they have all dropped it, and gossip
//     only goes to members one holds;
//   - its health check lapsed (a partition from Consul), and from lapseGrace to
//     lapseWindow after discovery took it again, with discovery healthy and answering
//     since, a live peer has been silent for lapseGrace: that peer's side watched the
//     check fail and dropped it. The peers on its own side of the partition keep
//     gossiping with it, so the silence of all would never come; and a peer that has
//     only gone quiet (paused, killed) stops being live in discovery within its TTL,
//     less than lapseGrace.
//
// Only the live cluster may make a member restart. A live peer is one of the latest
// topology that discovery reports alive (zombieSigns.live). A member the cluster has
// dropped — left out of the topology, its check failing — may have blocked the healthy
// members in turn (protoactor blocks every peer whose heartbeat it has not heard for a
// while, and a resumed process has heard none), and answers "blocked" to each of them:
// that answer is ignored here, and the dropped member finds out by itself that it is the
// one to restart (its pause, its peers' silence or blocked answers).
//
// Pure: time is an input. One value per member.
type zombieCheck struct {
	absentLimit int           // checks in a row absent from the own topology, provider healthy
	peerLimit   time.Duration // how long a peer may leave us out, or all peers stay silent
	pauseLimit  time.Duration // the longest pause a member survives; 0: pauses are not looked at
	grace       time.Duration // a live peer's silence after a lapse that drops us: lapseGrace, at least pauseLimit + 1 s

	absent        int
	firstSeen     map[string]time.Time // when each current live peer was first seen
	excludedSince map[string]time.Time // since when each live peer's topology has left us out
	heldBy        map[string]bool      // the live peers whose topology has held us
}

func newZombieCheck(absentLimit int, peerLimit, pauseLimit time.Duration) *zombieCheck {
	return &zombieCheck{absentLimit: absentLimit, peerLimit: peerLimit, pauseLimit: pauseLimit,
		grace:     max(lapseGrace, pauseLimit+time.Second),
		firstSeen: map[string]time.Time{}, excludedSince: map[string]time.Time{}, heldBy: map[string]bool{}}
}

// step takes one check's signs at now and returns why the member is lost, or "" while it
// is not; ignored are the peers whose "blocked" answers did not count, because the
// cluster has dropped them.
func (z *zombieCheck) step(now time.Time, s zombieSigns) (lost string, ignored []string) {
	if s.SelfBlocked {
		return "the member's own id is in its block list", nil
	}
	if z.pauseLimit > 0 && s.Paused >= z.pauseLimit {
		return fmt.Sprintf("the process did not run for %s (the limit is %s, past its health check's TTL): the cluster has dropped it meanwhile",
			s.Paused.Round(100*time.Millisecond), z.pauseLimit), nil
	}
	for _, id := range s.BlockedBy {
		if s.live(id) {
			return fmt.Sprintf("member %s, live in the cluster, answered that it has blocked this member", id), nil
		}
		ignored = append(ignored, id)
	}
	if s.TopologySeen && !s.InTopology && s.ProviderHealthy {
		z.absent++
	} else {
		z.absent = 0
	}
	if z.absent >= z.absentLimit {
		return fmt.Sprintf("the member has been missing from its own member list for %d checks while discovery is healthy", z.absent), ignored
	}
	if s.Peers == nil {
		return "", ignored
	}
	// A peer kept through a recovery window, or leaving, is not live: its silence and its
	// topology prove nothing.
	peers := make([]peerSigns, 0, len(s.Peers))
	for _, p := range s.Peers {
		if s.live(p.ID) {
			peers = append(peers, p)
		}
	}
	z.forgetGone(peers)
	// A peer's topology that held this member and leaves it out now has blocked it: that
	// is final whatever discovery says (the topology goes forward only, by gossip's
	// sequence numbers).
	for _, p := range peers {
		if _, ok := z.firstSeen[p.ID]; !ok {
			z.firstSeen[p.ID] = now
		}
		switch {
		case !p.TopologyKnown:
		case p.IncludesMe:
			z.heldBy[p.ID] = true
		case z.heldBy[p.ID]:
			return fmt.Sprintf("member %s had this member in its topology and has left it out: it has dropped and blocked it", p.ID), ignored
		}
	}
	// A gossip message sent before the partition can arrive after it (TCP retransmits):
	// a heartbeat heard once since the lapse proves nothing, a silence as long as the
	// grace does.
	if since := now.Sub(s.Lapsed); !s.Lapsed.IsZero() && s.ProviderHealthy && s.Answered.After(s.Lapsed) &&
		since >= z.grace && since <= lapseWindow {
		for _, p := range peers {
			if silent := now.Sub(latest(z.firstSeen[p.ID], p.Heard)); silent >= z.grace {
				return fmt.Sprintf("the member's health check lapsed %s ago, and member %s, live in discovery, has not gossiped to it for %s: it has dropped it",
					since.Round(time.Second), p.ID, silent.Round(time.Second)), ignored
			}
		}
	}
	if !s.ProviderHealthy {
		clear(z.excludedSince)
		return "", ignored
	}
	silent := 0
	for _, p := range peers {
		first := z.firstSeen[p.ID]
		if p.TopologyKnown && !p.IncludesMe {
			since, ok := z.excludedSince[p.ID]
			if !ok {
				since, z.excludedSince[p.ID] = now, now
			}
			if now.Sub(since) >= z.peerLimit {
				return fmt.Sprintf("member %s has left this member out of its topology for %s: it has dropped it", p.ID, now.Sub(since).Round(time.Second)), ignored
			}
		} else {
			delete(z.excludedSince, p.ID)
		}
		if now.Sub(latest(first, p.Heard)) >= z.peerLimit {
			silent++
		}
	}
	if len(peers) > 0 && silent == len(peers) {
		return fmt.Sprintf("none of the %d members that discovery reports alive has gossiped to this member for %s: they have dropped it", silent, z.peerLimit), ignored
	}
	return "", ignored
}

// forgetGone drops the state of peers no longer among peers.
func (z *zombieCheck) forgetGone(peers []peerSigns) {
	gone := func(id string) bool { return !slices.ContainsFunc(peers, func(p peerSigns) bool { return p.ID == id }) }
	for _, m := range []map[string]time.Time{z.firstSeen, z.excludedSince} {
		maps.DeleteFunc(m, func(id string, _ time.Time) bool { return gone(id) })
	}
	maps.DeleteFunc(z.heldBy, func(id string, _ bool) bool { return gone(id) })
}

func latest(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// pauseOf is how long a process did not run between two wake-ups of a ticker of period
// tick, at prev and now: what the gap has beyond one period (never negative).
func pauseOf(prev, now time.Time, tick time.Duration) time.Duration {
	return max(0, now.Sub(prev)-tick)
}

// watchdog runs zombieCheck every interval against a live member and closes lost once.
// The topology is followed through the actor system's event stream (the member list's own
// fields are not safe to read from another goroutine); gossip state is asked of the gossip
// actor. With pauseLimit set, a clock goroutine wakes every pauseTick and records how long
// the process did not run.
type watchdog struct {
	selfID     string
	cluster    *pcluster.Cluster
	healthy    func() bool
	alive      func() map[string]bool              // discovery's live member ids; nil: trust the topology
	lapse      func() (lapsed, answered time.Time) // zombieSigns.Lapsed and .Answered; nil: no TTL
	interval   time.Duration
	pauseLimit time.Duration // 0: pauses are not looked at (in-process discovery has no TTL)
	log        zerolog.Logger

	mu           sync.Mutex
	topologySeen bool
	inTopology   bool
	peers        []string        // the latest topology's other members
	blockedBy    map[string]bool // peers that answered "blocked" since the last check
	paused       time.Duration   // the longest pause since the last check

	noted map[string]bool // dropped peers whose "blocked" answer was logged as ignored (run's alone)

	lost     chan struct{}
	reason   string // set before lost is closed
	stop     chan struct{}
	done     sync.WaitGroup
	stopOnce sync.Once
}

func newWatchdog(selfID string, healthy func() bool, alive func() map[string]bool, lapse func() (time.Time, time.Time),
	interval, pauseLimit time.Duration, log zerolog.Logger) *watchdog {
	return &watchdog{selfID: selfID, healthy: healthy, alive: alive, lapse: lapse, interval: interval, pauseLimit: pauseLimit, log: log,
		blockedBy: map[string]bool{}, noted: map[string]bool{}, lost: make(chan struct{}), stop: make(chan struct{})}
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

// onBlockedBy is called when a peer answers a connection with "blocked". The ids come
// from the network: at most maxBlockedBy distinct ones are kept per check.
func (w *watchdog) onBlockedBy(peer string) {
	w.mu.Lock()
	if len(w.blockedBy) < maxBlockedBy {
		w.blockedBy[peer] = true
	}
	w.mu.Unlock()
}

// start runs the watchdog's goroutines until halt.
func (w *watchdog) start() {
	w.done.Add(1)
	go w.run()
	if w.pauseLimit > 0 {
		w.done.Add(1)
		go w.clock()
	}
}

func (w *watchdog) run() {
	defer w.done.Done()
	z := newZombieCheck(absentChecksLimit, peerSilenceLimit, w.pauseLimit)
	t := time.NewTicker(w.interval)
	defer t.Stop()
	last := time.Now()
	for {
		select {
		case <-w.stop:
			return
		case <-t.C:
		}
		now := time.Now()
		s := w.signs()
		// This loop measures pauses too, between checks: the first check after a freeze
		// sees it even if the clock has not woken yet.
		s.Paused = max(s.Paused, pauseOf(last, now, w.interval))
		reason, ignored := z.step(now, s)
		last = time.Now()
		w.noteIgnored(ignored)
		if reason != "" {
			w.reason = reason
			w.log.Error().Str("member", w.selfID).Str("reason", reason).
				Msg("cluster member lost: the cluster has dropped it for good; restart it with a new id")
			close(w.lost)
			return
		}
	}
}

// noteIgnored logs, once per peer, a "blocked" answer that did not count.
func (w *watchdog) noteIgnored(ids []string) {
	for _, id := range ids {
		if w.noted[id] {
			continue
		}
		if len(w.noted) >= maxBlockedBy {
			clear(w.noted)
		}
		w.noted[id] = true
		w.log.Info().Str("member", w.selfID).Str("peer", id).
			Msg("a member the cluster has dropped answered that it has blocked this member; ignored: it is the one to restart")
	}
}

// clock wakes every pauseTick and records the longest stretch the process did not run.
func (w *watchdog) clock() {
	defer w.done.Done()
	t := time.NewTicker(pauseTick)
	defer t.Stop()
	prev := time.Now()
	for {
		select {
		case <-w.stop:
			return
		case <-t.C:
		}
		now := time.Now()
		if p := pauseOf(prev, now, pauseTick); p > 0 {
			w.mu.Lock()
			w.paused = max(w.paused, p)
			w.mu.Unlock()
		}
		prev = now
	}
}

func (w *watchdog) signs() zombieSigns {
	bl := w.cluster.Remote.BlockList()
	// Len takes the block list's lock, which orders this read after every Block so far.
	selfBlocked := bl.Len() > 0 && bl.IsBlocked(w.selfID)
	healthy := w.healthy()
	var alive map[string]bool
	if w.alive != nil {
		alive = w.alive()
	}
	var lapsed, answered time.Time
	if w.lapse != nil {
		lapsed, answered = w.lapse()
	}
	w.mu.Lock()
	s := zombieSigns{SelfBlocked: selfBlocked, Paused: w.paused, TopologySeen: w.topologySeen,
		InTopology: w.inTopology, TopologyPeers: w.peers, ProviderHealthy: healthy, Alive: alive, Lapsed: lapsed, Answered: answered}
	for id := range w.blockedBy {
		s.BlockedBy = append(s.BlockedBy, id)
	}
	slices.Sort(s.BlockedBy)
	clear(w.blockedBy)
	w.paused = 0
	w.mu.Unlock()
	s.Peers = w.peerSigns(s.TopologyPeers)
	return s
}

// peerSigns reads the gossip state for the given peers; nil when gossip does not answer.
func (w *watchdog) peerSigns(peers []string) []peerSigns {
	heartbeats, err := w.cluster.Gossip.GetState(pcluster.HeartbeatKey)
	if err != nil {
		return nil
	}
	topologies, err := w.cluster.Gossip.GetState(pcluster.TopologyKey)
	if err != nil {
		return nil
	}
	out := []peerSigns{}
	for _, id := range peers {
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

// halt stops the watchdog and waits for its goroutines.
func (w *watchdog) halt() {
	w.stopOnce.Do(func() { close(w.stop) })
	w.done.Wait()
}
