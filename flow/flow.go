package flow

import (
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/turbine-llm/turbine/messages"
)

// Flow is one request's life: pure, single-threaded, deterministic. Not safe for
// concurrent use: its shell serializes Step calls.
//
// Invariants: every leg sent is forgotten exactly once (Forget), after its Cancel when
// it was cancelled; every request id routed is freed exactly once (Free), after its
// leg's Cancel; emitted chunks are numbered 0, 1, 2 ... across every leg and route, and
// nothing is emitted after the finishing chunk, a Fail, ClientGone or Deadline; cur is
// nil while a route is awaited (but a move's: its leg goes on meanwhile), while the
// request is parked, and once it failed for good; a request parked (Park) leaves the
// queue exactly once (Unpark), unless the shell answered QueueFull, and is not routed
// while it waits for Unparked.
type Flow struct {
	req Request
	cfg Config

	// Set during Step: its time and the effects it returns.
	now time.Time
	out []Effect

	started  bool
	cur      *leg     // the leg serving the request now (the decode leg when disaggregated)
	active   []*leg   // legs sent and not forgotten
	nextLeg  LegID    // the last leg id given
	routes   int      // routes asked (the next one's id suffix)
	pending  *pending // the route awaited (nil: none)
	produced []uint32 // every token emitted, in order
	index    uint32   // the next emitted chunk's index

	excluded        []string // workers the request failed on
	excludedPrefill []string // prefill workers whose prefill leg failed
	migrations      int
	prefillFailures int
	localPrefill    bool // the request is prefilled on its decode worker from now on

	finished bool // the finishing chunk was emitted
	failed   bool // Fail was returned
	gone     bool // ClientGone or Deadline
	draining bool // Drain: the server drains

	// The busy queue: parked from the first Park to the Unpark (or QueueFull); waiting
	// while parked and no route is awaited (Unparked is); expired once the queue timer
	// fired while a route from the queue was awaited.
	parked, waiting, expired bool
	queue                    Timer // the queue timer, while queueArmed
	queueArmed               bool
	// queuedAt: when the request's wait began (Request.QueuedAt, else its first Park).
	queuedAt time.Time

	decision                    messages.DisaggDecision // of the latest route
	prefillWorker, decodeWorker string                  // of the latest route

	gen        uint64 // the last timer generation given
	stall      Timer  // the stall timer, when stallArmed
	stallArmed bool

	// moving is the leg a routeMove route is asked for, while that route is awaited; a
	// route the flow asks meanwhile (the leg failed) waits in queued for its answer.
	moving *leg
	queued *pending
}

// leg is one Generate of the request on one worker under one request id: an aggregated
// request, a decode leg (pre set when its prompt is prefilled elsewhere), or a prefill
// leg.
type leg struct {
	id        LegID
	kind      messages.Leg
	requestID string
	worker    Worker

	// tokens and sampling are the request the leg serves, as routed (sampling without
	// disaggregation parameters): a prefill retry routes them again.
	tokens   []uint32
	sampling *messages.SamplingParams

	sent     bool      // Send was returned
	sentAt   time.Time // when
	ended    bool      // endLeg ran (or, for a prefill leg, settle)
	final    bool      // a prefill leg's last chunk (or fault) was taken
	done     bool      // its worker sent its last chunk (or it failed): no more chunks
	next     uint32    // the next chunk index expected
	consumed int32     // chunks emitted since the last Credit
	sawToken bool
	// whole: its engine answers whole (answersWhole) and no chunk of it has come yet:
	// the stall timer does not bound the wait.
	whole    bool
	grace    uint64 // generation of its terminated-grace timer; 0: none
	accept   uint64 // generation of its accept timer, until its worker acknowledges it; 0: none
	acked    bool   // its worker acknowledged it (Accepted, or a chunk)
	settling bool   // cancelled before its last chunk: ReleaseKV waits for it
	release  uint64 // generation of its prefill-release timer, while settling
	// receiverLost: its grace is for its receiver's loss (WorkerTerminated.ReceiverLost),
	// not its worker's.
	receiverLost bool

	// A decode leg's prefill leg (nil for aggregated and local requests), whether it
	// finished and the prompt tokens it found cached, the transfer parameters it
	// returned, whether ReleaseKV was sent, and the SGLang bootstrap parameters both
	// legs share.
	pre       *leg
	preDone   bool
	preCached int32
	kvParams  string
	released  bool
	bootstrap *messages.DisaggParams
}

// arrival is a chunk of a leg with the fault it reports (FAULT_NONE for ordinary chunks
// and for failures that are not migratable).
type arrival struct {
	chunk *messages.TokenChunk
	fault messages.Fault
	// receiverLost: the leg failed because its receiver was lost (WorkerTerminated):
	// its worker is not excluded from the route that moves the request.
	receiverLost bool
}

// routeWhy is why a route was asked.
type routeWhy int8

const (
	routeFirst   routeWhy = iota // the request arrived
	routeMigrate                 // a fault moves the request to another worker
	routeRetry                   // a prefill leg failed: prefill again elsewhere
	routeMove                    // the current leg's worker did not acknowledge it: another worker, while it waits on
)

// pending is a route asked and not answered yet.
type pending struct {
	why      routeWhy
	id       string
	tokens   []uint32
	sampling *messages.SamplingParams
	// routeMigrate, routeRetry: the arrival that caused it, and the leg that failed (the
	// decode leg; for routeRetry its prefill leg's worker is the one that failed).
	ar     arrival
	failed *leg
	// exclude is a worker excluded from this route only (routeMove: the leg's own).
	exclude string
}

// New returns the flow of req; nothing happens until Step(Start{}).
func New(req Request, cfg Config) *Flow { return &Flow{req: req, cfg: cfg} }

