package cluster

import (
	"fmt"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	pcluster "github.com/asynkron/protoactor-go/cluster"
	"github.com/turbine-llm/turbine/messages"
	"google.golang.org/protobuf/reflect/protoreflect"
)

var routerService = messages.File_services_proto.Services().ByName("Router")

// methodIndex is the generated client's MethodIndex of the Router method name.
func methodIndex(t *testing.T, name protoreflect.Name) int32 {
	t.Helper()
	m := routerService.Methods().ByName(name)
	if m == nil {
		t.Fatalf("Router has no method %s", name)
	}
	return int32(m.Index())
}

// recordingInvoker records the tags of the messages it is given; on the first user
// message it runs whileBusy (posting more messages while the mailbox is running).
type recordingInvoker struct {
	mu        sync.Mutex
	got       []string
	whileBusy func()
	failures  []any
}

func tag(msg any) string {
	if env, ok := msg.(*actor.MessageEnvelope); ok {
		msg = env.Message
	}
	switch m := msg.(type) {
	case *pcluster.GrainRequest:
		return string(m.MessageData)
	case string:
		return m
	default:
		return fmt.Sprintf("%T", msg)
	}
}

func (r *recordingInvoker) InvokeSystemMessage(msg any) { r.record("system:" + tag(msg)) }

func (r *recordingInvoker) InvokeUserMessage(msg any) {
	r.record(tag(msg))
	if f := r.whileBusy; f != nil {
		r.whileBusy = nil
		f()
	}
}

func (r *recordingInvoker) EscalateFailure(reason any, _ any) {
	r.failures = append(r.failures, reason)
}

func (r *recordingInvoker) record(s string) {
	r.mu.Lock()
	r.got = append(r.got, s)
	r.mu.Unlock()
}

// TestUrgentGrainMailboxOrder: while the mailbox processes a first message, others
// arrive; then system messages run first, calls of the urgent methods (Register,
// PublishEvents) next, everything else last, each class in arrival order.
func TestUrgentGrainMailboxOrder(t *testing.T) {
	register, publish := methodIndex(t, "Register"), methodIndex(t, "PublishEvents")
	route, free := methodIndex(t, "Route"), methodIndex(t, "Free")
	call := func(method int32, name string) any { // as a grain client sends it: in an envelope
		return &actor.MessageEnvelope{Message: &pcluster.GrainRequest{MethodIndex: method, MessageData: []byte(name)}}
	}
	bare := func(method int32, name string) any { // without a sender
		return &pcluster.GrainRequest{MethodIndex: method, MessageData: []byte(name)}
	}
	for _, tc := range []struct {
		name   string
		posted []any // user messages, or "system:X" for a system message
		want   []string
	}{
		{"urgent calls overtake queued routing calls",
			[]any{call(route, "route1"), call(free, "free1"), call(publish, "events1"), call(route, "route2"), call(register, "heartbeat1")},
			[]string{"events1", "heartbeat1", "route1", "free1", "route2"}},
		{"without an envelope too",
			[]any{bare(route, "route1"), bare(publish, "events1")},
			[]string{"events1", "route1"}},
		{"other messages are not urgent",
			[]any{"topology", call(register, "heartbeat1"), "ack"},
			[]string{"heartbeat1", "topology", "ack"},
		},
		{"system messages first",
			[]any{call(route, "route1"), call(publish, "events1"), "system:stop"},
			[]string{"system:stop", "events1", "route1"}},
		{"nothing urgent: arrival order",
			[]any{call(route, "route1"), call(free, "free1"), call(route, "route2")},
			[]string{"route1", "free1", "route2"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mb := urgentGrainMailbox(routerService, 0, "Register", "PublishEvents")()
			inv := &recordingInvoker{}
			inv.whileBusy = func() {
				user := 0
				for _, p := range tc.posted {
					if s, ok := p.(string); ok && strings.HasPrefix(s, "system:") {
						mb.PostSystemMessage(strings.TrimPrefix(s, "system:"))
						continue
					}
					mb.PostUserMessage(p)
					user++
				}
				if n := mb.UserMessageCount(); n != user {
					t.Errorf("UserMessageCount while busy = %d, want %d", n, user)
				}
			}
			mb.RegisterHandlers(inv, actor.NewSynchronizedDispatcher(300))
			mb.PostUserMessage("first")
			want := append([]string{"first"}, tc.want...)
			if !slices.Equal(inv.got, want) {
				t.Fatalf("order %v, want %v", inv.got, want)
			}
			if mb.UserMessageCount() != 0 || len(inv.failures) != 0 {
				t.Fatalf("%d messages left, failures %v", mb.UserMessageCount(), inv.failures)
			}
		})
	}
}

