package cluster

import (
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	pcluster "github.com/asynkron/protoactor-go/cluster"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// UrgentGrainMailbox returns the mailbox (for actor.WithMailbox on a grain kind's props)
// of a grain whose calls to the named methods of service — the grain's protobuf service;
// a method's index there is the generated client's GrainRequest.MethodIndex — are
// processed before every other user message. Each class keeps its arrival order; system
// messages come first, and suspension, the dispatcher's throughput and message batches
// behave as in protoactor's default mailbox. Unbounded.
//
// Unlike the default mailbox, the goroutine that ran the queues empty waits up to
// mailboxLinger for the next message before it ends, so that a busy grain keeps one
// goroutine and the stack it grew instead of starting a new goroutine, from a small
// stack grown again by copying, for every burst of calls (docs/actor-library.md §10).
// It needs a dispatcher that runs each scheduled function on a goroutine of its own
// (protoactor's default).
//
// protoactor's own priority mailbox cannot do this (docs/actor-library.md §10). It panics
// when service has no method of one of the names (a programming error).
func UrgentGrainMailbox(service protoreflect.ServiceDescriptor, methods ...protoreflect.Name) actor.MailboxProducer {
	return urgentGrainMailbox(service, mailboxLinger, methods...)
}

// mailboxLinger is how long an urgent mailbox's goroutine waits for more work once its
// queues are empty.
const mailboxLinger = time.Second

// urgentGrainMailbox is UrgentGrainMailbox with the goroutine's linger; 0: none (a new
// run for every burst, as the default mailbox; for a dispatcher that runs functions on
// the caller's goroutine).
func urgentGrainMailbox(service protoreflect.ServiceDescriptor, linger time.Duration, methods ...protoreflect.Name) actor.MailboxProducer {
	urgent := map[int32]bool{}
	for _, name := range methods {
		m := service.Methods().ByName(name)
		if m == nil {
			panic(fmt.Sprintf("cluster: UrgentGrainMailbox: service %s has no method %s", service.FullName(), name))
		}
		urgent[int32(m.Index())] = true
	}
	return func() actor.Mailbox {
		return &urgentMailbox{urgent: urgent, linger: linger, wake: make(chan struct{}, 1)}
	}
}

// grainMethod returns the method index of a grain call (a cluster.GrainRequest, in an
// envelope when it has a sender).
func grainMethod(msg any) (index int32, ok bool) {
	if env, isEnv := msg.(*actor.MessageEnvelope); isEnv {
		msg = env.Message
	}
	if r, isReq := msg.(*pcluster.GrainRequest); isReq {
		return r.MethodIndex, true
	}
	return 0, false
}

const (
	mailboxIdle int32 = iota
	mailboxRunning
)

// urgentMailbox is protoactor's default mailbox with two user queues: calls of the
// urgent methods, and everything else.
type urgentMailbox struct {
	urgent map[int32]bool // method indexes
	linger time.Duration  // how long a run's goroutine waits for the next one (0: not at all)
	wake   chan struct{}  // hands a run to a goroutine that lingers (room for one)

	lingerMu sync.Mutex
	waiting  int    // goroutines lingering, not handed a run
	onLinger func() // tests: called as a goroutine starts to linger

	system, high, low fifo
	sysMessages       atomic.Int32
	userMessages      atomic.Int32
	status            atomic.Int32 // mailboxIdle or mailboxRunning
	suspended         atomic.Bool
	invoker           actor.MessageInvoker
	dispatcher        actor.Dispatcher
}

func (m *urgentMailbox) PostUserMessage(message any) {
	// A batch's messages are posted one by one, then the batch itself, as protoactor's
	// default mailbox does.
	if batch, ok := message.(actor.MessageBatch); ok {
		for _, msg := range batch.GetMessages() {
			m.PostUserMessage(msg)
		}
	}
	if env, ok := message.(*actor.MessageEnvelope); ok {
		if batch, ok := env.Message.(actor.MessageBatch); ok {
			for _, msg := range batch.GetMessages() {
				m.PostUserMessage(msg)
			}
		}
	}
	if i, ok := grainMethod(message); ok && m.urgent[i] {
		m.high.push(message)
	} else {
		m.low.push(message)
	}
	m.userMessages.Add(1)
	m.schedule()
}

func (m *urgentMailbox) PostSystemMessage(message any) {
	m.system.push(message)
	m.sysMessages.Add(1)
	m.schedule()
}

func (m *urgentMailbox) RegisterHandlers(invoker actor.MessageInvoker, dispatcher actor.Dispatcher) {
	m.invoker, m.dispatcher = invoker, dispatcher
}

func (m *urgentMailbox) Start() {}

func (m *urgentMailbox) UserMessageCount() int { return int(m.userMessages.Load()) }

// schedule starts a run unless one is on: on a goroutine that lingers when one waits,
// else on a new one.
func (m *urgentMailbox) schedule() {
	if !m.status.CompareAndSwap(mailboxIdle, mailboxRunning) {
		return
	}
	if m.linger <= 0 {
		m.dispatcher.Schedule(m.process)
		return
	}
	m.lingerMu.Lock()
	if m.waiting > 0 {
		m.waiting--
		m.wake <- struct{}{} // room: one run is handed out at a time
		m.lingerMu.Unlock()
		return
	}
	m.lingerMu.Unlock()
	m.dispatcher.Schedule(m.serve)
}

// serve does the run it was started for and every run handed to it while it lingers,
// then ends after linger without one. Each goroutine waiting counts in waiting; a run
// handed out takes one off the count, so a goroutine whose linger ends either takes
// itself off or, taken off already, takes the run handed to it.
func (m *urgentMailbox) serve() {
	t := time.NewTimer(m.linger)
	defer t.Stop()
	for {
		m.process()
		m.lingerMu.Lock()
		m.waiting++
		m.lingerMu.Unlock()
		if m.onLinger != nil {
			m.onLinger()
		}
		t.Reset(m.linger)
		select {
		case <-m.wake:
			continue
		case <-t.C:
		}
		m.lingerMu.Lock()
		if m.waiting > 0 {
			m.waiting--
			m.lingerMu.Unlock()
			return
		}
		m.lingerMu.Unlock()
		<-m.wake
	}
}

// process runs the queues until they are empty (or the mailbox is suspended), then goes
// idle; a message posted while it was going idle makes it run again, unless the post
// scheduled a run of its own.
func (m *urgentMailbox) process() {
	for {
		m.run()
		m.status.Store(mailboxIdle)
		if m.sysMessages.Load() == 0 && (m.suspended.Load() || m.userMessages.Load() == 0) {
			return
		}
		if !m.status.CompareAndSwap(mailboxIdle, mailboxRunning) {
			return
		}
	}
}

// run invokes system messages first, then urgent user messages, then the others,
// yielding the goroutine every dispatcher throughput messages.
func (m *urgentMailbox) run() {
	var msg any
	defer func() {
		if r := recover(); r != nil {
			m.invoker.EscalateFailure(r, msg)
		}
	}()
	i, t := 0, m.dispatcher.Throughput()
	for {
		if i > t {
			i = 0
			runtime.Gosched()
		}
		i++
		if msg = m.system.pop(); msg != nil {
			m.sysMessages.Add(-1)
			switch msg.(type) {
			case *actor.SuspendMailbox:
				m.suspended.Store(true)
			case *actor.ResumeMailbox:
				m.suspended.Store(false)
			default:
				m.invoker.InvokeSystemMessage(msg)
			}
			continue
		}
		if m.suspended.Load() {
			return
		}
		if msg = m.high.pop(); msg == nil {
			msg = m.low.pop()
		}
		if msg == nil {
			return
		}
		m.userMessages.Add(-1)
		m.invoker.InvokeUserMessage(msg)
	}
}

// fifo is an unbounded queue for many producers and one consumer.
type fifo struct {
	mu    sync.Mutex
	items []any
	head  int // index of the oldest item
}

func (q *fifo) push(v any) {
	q.mu.Lock()
	q.items = append(q.items, v)
	q.mu.Unlock()
}

// pop removes and returns the oldest item; nil when the queue is empty.
func (q *fifo) pop() any {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.head == len(q.items) {
		return nil
	}
	v := q.items[q.head]
	q.items[q.head] = nil
	q.head++
	switch {
	case q.head == len(q.items):
		q.items, q.head = q.items[:0], 0
	case q.head >= 1024 && 2*q.head >= len(q.items):
		// Most of the backing array is consumed: move the rest to its front.
		n := copy(q.items, q.items[q.head:])
		clear(q.items[n:])
		q.items, q.head = q.items[:n], 0
	}
	return v
}
