package cluster

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	pcluster "github.com/asynkron/protoactor-go/cluster"
	"github.com/hashicorp/consul/api"
	"github.com/rs/zerolog"
)

// consulProvider is Turbine's Consul cluster provider. It keeps protoactor's Consul schema
// (service name = cluster name, tags = kinds, Meta["id"] = member id, Address/Port = the
// advertised remoting endpoint, one TTL check "service:<id>" with
// DeregisterCriticalServiceAfter), so members of either provider see each other, and it
// fixes that provider's defects (docs/actor-library.md §3):
//
//   - failed registrations and membership queries back off (100 ms doubling to 5 s, with
//     jitter) and are logged when they start failing and when they recover, not per try;
//   - a TTL refresh that the agent answers with "unknown check" (the agent restarted and
//     lost its state) registers the member again;
//   - the membership watch is a blocking query under a context that Shutdown cancels, and
//     Shutdown waits for both goroutines;
//   - what is published goes through memberView, which does not let a Consul outage or
//     restart make anyone leave the topology (leaving blocks a member id forever).
//
// Goroutines: keep (registration and TTL; members only) and watch (membership). State
// shared with them is under mu.
type consulProvider struct {
	client *api.Client
	opts   ConsulOptions // defaults applied
	log    zerolog.Logger
	now    func() time.Time

	cluster *pcluster.Cluster
	self    *pcluster.Member // nil for a client

	mu         sync.Mutex
	view       *memberView
	registered bool            // the agent holds our registration, as far as we know
	queryOK    bool            // the last membership query answered
	passing    map[string]bool // member ids whose checks passed in the last answer; replaced, never changed
	refreshed  time.Time       // when the agent last took our registration or a TTL refresh
	lapsedAt   time.Time       // when one last went through after a gap of the TTL or more; zero: never
	answeredAt time.Time       // when the membership query last answered
	started    bool
	stopped    bool

	cancel context.CancelFunc
	wg     sync.WaitGroup
	done   chan struct{} // closed once the goroutines have ended (or never started)
}

// newConsulProvider builds a provider for the agent at address ("HOST:PORT"). It does not
// contact the agent.
func newConsulProvider(address string, opts ConsulOptions, log zerolog.Logger) (*consulProvider, error) {
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	opts = opts.withDefaults()
	client, err := api.NewClient(opts.apiConfig(address))
	if err != nil {
		return nil, fmt.Errorf("cluster: consul client for %s: %w", address, err)
	}
	return &consulProvider{client: client, opts: opts, log: log, now: time.Now, done: make(chan struct{})}, nil
}

// StartMember registers the member and starts watching the membership; it does not wait
// for the agent (registration is retried in the background).
func (p *consulProvider) StartMember(c *pcluster.Cluster) error {
	host, port, err := c.ActorSystem.GetHostPort()
	if err != nil {
		return fmt.Errorf("cluster: consul provider: member address: %w", err)
	}
	kinds := c.GetClusterKinds()
	slices.Sort(kinds)
	self := &pcluster.Member{Id: c.ActorSystem.ID, Host: host, Port: int32(port), Kinds: kinds}
	return p.start(c, self)
}

// StartClient watches the membership without registering.
func (p *consulProvider) StartClient(c *pcluster.Cluster) error { return p.start(c, nil) }

func (p *consulProvider) start(c *pcluster.Cluster, self *pcluster.Member) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.started || p.stopped {
		return errors.New("cluster: consul provider started twice or after it stopped")
	}
	p.started, p.cluster, p.self = true, c, self
	p.view = newMemberView(self, p.opts.RecoveryWindow)
	ctx, cancel := context.WithCancel(context.Background())
	p.cancel = cancel
	seed := uint64(p.now().UnixNano())
	if self != nil {
		p.wg.Add(1)
		go p.keep(ctx, rand.New(rand.NewPCG(seed, 1)))
	}
	p.wg.Add(1)
	go p.watch(ctx, rand.New(rand.NewPCG(seed, 2)))
	go func() { p.wg.Wait(); close(p.done) }()
	return nil
}

// DeregisterMember stops the provider's goroutines and removes the member's registration
// from the agent, so that the others see it leave at once.
func (p *consulProvider) DeregisterMember() error {
	p.halt()
	if p.self == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), p.opts.TTL)
	defer cancel()
	if err := p.client.Agent().ServiceDeregisterOpts(p.self.Id, (&api.QueryOptions{}).WithContext(ctx)); err != nil {
		return fmt.Errorf("cluster: deregister member %s from consul: %w", p.self.Id, err)
	}
	p.mu.Lock()
	p.registered = false
	p.mu.Unlock()
	p.log.Info().Str("member", p.self.Id).Msg("deregistered from Consul")
	return nil
}