// TestUrgentGrainMailboxSuspend: a suspended mailbox holds user messages, urgent or
// not, until it is resumed.
func TestUrgentGrainMailboxSuspend(t *testing.T) {
	publish := methodIndex(t, "PublishEvents")
	mb := urgentGrainMailbox(routerService, 0, "PublishEvents")()
	inv := &recordingInvoker{}
	mb.RegisterHandlers(inv, actor.NewSynchronizedDispatcher(300))
	mb.PostSystemMessage(&actor.SuspendMailbox{})
	mb.PostUserMessage("normal")
	mb.PostUserMessage(&actor.MessageEnvelope{Message: &pcluster.GrainRequest{MethodIndex: publish, MessageData: []byte("events")}})
	if len(inv.got) != 0 {
		t.Fatalf("suspended mailbox ran %v", inv.got)
	}
	mb.PostSystemMessage(&actor.ResumeMailbox{})
	if want := []string{"events", "normal"}; !slices.Equal(inv.got, want) {
		t.Fatalf("after resume: %v, want %v", inv.got, want)
	}
}

// TestUrgentGrainMailboxPanic: a panic in a handler is escalated with the message, as
// the library's mailbox does, and the mailbox goes on with the next message.
func TestUrgentGrainMailboxPanic(t *testing.T) {
	mb := urgentGrainMailbox(routerService, 0)()
	inv := &panickyInvoker{}
	mb.RegisterHandlers(inv, actor.NewSynchronizedDispatcher(300))
	mb.PostUserMessage("boom")
	mb.PostUserMessage("next")
	if len(inv.failures) != 1 || inv.failures[0] != "boom" || !slices.Equal(inv.got, []string{"next"}) {
		t.Fatalf("failures %v, handled %v", inv.failures, inv.got)
	}
}

type panickyInvoker struct{ recordingInvoker }

func (p *panickyInvoker) InvokeUserMessage(msg any) {
	if msg == "boom" {
		panic("boom")
	}
	p.record(tag(msg))
}

func TestUrgentGrainMailboxUnknownMethod(t *testing.T) {
	defer func() {
		if r := recover(); r == nil || !strings.Contains(fmt.Sprint(r), "no method Heartbeat") {
			t.Fatalf("recovered %v, want a panic naming the method", r)
		}
	}()
	UrgentGrainMailbox(routerService, "Register", "Heartbeat")
}

// TestUrgentGrainMailboxConcurrent: producers post concurrently to a mailbox run by
// protoactor's goroutine dispatcher; every message is handled once, and each producer's
// messages of one class in the order posted.
func TestUrgentGrainMailboxConcurrent(t *testing.T) {
	publish, route := methodIndex(t, "PublishEvents"), methodIndex(t, "Route")
	const producers, each = 8, 500
	for _, linger := range []time.Duration{0, time.Microsecond, mailboxLinger} {
		t.Run(fmt.Sprintf("linger=%v", linger), func(t *testing.T) {
			mb := urgentGrainMailbox(routerService, linger, "PublishEvents")()
			inv := &countingInvoker{done: make(chan struct{}), want: producers * each, last: map[string]int{}}
			mb.RegisterHandlers(inv, actor.NewDefaultDispatcher(50))
			var wg sync.WaitGroup
			for p := range producers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := range each {
						method := route
						if i%3 == 0 {
							method = publish
						}
						mb.PostUserMessage(&actor.MessageEnvelope{Message: &pcluster.GrainRequest{MethodIndex: method,
							MessageData: fmt.Appendf(nil, "%d/%d/%d", p, method, i)}})
					}
				}()
			}
			wg.Wait()
			<-inv.done
			if inv.err != nil {
				t.Fatal(inv.err)
			}
		})
	}
}

// countingDispatcher is protoactor's goroutine dispatcher that counts the goroutines it
// starts and reports each one's end on ended.
type countingDispatcher struct {
	started atomic.Int32
	ended   chan struct{}
}

