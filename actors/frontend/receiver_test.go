package frontend

import (
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/turbine-llm/turbine/messages"
)

// newReceiverAttempt spawns a receiver for request r1 on worker w0 (an actor that
// ignores everything); its grace timer fires only when the test fires it.
func newReceiverAttempt(t *testing.T) (*actor.ActorSystem, *attempt, *actor.PID, *fakeClock) {
	t.Helper()
	sys := actor.NewActorSystem()
	t.Cleanup(sys.Shutdown)
	worker := sys.Root.Spawn(actor.PropsFromFunc(func(actor.Context) {}))
	a := &attempt{requestID: "r1", workerID: "w0", worker: worker,
		arrivals: make(chan arrival, 16), closed: make(chan struct{})}
	clk := newFakeClock()
	a.receiver = sys.Root.Spawn(actor.PropsFromProducer(func() actor.Actor { return &receiver{a: a, clock: clk} }))
	return sys, a, worker, clk
}

// delivered stops a's receiver once it has handled every message sent to it before
// (PoisonPill is an ordinary message, queued behind them), and returns what it
// delivered that the test had not taken.
func delivered(t *testing.T, sys *actor.ActorSystem, a *attempt) []arrival {
	t.Helper()
	if err := sys.Root.PoisonFuture(a.receiver).Wait(); err != nil {
		t.Fatal(err)
	}
	var out []arrival
	for {
		select {
		case ar := <-a.arrivals:
			out = append(out, ar)
		default:
			return out
		}
	}
}

func next(t *testing.T, a *attempt) arrival {
	t.Helper()
	select {
	case ar := <-a.arrivals:
		return ar
	case <-time.After(10 * time.Second):
		t.Fatal("no chunk delivered")
		return arrival{}
	}
}

func TestReceiverDeliversInIndexOrder(t *testing.T) {
	sys, a, _, _ := newReceiverAttempt(t)
	for _, i := range []uint32{2, 0, 3, 1} {
		ch := &messages.TokenChunk{RequestId: "r1", Index: i, TokenIds: []uint32{100 + i}}
		if i == 3 {
			ch.FinishReason = "length"
		}
		sys.Root.Send(a.receiver, ch)
	}
	sys.Root.Send(a.receiver, &messages.TokenChunk{RequestId: "other", Index: 4}) // not this request's
	for want := uint32(0); want < 4; want++ {
		if ar := next(t, a); ar.chunk.Index != want || ar.chunk.TokenIds[0] != 100+want || ar.fault != "" {
			t.Fatalf("got chunk %d (%v, fault %q), want %d", ar.chunk.Index, ar.chunk.TokenIds, ar.fault, want)
		}
	}
	if rest := delivered(t, sys, a); len(rest) != 0 {
		t.Fatalf("unexpected chunk after the last one: %+v", rest[0].chunk)
	}
}

// A worker that stops is reported lost (a migratable worker_terminated fault) once
// terminatedGrace has passed since its termination notice, not before.
func TestReceiverReportsWorkerLossAsMigratable(t *testing.T) {
	sys, a, worker, clk := newReceiverAttempt(t)
	sys.Root.Send(a.receiver, &messages.TokenChunk{RequestId: "r1", Index: 0, TokenIds: []uint32{7}})
	if ar := next(t, a); ar.chunk.Index != 0 {
		t.Fatalf("first chunk %+v", ar.chunk)
	}
	if err := sys.Root.StopFuture(worker).Wait(); err != nil {
		t.Fatal(err)
	}
	grace := clk.await(t, timerTerminatedGrace, 0) // the receiver has the notice
	if grace.d != terminatedGrace {
		t.Errorf("grace timer of %v, want terminatedGrace (%v)", grace.d, terminatedGrace)
	}
	select {
	case ar := <-a.arrivals:
		t.Fatalf("%+v (fault %q) delivered before the grace ran out", ar.chunk, ar.fault)
	default:
	}
	grace.fire()
	ar := next(t, a)
	ch := ar.chunk
	if ch.Index != 1 || ch.FinishReason != "error" || !ch.Migratable || ch.Error == "" || ar.fault != FaultWorkerTerminated {
		t.Fatalf("after the worker stopped: %+v (fault %q), want a worker_terminated error chunk with index 1", ch, ar.fault)
	}
}

func TestReceiverClassifiesWorkerErrors(t *testing.T) {
	sys, a, _, _ := newReceiverAttempt(t)
	sys.Root.Send(a.receiver, &messages.TokenChunk{RequestId: "r1", Index: 0, FinishReason: "error",
		Error: "engine: connection refused", Migratable: true})
	if ar := next(t, a); ar.fault != FaultEngineError {
		t.Fatalf("migratable engine error: fault %q, want %q", ar.fault, FaultEngineError)
	}
	sys2, b, _, _ := newReceiverAttempt(t)
	sys2.Root.Send(b.receiver, &messages.TokenChunk{RequestId: "r1", Index: 0, FinishReason: "error",
		Error: "worker: duplicate request id r1"})
	if ar := next(t, b); ar.fault != "" {
		t.Fatalf("non-migratable error: fault %q, want none", ar.fault)
	}
}

// A worker's termination notice can overtake the chunks it sent before stopping (a
// draining worker stops as soon as its last request ends): chunks that arrive after the
// notice, within terminatedGrace, finish the attempt, and no loss is reported when the
// grace runs out afterwards.
func TestReceiverTakesChunksThatTrailTheTerminationNotice(t *testing.T) {
	sys, a, worker, clk := newReceiverAttempt(t)
	if err := sys.Root.StopFuture(worker).Wait(); err != nil {
		t.Fatal(err)
	}
	// The grace timer is armed: the receiver has handled the notice. Send the trailing
	// chunks now, as the wire would have delivered them late.
	grace := clk.await(t, timerTerminatedGrace, 0)
	sys.Root.Send(a.receiver, &messages.TokenChunk{RequestId: "r1", Index: 0, TokenIds: []uint32{7}})
	sys.Root.Send(a.receiver, &messages.TokenChunk{RequestId: "r1", Index: 1, TokenIds: []uint32{8}, FinishReason: "length"})
	for want := uint32(0); want < 2; want++ {
		if ar := next(t, a); ar.chunk.Index != want || ar.fault != "" {
			t.Fatalf("chunk %d: %+v (fault %q), want the worker's own chunk", want, ar.chunk, ar.fault)
		}
	}
	grace.fire()
	if rest := delivered(t, sys, a); len(rest) != 0 {
		t.Fatalf("after the last chunk: %+v (fault %q); want nothing", rest[0].chunk, rest[0].fault)
	}
}
