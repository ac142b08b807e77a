package worker

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/rs/zerolog"
	"github.com/turbine-llm/turbine/engines"
	"github.com/turbine-llm/turbine/messages"
)

// heldEngine is healthy; each Generate sends one token, then waits for release (or its
// context) and finishes.
type heldEngine struct{ release chan struct{} }

func (heldEngine) Health(context.Context) error { return nil }
func (heldEngine) Load(context.Context) (*messages.WorkerLoad, error) {
	return &messages.WorkerLoad{TotalBlocks: 16}, nil
}
func (e heldEngine) Generate(ctx context.Context, _ string, _ []uint32, _ *messages.SamplingParams, fn func(engines.Chunk) error) error {
	if err := fn(engines.Chunk{TokenIDs: []uint32{1}}); err != nil {
		return err
	}
	select {
	case <-e.release:
	case <-ctx.Done():
		return ctx.Err()
	}
	return fn(engines.Chunk{TokenIDs: []uint32{2}, FinishReason: "stop", CompletionTokens: 2})
}

type heldLauncher struct {
	shellLauncher
	engine heldEngine
}

func (l heldLauncher) Connect(string) engines.Engine { return l.engine }

// recordingRouter reports registrations and deregistrations.
type recordingRouter struct {
	nopRouter
	registered   chan bool // Ready of each registration
	deregistered chan string
}

func (r recordingRouter) Register(m *messages.RegisterWorker) (*messages.RegisterAck, error) {
	select {
	case r.registered <- m.Worker.Ready:
	default:
	}
	return &messages.RegisterAck{Accepted: true}, nil
}

func (r recordingRouter) Deregister(m *messages.DeregisterWorker) (*messages.Ack, error) {
	r.deregistered <- m.Reason
	return &messages.Ack{}, nil
}

