package frontend

import (
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/turbine-llm/turbine/messages"
)

func newReceiverAttempt(t *testing.T) (*actor.ActorSystem, *attempt, *actor.PID) {
	t.Helper()
	sys := actor.NewActorSystem()
	t.Cleanup(sys.Shutdown)
	worker := sys.Root.Spawn(actor.PropsFromFunc(func(actor.Context) {}))
	a := &attempt{requestID: "r1", workerID: "w0", worker: worker,
		arrivals: make(chan arrival, 16), closed: make(chan struct{})}
	a.receiver = sys.Root.Spawn(actor.PropsFromProducer(func() actor.Actor { return &receiver{a: a} }))
	return sys, a, worker
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
	sys, a, _ := newReceiverAttempt(t)
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
	select {
	case ar := <-a.arrivals:
		t.Fatalf("unexpected chunk after the last one: %+v", ar.chunk)
	default:
	}
}

func TestReceiverReportsWorkerLossAsMigratable(t *testing.T) {
	sys, a, worker := newReceiverAttempt(t)
	sys.Root.Send(a.receiver, &messages.TokenChunk{RequestId: "r1", Index: 0, TokenIds: []uint32{7}})
	if ar := next(t, a); ar.chunk.Index != 0 {
		t.Fatalf("first chunk %+v", ar.chunk)
	}
	if err := sys.Root.StopFuture(worker).Wait(); err != nil {
		t.Fatal(err)
	}
	ar := next(t, a)
	ch := ar.chunk
	if ch.Index != 1 || ch.FinishReason != "error" || !ch.Migratable || ch.Error == "" || ar.fault != FaultWorkerTerminated {
		t.Fatalf("after the worker stopped: %+v (fault %q), want a worker_terminated error chunk with index 1", ch, ar.fault)
	}
}

func TestReceiverClassifiesWorkerErrors(t *testing.T) {
	sys, a, _ := newReceiverAttempt(t)
	sys.Root.Send(a.receiver, &messages.TokenChunk{RequestId: "r1", Index: 0, FinishReason: "error",
		Error: "engine: connection refused", Migratable: true})
	if ar := next(t, a); ar.fault != FaultEngineError {
		t.Fatalf("migratable engine error: fault %q, want %q", ar.fault, FaultEngineError)
	}
	sys2, b, _ := newReceiverAttempt(t)
	sys2.Root.Send(b.receiver, &messages.TokenChunk{RequestId: "r1", Index: 0, FinishReason: "error",
		Error: "worker: duplicate request id r1"})
	if ar := next(t, b); ar.fault != "" {
		t.Fatalf("non-migratable error: fault %q, want none", ar.fault)
	}
}

// A worker's termination notice can overtake the chunks it sent before stopping (a
// draining worker stops as soon as its last request ends): a last chunk that arrives after
// the notice, within terminatedGrace, finishes the attempt and no loss is reported.
func TestReceiverTakesChunksThatTrailTheTerminationNotice(t *testing.T) {
	sys, a, worker := newReceiverAttempt(t)
	if err := sys.Root.StopFuture(worker).Wait(); err != nil {
		t.Fatal(err)
	}
	// The receiver has the notice once a message sent after it is handled: send the
	// trailing chunks now, as the wire would have delivered them late.
	sys.Root.Send(a.receiver, &messages.TokenChunk{RequestId: "r1", Index: 0, TokenIds: []uint32{7}})
	sys.Root.Send(a.receiver, &messages.TokenChunk{RequestId: "r1", Index: 1, TokenIds: []uint32{8}, FinishReason: "length"})
	for want := uint32(0); want < 2; want++ {
		if ar := next(t, a); ar.chunk.Index != want || ar.fault != "" {
			t.Fatalf("chunk %d: %+v (fault %q), want the worker's own chunk", want, ar.chunk, ar.fault)
		}
	}
	select {
	case ar := <-a.arrivals:
		t.Fatalf("after the last chunk: %+v (fault %q); want nothing", ar.chunk, ar.fault)
	case <-time.After(2 * terminatedGrace):
	}
}