// Step takes one event at now and returns the effects the shell must carry out, in
// order. An event the flow cannot use (a chunk of a leg it forgot, a timer replaced
// since, a second Start) returns nothing. The slice returned is valid until the next
// Step (carry its effects out first). The flow takes ownership of a Chunk's
// TokenChunk: it may change it and emit it.
func (f *Flow) Step(ev Event, now time.Time) []Effect {
	// The effects' slice is reused: most events produce a few effects (a chunk: its
	// Emit and the stall timer).
	clear(f.out)
	f.now, f.out = now, f.out[:0]
	rearm := false
	switch e := ev.(type) {
	case Start:
		if !f.started && !f.gone {
			f.started = true
			if e.Behind && f.cfg.QueueTimeout > 0 {
				f.park("")
				break
			}
			f.route(f.req.Tokens, f.req.Sampling, &pending{why: routeFirst})
		}
	case Routed:
		if f.pending != nil {
			// A move that leaves its leg in place changes nothing the stall timer bounds.
			stays, l := f.pending.why == routeMove, f.cur
			f.routed(e)
			rearm = !stays || f.cur != l
		}
	case Chunk:
		l := f.leg(e.Leg)
		if l == nil || l.done || e.Chunk == nil {
			break
		}
		f.accepted(l)
		l.next, l.whole = e.Chunk.Index+1, false
		l.done = e.Chunk.FinishReason != ""
		rearm = f.arrive(l, arrival{chunk: e.Chunk, fault: faultOf(e.Chunk)})
	case Accepted:
		if l := f.leg(e.Leg); l != nil {
			f.accepted(l)
		}
	case WorkerTerminated:
		// The notice can overtake the worker's last chunks (a draining worker stops
		// right after its last request ends): they are still taken for a moment.
		if l := f.leg(e.Leg); l != nil && !l.done && l.grace == 0 {
			l.grace, l.receiverLost = f.newGen(), e.ReceiverLost
			// SetTimer: before any later event of the leg; Forget of the leg stops it.
			f.emit(SetTimer{Timer: Timer{Kind: TimerTerminatedGrace, Leg: l.id, Gen: l.grace}, After: f.cfg.TerminatedGrace})
		}
	case TimerFired:
		rearm = f.fired(e.Timer)
	case ClientGone:
		f.clientGone("client closed the stream")
	case Deadline:
		if !f.gone && !f.finished && !f.failed {
			f.note(Note{Kind: NoteDeadline, Detail: "the request's deadline passed"})
		}
		f.clientGone("the request's deadline passed")
	case Unparked:
		if f.waiting && !f.gone {
			f.waiting = false
			f.route(f.req.Tokens, f.req.Sampling, &pending{why: routeFirst})
		}
	case QueueFull:
		if f.waiting && !f.gone {
			// The shell gave it no place: nothing to leave.
			f.parked, f.waiting = false, false
			f.stopQueueTimer()
			f.failWith(messages.RouteOutcome_ROUTE_ALL_BUSY, e.Message, FailQueueFull)
		}
	case Drain:
		f.draining = true
		if f.waiting && !f.gone {
			f.leaveQueue()
			f.failWith(messages.RouteOutcome_ROUTE_ALL_BUSY, "the server is draining", FailDraining)
		}
	}
	f.stallTimer(rearm)
	if len(f.out) == 0 {
		return nil
	}
	return f.out
}

// Done reports whether nothing more can happen: the request ended (finished, failed, or
// its consumer left) and every leg is forgotten (a cancelled prefill leg's release
// wait included). A shell stops feeding events then.
func (f *Flow) Done() bool {
	return (f.finished || f.failed || f.gone) && f.pending == nil && len(f.active) == 0
}

// Info tells the request's state (see Info).
func (f *Flow) Info() Info {
	in := Info{Decision: f.decision, PrefillWorker: f.prefillWorker, DecodeWorker: f.decodeWorker, Migrations: f.migrations}
	if f.cur != nil {
		in.Worker = f.cur.worker.ID
	}
	in.Parked = f.parked
	return in
}

func (f *Flow) emit(e Effect) { f.out = append(f.out, e) }

// note emits n. A Note has no duty towards the other effects: it tells what happened.
func (f *Flow) note(n Note) { f.emit(n) }

func (f *Flow) newGen() uint64 { f.gen++; return f.gen }

// leg returns the leg id names among those sent and not forgotten, or nil.
func (f *Flow) leg(id LegID) *leg {
	for _, l := range f.active {
		if l.id == id {
			return l
		}
	}
	return nil
}

// ---- routing ----

// route asks the router for tokens with sampling under the request's next id, excluding
// the workers and prefill workers already failed on. A migration or a prefill retry is
// routed as admitted (RouteRequest.admitted): the request already runs, and the busy
// thresholds, which gate new work, do not refuse it.
func (f *Flow) route(tokens []uint32, sampling *messages.SamplingParams, p *pending) {
	id := f.req.ID
	if f.routes > 0 {
		id += "." + strconv.Itoa(f.routes)
	}
	pin := ""
	if p.why == routeFirst {
		pin = f.req.PinWorker // also after the busy queue: the request has not run yet
	}
	if f.pending != nil {
		// Only a move's route can be awaited here (the leg it moves failed meanwhile):
		// this one is asked once that answer came.
		p.tokens, p.sampling = tokens, sampling
		f.queued = p
		return
	}
	f.routes++
	p.id, p.tokens, p.sampling = id, tokens, sampling
	f.pending = p
	exclude := slices.Clone(f.excluded)
	if p.exclude != "" && !slices.Contains(exclude, p.exclude) {
		exclude = append(exclude, p.exclude)
	}
	// Route: the answer comes back as Routed; nothing waits for it.
	f.emit(Route{Request: &messages.RouteRequest{RequestId: id, TokenIds: tokens,
		ExcludeWorkers: exclude, ExcludePrefillWorkers: slices.Clone(f.excludedPrefill),
		LocalPrefill: f.localPrefill, WillAck: true, OverlapWeight: f.req.OverlapWeight, Temperature: f.req.Temperature,
		CacheSalt: f.req.Sampling.GetCacheSalt(), PinWorker: pin, Explain: f.req.Explain, SessionId: f.req.SessionID,
		Admitted: p.why != routeFirst, LoraName: f.req.Sampling.GetLoraName(),
		LoraOnDemand: f.cfg.LoraOnDemand && f.req.Sampling.GetLoraName() != "",
		LoraPath:     f.loraPath()}})
}

