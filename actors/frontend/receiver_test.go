package frontend

import (
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/turbine-llm/turbine/flow"
	"github.com/turbine-llm/turbine/messages"
)

// newTestReceiver spawns the receiver of leg 1, request r1, on worker w0 (an actor that
// ignores everything), delivering into a channel of its own.
func newTestReceiver(t *testing.T) (*actor.ActorSystem, *actor.PID, *actor.PID, chan flow.Event) {
	t.Helper()
	sys := actor.NewActorSystem()
	t.Cleanup(sys.Shutdown)
	worker := sys.Root.Spawn(actor.PropsFromFunc(func(actor.Context) {}))
	events := make(chan flow.Event, 16)
	r := &receiver{leg: 1, requestID: "r1", worker: worker, events: events, closed: make(chan struct{})}
	return sys, sys.Root.Spawn(actor.PropsFromProducer(func() actor.Actor { return r })), worker, events
}

// delivered stops the receiver once it has handled every message sent to it before
// (PoisonPill is an ordinary message, queued behind them), and returns what it
// delivered that the test had not taken.
func delivered(t *testing.T, sys *actor.ActorSystem, receiver *actor.PID, events chan flow.Event) []flow.Event {
	t.Helper()
	if err := sys.Root.PoisonFuture(receiver).Wait(); err != nil {
		t.Fatal(err)
	}
	var out []flow.Event
	for {
		select {
		case ev := <-events:
			out = append(out, ev)
		default:
			return out
		}
	}
}

func next(t *testing.T, events chan flow.Event) flow.Event {
	t.Helper()
	select {
	case ev := <-events:
		return ev
	case <-time.After(10 * time.Second):
		t.Fatal("no event delivered")
		return nil
	}
}

// nextChunk is the next event, which must be a chunk of leg 1.
func nextChunk(t *testing.T, events chan flow.Event) *messages.TokenChunk {
	t.Helper()
	ev := next(t, events)
	c, ok := ev.(flow.Chunk)
	if !ok || c.Leg != 1 {
		t.Fatalf("got %#v, want a chunk of leg 1", ev)
	}
	return c.Chunk
}

func TestReceiverDeliversInIndexOrder(t *testing.T) {
	sys, rcv, _, events := newTestReceiver(t)
	for _, i := range []uint32{2, 0, 3, 1} {
		ch := &messages.TokenChunk{RequestId: "r1", Index: i, TokenIds: []uint32{100 + i}}
		if i == 3 {
			ch.FinishReason = "length"
		}
		sys.Root.Send(rcv, ch)
	}
	sys.Root.Send(rcv, &messages.TokenChunk{RequestId: "other", Index: 4}) // not this request's
	for want := uint32(0); want < 4; want++ {
		if ch := nextChunk(t, events); ch.Index != want || ch.TokenIds[0] != 100+want {
			t.Fatalf("got chunk %d (%v), want %d", ch.Index, ch.TokenIds, want)
		}
	}
	if rest := delivered(t, sys, rcv, events); len(rest) != 0 {
		t.Fatalf("unexpected event after the last chunk: %#v", rest[0])
	}
}

// A worker that stops is reported to the flow (WorkerTerminated of the leg), which
// decides when the leg counts as lost.
func TestReceiverReportsWorkerTermination(t *testing.T) {
	sys, rcv, worker, events := newTestReceiver(t)
	sys.Root.Send(rcv, &messages.TokenChunk{RequestId: "r1", Index: 0, TokenIds: []uint32{7}})
	if ch := nextChunk(t, events); ch.Index != 0 {
		t.Fatalf("first chunk %+v", ch)
	}
	if err := sys.Root.StopFuture(worker).Wait(); err != nil {
		t.Fatal(err)
	}
	if ev := next(t, events); ev != (flow.WorkerTerminated{Leg: 1}) {
		t.Fatalf("after the worker stopped: %#v, want WorkerTerminated of leg 1", ev)
	}
}

// A worker's termination notice can overtake the chunks it sent before stopping (a
// draining worker stops as soon as its last request ends): chunks that arrive after the
// notice are still delivered, in order, and nothing after the last one.
func TestReceiverTakesChunksThatTrailTheTerminationNotice(t *testing.T) {
	sys, rcv, worker, events := newTestReceiver(t)
	if err := sys.Root.StopFuture(worker).Wait(); err != nil {
		t.Fatal(err)
	}
	if ev := next(t, events); ev != (flow.WorkerTerminated{Leg: 1}) {
		t.Fatalf("%#v, want WorkerTerminated of leg 1", ev)
	}
	// Send the trailing chunks now, as the wire would have delivered them late.
	sys.Root.Send(rcv, &messages.TokenChunk{RequestId: "r1", Index: 0, TokenIds: []uint32{7}})
	sys.Root.Send(rcv, &messages.TokenChunk{RequestId: "r1", Index: 1, TokenIds: []uint32{8}, FinishReason: "length"})
	for want := uint32(0); want < 2; want++ {
		if ch := nextChunk(t, events); ch.Index != want {
			t.Fatalf("chunk %d: %+v, want the worker's own chunk", want, ch)
		}
	}
	if rest := delivered(t, sys, rcv, events); len(rest) != 0 {
		t.Fatalf("after the last chunk: %#v; want nothing", rest[0])
	}
}

// A leg the stream forgot delivers nothing more, even with its channel full.
func TestReceiverStopsDeliveringOnceForgotten(t *testing.T) {
	sys := actor.NewActorSystem()
	t.Cleanup(sys.Shutdown)
	worker := sys.Root.Spawn(actor.PropsFromFunc(func(actor.Context) {}))
	events, closed := make(chan flow.Event, 1), make(chan struct{})
	rcv := sys.Root.Spawn(actor.PropsFromProducer(func() actor.Actor {
		return &receiver{leg: 1, requestID: "r1", worker: worker, events: events, closed: closed}
	}))
	for i := uint32(0); i < 3; i++ {
		sys.Root.Send(rcv, &messages.TokenChunk{RequestId: "r1", Index: i, TokenIds: []uint32{i}})
	}
	if ch := nextChunk(t, events); ch.Index != 0 {
		t.Fatalf("first chunk %+v", ch)
	}
	close(closed)
	// The receiver is not stuck on the full channel: it handles the PoisonPill.
	if rest := delivered(t, sys, rcv, events); len(rest) > 1 {
		t.Fatalf("delivered %d events after the leg was forgotten", len(rest))
	}
}
