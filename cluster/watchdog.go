package cluster

import (
	"fmt"
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
}

// zombieCheck decides from successive checks whether the member has been dropped from the
// cluster for good (protoactor never lets a blocked member id back). Pure; one value per
// member.
type zombieCheck struct {
	absentLimit int // checks in a row absent from the own topology, provider healthy
	absent      int
}

// step takes one check's signs and returns why the member is lost, or "" while it is not.
func (z *zombieCheck) step(s zombieSigns) string {
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
	return ""
}

// watchdog runs zombieCheck every interval against a live member and closes lost once.
// The topology is followed through the actor system's event stream (the member list's own
// fields are not safe to read from another goroutine).
type watchdog struct {
	selfID   string
	cluster  *pcluster.Cluster
	healthy  func() bool
	interval time.Duration
	log      zerolog.Logger

	mu           sync.Mutex
	topologySeen bool
	inTopology   bool
	blockedBy    string

	lost     chan struct{}
	reason   string // set before lost is closed
	stop     chan struct{}
	done     chan struct{}
	stopOnce sync.Once
}

func newWatchdog(selfID string, c *pcluster.Cluster, healthy func() bool, interval time.Duration, log zerolog.Logger) *watchdog {
	return &watchdog{selfID: selfID, cluster: c, healthy: healthy, interval: interval, log: log,
		lost: make(chan struct{}), stop: make(chan struct{}), done: make(chan struct{})}
}

// onTopology is called (synchronously, by the event stream) for every published topology.
func (w *watchdog) onTopology(t *pcluster.ClusterTopology) {
	in := false
	for _, m := range t.Members {
		if m.Id == w.selfID {
			in = true
			break
		}
	}
	w.mu.Lock()
	w.inTopology = in
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
	z := zombieCheck{absentLimit: absentChecksLimit}
	t := time.NewTicker(w.interval)
	defer t.Stop()
	for {
		select {
		case <-w.stop:
			return
		case <-t.C:
		}
		if reason := z.step(w.signs()); reason != "" {
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
	defer w.mu.Unlock()
	s := zombieSigns{SelfBlocked: selfBlocked, BlockedBy: w.blockedBy, TopologySeen: w.topologySeen,
		InTopology: w.inTopology, ProviderHealthy: healthy}
	w.blockedBy = ""
	return s
}

// halt stops the watchdog and waits for it.
func (w *watchdog) halt() {
	w.stopOnce.Do(func() { close(w.stop) })
	<-w.done
}
