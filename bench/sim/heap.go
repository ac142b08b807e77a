package sim

import "time"

// evKind orders events that happen at the same virtual time (lower first).
type evKind uint8

const (
	// evFault: a fault of Config.Faults (r: its index) strikes worker w.
	evFault evKind = iota
	// evDeliver: a worker's next KV event batch reaches the router.
	evDeliver
	// evRegister: worker w registers with the router (its LoRA adapters, lora.go): at
	// its heartbeat (x: 1) or when an adapter load ends (x: 0).
	evRegister
	// evScale: an autoscaled worker w's start ends, or its drain's timeout comes (x: the
	// slot's generation then; autoscale.go).
	evScale
	// evPlan: the autoscaler's planner decides (autoscale.go).
	evPlan
	// evStepEnd: a worker's step ends; its outputs become visible.
	evStepEnd
	// evTransfer: a remote prefill's KV blocks have reached the decode worker; the
	// decode leg (r: its slot in simulator.legs) enters its engine.
	evTransfer
	// evLoaded: a lower-tier load in worker w's idle engine ends (mocker.StepResult.
	// WakeAt): the worker steps unless it is stepping already.
	evLoaded
	// evTimer: a timer of request r's flow (w: its index in reqState.timers, x: the
	// number of the heap entry) is due.
	evTimer
	// evDeadline: request r's client gives up (Config.RequestTimeout).
	evDeadline
	// evQueueRetry: the head of the busy queue looks again (Config.QueueRetry).
	evQueueRetry
	// evArrival: a request arrives (arrivals are not kept in the heap; the kind only
	// places them among the heap's events).
	evArrival
	// evStepStart: an idle worker with work starts a step.
	evStepStart
)

// event is one heap entry: what happens at at to worker w (and request or leg r, see
// the kinds). key packs the kind (top byte) above an insertion counter, so equal times
// order by kind, then first in first out, and the order is a total one (the run is
// deterministic).
type event struct {
	at  time.Duration
	key uint64
	w   int32
	r   int32
	x   uint32
}

const kindShift = 56

func (e *event) kind() evKind { return evKind(e.key >> kindShift) }

// before reports whether a happens before b.
func (a *event) before(b *event) bool {
	if a.at != b.at {
		return a.at < b.at
	}
	return a.key < b.key
}

// eventHeap is a binary min-heap of events (container/heap without the interface
// boxing, which costs an allocation per push).
type eventHeap []event

func (h *eventHeap) push(e event) {
	*h = append(*h, e)
	q := *h
	i := len(q) - 1
	for i > 0 {
		p := (i - 1) / 2
		if !q[i].before(&q[p]) {
			break
		}
		q[i], q[p] = q[p], q[i]
		i = p
	}
}

func (h *eventHeap) pop() event {
	q := *h
	top := q[0]
	n := len(q) - 1
	q[0] = q[n]
	q = q[:n]
	i := 0
	for {
		l := 2*i + 1
		if l >= n {
			break
		}
		m := l
		if r := l + 1; r < n && q[r].before(&q[l]) {
			m = r
		}
		if !q[m].before(&q[i]) {
			break
		}
		q[i], q[m] = q[m], q[i]
		i = m
	}
	*h = q
	return top
}
