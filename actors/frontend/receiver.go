package frontend

import (
	"slices"
	"sync"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/turbine-llm/turbine/flow"
	"github.com/turbine-llm/turbine/messages"
)

// receiver is the reply_to of one leg's Generate: it puts the leg's chunks in index
// order and hands them, the worker's acknowledgement and the termination notice of the
// leg's worker to its stream as flow events (flow.Chunk, flow.Accepted,
// flow.WorkerTerminated). Chunks of another request
// id are dropped; nothing is delivered after the leg's last chunk, nor once the stream
// forgot the leg (closed).
//
// It is a process of its own (actor.Process), not an actor: a message is handled on the
// goroutine that delivers it (the worker's, or the connection's reader for a remote
// worker), under a mutex, and goes straight into the stream's channel, without the hop
// through a mailbox's goroutine that an actor takes for every chunk
// (docs/actor-library.md §10). It never blocks that goroutine: when the channel is full
// (a worker ignoring flow control), the events wait in a backlog that a goroutine of the
// receiver's hands over in order.
type receiver struct {
	leg       flow.LegID
	requestID string
	worker    *actor.PID
	events    chan<- flow.Event
	closed    <-chan struct{}

	self *actor.PID
	sys  *actor.ActorSystem

	mu         sync.Mutex
	watchers   []*actor.PID // the leg's worker watches its receiver: it cancels the request when the receiver stops
	stopped    bool
	workerGone bool // its Terminated came: nothing to unwatch
	next       uint32
	pending    map[uint32]*messages.TokenChunk
	finished   bool         // the last chunk was delivered
	backlog    []flow.Event // waiting for room in events, in order; a goroutine hands them over
	handing    sync.WaitGroup
}

// startReceiver registers r in sys as a process of its own and watches r.worker (a
// worker that is gone already is reported at once); stopReceiver undoes both.
func startReceiver(sys *actor.ActorSystem, r *receiver) *actor.PID {
	r.sys = sys
	r.self, _ = sys.ProcessRegistry.Add(r, "leg"+sys.ProcessRegistry.NextId())
	worker, _ := sys.ProcessRegistry.Get(r.worker)
	worker.SendSystemMessage(r.worker, &actor.Watch{Watcher: r.self})
	return r.self
}

// stopReceiver stops the receiver r as an actor stops: those watching it (the leg's
// worker, which then cancels the request and releases what it kept for it) get its
// Terminated, and a later Watch gets one at once. It is removed from its system, and
// stops watching the worker (else the worker, or the connection to its member, would
// keep the watch for the rest of its life). Messages that still reach it are dropped
// (its leg is closed).
func stopReceiver(r *receiver) {
	r.mu.Lock()
	r.stopped = true
	watchers, workerGone := r.watchers, r.workerGone
	r.watchers = nil
	r.mu.Unlock()
	for _, w := range watchers {
		r.terminated(w)
	}
	r.sys.ProcessRegistry.Remove(r.self)
	if !workerGone {
		w, _ := r.sys.ProcessRegistry.Get(r.worker)
		w.SendSystemMessage(r.worker, &actor.Unwatch{Watcher: r.self})
	}
}

// terminated tells watcher that the receiver stopped.
func (r *receiver) terminated(watcher *actor.PID) {
	p, _ := r.sys.ProcessRegistry.Get(watcher)
	p.SendSystemMessage(watcher, &actor.Terminated{Who: r.self, Why: actor.TerminatedReason_Stopped})
}

// SendUserMessage handles a message from the leg's worker.
func (r *receiver) SendUserMessage(_ *actor.PID, message any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	switch m := actor.UnwrapEnvelopeMessage(message).(type) {
	case *messages.GenerateAccepted:
		if !r.finished && m.RequestId == r.requestID {
			r.post(flow.Accepted{Leg: r.leg})
		}
	case *messages.TokenChunk:
		if r.finished || m.RequestId != r.requestID {
			return
		}
		if m.Index != r.next {
			if m.Index > r.next {
				if r.pending == nil {
					r.pending = map[uint32]*messages.TokenChunk{}
				}
				r.pending[m.Index] = m
			}
			return
		}
		r.deliver(m)
		for p, ok := r.pending[r.next]; ok; p, ok = r.pending[r.next] {
			delete(r.pending, p.Index)
			r.deliver(p)
		}
	}
}

// SendSystemMessage handles the worker's termination notice, and watches of the
// receiver (its worker's). The notice can overtake the worker's last chunks (a draining
// worker stops right after its last request ends): the flow still takes them for a
// moment.
func (r *receiver) SendSystemMessage(_ *actor.PID, message any) {
	r.mu.Lock()
	switch m := message.(type) {
	case *actor.Terminated:
		if m.Who.Equal(r.worker) {
			r.workerGone = true
			if !r.finished {
				r.post(flow.WorkerTerminated{Leg: r.leg})
			}
		}
	case *actor.Watch:
		if r.stopped {
			r.mu.Unlock()
			r.terminated(m.Watcher)
			return
		}
		if !slices.ContainsFunc(r.watchers, m.Watcher.Equal) {
			r.watchers = append(r.watchers, m.Watcher)
		}
	case *actor.Unwatch:
		r.watchers = slices.DeleteFunc(r.watchers, m.Watcher.Equal)
	}
	r.mu.Unlock()
}

// Stop is a no-op: the stream stops its receivers (stopReceiver).
func (r *receiver) Stop(*actor.PID) {}

func (r *receiver) deliver(ch *messages.TokenChunk) {
	r.next = ch.Index + 1
	r.finished = ch.FinishReason != ""
	r.post(flow.Chunk{Leg: r.leg, Chunk: ch})
}

// post hands ev to the stream without waiting: into the channel when it has room and no
// event waits before it, else into the backlog. The channel holds more than the credits
// granted, so the backlog only fills when a worker ignores flow control; a forgotten
// leg's receiver takes nothing more. Called with mu held.
func (r *receiver) post(ev flow.Event) {
	select {
	case <-r.closed:
		return
	default:
	}
	if len(r.backlog) == 0 {
		select {
		case r.events <- ev:
			return
		default:
			r.handing.Add(1)
			go r.handOver()
		}
	}
	r.backlog = append(r.backlog, ev)
}

// handOver hands the backlog over in order, waiting for room, until it is empty or the
// leg is forgotten.
func (r *receiver) handOver() {
	defer r.handing.Done()
	for {
		r.mu.Lock()
		ev, forgotten := flow.Event(nil), false
		select {
		case <-r.closed:
			forgotten = true
		default:
		}
		if forgotten {
			r.backlog = nil
		}
		if len(r.backlog) > 0 {
			ev = r.backlog[0]
		}
		r.mu.Unlock()
		if ev == nil {
			return
		}
		select {
		case r.events <- ev:
		case <-r.closed:
			continue
		}
		r.mu.Lock()
		r.backlog = r.backlog[1:]
		r.mu.Unlock()
	}
}
