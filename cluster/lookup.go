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
// activation request. The library's lookup asks the identity's owner member for the
// grain's PID with a fixed 5 s timeout, whatever the caller's own timeout: when the owner
// has just died, every grain call waits those 5 s before it can retry on the member that
// owns the identity after the topology change. Here the owner is found the same way
// (rendezvous hashing over the members hosting the kind) and asked with Timeout, while
// placement and activation stay the library's (its placement actor answers).
type identityLookup struct {
	inner   pcluster.IdentityLookup
	timeout time.Duration

	c   *pcluster.Cluster
	sub *eventstream.Subscription
	mu  sync.RWMutex
	rdv *pcluster.Rendezvous
}

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
			l.rdv = rdv
			l.mu.Unlock()
		}
	})
	l.inner.Setup(c, kinds, isClient)
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

// RemovePid is the library's (it broadcasts the activation's end).
func (l *identityLookup) RemovePid(ci *pcluster.ClusterIdentity, pid *actor.PID) {
	l.inner.RemovePid(ci, pid)
}

// Shutdown stops the topology subscription and the library's lookup.
func (l *identityLookup) Shutdown() {
	if l.sub != nil {
		l.c.ActorSystem.EventStream.Unsubscribe(l.sub)
	}
	l.inner.Shutdown()
}