// routed takes the answer to the pending route.
func (f *Flow) routed(e Routed) {
	p := f.pending
	f.pending = nil
	r := e.Response
	ok := e.Err == nil && r != nil && r.Outcome == messages.RouteOutcome_ROUTE_OK
	if p.why == routeMove {
		f.moved(p, e, ok)
		return
	}
	if f.gone {
		// The consumer left while the route was asked: let the router forget it.
		if e.Err != nil || ok {
			f.emit(Free{RequestID: p.id})
		}
		if ok && r.PrefillRequestId != "" {
			f.emit(Free{RequestID: r.PrefillRequestId})
		}
		f.leaveQueue()
		return
	}
	if f.draining && f.fromQueue(p) {
		// The server started draining while the request's route from the queue was
		// asked: it has not run, and gets the drain's answer whatever the router said
		// (its workers may have left routing for the drain). A worker it was given is
		// freed, nothing sent.
		if e.Err != nil || ok {
			f.emit(Free{RequestID: p.id})
		}
		if ok && r.PrefillRequestId != "" {
			f.emit(Free{RequestID: r.PrefillRequestId})
		}
		f.leaveQueue()
		f.failWith(messages.RouteOutcome_ROUTE_ALL_BUSY, "the server is draining", FailDraining)
		return
	}
	if busy := e.Err == nil && r != nil && r.Outcome == messages.RouteOutcome_ROUTE_ALL_BUSY; busy && p.why == routeFirst &&
		f.cfg.QueueTimeout > 0 {
		f.park(r.Error)
		return
	}
	if f.parked && !(ok && r.Worker != nil) {
		f.leaveQueue() // the route from the queue failed otherwise: the request ends
	}
	switch {
	case e.Err != nil || r == nil:
		// A call that timed out may have been recorded by a router too busy to answer
		// in time: free the id whatever happened (freeing an unknown id is harmless).
		msg := "the router did not answer"
		if e.Err != nil {
			msg = e.Err.Error()
		}
		f.emit(Free{RequestID: p.id})
		f.routeFailed(p, messages.RouteOutcome_ROUTE_CALL_FAILED, msg)
	case r.Outcome != messages.RouteOutcome_ROUTE_OK:
		if p.why == routeRetry && r.Outcome == messages.RouteOutcome_ROUTE_NO_PREFILL_WORKERS && !f.localPrefill {
			// Enforced disaggregation refuses new requests without a prefill worker; this
			// one was admitted and its prefill failed: its decode worker finishes it.
			f.localPrefill = true
			f.route(p.tokens, p.sampling, p)
			return
		}
		f.routeFailed(p, r.Outcome, r.Error)
	case r.Worker == nil:
		f.emit(Free{RequestID: p.id})
		if r.PrefillRequestId != "" {
			f.emit(Free{RequestID: r.PrefillRequestId})
		}
		f.routeFailed(p, messages.RouteOutcome_ROUTE_NO_WORKERS,
			fmt.Sprintf("the router chose worker %q without its address", r.WorkerId))
	default:
		f.start(p, r, e.Room)
		// Unpark: after the route's Send(s) and Ack.
		f.leaveQueue()
	}
}

// fromQueue reports whether route p takes the request out of the busy queue: a route
// after Unparked, or the first route of a request that waited in its shell's queue
// before the flow started (Request.QueuedAt).
func (f *Flow) fromQueue(p *pending) bool {
	return f.parked || p.why == routeFirst && !f.req.QueuedAt.IsZero()
}

// park queues a request the router found every worker busy for (msg, its message):
// Park, and the queue timer from the first Park on; a request whose wait is over (the
// server drains, the queue timer fired while its route was asked) fails instead.
func (f *Flow) park(msg string) {
	switch {
	case f.draining:
		f.leaveQueue()
		f.failWith(messages.RouteOutcome_ROUTE_ALL_BUSY, "the server is draining", FailDraining)
		return
	case f.expired:
		f.leaveQueue()
		f.failWith(messages.RouteOutcome_ROUTE_ALL_BUSY, f.queueMessage(msg), FailQueueTimeout)
		return
	}
	if !f.parked {
		f.parked = true
		if f.queuedAt = f.req.QueuedAt; f.queuedAt.IsZero() || f.queuedAt.After(f.now) {
			f.queuedAt = f.now
		}
		f.queue, f.queueArmed = Timer{Kind: TimerQueue, Gen: f.newGen()}, true
		// SetTimer: the wait's bound, from the first Park to the Unpark.
		f.emit(SetTimer{Timer: f.queue, After: f.cfg.QueueTimeout})
	}
	f.waiting = true
	// Park: the answer (Unparked or QueueFull) is an event of its own.
	f.emit(Park{})
}

// queueMessage is the message of a request whose wait in the busy queue timed out: the
// whole wait, from Request.QueuedAt or its first Park to now (to the millisecond); msg
// is the router's last answer.
func (f *Flow) queueMessage(msg string) string {
	s := fmt.Sprintf("waited %v in the busy queue", f.now.Sub(f.queuedAt).Round(time.Millisecond))
	if msg != "" {
		s += ": " + msg
	}
	return s
}

// leaveQueue takes a parked request out of the queue: Unpark, and its timer stopped.
func (f *Flow) leaveQueue() {
	if !f.parked {
		return
	}
	f.parked, f.waiting = false, false
	f.stopQueueTimer()
	// Unpark: the shell wakes the next head.
	f.emit(Unpark{})
}

func (f *Flow) stopQueueTimer() {
	if f.queueArmed {
		f.queueArmed = false
		// StopTimer: the wait is over (a TimerFired already sent is ignored).
		f.emit(StopTimer{Timer: f.queue})
	}
}

// unroutable reports whether outcome says the request could not be routed now (no
// worker, every worker busy, no prefill worker, the Route call failed): a retry may
// succeed, so the consumer gets the outcome (Fail) rather than a worker failure.
func unroutable(outcome messages.RouteOutcome) bool {
	switch outcome {
	case messages.RouteOutcome_ROUTE_OK, messages.RouteOutcome_ROUTE_UNKNOWN_MODEL, messages.RouteOutcome_ROUTE_BAD_REQUEST:
		return false
	}
	return true
}

