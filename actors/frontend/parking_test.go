package frontend

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"google.golang.org/protobuf/proto"

	"github.com/turbine-llm/turbine/flow"
	"github.com/turbine-llm/turbine/gateway"
	"github.com/turbine-llm/turbine/messages"
)

// fakeParking is a request's place in a busy queue that the test drives: it wakes the
// request (wakeUp) and says whether it is the head with a slot (ready) or the server
// drains.
type fakeParking struct {
	full   error         // Park's answer
	wake   chan struct{} // Wake's
	parked chan struct{} // receives on every Park
	asked  chan struct{} // receives on every Ready

	mu       sync.Mutex
	ready    bool
	draining bool
	parks    int
	leaves   int
	joined   time.Time // Joined's
}

func newFakeParking() *fakeParking {
	return &fakeParking{wake: make(chan struct{}, 1), parked: make(chan struct{}, 8), asked: make(chan struct{}, 8)}
}

func (p *fakeParking) Timeout() time.Duration { return 10 * time.Second }
func (p *fakeParking) Joined() time.Time {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.joined
}
func (p *fakeParking) Park() error {
	p.mu.Lock()
	p.parks++
	p.mu.Unlock()
	p.parked <- struct{}{}
	return p.full
}
func (p *fakeParking) Wake() <-chan struct{} { return p.wake }
func (p *fakeParking) Ready() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.asked <- struct{}{}
	return p.ready
}
func (p *fakeParking) Draining() bool { p.mu.Lock(); defer p.mu.Unlock(); return p.draining }
func (p *fakeParking) Leave()         { p.mu.Lock(); p.leaves++; p.mu.Unlock() }

// wakeUp sets what the next look finds and wakes the parked request.
func (p *fakeParking) wakeUp(ready, draining bool) {
	p.mu.Lock()
	p.ready, p.draining = ready, draining
	p.mu.Unlock()
	p.wake <- struct{}{}
}

func (p *fakeParking) counts() (parks, leaves int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.parks, p.leaves
}

// queueBusyRouter answers ROUTE_ALL_BUSY to its first busy routes, then as its fakeRouter.
type queueBusyRouter struct {
	*fakeRouter
	busy atomic.Int32
}

func (r *queueBusyRouter) Route(rr *messages.RouteRequest) (*messages.RouteResponse, error) {
	if r.busy.Add(-1) >= 0 {
		r.mu.Lock()
		r.routes = append(r.routes, rr)
		r.mu.Unlock()
		return &messages.RouteResponse{Outcome: messages.RouteOutcome_ROUTE_ALL_BUSY, Error: "every worker is busy"}, nil
	}
	return r.fakeRouter.Route(rr)
}

// countingRecorder counts the deadlines a stream records besides fakeRecorder's events.
type countingRecorder struct {
	fakeRecorder
	deadlines atomic.Int32
}

func (r *countingRecorder) deadline(string) { r.deadlines.Add(1) }

// parkedStream is a stream over one scripted worker whose router is busy for its first
// busy routes, with park as its place in the busy queue; start runs in the background
// under ctx and its error comes on started.
type parkedStream struct {
	stream  *stream
	router  *queueBusyRouter
	clock   *fakeClock
	rec     *countingRecorder
	started chan error
}

func startParked(t *testing.T, ctx context.Context, busy int, park *fakeParking, w actor.Actor) *parkedStream {
	t.Helper()
	sys := actor.NewActorSystem()
	t.Cleanup(sys.Shutdown)
	pid := sys.Root.Spawn(actor.PropsFromProducer(func() actor.Actor { return w }))
	ps := &parkedStream{router: &queueBusyRouter{fakeRouter: &fakeRouter{ids: []string{"w0"}, pids: map[string]*actor.PID{"w0": pid}}},
		clock: newFakeClock(), rec: &countingRecorder{}, started: make(chan error, 1)}
	ps.router.busy.Store(int32(busy))
	seq := 0
	newID := func(c string) string { seq++; return fmt.Sprintf("%s#%d", c, seq) }
	req := &gateway.GenerateRequest{Model: "m", RequestID: "req", TokenIDs: []uint32{1, 2, 3, 4, 5},
		Sampling: &messages.SamplingParams{MaxTokens: 8, MinTokens: 6, IgnoreEos: true, Seed: proto.Int64(7)}}
	if park != nil {
		req.Parking = park
	}
	ps.stream = newStream(sys.Root, ps.router, Config{Credits: 4, MigrationLimit: 3, PrefillReleaseWait: 200 * time.Millisecond,
		clock: ps.clock}, req, newID, ps.rec)
	go func() { ps.started <- ps.stream.startIn(ctx, req.TokenIDs, req.Sampling) }()
	t.Cleanup(ps.stream.Close)
	return ps
}

// await waits for one signal on c (10 s at most: liveness, not a timing the test uses).
func await(t *testing.T, c <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-c:
	case <-time.After(10 * time.Second):
		t.Fatalf("no %s", what)
	}
}

func (ps *parkedStream) result(t *testing.T) error {
	t.Helper()
	select {
	case err := <-ps.started:
		return err
	case <-time.After(10 * time.Second):
		t.Fatal("start did not return")
		return nil
	}
}

func (ps *parkedStream) routeIDs() []string {
	ps.router.mu.Lock()
	defer ps.router.mu.Unlock()
	var ids []string
	for _, r := range ps.router.routes {
		ids = append(ids, r.RequestId)
	}
	return ids
}

