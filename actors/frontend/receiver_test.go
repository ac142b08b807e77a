package frontend

import (
	"sync"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/turbine-llm/turbine/flow"
	"github.com/turbine-llm/turbine/messages"
)

// newTestReceiver starts the receiver of leg 1, request r1, on worker w0 (an actor that
// ignores everything), delivering into a channel of its own.
func newTestReceiver(t *testing.T) (*actor.ActorSystem, *receiver, *actor.PID, *actor.PID, chan flow.Event) {
	t.Helper()
	return newTestReceiverWith(t, 16, make(chan struct{}))
}

// newTestReceiverWith is newTestReceiver with a channel of room events and the leg's
// closed channel.
func newTestReceiverWith(t *testing.T, room int, closed chan struct{}) (*actor.ActorSystem, *receiver, *actor.PID, *actor.PID, chan flow.Event) {
	t.Helper()
	sys := actor.NewActorSystem()
	t.Cleanup(sys.Shutdown)
	worker := sys.Root.Spawn(actor.PropsFromFunc(func(actor.Context) {}))
	events := make(chan flow.Event, room)
	r := &receiver{leg: 1, requestID: "r1", worker: worker, events: events, closed: closed}
	return sys, r, startReceiver(sys, r), worker, events
}

// delivered stops the receiver (a message reaches it on the sender's goroutine: what
// was sent before was handled), waits for its backlog's hand-over, and returns what it
// delivered that the test had not taken.
func delivered(t *testing.T, r *receiver, events chan flow.Event) []flow.Event {
	t.Helper()
	stopReceiver(r)
	r.handing.Wait()
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
	sys, r, rcv, _, events := newTestReceiver(t)
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
	if rest := delivered(t, r, events); len(rest) != 0 {
		t.Fatalf("unexpected event after the last chunk: %#v", rest[0])
	}
}

// A worker that stops is reported to the flow (WorkerTerminated of the leg), which
// decides when the leg counts as lost.
func TestReceiverReportsWorkerTermination(t *testing.T) {
	sys, _, rcv, worker, events := newTestReceiver(t)
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
	sys, r, rcv, worker, events := newTestReceiver(t)
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
	if rest := delivered(t, r, events); len(rest) != 0 {
		t.Fatalf("after the last chunk: %#v; want nothing", rest[0])
	}
}

// A leg the stream forgot delivers nothing more, even with its channel full: at most the
// one event its hand-over was offering as the leg was forgotten.
func TestReceiverStopsDeliveringOnceForgotten(t *testing.T) {
	closed := make(chan struct{})
	sys, r, rcv, _, events := newTestReceiverWith(t, 1, closed)
	for i := uint32(0); i < 4; i++ {
		sys.Root.Send(rcv, &messages.TokenChunk{RequestId: "r1", Index: i, TokenIds: []uint32{i}})
	}
	if ch := nextChunk(t, events); ch.Index != 0 {
		t.Fatalf("first chunk %+v", ch)
	}
	close(closed)
	sys.Root.Send(rcv, &messages.TokenChunk{RequestId: "r1", Index: 4, TokenIds: []uint32{4}})
	// The hand-over is not stuck on the full channel: it ends.
	if rest := delivered(t, r, events); len(rest) > 1 {
		t.Fatalf("delivered %d events after the leg was forgotten", len(rest))
	}
}

// A worker that ignores flow control does not block the goroutine that delivers its
// messages (the connection's reader, for a remote worker): with the channel full, every
// chunk is taken at once and handed over in order as the stream reads.
func TestReceiverNeverBlocksItsSender(t *testing.T) {
	sys, r, rcv, _, events := newTestReceiverWith(t, 2, make(chan struct{}))
	const n = 50
	for i := uint32(0); i < n; i++ { // returns although the channel holds 2
		sys.Root.Send(rcv, &messages.TokenChunk{RequestId: "r1", Index: i, TokenIds: []uint32{i}})
	}
	for want := uint32(0); want < n; want++ {
		if ch := nextChunk(t, events); ch.Index != want {
			t.Fatalf("chunk %d, want %d", ch.Index, want)
		}
	}
	if rest := delivered(t, r, events); len(rest) != 0 {
		t.Fatalf("more events than chunks: %#v", rest[0])
	}
}