// Shutdown stops the goroutines and waits for them; a graceful shutdown of a member that is
// still registered deregisters it. Safe to call more than once.
func (p *consulProvider) Shutdown(graceful bool) error {
	p.mu.Lock()
	registered := p.registered
	p.mu.Unlock()
	if graceful && registered {
		return p.DeregisterMember()
	}
	p.halt()
	return nil
}

// halt cancels the goroutines and waits until they have ended.
func (p *consulProvider) halt() {
	p.mu.Lock()
	if !p.started && !p.stopped {
		close(p.done)
	}
	p.stopped = true
	cancel := p.cancel
	p.mu.Unlock()
	if cancel != nil {
		cancel()
	}
	<-p.done
}

// Done is closed once the provider's goroutines have ended.
func (p *consulProvider) Done() <-chan struct{} { return p.done }

// healthy reports whether the last membership query answered and, for a member, the agent
// holds its registration.
func (p *consulProvider) healthy() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.queryOK && (p.self == nil || p.registered)
}

// keep registers the member and refreshes its TTL check until ctx ends.
func (p *consulProvider) keep(ctx context.Context, rnd *rand.Rand) {
	defer p.wg.Done()
	bo := newBackoff(RegisterBackoffMin, RegisterBackoffMax, rnd)
	regLog := failureLog{every: stillFailingEvery}
	ttlLog := failureLog{every: stillFailingEvery}
	registered := false
	for ctx.Err() == nil {
		if !registered {
			err := p.register(ctx)
			if ctx.Err() != nil {
				return
			}
			if err != nil {
				p.trouble(false)
				if regLog.fail(p.now()) {
					p.log.Warn().Err(err).Str("member", p.self.Id).Msg("consul registration failing; retrying with backoff")
				}
				sleepCtx(ctx, bo.next())
				continue
			}
			bo.reset()
			registered = true
			p.setRegistered()
			p.tookUs()
			if rec, n, down := regLog.ok(p.now()); rec {
				p.log.Info().Str("member", p.self.Id).Int("failed_attempts", n).Dur("down", down).Msg("registered with Consul after failures")
			} else {
				p.log.Info().Str("member", p.self.Id).Msg("registered with Consul")
			}
		}
		if !sleepCtx(ctx, p.opts.RefreshTTL) {
			return
		}
		err := p.refresh(ctx)
		switch {
		case ctx.Err() != nil:
			return
		case err == nil:
			p.tookUs()
			if rec, n, down := ttlLog.ok(p.now()); rec {
				p.log.Info().Str("member", p.self.Id).Int("failed_attempts", n).Dur("down", down).Msg("consul TTL refresh recovered")
			}
		case checkUnknown(err):
			registered = false
			p.trouble(true)
			ttlLog.ok(p.now())
			p.log.Warn().Str("member", p.self.Id).Msg("consul agent no longer knows this member (agent restarted?); registering again")
		default:
			p.trouble(false)
			if ttlLog.fail(p.now()) {
				p.log.Warn().Err(err).Str("member", p.self.Id).Msg("consul TTL refresh failing; retrying")
			}
		}
	}
}

func (p *consulProvider) register(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, p.opts.TTL)
	defer cancel()
	s := p.self
	reg := &api.AgentServiceRegistration{
		ID:      s.Id,
		Name:    p.cluster.Config.Name,
		Tags:    s.Kinds,
		Address: s.Host,
		Port:    int(s.Port),
		Meta:    map[string]string{"id": s.Id},
		Check: &api.AgentServiceCheck{
			TTL:                            p.opts.TTL.String(),
			DeregisterCriticalServiceAfter: p.opts.DeregisterCritical.String(),
			Status:                         api.HealthPassing,
		},
	}
	return p.client.Agent().ServiceRegisterOpts(reg, api.ServiceRegisterOpts{ReplaceExistingChecks: true}.WithContext(ctx))
}

func (p *consulProvider) refresh(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, p.opts.TTL)
	defer cancel()
	return p.client.Agent().UpdateTTLOpts("service:"+p.self.Id, "", api.HealthPassing, (&api.QueryOptions{}).WithContext(ctx))
}

