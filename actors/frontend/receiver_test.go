package frontend

import (
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/turbine-llm/turbine/messages"
)

func newReceiverStream(t *testing.T) (*actor.ActorSystem, *stream, *actor.PID) {
	t.Helper()
	sys := actor.NewActorSystem()
	t.Cleanup(sys.Shutdown)
	worker := sys.Root.Spawn(actor.PropsFromFunc(func(actor.Context) {}))
	s := &stream{requestID: "r1", workerID: "w0", worker: worker,
		chunks: make(chan *messages.TokenChunk, 16), closed: make(chan struct{})}
	s.receiver = sys.Root.Spawn(actor.PropsFromProducer(func() actor.Actor { return &receiver{s: s} }))
	return sys, s, worker
}

func next(t *testing.T, s *stream) *messages.TokenChunk {
	t.Helper()
	select {
	case ch := <-s.chunks:
		return ch
	case <-time.After(10 * time.Second):
		t.Fatal("no chunk delivered")
		return nil
	}
}

func TestReceiverDeliversInIndexOrder(t *testing.T) {
	sys, s, _ := newReceiverStream(t)
	for _, i := range []uint32{2, 0, 3, 1} {
		ch := &messages.TokenChunk{RequestId: "r1", Index: i, TokenIds: []uint32{100 + i}}
		if i == 3 {
			ch.FinishReason = "length"
		}
		sys.Root.Send(s.receiver, ch)
	}
	sys.Root.Send(s.receiver, &messages.TokenChunk{RequestId: "other", Index: 4}) // not this request's
	for want := uint32(0); want < 4; want++ {
		if ch := next(t, s); ch.Index != want || ch.TokenIds[0] != 100+want {
			t.Fatalf("got chunk %d (%v), want %d", ch.Index, ch.TokenIds, want)
		}
	}
	select {
	case ch := <-s.chunks:
		t.Fatalf("unexpected chunk after the last one: %+v", ch)
	default:
	}
}

func TestReceiverReportsWorkerLossAsMigratable(t *testing.T) {
	sys, s, worker := newReceiverStream(t)
	sys.Root.Send(s.receiver, &messages.TokenChunk{RequestId: "r1", Index: 0, TokenIds: []uint32{7}})
	if ch := next(t, s); ch.Index != 0 {
		t.Fatalf("first chunk %+v", ch)
	}
	if err := sys.Root.StopFuture(worker).Wait(); err != nil {
		t.Fatal(err)
	}
	ch := next(t, s)
	if ch.Index != 1 || ch.FinishReason != "error" || !ch.Migratable || ch.Error == "" {
		t.Fatalf("after the worker stopped: %+v, want a migratable error chunk with index 1", ch)
	}
}
