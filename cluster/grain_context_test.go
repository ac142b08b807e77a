package cluster

import (
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	pcluster "github.com/asynkron/protoactor-go/cluster"
	"github.com/asynkron/protoactor-go/remote"
)

// scriptedLookup answers the i-th Get with pids[i] (the last one from then on).
type scriptedLookup struct {
	mu   sync.Mutex
	pids []*actor.PID
	gets int
}

func (l *scriptedLookup) Get(*pcluster.ClusterIdentity) *actor.PID {
	l.mu.Lock()
	defer l.mu.Unlock()
	i := min(l.gets, len(l.pids)-1)
	l.gets++
	return l.pids[i]
}
func (*scriptedLookup) RemovePid(*pcluster.ClusterIdentity, *actor.PID) {}
func (*scriptedLookup) Setup(*pcluster.Cluster, []string, bool)         {}
func (*scriptedLookup) Shutdown()                                       {}

// TestGrainContextRetries: a grain call that finds no activation, or a dead one, tries
// again after 50, 100, 200, 400, 400… ms while its timeout allows another attempt, at
// most RetryCount attempts (UntilTimeout: no bound but the timeout); the library's
// context paused i²·50 ns and failed within microseconds.
func TestGrainContextRetries(t *testing.T) {
	system := actor.NewActorSystem()
	echo := system.Root.Spawn(actor.PropsFromFunc(func(c actor.Context) {
		if s, ok := c.Message().(string); ok {
			c.Respond("echo " + s)
		}
	}))
	dead := system.Root.Spawn(actor.PropsFromFunc(func(actor.Context) {}))
	if err := system.Root.StopFuture(dead).Wait(); err != nil {
		t.Fatal(err)
	}
	ms := time.Millisecond
	for _, tc := range []struct {
		name    string
		timeout time.Duration
		pids    []*actor.PID
		opts    []pcluster.GrainCallOption
		answer  bool
		sleeps  []time.Duration
		lookups int
	}{
		{"found at once", time.Second, []*actor.PID{echo}, nil, true, nil, 1},
		{"found at the third attempt", time.Second, []*actor.PID{nil, nil, echo}, nil, true, []time.Duration{50 * ms, 100 * ms}, 3},
		{"never found: three attempts", time.Second, []*actor.PID{nil}, nil, false, []time.Duration{50 * ms, 100 * ms}, 3},
		{"never found, until the timeout of 1 s", time.Second, []*actor.PID{nil}, []pcluster.GrainCallOption{UntilTimeout()}, false,
			[]time.Duration{50 * ms, 100 * ms, 200 * ms, 400 * ms}, 5},
		{"found after 1.2 s, until the timeout of 2 s", 2 * time.Second, []*actor.PID{nil, nil, nil, nil, nil, echo}, []pcluster.GrainCallOption{UntilTimeout()}, true,
			[]time.Duration{50 * ms, 100 * ms, 200 * ms, 400 * ms, 400 * ms}, 6},
		{"a dead activation, then the live one", time.Second, []*actor.PID{dead, echo}, nil, true, []time.Duration{50 * ms}, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := pcluster.New(system, pcluster.Configure("grain-context-test", nil, nil, remote.Configure("127.0.0.1", 0)))
			lookup := &scriptedLookup{pids: tc.pids}
			c.IdentityLookup = lookup
			now := time.Unix(1000, 0)
			var slept []time.Duration
			g := &grainContext{c: c, now: func() time.Time { return now }, sleep: func(d time.Duration) {
				slept = append(slept, d)
				now = now.Add(d)
			}, listed: memberListed(c)}
			timeout := tc.timeout
			resp, err := g.Request("m", "Router", "hi", append([]pcluster.GrainCallOption{pcluster.WithTimeout(timeout)}, tc.opts...)...)
			if tc.answer != (err == nil) || (tc.answer && resp != "echo hi") {
				t.Fatalf("answer %v, error %v", resp, err)
			}
			if !tc.answer && !errors.Is(err, ErrGrainCall) {
				t.Fatalf("error %v does not wrap ErrGrainCall", err)
			}
			if !slices.Equal(slept, tc.sleeps) {
				t.Fatalf("paused %v, want %v", slept, tc.sleeps)
			}
			if lookup.gets != tc.lookups {
				t.Fatalf("%d lookups, want %d", lookup.gets, tc.lookups)
			}
			var total time.Duration
			for _, d := range slept {
				total += d
			}
			if total >= timeout {
				t.Fatalf("paused %v in all, past the timeout %v", total, timeout)
			}
		})
	}
}