// startHeld starts a worker over a heldEngine and waits for its first ready registration.
func startHeld(t *testing.T) (*actor.ActorSystem, *actor.PID, heldEngine, recordingRouter) {
	t.Helper()
	eng := heldEngine{release: make(chan struct{})}
	rt := recordingRouter{registered: make(chan bool, 64), deregistered: make(chan string, 4)}
	sys := actor.NewActorSystem()
	props, err := Props(Config{WorkerID: "w-drain", Card: &messages.ModelCard{Model: "m"},
		Launcher:  heldLauncher{shellLauncher: shellLauncher{script: "exec sleep 60"}, engine: eng},
		Heartbeat: 20 * time.Millisecond, StopGrace: time.Second, Router: rt, Logger: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	pid := sys.Root.Spawn(props)
	t.Cleanup(func() { _ = sys.Root.StopFuture(pid).Wait() })
	waitRegisteredReady(t, rt.registered)
	return sys, pid, eng, rt
}

// waitRegisteredReady waits up to 10 s for a registration saying ready on registered.
func waitRegisteredReady(t *testing.T, registered <-chan bool) {
	t.Helper()
	for ready := false; !ready; {
		select {
		case ready = <-registered:
		case <-time.After(10 * time.Second):
			t.Fatal("worker not registered ready within 10 s")
		}
	}
}

// sink spawns an actor that passes on, in order, the messages it receives that pass
// takes.
func sink[T any](sys *actor.ActorSystem, pass func(any) (T, bool)) (*messages.ActorRef, chan T) {
	ch := make(chan T, 64)
	pid := sys.Root.Spawn(actor.PropsFromFunc(func(c actor.Context) {
		if m, ok := pass(c.Message()); ok {
			ch <- m
		}
	}))
	return &messages.ActorRef{Address: pid.Address, Id: pid.Id}, ch
}

// chunkSink spawns an actor that passes on the TokenChunks it receives.
func chunkSink(sys *actor.ActorSystem) (*messages.ActorRef, chan *messages.TokenChunk) {
	return sink(sys, func(m any) (*messages.TokenChunk, bool) { c, ok := m.(*messages.TokenChunk); return c, ok })
}

// messageSink spawns an actor that passes on every GenerateAccepted and TokenChunk it
// receives, in order.
func messageSink(sys *actor.ActorSystem) (*messages.ActorRef, chan any) {
	return sink(sys, func(m any) (any, bool) {
		switch m.(type) {
		case *messages.GenerateAccepted, *messages.TokenChunk:
			return m, true
		}
		return nil, false
	})
}

// next returns the next value of ch, failing the test after 10 s without one.
func next[T any](t *testing.T, ch chan T) T {
	t.Helper()
	select {
	case c := <-ch:
		return c
	case <-time.After(10 * time.Second):
		t.Fatal("nothing within 10 s")
		var zero T
		return zero
	}
}

func waitClosed(t *testing.T, done chan struct{}, what string) {
	t.Helper()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatalf("%s: not within 10 s", what)
	}
}

// TestDrainLetsRequestsFinish: after Drain the worker deregisters, refuses new requests
// with a migratable error, and the request in flight finishes normally; Done closes then.
func TestDrainLetsRequestsFinish(t *testing.T) {
	sys, pid, eng, rt := startHeld(t)
	ref, chunks := chunkSink(sys)
	sys.Root.Send(pid, &messages.Generate{RequestId: "r1", TokenIds: []uint32{5}, ReplyTo: ref})
	if c := next(t, chunks); c.FinishReason != "" || len(c.TokenIds) != 1 {
		t.Fatalf("first chunk %v", c)
	}
	done := make(chan struct{})
	sys.Root.Send(pid, &Drain{Grace: time.Hour, Done: done})
	if reason := <-rt.deregistered; !strings.Contains(reason, "draining") {
		t.Errorf("deregistration reason %q", reason)
	}
	sys.Root.Send(pid, &messages.Generate{RequestId: "r2", TokenIds: []uint32{5}, ReplyTo: ref})
	if c := next(t, chunks); c.RequestId != "r2" || c.Fault == messages.Fault_FAULT_NONE || c.FinishReason != "error" {
		t.Fatalf("new request while draining: %v", c)
	}
	select {
	case <-done:
		t.Fatal("drained with a request in flight")
	default:
	}
	close(eng.release)
	if c := next(t, chunks); c.RequestId != "r1" || c.FinishReason != "stop" {
		t.Fatalf("in-flight request ended with %v", c)
	}
	waitClosed(t, done, "drained after the last request")
}

// TestDrainGraceOver: a request still running when the grace period ends gets a
// migratable error chunk (numbered after what it sent), and the drain completes.
func TestDrainGraceOver(t *testing.T) {
	sys, pid, _, _ := startHeld(t)
	ref, chunks := chunkSink(sys)
	sys.Root.Send(pid, &messages.Generate{RequestId: "r1", TokenIds: []uint32{5}, ReplyTo: ref})
	next(t, chunks)
	done := make(chan struct{})
	sys.Root.Send(pid, &Drain{Grace: 0, Done: done})
	c := next(t, chunks)
	if c.FinishReason != "error" || c.Fault == messages.Fault_FAULT_NONE || c.Index != 1 || !strings.Contains(c.Error, "draining") {
		t.Fatalf("after the grace: %v", c)
	}
	waitClosed(t, done, "drained after aborting")
}

// TestDrainIdle: a worker with nothing in flight is drained at once.
func TestDrainIdle(t *testing.T) {
	sys, pid, _, _ := startHeld(t)
	done := make(chan struct{})
	sys.Root.Send(pid, &Drain{Grace: time.Hour, Done: done})
	waitClosed(t, done, "idle drain")
}

// TestDrainShorterGraceShortens: a worker draining with a long grace that gets a second
// Drain with a shorter grace ends its requests at the shorter deadline.
func TestDrainShorterGraceShortens(t *testing.T) {
	sys, pid, _, _ := startHeld(t)
	ref, chunks := chunkSink(sys)
	sys.Root.Send(pid, &messages.Generate{RequestId: "r1", TokenIds: []uint32{5}, ReplyTo: ref})
	next(t, chunks)
	first, second := make(chan struct{}), make(chan struct{})
	sys.Root.Send(pid, &Drain{Grace: time.Hour, Done: first})
	sys.Root.Send(pid, &Drain{Grace: 0, Done: second})
	c := next(t, chunks)
	if c.FinishReason != "error" || !strings.Contains(c.Error, "draining") {
		t.Fatalf("after the shorter grace: %v", c)
	}
	waitClosed(t, first, "first drain's Done")
	waitClosed(t, second, "second drain's Done")
}

// TestGenerateAcknowledgedFirst: a worker acknowledges a Generate it takes
// (GenerateAccepted, naming the request and itself) before its first chunk, and once; a
// Generate it cannot take (a draining worker's) gets its error chunk, which is answer
// enough, and no acknowledgement.
func TestGenerateAcknowledgedFirst(t *testing.T) {
	sys, pid, eng, _ := startHeld(t)
	ref, msgs := messageSink(sys)
	sys.Root.Send(pid, &messages.Generate{RequestId: "r1", TokenIds: []uint32{5}, ReplyTo: ref})
	if a, ok := next(t, msgs).(*messages.GenerateAccepted); !ok || a.RequestId != "r1" || a.WorkerId != "w-drain" {
		t.Fatalf("first message %v, want GenerateAccepted of r1 by w-drain", a)
	}
	if c, ok := next(t, msgs).(*messages.TokenChunk); !ok || len(c.TokenIds) != 1 {
		t.Fatalf("second message %v, want the first token", c)
	}
	close(eng.release)
	if c, ok := next(t, msgs).(*messages.TokenChunk); !ok || c.FinishReason != "stop" {
		t.Fatalf("third message %v, want the last chunk", c)
	}
	done := make(chan struct{})
	sys.Root.Send(pid, &Drain{Grace: time.Minute, Done: done})
	waitClosed(t, done, "drained")
	sys.Root.Send(pid, &messages.Generate{RequestId: "r2", TokenIds: []uint32{5}, ReplyTo: ref})
	if c, ok := next(t, msgs).(*messages.TokenChunk); !ok || c.Fault != messages.Fault_FAULT_ENGINE_ERROR {
		t.Fatalf("a draining worker's answer %v, want its migratable error chunk alone", c)
	}
	select {
	case m := <-msgs:
		t.Fatalf("then %v, want nothing", m)
	default:
	}
}
