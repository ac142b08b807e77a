package cluster

import (
	"errors"
	"fmt"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	pcluster "github.com/asynkron/protoactor-go/cluster"
	"github.com/asynkron/protoactor-go/remote"
)

// UntilTimeout is the grain call option of a call that retries until its timeout rather
// than for the default three attempts: a call whose answer is worth waiting for while
// the cluster's topology settles (a Route call: the request fails without it).
func UntilTimeout() pcluster.GrainCallOption { return pcluster.WithRetryCount(1 << 30) }

// ErrGrainCall wraps every error of a grain call that got no answer.
var ErrGrainCall = errors.New("grain call")

// grainContext is the cluster context every grain call of a Turbine member goes through
// (pcluster.WithClusterContextProducer). It does what the library's default context does
// — find the grain's activation (address cache, then the identity lookup), ask it, and
// on a dead letter or a timeout try again, at most RetryCount attempts in all — except
// that:
//   - attempts are spaced by a real backoff (GrainRetryMin doubling to GrainRetryMax; the
//     library pauses i²·50 ns, so its attempts come within microseconds and a call made
//     while the topology is in flux fails at once);
//   - no attempt waits past the call's own deadline (Timeout from the call's start; the
//     library gives every attempt the whole Timeout again);
//   - a timeout forgets the cached address only when the topology no longer lists its
//     member (the library always forgets it): a slow activation has not moved, the
//     identity lookup would ask the same busy member and time out in turn, and an
//     activation whose member left is forgotten with the member. A dead letter forgets it.
//
// The options' RetryAction is not used.
type grainContext struct {
	c   *pcluster.Cluster
	now func() time.Time
	// sleep pauses d (time.Sleep; a test's fake clock).
	sleep func(d time.Duration)
	// listed reports whether the topology lists a member at an address (memberListed).
	listed func(address string) bool
}

var _ pcluster.Context = (*grainContext)(nil)

func newGrainContext(c *pcluster.Cluster) pcluster.Context {
	return &grainContext{c: c, now: time.Now, sleep: time.Sleep, listed: memberListed(c)}
}

// Request asks the grain (identity, kind) message and returns its answer. Errors
// (wrapping ErrGrainCall): no activation found or none answered within the call's
// timeout and attempts; an error other than a timeout or a dead letter from the
// activation's future as it is.
func (g *grainContext) Request(identity, kind string, message any, opts ...pcluster.GrainCallOption) (any, error) {
	cfg := g.config(opts)
	var last error
	for a := g.attempts(cfg); a.next(); {
		pid := g.pid(identity, kind)
		if pid == nil {
			last = fmt.Errorf("no activation of %s/%s found", kind, identity)
			continue
		}
		resp, err := cfg.Context.RequestFuture(pid, message, a.left()).Result()
		if resp != nil {
			return resp, nil
		}
		switch {
		case err == nil:
			return nil, nil
		case errors.Is(err, actor.ErrTimeout), errors.Is(err, remote.ErrTimeout):
			if !g.listed(pid.Address) {
				g.c.PidCache.Remove(identity, kind)
			}
			last = fmt.Errorf("%s/%s at %s: %w", kind, identity, pid.Address, err)
		case errors.Is(err, actor.ErrDeadLetter), errors.Is(err, remote.ErrDeadLetter):
			g.c.PidCache.Remove(identity, kind)
			last = fmt.Errorf("%s/%s at %s: %w", kind, identity, pid.Address, err)
		default:
			return nil, err
		}
	}
	if last == nil {
		last = errors.New("no time left for an attempt")
	}
	return nil, fmt.Errorf("%w: no answer within %v: %w", ErrGrainCall, cfg.Timeout, last)
}

// RequestFuture finds the grain's activation as Request does and sends it message,
// returning the answer's future (its timeout the call's Timeout). It fails, wrapping
// ErrGrainCall, when no activation is found within the call's timeout and attempts.
func (g *grainContext) RequestFuture(identity, kind string, message any, opts ...pcluster.GrainCallOption) (*actor.Future, error) {
	cfg := g.config(opts)
	for a := g.attempts(cfg); a.next(); {
		if pid := g.pid(identity, kind); pid != nil {
			return cfg.Context.RequestFuture(pid, message, cfg.Timeout), nil
		}
	}
	return nil, fmt.Errorf("%w: no activation of %s/%s found within %v", ErrGrainCall, kind, identity, cfg.Timeout)
}

// memberListed reports whether the cluster's latest topology lists a member at address
// (true when the identity lookup is not Turbine's, which keeps no topology).
func memberListed(c *pcluster.Cluster) func(address string) bool {
	return func(address string) bool {
		l, ok := c.IdentityLookup.(*identityLookup)
		return !ok || l.hosts(address)
	}
}

// config is a call's options applied to the library's defaults.
func (g *grainContext) config(opts []pcluster.GrainCallOption) *pcluster.GrainCallConfig {
	cfg := pcluster.NewGrainCallOptions(g.c)
	for _, o := range opts {
		o(cfg)
	}
	return cfg
}

// attempts paces the attempts of one call: at most max(RetryCount, 1), within Timeout
// from now.
func (g *grainContext) attempts(cfg *pcluster.GrainCallConfig) *pacer {
	return &pacer{g: g, deadline: g.now().Add(cfg.Timeout), limit: max(cfg.RetryCount, 1)}
}

// pacer counts a call's attempts and pauses between them.
type pacer struct {
	g        *grainContext
	deadline time.Time
	pause    time.Duration // the last pause
	n, limit int           // attempts started, and allowed
}

// next waits out the pause before another attempt (none before the first) and reports
// whether one may start: not once limit attempts were made, nor when the pause would
// leave no time for it.
func (p *pacer) next() bool {
	if p.n >= p.limit {
		return false
	}
	if p.n > 0 {
		p.pause = min(max(2*p.pause, GrainRetryMin), GrainRetryMax)
		if p.left() <= p.pause {
			return false
		}
		p.g.sleep(p.pause)
	}
	p.n++
	return p.left() > 0
}

// left is the time left before the call's deadline.
func (p *pacer) left() time.Duration { return p.deadline.Sub(p.g.now()) }

// pid is the activation's address from the cluster's cache, else from the identity
// lookup (cached when found); nil when none is found.
func (g *grainContext) pid(identity, kind string) *actor.PID {
	if pid, ok := g.c.PidCache.Get(identity, kind); ok && pid != nil {
		return pid
	}
	pid := g.c.Get(identity, kind)
	if pid != nil {
		g.c.PidCache.Set(identity, kind, pid)
	}
	return pid
}
