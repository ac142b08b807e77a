package frontend

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"google.golang.org/protobuf/proto"

	"github.com/turbine-llm/turbine/flow"
	"github.com/turbine-llm/turbine/gateway"
	"github.com/turbine-llm/turbine/messages"
)

// drainingRouter answers ROUTE_ALL_BUSY to its first busy routes; the server starts
// draining while the next one is asked (it sets park draining, as gateway.Server.Drain
// does, before it answers), and that one gets answer (nil: its fakeRouter's worker).
type drainingRouter struct {
	*fakeRouter
	busy   int32
	park   *fakeParking
	answer *messages.RouteResponse
	n      atomic.Int32
}

func (r *drainingRouter) Route(rr *messages.RouteRequest) (*messages.RouteResponse, error) {
	n := r.n.Add(1)
	if n <= r.busy {
		r.mu.Lock()
		r.routes = append(r.routes, rr)
		r.mu.Unlock()
		return &messages.RouteResponse{Outcome: messages.RouteOutcome_ROUTE_ALL_BUSY, Error: "every worker is busy"}, nil
	}
	if n == r.busy+1 {
		r.park.mu.Lock()
		r.park.draining = true
		r.park.mu.Unlock()
	}
	if r.answer == nil {
		return r.fakeRouter.Route(rr)
	}
	r.mu.Lock()
	r.routes = append(r.routes, rr)
	r.mu.Unlock()
	return r.answer, nil
}

// startWithRouter starts, in the background, a stream of one request on sys whose
// routes r answers, with park as its place in the busy queue; its start error comes on
// the channel returned.
func startWithRouter(t *testing.T, sys *actor.ActorSystem, r routing, park *fakeParking, clock *fakeClock) (*stream, <-chan error) {
	t.Helper()
	req := &gateway.GenerateRequest{Model: "m", RequestID: "req", TokenIDs: []uint32{1, 2, 3, 4, 5}, Parking: park,
		Sampling: &messages.SamplingParams{MaxTokens: 8, MinTokens: 6, IgnoreEos: true, Seed: proto.Int64(7)}}
	seq := 0
	newID := func(c string) string { seq++; return fmt.Sprintf("%s#%d", c, seq) }
	s := newStream(sys.Root, r, Config{Credits: 4, MigrationLimit: 3, PrefillReleaseWait: 200 * time.Millisecond,
		clock: clock}, req, newID, &fakeRecorder{})
	started := make(chan error, 1)
	go func() { started <- s.startIn(context.Background(), req.TokenIDs, req.Sampling) }()
	t.Cleanup(s.Close)
	return s, started
}

// TestStreamDrainWhileRoutedFromQueue: the server starts draining while the route that
// takes a request out of the busy queue is asked (the wake came just before the drain,
// and the workers left routing for it). Whatever that route answers — no worker, or a
// worker still registered — the request gets the drain's answer (503 service_draining),
// not the router's (no_live_workers); a worker's route is freed and nothing is sent.
// The same holds for a request that waited in the gateway's queue before its first
// route (Parking.Joined set).
func TestStreamDrainWhileRoutedFromQueue(t *testing.T) {
	noWorkers := &messages.RouteResponse{Outcome: messages.RouteOutcome_ROUTE_NO_WORKERS,
		Error: "0 registered, none ready and not excluded"}
	for _, tc := range []struct {
		name   string
		queued bool                    // it waited in the gateway's queue before its first route
		answer *messages.RouteResponse // nil: a worker
		freed  []string
		leaves int
	}{
		{name: "parked, then no worker", answer: noWorkers, leaves: 1},
		{name: "parked, then a worker", freed: []string{"req#1.1"}, leaves: 1},
		{name: "queued before its first route, then no worker", queued: true, answer: noWorkers},
		{name: "queued before its first route, then a worker", queued: true, freed: []string{"req#1"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := &scriptedWorker{failAfter: -1}
			sys := actor.NewActorSystem()
			t.Cleanup(sys.Shutdown)
			pid := sys.Root.Spawn(actor.PropsFromProducer(func() actor.Actor { return w }))
			park := newFakeParking()
			r := &drainingRouter{fakeRouter: &fakeRouter{ids: []string{"w0"}, pids: map[string]*actor.PID{"w0": pid}},
				park: park, answer: tc.answer, busy: 1}
			if tc.queued {
				park.joined, r.busy = time.Now().Add(-time.Second), 0
			}
			_, started := startWithRouter(t, sys, r, park, newFakeClock())
			if !tc.queued {
				await(t, park.parked, "park")
				park.wakeUp(true, false) // the head with a slot: routed again, and the drain starts meanwhile
			}
			var err error
			select {
			case err = <-started:
			case <-time.After(10 * time.Second):
				t.Fatal("start did not return")
			}
			if !errors.Is(err, gateway.ErrDraining) {
				t.Fatalf("start error %v, want the drain's (gateway.ErrDraining)", err)
			}
			if gens, _ := w.calls(); len(gens) != 0 {
				t.Errorf("the worker got %d Generate", len(gens))
			}
			r.mu.Lock()
			freed := slices.Clone(r.freed)
			r.mu.Unlock()
			if !slices.Equal(freed, tc.freed) {
				t.Errorf("freed %v, want %v", freed, tc.freed)
			}
			if _, leaves := park.counts(); leaves != tc.leaves {
				t.Errorf("left the queue %d times, want %d", leaves, tc.leaves)
			}
		})
	}
}

// TestStreamQueueTimeoutReportsWholeWait: a request that waited in the gateway's queue
// before its Backend parked it (Parking.Joined an hour ago) and times out reports its
// whole wait, not the rest of it its queue timer had (Parking.Timeout).
func TestStreamQueueTimeoutReportsWholeWait(t *testing.T) {
	park := newFakeParking()
	park.joined = time.Now().Add(-time.Hour)
	r := &queueBusyRouter{fakeRouter: &fakeRouter{ids: []string{"w0"}, pids: map[string]*actor.PID{}}}
	r.busy.Store(1)
	clock := newFakeClock()
	sys := actor.NewActorSystem()
	t.Cleanup(sys.Shutdown)
	_, started := startWithRouter(t, sys, r, park, clock)
	await(t, park.parked, "park")
	clock.await(t, flow.TimerQueue, 0).fire()
	var err error
	select {
	case err = <-started:
	case <-time.After(10 * time.Second):
		t.Fatal("start did not return")
	}
	if !errors.Is(err, gateway.ErrAllBusy) {
		t.Fatalf("start error %v, want all busy", err)
	}
	// At least the hour since it joined (a lower bound: the test's own time adds to it).
	if !strings.Contains(err.Error(), "waited 1h0m") {
		t.Errorf("start error %q, want the whole wait (waited 1h0m...)", err)
	}
}