// TestGrainContextTimeout: an activation that never answers ends the call at its
// timeout, not after the timeout again for each attempt.
func TestGrainContextTimeout(t *testing.T) {
	system := actor.NewActorSystem()
	mute := system.Root.Spawn(actor.PropsFromFunc(func(actor.Context) {}))
	c := pcluster.New(system, pcluster.Configure("grain-context-test", nil, nil, remote.Configure("127.0.0.1", 0)))
	c.IdentityLookup = &scriptedLookup{pids: []*actor.PID{mute}}
	g := newGrainContext(c)
	start := time.Now()
	_, err := g.Request("m", "Router", "hi", pcluster.WithTimeout(200*time.Millisecond), UntilTimeout())
	took := time.Since(start)
	if !errors.Is(err, ErrGrainCall) || !errors.Is(err, actor.ErrTimeout) {
		t.Fatalf("error %v, want a grain call timeout", err)
	}
	if took < 200*time.Millisecond || took > 2*200*time.Millisecond {
		t.Fatalf("the call took %v, want its timeout of 200ms", took)
	}
}

// TestGrainContextKeepsSlowActivation: a call that times out keeps the activation's cached
// address while the topology lists its member (a busy member, not a moved grain: the
// identity lookup would ask it too), and forgets it once the member is not listed; a dead
// letter forgets it either way.
func TestGrainContextKeepsSlowActivation(t *testing.T) {
	system := actor.NewActorSystem()
	mute := system.Root.Spawn(actor.PropsFromFunc(func(actor.Context) {}))
	dead := system.Root.Spawn(actor.PropsFromFunc(func(actor.Context) {}))
	if err := system.Root.StopFuture(dead).Wait(); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		pid    *actor.PID
		listed bool
		kept   bool
	}{
		{"timeout, member listed", mute, true, true},
		{"timeout, member gone", mute, false, false},
		{"dead letter, member listed", dead, true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := pcluster.New(system, pcluster.Configure("grain-context-test", nil, nil, remote.Configure("127.0.0.1", 0)))
			c.IdentityLookup = &scriptedLookup{pids: []*actor.PID{nil}}
			c.PidCache.Set("m", "Router", tc.pid)
			g := newGrainContext(c).(*grainContext)
			g.listed = func(a string) bool {
				if a != tc.pid.Address {
					t.Errorf("listed(%q), want the activation's address %q", a, tc.pid.Address)
				}
				return tc.listed
			}
			if _, err := g.Request("m", "Router", "hi", pcluster.WithTimeout(50*time.Millisecond), pcluster.WithRetryCount(1)); !errors.Is(err, ErrGrainCall) {
				t.Fatalf("error %v, want a failed grain call", err)
			}
			if pid, ok := c.PidCache.Get("m", "Router"); ok != tc.kept || (ok && !pid.Equal(tc.pid)) {
				t.Fatalf("cached %v (%v), want kept %v", pid, ok, tc.kept)
			}
		})
	}
}

// TestLookupHosts: the identity lookup tells a listed member's address from others by the
// latest topology; before any, nothing says a member left.
func TestLookupHosts(t *testing.T) {
	l := newIdentityLookup(time.Second)
	if !l.hosts("10.0.0.1:7000") {
		t.Fatal("no topology yet: want listed")
	}
	l.last = &pcluster.ClusterTopology{Members: []*pcluster.Member{{Id: "a", Host: "10.0.0.1", Port: 7000}}}
	for addr, want := range map[string]bool{"10.0.0.1:7000": true, "10.0.0.1:7001": false, "10.0.0.2:7000": false} {
		if got := l.hosts(addr); got != want {
			t.Errorf("hosts(%q) = %v, want %v", addr, got, want)
		}
	}
}
