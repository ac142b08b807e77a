package frontend

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	pcluster "github.com/asynkron/protoactor-go/cluster"
	"github.com/rs/zerolog"
	"github.com/turbine-llm/turbine/actors/catalog"
	"github.com/turbine-llm/turbine/actors/router"
	"github.com/turbine-llm/turbine/cluster"
	"github.com/turbine-llm/turbine/gateway"
	"github.com/turbine-llm/turbine/messages"
)

// busyRouter is a Router grain whose Route waits, while hold is set, until hold is
// closed: a router too busy to answer within the caller's route timeout, which records
// the request all the same once it gets to it.
type busyRouter struct {
	*router.Grain
	hold *atomic.Pointer[chan struct{}]
}

func (b *busyRouter) Route(req *messages.RouteRequest, ctx pcluster.GrainContext) (*messages.RouteResponse, error) {
	if h := b.hold.Load(); h != nil {
		<-*h
	}
	return b.Grain.Route(req, ctx)
}

// testClock is a settable clock shared by the test and the grain's goroutine.
type testClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *testClock) now() time.Time      { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *testClock) add(d time.Duration) { c.mu.Lock(); c.t = c.t.Add(d); c.mu.Unlock() }

// TestRouteTimeoutLeavesNoTrackedRequest runs the Router grain in a one-process cluster.
// A Route call that times out while the grain is busy is recorded by the grain after
// the frontend gave up: the frontend frees it, and the grain tracks nothing afterwards.
// A route made with will_ack and never acknowledged (the free was lost too) is expired
// once the grain's bound has passed, while an acknowledged one — the RouteAck travels as
// a message to the grain activation named in the answer — stays until it is freed.
func TestRouteTimeoutLeavesNoTrackedRequest(t *testing.T) {
	const routeTimeout, maxUnacked = 300 * time.Millisecond, 2 * time.Second
	clock := &testClock{t: time.Unix(1000, 0)}
	var hold atomic.Pointer[chan struct{}]
	rcfg := router.Config{BlockSize: 4, Mode: "kv", OverlapWeight: 1, WorkerTTL: time.Hour,
		MaxUnackedAge: maxUnacked, Now: clock.now, Seed: 1, Logger: zerolog.Nop()}
	kind := messages.NewRouterKind(func() messages.Router { return &busyRouter{Grain: router.New(rcfg), hold: &hold} }, 0)
	member, err := cluster.Start(cluster.Config{Name: fmt.Sprintf("route-timeout-%d", time.Now().UnixNano()),
		Discovery: "local", Logger: zerolog.Nop(), Kinds: []*pcluster.Kind{kind, catalog.Kind()}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(member.Stop)
	root := member.System.Root
	client := messages.GetRouterGrainClient(member.Cluster, "m")
	worker := root.Spawn(actor.PropsFromProducer(func() actor.Actor { return &scriptedWorker{failAfter: -1} }))
	ack, err := client.Register(&messages.RegisterWorker{Worker: &messages.WorkerInfo{WorkerId: "w0",
		Actor: &messages.ActorRef{Address: worker.Address, Id: worker.Id},
		Card:  &messages.ModelCard{Model: "m", KvBlockSize: 4, TotalKvBlocks: 100}, Ready: true, EngineEpoch: 1}},
		pcluster.WithTimeout(10*time.Second))
	if err != nil || !ack.Accepted {
		t.Fatalf("register: %+v %v", ack, err)
	}
	stats := func() *messages.RouterStats {
		t.Helper()
		st, err := client.Stats(&messages.RouterStatsRequest{}, pcluster.WithTimeout(10*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		return st
	}
	active := func(st *messages.RouterStats) (n int32) {
		for _, w := range st.Workers {
			n += w.ActiveRequests
		}
		return n
	}
	// waitFor polls the grain's stats (each a grain call queued behind what the frontend
	// sent before it) until cond holds.
	waitFor := func(what string, cond func(*messages.RouterStats) bool) *messages.RouterStats {
		t.Helper()
		deadline := time.Now().Add(20 * time.Second)
		for {
			st := stats()
			if cond(st) {
				return st
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: stats %+v, %d active", what, st, active(st))
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	seq := 0
	newID := func(c string) string { seq++; return fmt.Sprintf("%s#%d", c, seq) }
	// newRequestStream's Route calls wait at most timeout: routeTimeout for the call the
	// busy grain makes time out, 10 s (a bound on liveness only) for those that must
	// succeed however loaded the machine.
	newRequestStream := func(id string, timeout time.Duration) *stream {
		req := &gateway.GenerateRequest{Model: "m", RequestID: id, TokenIDs: []uint32{1, 2, 3, 4, 5, 6, 7, 8},
			Sampling: &messages.SamplingParams{MaxTokens: 4}}
		return newStream(root, &grainRouting{c: client, root: root, timeout: timeout, log: zerolog.Nop()},
			Config{Credits: 4, StallTimeout: -1}, req, newID, nil)
	}

	// The grain is busy: the Route call times out, then the grain records the request.
	gate := make(chan struct{})
	hold.Store(&gate)
	s := newRequestStream("late", routeTimeout)
	err = s.start(s.req.TokenIDs, s.req.Sampling)
	var ae *gateway.APIError
	if !errors.As(err, &ae) || ae.Status() != 503 || !ae.Kind.Entry().RetryAfter || !errors.Is(err, gateway.ErrNoWorkers) {
		t.Fatalf("start against a busy router: %v; want a 503 with Retry-After", err)
	}
	hold.Store(nil)
	close(gate)
	st := waitFor("the timed-out route recorded, then freed", func(st *messages.RouterStats) bool {
		return st.Routed >= 1 && active(st) == 0
	})
	t.Logf("after the timed-out route: routed %d, active %d", st.Routed, active(st))

	// An acknowledged request stays; one never acknowledged nor freed expires.
	s = newRequestStream("acked", 10*time.Second)
	if err := s.start(s.req.TokenIDs, s.req.Sampling); err != nil {
		t.Fatal(err)
	}
	if resp, err := client.Route(&messages.RouteRequest{RequestId: "orphan", TokenIds: []uint32{9, 9, 9, 9}, WillAck: true},
		pcluster.WithTimeout(10*time.Second)); err != nil || resp.Outcome != messages.RouteOutcome_ROUTE_OK || resp.Router == nil {
		t.Fatalf("route: %+v %v", resp, err)
	}
	if st := stats(); active(st) != 2 {
		t.Fatalf("%d active, want 2", active(st))
	}
	clock.add(maxUnacked + time.Second)
	if st := stats(); active(st) != 1 || st.ExpiredUnacked != 1 {
		t.Fatalf("after the bound: %d active, %d expired unacknowledged; want the acknowledged one kept and the other expired",
			active(st), st.ExpiredUnacked)
	}
	s.Close()
	waitFor("the acknowledged request freed", func(st *messages.RouterStats) bool { return active(st) == 0 })

	// /metrics counts the expiries.
	if _, err := messages.GetCatalogGrainClient(member.Cluster, catalog.Identity).Announce(&messages.AnnounceModel{
		Card: &messages.ModelCard{Model: "m", KvBlockSize: 4}, WorkerId: "w0", TtlMs: 60000,
		Worker: &messages.ActorRef{Address: worker.Address, Id: worker.Id}}, pcluster.WithTimeout(10*time.Second)); err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	New(member.Cluster, Config{Logger: zerolog.Nop()}).WritePrometheus(context.Background(), &b)
	for _, line := range []string{
		`turbine_router_requests_expired_total{model="m",reason="unacknowledged"} 1`,
		`turbine_router_requests_expired_total{model="m",reason="stale"} 0`,
	} {
		if !bytes.Contains(b.Bytes(), []byte(line+"\n")) {
			t.Errorf("no line %q in /metrics:\n%s", line, b.String())
		}
	}
}

// TestCatalogCallFailureIs503: a Catalog grain call that fails (here: no member hosts
// the kind, as while a frontend restarts its member) means the request cannot be routed
// now — 503 with Retry-After (KindNoWorkers, wrapping gateway.ErrNoWorkers) — not a
// worker failure (502).
func TestCatalogCallFailureIs503(t *testing.T) {
	member, err := cluster.Start(cluster.Config{Name: fmt.Sprintf("no-catalog-%d", time.Now().UnixNano()),
		Discovery: "local", Logger: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(member.Stop)
	b := New(member.Cluster, Config{RouteTimeout: 200 * time.Millisecond, Logger: zerolog.Nop()})
	_, err = b.Models(context.Background())
	var ae *gateway.APIError
	if !errors.As(err, &ae) || ae.Kind != gateway.KindNoWorkers || !errors.Is(err, gateway.ErrNoWorkers) {
		t.Fatalf("Models error %#v (%v); want a KindNoWorkers APIError wrapping ErrNoWorkers", err, err)
	}
}

// A Catalog grain that does not answer (here: a member without the kind) is stood in
// for by the list it gave within CatalogGrace; past it, the frontend answers 503.
func TestModelsOutliveAnUnansweredCatalog(t *testing.T) {
	member, err := cluster.Start(cluster.Config{Name: fmt.Sprintf("no-catalog-%d", time.Now().UnixNano()),
		Discovery: "local", Logger: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(member.Stop)
	b := New(member.Cluster, Config{RouteTimeout: 300 * time.Millisecond, ModelsTTL: time.Millisecond, CatalogGrace: 10 * time.Second})
	card := &messages.ModelCard{Model: "m", KvBlockSize: 16}
	b.mu.Lock()
	b.listed([]*messages.ModelCard{card}, time.Now().Add(-time.Second)) // older than ModelsTTL
	b.mu.Unlock()
	got, err := b.Models(context.Background())
	if err != nil || len(got) != 1 || got[0] != card {
		t.Fatalf("within the grace: %v, %v; want the last list", got, err)
	}
	b.mu.Lock()
	b.modelsAt = time.Time{} // as a LoRA load forces a refresh: the grace still counts from the answer
	b.mu.Unlock()
	if got, err := b.Models(context.Background()); err != nil || len(got) != 1 {
		t.Fatalf("within the grace, a refresh forced: %v, %v; want the last list", got, err)
	}
	b.mu.Lock()
	b.listedAt = time.Now().Add(-11 * time.Second)
	b.mu.Unlock()
	var apiErr *gateway.APIError
	if _, err := b.Models(context.Background()); !errors.As(err, &apiErr) || apiErr.Kind != gateway.KindNoWorkers {
		t.Fatalf("past the grace: %v, want 503 no workers", err)
	}
}

// fakeCatalog stands in for the Catalog grain's List (Backend.list): it records each
// call's timeout and answers as the test says, at once or once released.
type fakeCatalog struct {
	mu       sync.Mutex
	timeouts []time.Duration
	gate     chan struct{} // nil: answer at once; else wait until it is closed
	models   []*messages.ModelCard
	err      error
}

func (f *fakeCatalog) list(timeout time.Duration) ([]*messages.ModelCard, error) {
	f.mu.Lock()
	f.timeouts = append(f.timeouts, timeout)
	gate := f.gate
	f.mu.Unlock()
	if gate != nil {
		<-gate
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.models, f.err
}

func (f *fakeCatalog) set(gate chan struct{}, models []*messages.ModelCard, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.gate, f.models, f.err = gate, models, err
}

func (f *fakeCatalog) calls() []time.Duration {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.timeouts)
}

// modelsWithin calls b.Models and fails the test if it waits (for the catalog) longer
// than a few seconds, far past any answer not waiting for it.
func modelsWithin(t *testing.T, b *Backend) ([]*messages.ModelCard, error) {
	t.Helper()
	type answer struct {
		m   []*messages.ModelCard
		err error
	}
	done := make(chan answer, 1)
	go func() {
		m, err := b.Models(context.Background())
		done <- answer{m, err}
	}()
	select {
	case a := <-done:
		return a.m, a.err
	case <-time.After(5 * time.Second):
		t.Fatal("Models waited for a catalog that is down")
		return nil, nil
	}
}

// A catalog that does not answer is waited for once, CatalogTimeout when a recent list
// can stand in and RouteTimeout when none can; after that one probe at a time asks the
// catalog until one answers, and a request is answered at once from the recent list, or,
// with none, waits for the probe in flight and takes its answer.
func TestCatalogDownIsNotWaitedFor(t *testing.T) {
	const routeTimeout, catalogTimeout = 3 * time.Second, 250 * time.Millisecond
	down := errors.New("timed out")
	old := &messages.ModelCard{Model: "m", KvBlockSize: 16}
	newer := &messages.ModelCard{Model: "m2", KvBlockSize: 16}
	for _, tc := range []struct {
		name      string
		listedAgo time.Duration // -1: the catalog never answered
		standIn   bool          // the old list stands in
		firstWait time.Duration // the first call's timeout
	}{
		{"a list within the grace", 2 * time.Hour, true, catalogTimeout},
		{"a list past the grace", 4 * time.Hour, false, routeTimeout},
		{"no list", -1, false, routeTimeout},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := New(nil, Config{RouteTimeout: routeTimeout, CatalogTimeout: catalogTimeout, ModelsTTL: time.Hour,
				CatalogGrace: 3 * time.Hour})
			f := &fakeCatalog{}
			b.list = f.list
			if tc.listedAgo >= 0 {
				b.mu.Lock()
				b.listed([]*messages.ModelCard{old}, time.Now().Add(-tc.listedAgo))
				b.mu.Unlock()
			}
			f.set(nil, nil, down)
			m, err := modelsWithin(t, b)
			var apiErr *gateway.APIError
			switch {
			case tc.standIn && (err != nil || len(m) != 1 || m[0] != old):
				t.Fatalf("the call that failed: %v, %v; want the last list", m, err)
			case !tc.standIn && (!errors.As(err, &apiErr) || apiErr.Kind != gateway.KindNoWorkers):
				t.Fatalf("the call that failed: %v, %v; want 503 no workers", m, err)
			}
			if got := f.calls(); len(got) != 1 || got[0] != tc.firstWait {
				t.Fatalf("catalog calls %v, want one of %v", got, tc.firstWait)
			}
			gate := make(chan struct{})
			f.set(gate, []*messages.ModelCard{newer}, nil)
			if tc.standIn {
				for i := range 3 {
					if m, err := modelsWithin(t, b); err != nil || len(m) != 1 || m[0] != old {
						t.Fatalf("request %d while down: %v, %v; want the last list at once", i, m, err)
					}
				}
				close(gate)
			} else {
				// Three requests wait for one probe and take its answer.
				type answer struct {
					m   []*messages.ModelCard
					err error
				}
				answers := make(chan answer, 3)
				for range 3 {
					go func() {
						m, err := b.Models(context.Background())
						answers <- answer{m, err}
					}()
				}
				close(gate)
				for i := range 3 {
					select {
					case a := <-answers:
						if a.err != nil || len(a.m) != 1 || a.m[0] != newer {
							t.Fatalf("request %d while down: %v, %v; want the probe's list", i, a.m, a.err)
						}
					case <-time.After(10 * time.Second):
						t.Fatal("a request waiting for the probe never got an answer")
					}
				}
			}
			b.probes.Wait()
			if got := f.calls(); len(got) != 2 || got[1] != routeTimeout {
				t.Fatalf("catalog calls %v, want one probe of %v after the failed call", got, routeTimeout)
			}
			if m, err := modelsWithin(t, b); err != nil || len(m) != 1 || m[0] != newer {
				t.Fatalf("after the probe answered: %v, %v; want its list", m, err)
			}
			// Back up: a stale list is asked for again, and waited for.
			b.mu.Lock()
			b.modelsAt = time.Time{}
			b.mu.Unlock()
			if m, err := modelsWithin(t, b); err != nil || len(m) != 1 || m[0] != newer {
				t.Fatalf("a refresh after the catalog is back: %v, %v", m, err)
			}
			if got := f.calls(); len(got) != 3 || got[2] != catalogTimeout {
				t.Fatalf("catalog calls %v, want a third, of %v, made by the request", got, catalogTimeout)
			}
		})
	}
}
