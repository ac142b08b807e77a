package frontend

import (
	"bytes"
	"context"
	"errors"
	"fmt"
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

// fakeCatalog stands in for the Catalog grain's List (Backend.list): each call is handed
// to the test, which answers it when it likes.
type fakeCatalog struct {
	calls chan *fakeCall
	seen  int // calls taken by next
}

type fakeCall struct {
	timeout time.Duration
	answer  chan fakeAnswer
}

type fakeAnswer struct {
	models []*messages.ModelCard
	err    error
}

func newFakeCatalog() *fakeCatalog { return &fakeCatalog{calls: make(chan *fakeCall, 16)} }

func (f *fakeCatalog) list(timeout time.Duration) ([]*messages.ModelCard, error) {
	c := &fakeCall{timeout: timeout, answer: make(chan fakeAnswer, 1)}
	f.calls <- c
	a := <-c.answer
	return a.models, a.err
}

// next waits for the next call and checks its timeout.
func (f *fakeCatalog) next(t *testing.T, timeout time.Duration) *fakeCall {
	t.Helper()
	select {
	case c := <-f.calls:
		f.seen++
		if c.timeout != timeout {
			t.Fatalf("a catalog call of %v, want %v", c.timeout, timeout)
		}
		return c
	case <-time.After(5 * time.Second):
		t.Fatal("no catalog call")
		return nil
	}
}

type modelsAnswer struct {
	m   []*messages.ModelCard
	err error
}

// modelsAsync calls b.Models on a goroutine of its own.
func modelsAsync(ctx context.Context, b *Backend) <-chan modelsAnswer {
	out := make(chan modelsAnswer, 1)
	go func() {
		m, err := b.Models(ctx)
		out <- modelsAnswer{m, err}
	}()
	return out
}

// awaitModels returns the answer of a modelsAsync call, failing the test if none comes.
func awaitModels(t *testing.T, ch <-chan modelsAnswer) modelsAnswer {
	t.Helper()
	select {
	case a := <-ch:
		return a
	case <-time.After(5 * time.Second):
		t.Fatal("Models did not answer")
		return modelsAnswer{}
	}
}

// One Catalog call at a time: a request with a stale list waits for its own call, one
// that finds a call under way or the catalog down answers from a recent list at once, and
// with no such list every request waits for the call in flight (a second one when that
// call had started before it and failed). Each case runs its steps on a fresh Backend.
func TestCatalogCalls(t *testing.T) {
	const routeTimeout, catalogTimeout = 3 * time.Second, 250 * time.Millisecond
	down := errors.New("timed out")
	old := &messages.ModelCard{Model: "m", KvBlockSize: 16}
	newer := &messages.ModelCard{Model: "m2", KvBlockSize: 16}
	isList := func(a modelsAnswer, want *messages.ModelCard) bool {
		return a.err == nil && len(a.m) == 1 && a.m[0] == want
	}
	is503 := func(a modelsAnswer) bool {
		var apiErr *gateway.APIError
		return errors.As(a.err, &apiErr) && apiErr.Kind == gateway.KindNoWorkers
	}
	for _, tc := range []struct {
		name     string
		list     bool // a list from 2 h ago (ModelsTTL 1 h, CatalogGrace 3 h)
		steps    func(t *testing.T, b *Backend, f *fakeCatalog)
		calls    int // in all
		downThen bool
	}{
		{"a stale list: one call, the others answered from the list meanwhile", true, func(t *testing.T, b *Backend, f *fakeCatalog) {
			r1 := modelsAsync(context.Background(), b)
			c := f.next(t, catalogTimeout)
			if a := awaitModels(t, modelsAsync(context.Background(), b)); !isList(a, old) {
				t.Fatalf("a request while the call is under way: %v, %v; want the last list", a.m, a.err)
			}
			c.answer <- fakeAnswer{models: []*messages.ModelCard{newer}}
			if a := awaitModels(t, r1); !isList(a, newer) {
				t.Fatalf("the request that made the call: %v, %v; want its answer", a.m, a.err)
			}
		}, 1, false},
		{"no list: requests share one call", false, func(t *testing.T, b *Backend, f *fakeCatalog) {
			r1, r2 := modelsAsync(context.Background(), b), modelsAsync(context.Background(), b)
			f.next(t, routeTimeout).answer <- fakeAnswer{models: []*messages.ModelCard{newer}}
			for i, r := range []<-chan modelsAnswer{r1, r2} {
				if a := awaitModels(t, r); !isList(a, newer) {
					t.Fatalf("request %d: %v, %v; want the call's answer", i, a.m, a.err)
				}
			}
		}, 1, false},
		{"a failed call: the list stands in; one probe at a time until one answers", true, func(t *testing.T, b *Backend, f *fakeCatalog) {
			r1 := modelsAsync(context.Background(), b)
			f.next(t, catalogTimeout).answer <- fakeAnswer{err: down}
			if a := awaitModels(t, r1); !isList(a, old) {
				t.Fatalf("the call failed: %v, %v; want the last list", a.m, a.err)
			}
			for round, answer := range []fakeAnswer{{err: down}, {models: []*messages.ModelCard{newer}}} {
				if a := awaitModels(t, modelsAsync(context.Background(), b)); !isList(a, old) {
					t.Fatalf("round %d, a request while down: %v, %v; want the last list at once", round, a.m, a.err)
				}
				c := f.next(t, routeTimeout) // the probe it started
				if a := awaitModels(t, modelsAsync(context.Background(), b)); !isList(a, old) {
					t.Fatalf("round %d, a request while the probe is under way: %v, %v", round, a.m, a.err)
				}
				c.answer <- answer
				b.calls.Wait()
			}
			if a := awaitModels(t, modelsAsync(context.Background(), b)); !isList(a, newer) {
				t.Fatalf("after the probe answered: %v, %v; want its list", a.m, a.err)
			}
		}, 3, false},
		{"no list, the catalog down: a request's own call fails with 503, and the next takes a call's answer", false, func(t *testing.T, b *Backend, f *fakeCatalog) {
			for i, answer := range []fakeAnswer{{err: down}, {err: down}} {
				r := modelsAsync(context.Background(), b)
				f.next(t, routeTimeout).answer <- answer
				if a := awaitModels(t, r); !is503(a) || !errors.Is(a.err, down) {
					t.Fatalf("request %d: %v, %v; want 503 for the failed call", i, a.m, a.err)
				}
			}
			r := modelsAsync(context.Background(), b)
			f.next(t, routeTimeout).answer <- fakeAnswer{models: []*messages.ModelCard{newer}}
			if a := awaitModels(t, r); !isList(a, newer) {
				t.Fatalf("the catalog back: %v, %v; want its answer", a.m, a.err)
			}
		}, 3, false},
		{"no list: a request that joined a call started before it and failed makes one more", false, func(t *testing.T, b *Backend, f *fakeCatalog) {
			r1 := modelsAsync(context.Background(), b)
			c1 := f.next(t, routeTimeout)
			r2 := modelsAsync(context.Background(), b)
			c1.answer <- fakeAnswer{err: down}
			if a := awaitModels(t, r1); !is503(a) {
				t.Fatalf("the request whose call failed: %v, %v; want 503", a.m, a.err)
			}
			// r2 joined c1 (then it tries once more) or came after its failure (its own
			// call): either way a second call answers it.
			f.next(t, routeTimeout).answer <- fakeAnswer{models: []*messages.ModelCard{newer}}
			if a := awaitModels(t, r2); !isList(a, newer) {
				t.Fatalf("the second request: %v, %v; want the second call's answer", a.m, a.err)
			}
		}, 2, false},
		{"a request that ends while waiting gets its context's error", false, func(t *testing.T, b *Backend, f *fakeCatalog) {
			ctx, cancel := context.WithCancel(context.Background())
			r := modelsAsync(ctx, b)
			c := f.next(t, routeTimeout)
			cancel()
			var apiErr *gateway.APIError
			if a := awaitModels(t, r); !errors.Is(a.err, context.Canceled) || errors.As(a.err, &apiErr) {
				t.Fatalf("a cancelled request: %v, %v; want context.Canceled, not an API error", a.m, a.err)
			}
			c.answer <- fakeAnswer{err: down}
		}, 1, true},
		{"a member change: the old call's answer is ignored, and a new call goes through the new member", false, func(t *testing.T, b *Backend, f *fakeCatalog) {
			r := modelsAsync(context.Background(), b)
			c1 := f.next(t, routeTimeout)
			b.SetCluster(nil)
			f.next(t, routeTimeout).answer <- fakeAnswer{models: []*messages.ModelCard{newer}}
			if a := awaitModels(t, r); !isList(a, newer) {
				t.Fatalf("the waiting request: %v, %v; want the new member's answer", a.m, a.err)
			}
			c1.answer <- fakeAnswer{err: down}
		}, 2, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := New(nil, Config{RouteTimeout: routeTimeout, CatalogTimeout: catalogTimeout, ModelsTTL: time.Hour,
				CatalogGrace: 3 * time.Hour})
			f := newFakeCatalog()
			b.list = f.list
			if tc.list {
				b.mu.Lock()
				b.listed([]*messages.ModelCard{old}, time.Now().Add(-2*time.Hour))
				b.mu.Unlock()
			}
			tc.steps(t, b, f)
			b.calls.Wait()
			if n := len(f.calls); n != 0 || f.seen != tc.calls {
				t.Fatalf("catalog calls: %d answered and %d more, want %d", f.seen, n, tc.calls)
			}
			b.mu.Lock()
			defer b.mu.Unlock()
			if b.catalogDown != tc.downThen {
				t.Fatalf("catalog down at the end: %v, want %v", b.catalogDown, tc.downThen)
			}
		})
	}
}