// A worker that is gone before its leg's receiver watches it is reported at once; a
// stopped receiver no longer watches its worker, whose stop then reaches nobody.
func TestReceiverWatchesAndUnwatches(t *testing.T) {
	sys := actor.NewActorSystem()
	t.Cleanup(sys.Shutdown)
	gone := sys.Root.Spawn(actor.PropsFromFunc(func(actor.Context) {}))
	if err := sys.Root.StopFuture(gone).Wait(); err != nil {
		t.Fatal(err)
	}
	events := make(chan flow.Event, 4)
	r := &receiver{leg: 1, requestID: "r1", worker: gone, events: events, closed: make(chan struct{})}
	startReceiver(sys, r)
	if ev := next(t, events); ev != (flow.WorkerTerminated{Leg: 1}) {
		t.Fatalf("watching a stopped worker: %#v, want WorkerTerminated of leg 1", ev)
	}

	// After stopReceiver the worker no longer holds the watch: its stop sends the
	// receiver nothing (a watch left behind would send a Terminated to the removed
	// receiver, a dead letter). Without the unwatch, the same check sees one.
	for _, unwatch := range []bool{true, false} {
		var mu sync.Mutex
		var leftovers int
		var receiverPID *actor.PID
		sub := sys.EventStream.Subscribe(func(ev any) {
			if d, ok := ev.(*actor.DeadLetterEvent); ok {
				if _, ok := d.Message.(*actor.Terminated); ok {
					mu.Lock()
					if receiverPID != nil && d.PID.Equal(receiverPID) {
						leftovers++
					}
					mu.Unlock()
				}
			}
		})
		worker := sys.Root.Spawn(actor.PropsFromFunc(func(actor.Context) {}))
		r2 := &receiver{leg: 2, requestID: "r2", worker: worker, events: events, closed: make(chan struct{})}
		pid := startReceiver(sys, r2)
		mu.Lock()
		receiverPID = pid
		mu.Unlock()
		if unwatch {
			stopReceiver(r2)
		} else {
			sys.ProcessRegistry.Remove(pid)
		}
		if err := sys.Root.StopFuture(worker).Wait(); err != nil {
			t.Fatal(err)
		}
		sys.EventStream.Unsubscribe(sub)
		mu.Lock()
		got := leftovers
		mu.Unlock()
		if want := map[bool]int{true: 0, false: 1}[unwatch]; got != want {
			t.Fatalf("unwatch %v: %d Terminated sent to the stopped receiver, want %d", unwatch, got, want)
		}
	}
}

// The leg's worker watches its receiver (it cancels the request when the receiver
// stops): a watch before the stop gets the receiver's Terminated when it stops, one
// after it at once, and one taken back (Unwatch) none.
func TestReceiverStopsAsAnActorStops(t *testing.T) {
	sys := actor.NewActorSystem()
	t.Cleanup(sys.Shutdown)
	worker := sys.Root.Spawn(actor.PropsFromFunc(func(actor.Context) {}))
	r := &receiver{leg: 1, requestID: "r1", worker: worker, events: make(chan flow.Event, 4), closed: make(chan struct{})}
	rcv := startReceiver(sys, r)
	type watcherMsg struct {
		watch, unwatch bool
	}
	terminated := make(chan string, 8)
	watcher := func(name string) *actor.PID {
		return sys.Root.Spawn(actor.PropsFromFunc(func(c actor.Context) {
			switch m := c.Message().(type) {
			case watcherMsg:
				if m.watch {
					c.Watch(rcv)
				}
				if m.unwatch {
					c.Unwatch(rcv)
				}
				c.Respond(true)
			case *actor.Terminated:
				if m.Who.Equal(rcv) {
					terminated <- name
				}
			}
		}))
	}
	ask := func(pid *actor.PID, m watcherMsg) {
		if _, err := sys.Root.RequestFuture(pid, m, 5*time.Second).Result(); err != nil {
			t.Fatal(err)
		}
	}
	before, undone := watcher("before"), watcher("undone")
	ask(before, watcherMsg{watch: true})
	ask(undone, watcherMsg{watch: true})
	ask(undone, watcherMsg{unwatch: true})
	stopReceiver(r)
	next := func() string {
		select {
		case got := <-terminated:
			return got
		case <-time.After(10 * time.Second):
			t.Fatal("no Terminated of the receiver")
			return ""
		}
	}
	if got := next(); got != "before" {
		t.Fatalf("Terminated went to %q, want the watcher from before the stop", got)
	}
	after := watcher("after")
	ask(after, watcherMsg{watch: true})
	if got := next(); got != "after" {
		t.Fatalf("Terminated went to %q, want the watcher from after the stop", got)
	}
	// The one that took its watch back heard nothing: a last message through its
	// mailbox comes after any Terminated sent to it.
	ask(undone, watcherMsg{})
	select {
	case got := <-terminated:
		t.Fatalf("Terminated also went to %q", got)
	default:
	}
}
