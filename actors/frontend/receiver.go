package frontend

import (
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
type receiver struct {
	leg       flow.LegID
	requestID string
	worker    *actor.PID
	events    chan<- flow.Event
	closed    <-chan struct{}

	next     uint32
	pending  map[uint32]*messages.TokenChunk
	finished bool // the last chunk was delivered
}

func (r *receiver) Receive(c actor.Context) {
	switch m := c.Message().(type) {
	case *actor.Started:
		c.Watch(r.worker)
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
	case *actor.Terminated:
		// The notice can overtake the worker's last chunks (a draining worker stops
		// right after its last request ends): the flow still takes them for a moment.
		if !r.finished && m.Who.Equal(r.worker) {
			r.post(flow.WorkerTerminated{Leg: r.leg})
		}
	}
}

func (r *receiver) deliver(ch *messages.TokenChunk) {
	r.next = ch.Index + 1
	r.finished = ch.FinishReason != ""
	r.post(flow.Chunk{Leg: r.leg, Chunk: ch})
}

// post waits for room in the stream's channel: the channel holds more than the credits
// granted, so it only waits when a worker ignores flow control; a forgotten leg's
// receiver takes nothing more.
func (r *receiver) post(ev flow.Event) {
	select {
	case r.events <- ev:
	case <-r.closed:
	}
}