// routeFailed ends the request whose route p found no worker (outcome, the router's
// message).
func (f *Flow) routeFailed(p *pending, outcome messages.RouteOutcome, msg string) {
	switch p.why {
	case routeFirst:
		f.fail(outcome, msg)
	case routeMigrate:
		if unroutable(outcome) {
			f.note(Note{Kind: NoteNotMigrated, Fault: p.ar.fault, From: p.failed.worker.ID,
				Detail: "it could not be routed again: " + outcome.Label() + ": " + msg})
			f.fail(outcome, msg)
			return
		}
		f.notMigrated(p.ar, p.failed, outcome.Label()+": "+msg)
	case routeRetry:
		from := p.failed.pre.worker.ID
		if unroutable(outcome) {
			f.note(Note{Kind: NotePrefillRetried, Fault: p.ar.fault, From: from,
				Detail: "the request could not be routed again: " + outcome.Label() + ": " + msg})
			f.fail(outcome, msg)
			return
		}
		f.note(Note{Kind: NotePrefillRetried, Fault: p.ar.fault, From: from, Detail: outcome.Label() + ": " + msg})
		f.prefillNotRetried(p.ar, p.failed, outcome.Label()+": "+msg)
	}
}

// fail ends the request: it could not be routed (again).
func (f *Flow) fail(outcome messages.RouteOutcome, msg string) { f.failWith(outcome, msg, FailRouted) }

func (f *Flow) failWith(outcome messages.RouteOutcome, msg string, cause FailCause) {
	f.failed, f.cur = true, nil
	// Fail: after every Emit before it; the consumer's error.
	f.emit(Fail{Outcome: outcome, Message: msg, Cause: cause})
}

// start starts the request on route r (ROUTE_OK, with the worker's address) of p: on the
// chosen worker, or, when the router decides "remote", as a prefill leg on the prefill
// worker followed by the decode leg on the chosen (decode) worker. A vLLM-style decode
// leg is sent once its prefill leg returned the transfer parameters (onPrefill); an
// SGLang-style one (bootstrap address in the route) is sent with its prefill leg.
func (f *Flow) start(p *pending, r *messages.RouteResponse, room uint64) {
	decision := r.DisaggDecision
	if decision == messages.DisaggDecision_DISAGG_REMOTE && r.PrefillWorker == nil {
		// The router tracks a prefill leg it gave no address for: let it go, and
		// prefill on the decode worker.
		f.note(Note{Kind: NoteWarning, From: r.PrefillWorkerId,
			Detail: "route without the prefill worker's address: prefilling on the decode worker"})
		if r.PrefillRequestId != "" {
			f.emit(Free{RequestID: r.PrefillRequestId})
		}
		decision = messages.DisaggDecision_DISAGG_LOCAL_REQUESTED
	}
	if p.why == routeRetry {
		// Counted before the route's decision, as the retry that caused it.
		f.note(Note{Kind: NotePrefillRetried, Decision: decision, Fault: p.ar.fault, From: p.failed.pre.worker.ID,
			To: r.WorkerId})
	}
	remote := decision == messages.DisaggDecision_DISAGG_REMOTE
	n := Note{Kind: NoteDecided, Decision: decision, To: r.WorkerId}
	if remote {
		n.From = r.PrefillWorkerId
	}
	f.note(n)
	a := f.newLeg(p.id, Worker{ID: r.WorkerId, Ref: r.Worker, Acks: r.WorkerAcknowledges}, messages.Leg_LEG_AGGREGATED, p.tokens,
		withLoraPath(p.sampling, r.LoraPath))
	f.decision, f.prefillWorker, f.decodeWorker = decision, "", ""
	if decision != messages.DisaggDecision_DISAGG_AGGREGATED {
		f.decodeWorker = r.WorkerId
	}
	if remote {
		f.prefillWorker = r.PrefillWorkerId
		f.startRemote(a, r, room)
	} else {
		f.send(a, a.tokens, a.sampling)
	}
	// Ack: after the route's Send(s).
	f.emit(Ack{RequestID: p.id, Router: r.Router})
	f.cur = a
	if p.why == routeMigrate {
		f.note(Note{Kind: NoteMigrated, Fault: p.ar.fault, From: p.failed.worker.ID, To: a.worker.ID,
			Detail: fmt.Sprintf("migration %d, after %d tokens", f.migrations, len(f.produced))})
	}
}

// startRemote starts decode leg a's prefill leg on the route's prefill worker, and the
// decode leg itself when the engines bootstrap the transfer (SGLang, room its bootstrap
// room).
func (f *Flow) startRemote(a *leg, r *messages.RouteResponse, room uint64) {
	a.kind = messages.Leg_LEG_DECODE
	id := r.PrefillRequestId
	if id == "" {
		id = a.requestID + "/prefill"
	}
	p := f.newLeg(id, Worker{ID: r.PrefillWorkerId, Ref: r.PrefillWorker, Acks: r.PrefillWorkerAcknowledges}, messages.Leg_LEG_PREFILL, a.tokens, a.sampling)
	a.pre = p
	if r.PrefillBootstrapHost != "" {
		a.bootstrap = &messages.DisaggParams{BootstrapHost: r.PrefillBootstrapHost,
			BootstrapPort: r.PrefillBootstrapPort, BootstrapRoom: room & (1<<63 - 1)}
	}
	f.send(p, a.tokens, prefillSampling(a.sampling, a.bootstrap))
	if a.bootstrap != nil {
		f.send(a, a.tokens, decodeSampling(a.sampling, "", a.bootstrap))
	}
}

func (f *Flow) newLeg(id string, w Worker, kind messages.Leg, tokens []uint32, sampling *messages.SamplingParams) *leg {
	f.nextLeg++
	return &leg{id: f.nextLeg, kind: kind, requestID: id, worker: w, tokens: tokens, sampling: sampling}
}