// checkUnknown reports whether err is the agent saying it has no such check: it restarted
// without our registration, or reaped it.
func checkUnknown(err error) bool {
	var se api.StatusError
	if !errors.As(err, &se) {
		return false
	}
	return se.Code == http.StatusNotFound || strings.Contains(se.Body, "does not have associated TTL") ||
		strings.Contains(se.Body, "Unknown check")
}

// trouble records a sign of a Consul outage: absences are distrusted for the recovery
// window. lost: the agent no longer holds our registration.
func (p *consulProvider) trouble(lost bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.view.distrust(p.now())
	if lost {
		p.registered = false
	}
}

// tookUs records that the agent took our registration or a TTL refresh now. After a gap
// of the TTL or more the member's check has been critical in an agent that kept it (or
// the agent lost it): whoever watched Consul meanwhile may have dropped the member, and
// the watchdog looks for their silence (zombieSigns.Lapsed).
func (p *consulProvider) tookUs() {
	now := p.now()
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.refreshed.IsZero() && now.Sub(p.refreshed) >= p.opts.TTL {
		p.lapsedAt = now
	}
	p.refreshed = now
}

// lapse returns when the member's registration or TTL refresh last went through after
// its check had lapsed (tookUs; zero when it never has) and when the membership query
// last answered (zero: never).
func (p *consulProvider) lapse() (lapsed, answered time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.lapsedAt, p.answeredAt
}

func (p *consulProvider) setRegistered() {
	p.mu.Lock()
	p.registered = true
	p.mu.Unlock()
}

// watch follows the cluster's service with blocking queries until ctx ends, and publishes
// the member list memberView decides on.
func (p *consulProvider) watch(ctx context.Context, rnd *rand.Rand) {
	defer p.wg.Done()
	bo := newBackoff(RegisterBackoffMin, RegisterBackoffMax, rnd)
	qLog := failureLog{every: stillFailingEvery}
	name := p.cluster.Config.Name
	var index uint64
	for ctx.Err() == nil {
		wait := p.waitTime()
		qctx, cancel := context.WithTimeout(ctx, wait+wait/16+p.opts.TTL)
		entries, meta, err := p.client.Health().Service(name, "", false,
			(&api.QueryOptions{WaitIndex: index, WaitTime: wait}).WithContext(qctx))
		cancel()
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			index = 0
			p.queryFailed()
			if qLog.fail(p.now()) {
				p.log.Warn().Err(err).Str("service", name).Msg("consul membership query failing; keeping the last known members")
			}
			sleepCtx(ctx, bo.next())
			continue
		}
		bo.reset()
		if rec, n, down := qLog.ok(p.now()); rec {
			p.log.Info().Str("service", name).Int("failed_attempts", n).Dur("down", down).Msg("consul membership query recovered")
		}
		var members []*pcluster.Member
		var changed bool
		index, members, changed = p.answer(index, meta.LastIndex, passingMembers(name, entries))
		if changed {
			p.cluster.MemberList.UpdateClusterTopology(members)
		}
	}
}

// answer applies one successful query: the next wait index (reset when Consul's index went
// backwards, itself a sign that the agent restarted) and the member list to publish.
func (p *consulProvider) answer(index, last uint64, passing []*pcluster.Member) (uint64, []*pcluster.Member, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	now := p.now()
	p.queryOK = true
	p.answeredAt = now
	p.passing = make(map[string]bool, len(passing))
	for _, m := range passing {
		p.passing[m.Id] = true
	}
	next := max(last, 1)
	if last < index {
		p.view.distrust(now)
		next = 0
	}
	members, changed := p.view.observe(now, passing)
	return next, members, changed
}

func (p *consulProvider) queryFailed() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.queryOK = false
	p.view.distrust(p.now())
}

// waitTime is how long the next blocking query may wait: blockingWait, or less, so that
// the end of a recovery window is looked at when it comes.
func (p *consulProvider) waitTime() time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	now := p.now()
	ends := p.view.recoveryEnds(now)
	if ends.IsZero() {
		return blockingWait
	}
	return min(blockingWait, max(ends.Sub(now)+10*time.Millisecond, 50*time.Millisecond))
}

// alive is the set of member ids whose checks passed in Consul's last answer (nil before
// the first); the caller must not change it.
func (p *consulProvider) alive() map[string]bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.passing
}

// members is the last published member list (for tests and diagnostics).
func (p *consulProvider) members() []*pcluster.Member {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.view == nil {
		return nil
	}
	return p.view.current()
}

// sleepCtx waits d or until ctx ends; false when ctx ended.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