// TestStreamParkedThenRouted: a request every worker is busy for waits in its place of
// the busy queue; a wake that finds it not at the head changes nothing; once it is the
// head with a slot it is routed again under a new id (busy again: it parks again, in
// the same place), runs, and leaves the queue once.
func TestStreamParkedThenRouted(t *testing.T) {
	for _, busy := range []int{1, 2} {
		t.Run(fmt.Sprintf("busy %d times", busy), func(t *testing.T) {
			park := newFakeParking()
			ps := startParked(t, context.Background(), busy, park, &scriptedWorker{failAfter: -1})
			await(t, park.parked, "park")
			park.wakeUp(false, false)
			await(t, park.asked, "look at the queue")
			if ids := ps.routeIDs(); len(ids) != 1 {
				t.Fatalf("routes %v after a wake behind the head, want the first only", ids)
			}
			for range busy {
				park.wakeUp(true, false)
				await(t, park.asked, "look at the queue")
			}
			if err := ps.result(t); err != nil {
				t.Fatalf("start: %v", err)
			}
			want := []string{"req#1"}
			for k := 1; k <= busy; k++ {
				want = append(want, fmt.Sprintf("req#1.%d", k))
			}
			if ids := ps.routeIDs(); !slices.Equal(ids, want) {
				t.Errorf("routes %v, want %v", ids, want)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			var got []uint32
			for {
				ch, err := ps.stream.Recv(ctx)
				if err == io.EOF {
					break
				}
				if err != nil {
					t.Fatal(err)
				}
				got = append(got, ch.TokenIds...)
			}
			if len(got) != 8 {
				t.Errorf("%d tokens, want 8", len(got))
			}
			if parks, leaves := park.counts(); parks != busy || leaves != 1 {
				t.Errorf("parked %d times and left %d, want %d and 1", parks, leaves, busy)
			}
		})
	}
}

// TestStreamParkedEnds: a parked request that does not run — the queue timer fired, the
// queue was full, the server drains, its deadline passed, the client left — gets the
// gateway's answer for it, leaves the queue (unless it never entered it), and sends
// nothing to a worker; only the deadline counts as one.
func TestStreamParkedEnds(t *testing.T) {
	full := fmt.Errorf("%w: the queue of 2 requests for %q is full", gateway.ErrAllBusy, "m")
	for _, tc := range []struct {
		name      string
		full      error
		end       func(t *testing.T, ps *parkedStream, park *fakeParking, cancel context.CancelFunc)
		deadline  bool // the ctx's deadline has passed
		is        error
		leaves    int
		deadlines int32
	}{
		{name: "queue timeout", end: func(t *testing.T, ps *parkedStream, _ *fakeParking, _ context.CancelFunc) {
			ps.clock.await(t, flow.TimerQueue, 0).fire()
		}, is: gateway.ErrAllBusy, leaves: 1},
		{name: "queue full", full: full, is: full},
		{name: "drain", end: func(_ *testing.T, _ *parkedStream, park *fakeParking, _ context.CancelFunc) { park.wakeUp(false, true) },
			is: gateway.ErrDraining, leaves: 1},
		{name: "deadline", deadline: true, is: context.DeadlineExceeded, leaves: 1, deadlines: 1},
		{name: "client gone", end: func(_ *testing.T, _ *parkedStream, _ *fakeParking, cancel context.CancelFunc) { cancel() },
			is: context.Canceled, leaves: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			if tc.deadline {
				ctx, cancel = context.WithDeadline(ctx, time.Now().Add(-time.Second))
				defer cancel()
			}
			park := newFakeParking()
			park.full = tc.full
			w := &scriptedWorker{failAfter: -1}
			ps := startParked(t, ctx, 1, park, w)
			await(t, park.parked, "park")
			if tc.end != nil {
				tc.end(t, ps, park, cancel)
			}
			err := ps.result(t)
			if !errors.Is(err, tc.is) {
				t.Fatalf("start error %v, want %v", err, tc.is)
			}
			if tc.full != nil && err != tc.full {
				t.Errorf("start error %v, want the queue's own %v", err, tc.full)
			}
			if _, leaves := park.counts(); leaves != tc.leaves {
				t.Errorf("left the queue %d times, want %d", leaves, tc.leaves)
			}
			if gens, _ := w.calls(); len(gens) != 0 {
				t.Errorf("the worker got %d Generate", len(gens))
			}
			if n := ps.rec.deadlines.Load(); n != tc.deadlines {
				t.Errorf("%d deadlines recorded, want %d", n, tc.deadlines)
			}
		})
	}
}

// silentWorker takes a Generate and sends nothing; each Cancel's request id comes on
// cancels.
type silentWorker struct{ cancels chan string }

func (w *silentWorker) Receive(c actor.Context) {
	if m, ok := c.Message().(*messages.Cancel); ok {
		w.cancels <- m.RequestId
	}
}

// TestStreamDeadlineWhileRunning: a running request whose deadline passes while Recv
// waits is cancelled in its engine at once and counted as a deadline (not a client
// gone); Recv returns the context's error as before.
func TestStreamDeadlineWhileRunning(t *testing.T) {
	w := &silentWorker{cancels: make(chan string, 4)}
	ps := startParked(t, context.Background(), 0, nil, w)
	if err := ps.result(t); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
	defer cancel()
	if _, err := ps.stream.Recv(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Recv error %v, want the deadline", err)
	}
	select {
	case id := <-w.cancels:
		if id != "req#1" {
			t.Errorf("cancelled %s, want req#1", id)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the engine request was not cancelled")
	}
	if n := ps.rec.deadlines.Load(); n != 1 {
		t.Errorf("%d deadlines recorded, want 1", n)
	}
}