// send starts leg l: Generate of tokens with sampling.
func (f *Flow) send(l *leg, tokens []uint32, sampling *messages.SamplingParams) {
	l.sent, l.sentAt, l.whole = true, f.now, answersWhole(sampling)
	f.active = append(f.active, l)
	// Send: the leg's receiver listens (and watches the worker) before Generate goes;
	// every later effect of the leg comes after it.
	f.emit(Send{Leg: l.id, Worker: l.worker, Generate: &messages.Generate{RequestId: l.requestID, TokenIds: tokens,
		Sampling: sampling, InitialCredits: f.cfg.Credits}})
	if f.cfg.AcceptTimeout > 0 && l.worker.Acks {
		l.accept = f.newGen()
		// SetTimer: after the leg's Send; Forget of the leg stops it.
		f.emit(SetTimer{Timer: Timer{Kind: TimerAccept, Leg: l.id, Gen: l.accept}, After: f.cfg.AcceptTimeout})
	}
}

// accepted takes leg l's acknowledgement (Accepted, or its first chunk): its accept
// timer stops.
func (f *Flow) accepted(l *leg) {
	l.acked = true
	if l.accept == 0 {
		return
	}
	// StopTimer: before any effect of the chunk that acknowledged it.
	f.emit(StopTimer{Timer: Timer{Kind: TimerAccept, Leg: l.id, Gen: l.accept}})
	l.accept = 0
}

// ---- arrivals ----

// arrive takes ar from leg l (sent, not forgotten) and reports whether it was the
// request's (the stall timer restarts).
func (f *Flow) arrive(l *leg, ar arrival) bool {
	switch {
	case l.settling:
		if ar.chunk.FinishReason != "" || ar.fault != messages.Fault_FAULT_NONE {
			f.settled(l, ar.chunk.KvTransferParams)
		}
		return false
	case f.cur == nil:
		return false
	case l == f.cur.pre:
		f.onPrefill(ar)
	case l == f.cur:
		f.onChunk(ar)
	default:
		return false
	}
	return true
}

// onChunk takes an arrival of the current leg. A decode leg that failed to load its KV
// from the prefill engine (FAULT_KV_TRANSFER) before its first token retries the prefill
// rather than migrating away from its decode worker; a refusal of the request by its
// engine (FAULT_INVALID_REQUEST) ends the request, as every engine would refuse it; any
// other fault migrates.
func (f *Flow) onChunk(ar arrival) {
	a := f.cur
	if ar.fault == messages.Fault_FAULT_INVALID_REQUEST {
		f.hand(refusedChunk(a.requestID, ar.chunk))
		return
	}
	if ar.fault == messages.Fault_FAULT_KV_TRANSFER {
		if a.pre != nil && !a.sawToken {
			// The prefill side failed, not this decode worker.
			f.retryPrefill(ar)
			return
		}
		ar.fault = messages.Fault_FAULT_ENGINE_ERROR // no prefill leg to blame: an engine failure like any other
	}
	if ar.fault != messages.Fault_FAULT_NONE {
		f.migrate(ar)
		return
	}
	if a.pre != nil && !a.sawToken && len(ar.chunk.TokenIds) > 0 {
		f.note(Note{Kind: NoteTransferWait, Duration: f.now.Sub(a.sentAt), To: a.worker.ID})
	}
	f.hand(ar.chunk)
}

// hand emits ch as the request's next chunk: numbered on from the chunks before it,
// its cached tokens the prefill worker's for a remotely prefilled prompt, and on the
// finishing chunk the whole request's usage. The current leg is told its prompt is
// computed on its first token and granted credits as its chunks are consumed; a
// finishing chunk ends the request.
func (f *Flow) hand(ch *messages.TokenChunk) {
	ch.Index = f.index
	f.index++
	a := f.cur
	if a != nil && a.pre != nil {
		// A remotely prefilled prompt was computed on the prefill worker: its prefix-cache
		// hit is the request's. The decode worker's own count would describe KV it loaded
		// over the transfer (or, in SGLang, before the prefill leg has even finished).
		ch.CachedTokens = 0
		if a.preDone {
			ch.CachedTokens = a.preCached
		}
	}
	f.produced = append(f.produced, ch.TokenIds...)
	if ch.FinishReason != "" {
		f.finished = true
		finalUsage(ch, len(f.req.Tokens), len(f.produced))
	}
	if a != nil {
		if !a.sawToken && len(ch.TokenIds) > 0 {
			a.sawToken = true
			// PrefillDone: before the Free of its id (a later one in this Step).
			f.emit(PrefillDone{RequestID: a.requestID})
		}
		if a.consumed++; a.consumed >= f.cfg.Credits/2 && !f.finished {
			// Credit: after the leg's Send, before its Forget; none once it finished.
			f.emit(Credit{Leg: a.id, Worker: a.worker, Credit: &messages.Credit{RequestId: a.requestID, Credits: a.consumed}})
			a.consumed = 0
		}
	}
	// Emit: after every Emit before it.
	f.emit(Emit{Chunk: ch})
	if f.finished && a != nil {
		f.end(a, "")
	}
}

