package cluster

import (
	"sync"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	pcluster "github.com/asynkron/protoactor-go/cluster"
	"github.com/asynkron/protoactor-go/cluster/identitylookup/disthash"
	"github.com/asynkron/protoactor-go/eventstream"
)

// identityLookup is protoactor's distributed-hash identity lookup with a bounded
// activation request (docs/actor-library.md §7): the library's waits a fixed 5 s on an
// owner that has just died. Here the owner is found the same way (rendezvous hashing
// over the members hosting the kind) and asked with timeout, while placement and
// activation stay the library's (its placement actor answers).
type identityLookup struct {
	inner   pcluster.IdentityLookup
	timeout time.Duration

	c    *pcluster.Cluster
	sub  *eventstream.Subscription
	mu   sync.RWMutex
	rdv  *pcluster.Rendezvous
	last *pcluster.ClusterTopology
	stop chan struct{}
	done chan struct{}
	once sync.Once // Shutdown may be called more than once
}

// reconcileEvery is how often the placement actor re-checks which of its activations it
// still owns, stopping those it does not: the library's placement actor activates a grain
// for whoever asks, so a caller with a lagging topology can leave a second activation
// beside the owner's (two Router grains for one model; docs/actor-library.md §7).
// Callers' PID caches drop a stopped activation, and their next lookup finds the owner.
const reconcileEvery = 2 * time.Second

func newIdentityLookup(timeout time.Duration) *identityLookup {
	return &identityLookup{inner: disthash.New(), timeout: timeout, rdv: pcluster.NewRendezvous()}
}

// Setup subscribes to topology changes, then sets up the library's lookup (which spawns
// the placement actor that answers activation requests).
func (l *identityLookup) Setup(c *pcluster.Cluster, kinds []string, isClient bool) {
	l.c = c
	l.sub = c.ActorSystem.EventStream.Subscribe(func(ev any) {
		if t, ok := ev.(*pcluster.ClusterTopology); ok {
			rdv := pcluster.NewRendezvous()
			rdv.UpdateMembers(t.Members)
			l.mu.Lock()
			l.rdv, l.last = rdv, t
			l.mu.Unlock()
		}
	})
	l.inner.Setup(c, kinds, isClient)
	l.stop, l.done = make(chan struct{}), make(chan struct{})
	go l.reconcile()
}

// reconcile sends the latest topology to this member's placement actor every
// reconcileEvery, until Shutdown.
func (l *identityLookup) reconcile() {
	defer close(l.done)
	tick := time.NewTicker(reconcileEvery)
	defer tick.Stop()
	placement := actor.NewPID(l.c.ActorSystem.Address(), disthash.PartitionActivatorActorName)
	for {
		select {
		case <-l.stop:
			return
		case <-tick.C:
			l.mu.RLock()
			t := l.last
			l.mu.RUnlock()
			if t != nil {
				l.c.ActorSystem.Root.Send(placement, t)
			}
		}
	}
}

// Get returns the PID of the grain, activating it on its owner member; nil when there is
// no owner or the owner does not answer within the timeout (the caller retries).
func (l *identityLookup) Get(ci *pcluster.ClusterIdentity) *actor.PID {
	l.mu.RLock()
	owner := l.rdv.GetByClusterIdentity(ci)
	l.mu.RUnlock()
	if owner == "" {
		return nil
	}
	res, err := l.c.ActorSystem.Root.RequestFuture(actor.NewPID(owner, disthash.PartitionActivatorActorName),
		&pcluster.ActivationRequest{ClusterIdentity: ci}, l.timeout).Result()
	if err != nil {
		return nil
	}
	if r, ok := res.(*pcluster.ActivationResponse); ok {
		return r.Pid
	}
	return nil
}

// hosts reports whether the latest topology lists a member at address (host:port);
// true before any topology is known, since nothing says the member left.
func (l *identityLookup) hosts(address string) bool {
	l.mu.RLock()
	defer l.mu.RUnlock()
	if l.last == nil {
		return true
	}
	for _, m := range l.last.Members {
		if m.Address() == address {
			return true
		}
	}
	return false
}

// RemovePid is the library's (it broadcasts the activation's end).
func (l *identityLookup) RemovePid(ci *pcluster.ClusterIdentity, pid *actor.PID) {
	l.inner.RemovePid(ci, pid)
}

// Shutdown stops the topology subscription and the library's lookup.
func (l *identityLookup) Shutdown() {
	l.once.Do(func() {
		if l.stop != nil {
			close(l.stop)
			<-l.done
		}
	})
	if l.sub != nil {
		l.c.ActorSystem.EventStream.Unsubscribe(l.sub)
	}
	l.inner.Shutdown()
}