func (d *countingDispatcher) Schedule(fn func()) {
	d.started.Add(1)
	go func() {
		fn()
		d.ended <- struct{}{}
	}()
}

func (d *countingDispatcher) Throughput() int { return 300 }

// TestUrgentGrainMailboxLingers: the goroutine that ran the queues empty runs the next
// message too while it lingers, and ends after the linger without one; a message after
// that starts a new one.
func TestUrgentGrainMailboxLingers(t *testing.T) {
	// A linger no loaded machine outlasts between two posts, then one that ends at once.
	for _, linger := range []time.Duration{time.Minute, time.Millisecond} {
		mb := urgentGrainMailbox(routerService, linger)().(*urgentMailbox)
		lingers := make(chan struct{}, 8)
		mb.onLinger = func() { lingers <- struct{}{} }
		inv := &signallingInvoker{handled: make(chan string, 4)}
		d := &countingDispatcher{ended: make(chan struct{}, 4)}
		mb.RegisterHandlers(inv, d)
		if linger == time.Minute {
			for _, msg := range []string{"first", "second", "third"} {
				mb.PostUserMessage(msg)
				if got := <-inv.handled; got != msg {
					t.Fatalf("handled %q, want %q", got, msg)
				}
				<-lingers
			}
			if n := d.started.Load(); n != 1 {
				t.Fatalf("%d goroutines started for three messages one after another, want 1", n)
			}
			continue // its goroutine lingers on past the test, waiting for nothing
		}
		mb.PostUserMessage("first")
		<-inv.handled
		<-d.ended // the linger passed with nothing to do
		mb.PostUserMessage("second")
		if got := <-inv.handled; got != "second" {
			t.Fatalf("handled %q, want second", got)
		}
		if n := d.started.Load(); n != 2 {
			t.Fatalf("%d goroutines started, want 2: a new one once the first ended", n)
		}
		<-d.ended
	}
}

type signallingInvoker struct {
	recordingInvoker
	handled chan string
}

func (s *signallingInvoker) InvokeUserMessage(msg any) { s.handled <- tag(msg) }

type countingInvoker struct {
	recordingInvoker
	n, want int
	last    map[string]int // producer/method -> last sequence number handled
	err     error
	done    chan struct{}
}

func (c *countingInvoker) InvokeUserMessage(msg any) {
	var p, method, i int
	fmt.Sscanf(tag(msg), "%d/%d/%d", &p, &method, &i)
	key := fmt.Sprintf("%d/%d", p, method)
	if prev, ok := c.last[key]; ok && i <= prev && c.err == nil {
		c.err = fmt.Errorf("producer %d method %d: %d after %d", p, method, i, prev)
	}
	c.last[key] = i
	c.n++
	if c.n == c.want {
		close(c.done)
	}
}

// TestFIFO: a long run of pushes and pops, interleaved so that the queue compacts,
// returns the items in order.
func TestFIFO(t *testing.T) {
	var q fifo
	next, want := 0, 0
	for round := range 50 {
		for range 100 + round*7 {
			q.push(next)
			next++
		}
		for range 90 + round*5 {
			if v := q.pop(); v != want {
				t.Fatalf("popped %v, want %d", v, want)
			}
			want++
		}
	}
	for v := q.pop(); v != nil; v = q.pop() {
		if v != want {
			t.Fatalf("popped %v, want %d", v, want)
		}
		want++
	}
	if want != next {
		t.Fatalf("popped %d items, pushed %d", want, next)
	}
}

// TestUrgentGrainMailboxLingerRaces: messages posted one at a time as lingers end (a
// linger of a microsecond, so that runs are handed out while goroutines give up) are
// each handled: no run is handed to a goroutine that left.
func TestUrgentGrainMailboxLingerRaces(t *testing.T) {
	mb := urgentGrainMailbox(routerService, time.Microsecond)()
	inv := &signallingInvoker{handled: make(chan string, 1)}
	mb.RegisterHandlers(inv, actor.NewDefaultDispatcher(300))
	for i := range 20000 {
		mb.PostUserMessage("m")
		select {
		case <-inv.handled:
		case <-time.After(10 * time.Second):
			t.Fatalf("message %d not handled", i)
		}
		for range i % 7 { // spread the next post over the linger's end
			runtime.Gosched()
		}
	}
}