// fired takes timer t's firing and reports whether it was the request's (the stall
// timer restarts).
func (f *Flow) fired(t Timer) bool {
	switch t.Kind {
	case TimerStall:
		if !f.stallArmed || t.Gen != f.stall.Gen {
			return false
		}
		f.stallArmed = false
		l := f.awaited()
		if l == nil || l.id != t.Leg {
			return false
		}
		return f.arrive(l, arrival{fault: messages.Fault_FAULT_STALLED, chunk: &messages.TokenChunk{RequestId: l.requestID,
			FinishReason: "error", WorkerId: l.worker.ID, Fault: messages.Fault_FAULT_STALLED,
			Error: fmt.Sprintf("worker %s sent nothing for %v", l.worker.ID, f.cfg.StallTimeout)}})
	case TimerAccept:
		l := f.leg(t.Leg)
		if l == nil || l.done || l.accept != t.Gen {
			return false
		}
		l.accept = 0
		switch {
		case l.grace != 0:
			return false // its worker terminated: that fault comes with the grace
		case f.cur != nil && l == f.cur.pre && f.cur.sawToken:
			return false // its decode leg has tokens: it reached its worker (a bootstrap pair)
		case l == f.cur && l.bootstrap != nil && l.preDone:
			return false // its bootstrap prefill leg finished: the two engines met, it reached its worker
		case l == f.cur:
			f.move(l)
			return false
		}
		// A prefill leg, as a stall: it is cancelled (a Generate that arrives late is
		// cancelled behind it) and the prefill retried.
		return f.arrive(l, arrival{fault: messages.Fault_FAULT_STALLED, chunk: &messages.TokenChunk{
			RequestId: l.requestID, FinishReason: "error", WorkerId: l.worker.ID, Fault: messages.Fault_FAULT_STALLED,
			Error: fmt.Sprintf("worker %s did not take the request within %v", l.worker.ID, f.cfg.AcceptTimeout)}})
	case TimerTerminatedGrace:
		l := f.leg(t.Leg)
		if l == nil || l.done || l.grace != t.Gen {
			return false
		}
		l.done = true
		msg := "worker " + l.worker.ID + " terminated"
		if l.receiverLost {
			msg = "the receiver of worker " + l.worker.ID + "'s chunks was lost with its cluster member"
		}
		return f.arrive(l, arrival{fault: messages.Fault_FAULT_WORKER_TERMINATED, receiverLost: l.receiverLost,
			chunk: &messages.TokenChunk{RequestId: l.requestID, Index: l.next, FinishReason: "error", Error: msg,
				Fault: messages.Fault_FAULT_WORKER_TERMINATED, WorkerId: l.worker.ID}})
	case TimerPrefillRelease:
		if l := f.leg(t.Leg); l != nil && l.settling && l.release == t.Gen {
			f.settled(l, "") // the cancel stopped it before its last chunk
		}
	case TimerQueue:
		if !f.queueArmed || t.Gen != f.queue.Gen {
			return false
		}
		f.queueArmed = false
		if !f.waiting {
			// Its route from the queue is awaited: that answer decides (a worker: it
			// runs; every worker busy again: it fails).
			f.expired = true
			return false
		}
		f.leaveQueue()
		f.failWith(messages.RouteOutcome_ROUTE_ALL_BUSY, f.queueMessage(""), FailQueueTimeout)
	}
	return false
}

// awaited is the leg whose next chunk the request waits for: the prefill leg while the
// decode leg waits for its transfer parameters, else the current leg; nil when none
// (a route is awaited, but a move's, whose leg waits on; or the request ended).
func (f *Flow) awaited() *leg {
	a := f.cur
	if a == nil || f.finished || f.failed || f.gone || f.pending != nil && f.moving != a {
		return nil
	}
	if p := a.pre; p != nil && !p.ended && !a.sent {
		return p
	}
	if !a.sent {
		return nil
	}
	return a
}

// stallTimer arms the stall timer on the awaited leg when rearm (the event was the
// request's) or when it is not armed on it, and stops it when no leg is awaited or the
// awaited leg's engine answers whole and nothing of it has come yet (answersWhole: its
// first chunk comes when the engine has finished, however long that takes; the worker's
// termination and the engine's errors still end it).
func (f *Flow) stallTimer(rearm bool) {
	if f.cfg.StallTimeout <= 0 {
		return
	}
	l := f.awaited()
	if l != nil && l.whole {
		l = nil
	}
	switch {
	case l != nil && (rearm || !f.stallArmed || f.stall.Leg != l.id):
		f.stall, f.stallArmed = Timer{Kind: TimerStall, Leg: l.id, Gen: f.newGen()}, true
		// SetTimer: replaces the stall timer armed before (whatever its leg).
		f.emit(SetTimer{Timer: f.stall, After: f.cfg.StallTimeout})
	case l == nil && f.stallArmed:
		f.stallArmed = false
		// StopTimer: nothing is awaited any more (a TimerFired already sent is ignored).
		f.emit(StopTimer{Timer: f.stall})
	}
}

// ---- moving a leg its worker did not acknowledge ----

// move asks the router for another worker for current leg l, which its worker did not
// acknowledge within Config.AcceptTimeout (the Generate may be lost, or only delayed by
// a network that heals). l waits on meanwhile: it is cancelled and the request moved
// (a migration, FAULT_STALLED) only when the router names another worker and l is still
// unacknowledged then; with none, l waits on and is asked about again after another
// accept timeout. Nothing moves when the request may not (the migration limit; output
// constrained after tokens were handed on; max_tokens used up) or a route is awaited:
// then the stall timeout bounds l.
func (f *Flow) move(l *leg) {
	tokens, sampling, more := continuation(f.req.Tokens, f.req.Sampling, f.produced)
	if f.pending != nil || !more || refusal(f.cfg.MigrationLimit, f.migrations) != "" ||
		unmovable(f.req.Sampling) != "" && len(f.produced) > 0 {
		return
	}
	f.moving = l
	ar := arrival{fault: messages.Fault_FAULT_STALLED, chunk: &messages.TokenChunk{RequestId: l.requestID,
		FinishReason: "error", WorkerId: l.worker.ID, Fault: messages.Fault_FAULT_STALLED,
		Error: fmt.Sprintf("worker %s did not take the request within %v", l.worker.ID, f.cfg.AcceptTimeout)}}
	f.route(tokens, sampling, &pending{why: routeMove, ar: ar, failed: l, exclude: l.worker.ID})
}

// moved takes the answer to move's route p: the request moves to the worker it names
// when the leg is still current and unacknowledged; otherwise the route is freed, and a
// route asked meanwhile (queued) is asked now, or the leg waits on.
func (f *Flow) moved(p *pending, e Routed, ok bool) {
	l, q := f.moving, f.queued
	f.moving, f.queued = nil, nil
	r := e.Response
	if !f.gone && q == nil && !f.finished && !f.failed && f.cur == l && !l.acked && ok && r.Worker != nil {
		f.end(l, "moving the request: its worker did not take it")
		f.cur = nil
		f.excluded = append(f.excluded, l.worker.ID)
		f.migrations++
		p.why = routeMigrate
		f.start(p, r, e.Room)
		return
	}
	// Free: the router may have recorded the route (as for a consumer gone).
	if e.Err != nil || ok {
		f.emit(Free{RequestID: p.id})
	}
	if ok && r.PrefillRequestId != "" {
		f.emit(Free{RequestID: r.PrefillRequestId})
	}
	switch {
	case f.gone || f.finished || f.failed:
	case q != nil:
		if q.exclude == "" {
			q.exclude = l.worker.ID // still silent, as far as this flow knows
		}
		f.route(q.tokens, q.sampling, q)
	case f.cur == l && !l.acked:
		msg := "the router did not answer"
		switch {
		case e.Err != nil:
			msg = e.Err.Error()
		case r != nil && r.Outcome != messages.RouteOutcome_ROUTE_OK:
			msg = r.Outcome.Label()
			if r.Error != "" {
				msg += ": " + r.Error
			}
		case r != nil:
			msg = fmt.Sprintf("the router chose worker %q without its address", r.WorkerId)
		}
		f.note(Note{Kind: NoteNotMoved, From: l.worker.ID, Detail: "no other worker: " + msg})
		l.accept = f.newGen()
		// SetTimer: the leg waits on for its acknowledgement.
		f.emit(SetTimer{Timer: Timer{Kind: TimerAccept, Leg: l.id, Gen: l.accept}, After: f.cfg.AcceptTimeout})
	}
}

// ---- migration ----

// migrate ends the failed leg and re-sends the rest of the request to another worker;
// or, when it may not move (structured output, the limit), ends the request with the
// fault's error chunk naming why, still carrying its fault (another try may succeed);
// or with a "length" finish when max_tokens was already used up.
func (f *Flow) migrate(ar arrival) {
	failed := f.cur
	f.end(failed, "migrating the request: "+ar.fault.Label())
	f.cur = nil
	if why := unmovable(f.req.Sampling); why != "" {
		f.notMigrated(ar, failed, why)
		return
	}
	if why := refusal(f.cfg.MigrationLimit, f.migrations); why != "" {
		f.notMigrated(ar, failed, why)
		return
	}
	tokens, sampling, more := continuation(f.req.Tokens, f.req.Sampling, f.produced)
	if !more {
		f.hand(&messages.TokenChunk{RequestId: failed.requestID, FinishReason: "length", WorkerId: failed.worker.ID})
		return
	}
	if !ar.receiverLost {
		f.excluded = append(f.excluded, failed.worker.ID)
	}
	f.migrations++
	f.route(tokens, sampling, &pending{why: routeMigrate, ar: ar, failed: failed})
}

// notMigrated ends the request with ar's error chunk saying why it was not moved.
func (f *Flow) notMigrated(ar arrival, failed *leg, why string) {
	f.note(Note{Kind: NoteNotMigrated, Fault: ar.fault, From: failed.worker.ID, Detail: why})
	ch := ar.chunk
	ch.FinishReason, ch.TokenIds = "error", nil
	ch.Error = fmt.Sprintf("%s; not migrated: %s", ch.Error, why)
	f.hand(ch)
}

// end ends leg a and its prefill leg: each leg still running is cancelled for reason
// (or, for a prefill leg outliving its decode leg, because the decode leg ended),
// forgotten and freed; a decode leg that ends without a token has its prefill worker
// release the KV blocks it pinned for it.
func (f *Flow) end(a *leg, reason string) {
	if p := a.pre; p != nil {
		why := reason
		if why == "" {
			why = "the decode leg ended"
		}
		switch {
		case a.sawToken:
			f.endLeg(p, why)
		case !p.ended && !p.final && p.sent:
			f.settle(a, why)
		default:
			f.endLeg(p, why)
			f.release(a)
		}
	}
	f.endLeg(a, reason)
}

// endLeg ends one leg once: cancelled in its engine unless reason is "" or it was never
// sent (cancelling one that already ended is harmless), forgotten, and freed.
func (f *Flow) endLeg(l *leg, reason string) {
	if l.ended {
		return
	}
	l.ended = true
	if reason != "" && l.sent {
		// Cancel: before the Free of its request id.
		f.emit(Cancel{Leg: l.id, Worker: l.worker, Cancel: &messages.Cancel{RequestId: l.requestID, Reason: reason}})
	}
	if l.sent {
		f.forget(l)
	}
	// Free: after the leg's Cancel; exactly once per id routed.
	f.emit(Free{RequestID: l.requestID})
}

// forget drops sent leg l: no more of its events are taken.
func (f *Flow) forget(l *leg) {
	if i := slices.Index(f.active, l); i >= 0 {
		f.active = slices.Delete(f.active, i, i+1)
	}
	// Forget: after the leg's Cancel; its receiver and timers stop.
	f.emit(Forget{Leg: l.id})
}

// clientGone ends the request for a consumer that left (or whose deadline passed: reason
// says which): every leg still running is cancelled for reason (unless the request
// finished: then its legs were ended already), and a parked request waiting for
// Unparked leaves the queue.
func (f *Flow) clientGone(reason string) {
	if f.gone {
		return
	}
	f.gone = true
	if f.waiting {
		f.leaveQueue()
	}
	if f.finished || f.failed || f.cur == nil {
		return // a route awaited is freed (and its queue place left) when its answer comes
	}
	f.end(f.cur, reason)
}

// ---- disaggregated serving ----

// onPrefill takes an arrival of the current decode leg's prefill leg.
func (f *Flow) onPrefill(ar arrival) {
	a := f.cur
	p := a.pre
	ch := ar.chunk
	if ch.FinishReason != "" || ar.fault != messages.Fault_FAULT_NONE {
		p.final = true
	}
	switch {
	case a.sawToken:
		// The decode leg has its KV already (SGLang: both legs ran at once): whatever
		// the prefill leg says now changes nothing for the consumer.
		if ch.FinishReason != "" {
			f.prefillFinished(a, ch)
		}
	case ar.fault == messages.Fault_FAULT_INVALID_REQUEST:
		// The prefill engine refused the request itself: any engine would, the decode
		// worker's included. No retry; the consumer gets the engine's message.
		f.end(a, "the prefill engine refused the request")
		f.cur = nil
		f.hand(refusedChunk(a.requestID, ch))
	case ar.fault != messages.Fault_FAULT_NONE:
		f.retryPrefill(ar)
	case ch.FinishReason == "error" || ch.FinishReason == "abort" || ch.Error != "":
		// Not migratable (the engine refused this prompt): the decode worker's engine
		// would refuse it too. The consumer gets the failure as for an aggregated request.
		f.note(Note{Kind: NoteWarning, From: p.worker.ID, Detail: "prefill leg failed: " + ch.Error})
		f.end(a, "prefill leg failed")
		f.cur = nil
		msg := ch.Error
		if msg == "" {
			msg = "finished with " + ch.FinishReason
		}
		f.hand(&messages.TokenChunk{RequestId: a.requestID, FinishReason: "error", WorkerId: p.worker.ID,
			Error: "prefill leg on " + p.worker.ID + ": " + msg})
	case ch.FinishReason != "":
		f.prefillFinished(a, ch)
		if !a.sent {
			if a.kvParams == "" && a.bootstrap == nil {
				f.note(Note{Kind: NoteWarning, From: p.worker.ID,
					Detail: "prefill leg returned no transfer parameters: the decode worker prefills the prompt again"})
			}
			f.send(a, a.tokens, decodeSampling(a.sampling, a.kvParams, a.bootstrap))
		}
	default:
		// The prefill leg's token is not the consumer's; keep its credits flowing.
		f.emit(Credit{Leg: p.id, Worker: p.worker, Credit: &messages.Credit{RequestId: p.requestID, Credits: 1}})
	}
}

// prefillFinished ends decode leg a's prefill leg after its last chunk ch: the transfer
// parameters are kept for the decode leg (and for ReleaseKV), the router is told the
// leg's prompt is computed, and the leg is over.
func (f *Flow) prefillFinished(a *leg, ch *messages.TokenChunk) {
	p := a.pre
	a.preDone, a.preCached, a.kvParams = true, ch.CachedTokens, ch.KvTransferParams
	f.note(Note{Kind: NotePrefillLeg, Duration: f.now.Sub(p.sentAt), From: p.worker.ID})
	// PrefillDone: before the Free of the leg's id.
	f.emit(PrefillDone{RequestID: p.requestID})
	f.endLeg(p, "")
}

// retryPrefill handles a prefill leg that failed with a migratable fault before the
// decode leg produced anything, or a decode leg that could not load the KV its prefill
// leg computed (FAULT_KV_TRANSFER): both legs end (the prefill worker told to release
// what it may have pinned), and the request is routed again without that prefill worker
// — after MaxPrefillFailures failures, or when no prefill worker is left and
// disaggregation is enforced, with local prefill on a decode worker. The decode worker
// is not excluded. Prefill retries do not count against the migration limit: no token
// was produced, and their number is bounded by MaxPrefillFailures.
func (f *Flow) retryPrefill(ar arrival) {
	a := f.cur
	p := a.pre
	f.end(a, "prefill leg failed: "+ar.fault.Label())
	f.cur = nil
	f.prefillFailures++
	if !ar.receiverLost {
		f.excludedPrefill = append(f.excludedPrefill, p.worker.ID)
	}
	f.localPrefill = f.localPrefill || f.prefillFailures >= MaxPrefillFailures
	if f.prefillFailures > MaxPrefillFailures {
		f.prefillNotRetried(ar, a, fmt.Sprintf("%d prefill legs failed", f.prefillFailures))
		return
	}
	f.route(a.tokens, a.sampling, &pending{why: routeRetry, ar: ar, failed: a})
}

// prefillNotRetried ends the request whose decode leg a lost its prefill (ar) with an
// error chunk saying why it was not prefilled again.
func (f *Flow) prefillNotRetried(ar arrival, a *leg, why string) {
	ch := ar.chunk
	ch.RequestId, ch.FinishReason, ch.TokenIds = a.requestID, "error", nil
	if ch.Fault == messages.Fault_FAULT_NONE {
		ch.Fault = messages.Fault_FAULT_ENGINE_ERROR
	}
	ch.Error = fmt.Sprintf("prefill leg on %s: %s; not retried: %s", a.pre.worker.ID, ch.Error, why)
	f.hand(ch)
}

// settle ends decode leg a's prefill leg p, which has not delivered its last chunk,
// when a ends before its first token: p is cancelled and freed at once, and ReleaseKV
// goes to p's worker once p's last chunk arrives — with the transfer parameters of a
// leg that finished before the cancel reached it, whose blocks its engine pinned — or
// after Config.PrefillReleaseWait without one (the cancel stopped it first).
func (f *Flow) settle(a *leg, reason string) {
	p := a.pre
	p.ended, a.released = true, true
	f.emit(Cancel{Leg: p.id, Worker: p.worker, Cancel: &messages.Cancel{RequestId: p.requestID, Reason: reason}})
	f.emit(Free{RequestID: p.requestID})
	p.settling, p.release = true, f.newGen()
	f.accepted(p) // the release wait bounds it from now on, acknowledged or not
	// SetTimer: the leg's chunks are still taken until it fires or the leg is forgotten.
	f.emit(SetTimer{Timer: Timer{Kind: TimerPrefillRelease, Leg: p.id, Gen: p.release}, After: f.cfg.PrefillReleaseWait})
}

// settled ends the wait of settle for prefill leg p: kvParams are its last chunk's
// transfer parameters ("" when none came).
func (f *Flow) settled(p *leg, kvParams string) {
	p.settling = false
	f.forget(p)
	f.note(Note{Kind: NoteReleased, From: p.worker.ID})
	// ReleaseKV: after the leg's Cancel.
	f.emit(ReleaseKV{Worker: p.worker, Release: &messages.ReleaseKv{RequestId: p.requestID, KvTransferParams: kvParams}})
}

// release tells decode leg a's prefill worker, once, to release the KV blocks its engine
// pinned for a (ReleaseKV with the transfer parameters, when the prefill leg returned
// them). Harmless when the blocks are already gone.
func (f *Flow) release(a *leg) {
	if a.released || a.pre == nil || !a.pre.sent {
		return
	}
	a.released = true
	f.emit(ReleaseKV{Worker: a.pre.worker, Release: &messages.ReleaseKv{RequestId: a.pre.requestID, KvTransferParams: a.kvParams}})
	f.note(Note{Kind: NoteReleased, From: a.pre.worker.ID})
}

// loraPath is the adapter's folder a route may have a worker load it from on demand: the
// request's (the fleet's catalogue), only when loads on demand are allowed.
func (f *Flow) loraPath() string {
	if !f.cfg.LoraOnDemand {
		return ""
	}
	return f.req.Sampling.GetLoraPath()
}
