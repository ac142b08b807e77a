package frontend

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/turbine-llm/turbine/flow"
	"github.com/turbine-llm/turbine/gateway"
	"github.com/turbine-llm/turbine/messages"
)

// routing is what a stream needs from its model's router: choose a worker (and, for a
// disaggregated request, a prefill worker), and keep the router's load tracking of each
// leg right (the flow says when: flow.Ack, flow.PrefillDone, flow.Free). Started,
// PrefillDone and Free do not block.
type routing interface {
	Route(rr *messages.RouteRequest) (*messages.RouteResponse, error)
	// Started acknowledges the route of requestID (made with will_ack) to router, the
	// router activation that answered it (nil: none needed): the request's work was
	// sent, and the router no longer expires it for want of an acknowledgement.
	Started(requestID string, router *messages.ActorRef)
	PrefillDone(requestID string)
	Free(requestID string)
}

// recorder takes a stream's events for the frontend's metrics. Durations are wall time.
type recorder interface {
	// migrated: the request was re-sent to another worker after fault.
	migrated(model string, fault messages.Fault)
	// decided: the router answered a Route with this disaggregation decision.
	decided(model string, decision messages.DisaggDecision)
	// prefillRetried: a prefill leg failed with fault and the request was routed again.
	prefillRetried(model string, fault messages.Fault)
	// released: ReleaseKv was sent to a prefill worker whose blocks no decode leg read.
	released(model string)
	// prefillLeg: a prefill leg took d from its Generate to its last chunk.
	prefillLeg(model string, d time.Duration)
	// transferWait: a decode leg took d from its Generate to its first token (the KV
	// transfer plus one decode step).
	transferWait(model string, d time.Duration)
}

// deadlineRecorder is a recorder that also counts requests whose own deadline passed
// before they ended (flow.NoteDeadline).
type deadlineRecorder interface {
	deadline(model string)
}

// notMovedRecorder is a recorder that also counts unacknowledged legs left waiting
// (flow.NoteNotMoved).
type notMovedRecorder interface {
	notMoved(model string)
}

// stream is one request's token stream: the shell of its flow (flow.Flow), which decides
// everything that happens to the request. The stream feeds the flow what happens — the
// receivers' chunks and termination notices, timers, the client leaving — one event at
// a time, and carries out the effects each step returns, in order: routes through the
// router, legs as Generate to workers with a receiver process as reply_to, credits,
// cancels, releases, metrics and log lines; emitted chunks are what Recv returns.
//
// A request the router finds every worker busy for waits in the gateway's busy queue
// when the gateway gave it a place there (GenerateRequest.Parking): the flow's Park and
// Unpark join and leave that place, and while the request is parked the stream turns
// the queue's wakes into the flow's Unparked (it is the head and took a slot) or Drain
// (the server drains); the flow's queue timer bounds the wait. A route answered while
// the server drains is preceded by Drain (the drain may have started while it was
// asked), and the flow's request carries when it joined the queue (Parking.Joined).
// start returns once the request runs or has failed.
//
// Goroutines: start, Recv and Close are called by one goroutine (the HTTP handler),
// which steps the flow; after Close, while the flow is not done (a cancelled prefill
// leg's release wait), a goroutine of the stream's goes on stepping it. Receivers and
// timers only post events to the stream's channel. Disagg and WorkerID may be called
// from anywhere.
type stream struct {
	root *actor.RootContext // of the member the stream runs on
	// lost is closed when that member is replaced (nil: never); moveTo moves the stream
	// and its routing to the member now, returning its root and its lost channel
	// (move).
	lost   <-chan struct{}
	moveTo func() (*actor.RootContext, <-chan struct{})
	router routing
	cfg    Config
	fcfg   flow.Config
	req    *gateway.GenerateRequest
	newID  func(clientID string) string
	rec    recorder

	flow   *flow.Flow
	events chan flow.Event // from the receivers and the timers
	done   chan struct{}   // closed once the flow is done after Close: nothing is taken any more
	legs   map[flow.LegID]*leg
	timers map[timerKey]func() bool // armed timers (but the stall timer) and their stop
	// stall is the stall timer the flow has set (stallSet), armed only while Recv waits
	// for an event: from the moment one Recv first waits under it (stallWait).
	stall    flow.SetTimer
	stallSet bool
	// routed holds the answers to the Route and Park effects of a step, stepped after
	// its other effects.
	routed []flow.Event
	// park is the request's place in the gateway's busy queue (nil: none); parked while
	// the flow has it there (Park to Unpark); full is the queue's refusal of a Park.
	park   gateway.Parking
	parked bool
	full   error

	// Emitted chunks that Recv has not returned yet (from queue[head]), how many it has
	// returned (the next one's index), the tokens emitted, and how the request ended: its
	// finishing chunk emitted, or the error of a Fail.
	queue    []*messages.TokenChunk
	head     int
	index    uint32
	produced int
	finished bool
	failed   error

	closeOnce sync.Once
	infoMu    sync.Mutex
	info      flow.Info                 // copied after each step
	explained *gateway.RouteExplanation // the latest route's, when the request asked (hits.go)

	// Predicted prefix hits (hits.go): blockSize is the model's KV block size (0:
	// unknown, nothing predicted); predicted holds them by the request id of the leg
	// that will compute the prompt, until it is sent, then legPredicted by leg.
	blockSize    int
	predicted    map[string]prediction
	legPredicted map[flow.LegID]prediction

	trace *streamTrace // the request's spans (trace.go); nil while tracing is off
}

// leg is a leg the flow sent: its worker and its receiver.
type leg struct {
	worker *actor.PID
	rcv    *receiver
	closed chan struct{} // closed when the flow forgets the leg: its receiver delivers nothing more
}

// timerKey names a timer of the flow as SetTimer replaces it: one per kind and leg.
type timerKey struct {
	kind flow.TimerKind
	leg  flow.LegID
}

// errEnded is Recv's error when the flow ended without a finishing chunk or a failure,
// which it never does.
var errEnded = errors.New("frontend: the request ended without its last chunk")

func newStream(root *actor.RootContext, r routing, cfg Config, req *gateway.GenerateRequest,
	newID func(string) string, rec recorder) *stream {
	if cfg.clock == nil {
		cfg.clock = wallClock{}
	}
	fcfg := flow.Config{Credits: cfg.Credits, MigrationLimit: cfg.MigrationLimit, StallTimeout: max(cfg.StallTimeout, 0),
		AcceptTimeout: max(cfg.AcceptTimeout, 0), PrefillReleaseWait: cfg.PrefillReleaseWait, TerminatedGrace: flow.DefaultTerminatedGrace, LoraOnDemand: cfg.LoraOnDemand}
	if req.Parking != nil {
		fcfg.QueueTimeout = req.Parking.Timeout()
	}
	return &stream{root: root, router: r, cfg: cfg, fcfg: fcfg, req: req, newID: newID, rec: rec, park: req.Parking,
		// The channel holds more than the credits granted, so a receiver only waits for
		// room when a worker ignores flow control.
		events: make(chan flow.Event, 4*int(max(cfg.Credits, 1))+16), done: make(chan struct{}),
		legs: map[flow.LegID]*leg{}, timers: map[timerKey]func() bool{}}
}

// start starts the flow of tokens with sampling (the request's prompt and sampling) under
// a new request id: it routes the request and sends it. Errors: the request could not be
// routed, as gateway.RouteError says (the stream is closed then).
func (s *stream) start(tokens []uint32, sampling *messages.SamplingParams) error {
	return s.startIn(context.Background(), tokens, sampling)
}

// startIn is start, for a request that may wait in the busy queue while ctx lasts.
// Errors: start's, the queue's (gateway.ErrAllBusy wrapped when it is full or the wait
// timed out, gateway.ErrDraining), ctx.Err() when ctx ended while it waited.
func (s *stream) startIn(ctx context.Context, tokens []uint32, sampling *messages.SamplingParams) error {
	fr := flow.Request{ID: s.newID(s.req.RequestID), Model: s.req.Model, Tokens: tokens, Sampling: sampling,
		OverlapWeight: s.req.OverlapWeight, Temperature: s.req.Temperature, PinWorker: s.req.PinWorker,
		Explain: s.req.ExplainRoute, SessionID: s.req.SessionID}
	if s.park != nil {
		fr.QueuedAt = s.park.Joined() // it may have waited in the gateway's queue for its turn
	}
	s.flow = flow.New(fr, s.fcfg)
	s.trace = newStreamTrace(ctx)
	s.step(flow.Start{})
	for s.parked && s.failed == nil {
		ev, err := s.waitParked(ctx)
		if err != nil {
			s.Close()
			return err
		}
		s.step(ev)
	}
	if s.failed != nil {
		s.Close()
		return s.failed
	}
	return nil
}

// waitParked returns the next event of a parked request: the queue's wake as Unparked
// (the request is the head and took a slot) or Drain, or the flow's queue timer. When ctx
// ends first it steps the flow's Deadline or ClientGone and returns ctx.Err().
func (s *stream) waitParked(ctx context.Context) (flow.Event, error) {
	for {
		select {
		case <-ctx.Done():
			s.step(ended(ctx))
			return nil, ctx.Err()
		case ev := <-s.events:
			return ev, nil
		case <-s.lost:
			s.move() // a parked request has no leg: only its routing moves
		case <-s.park.Wake():
			switch {
			case s.park.Draining():
				return flow.Drain{}, nil
			case s.park.Ready():
				return flow.Unparked{}, nil
			}
		}
	}
}

// ended is the flow's event for a consumer whose ctx ended: Deadline when its deadline
// passed (the gateway's request timeout), else ClientGone.
func ended(ctx context.Context) flow.Event {
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return flow.Deadline{}
	}
	return flow.ClientGone{}
}

// WorkerID names the worker serving the request now (the decode worker of a
// disaggregated request; "" once it failed for good).
func (s *stream) WorkerID() string {
	s.infoMu.Lock()
	defer s.infoMu.Unlock()
	return s.info.Worker
}

// Disagg returns the latest route's disaggregation decision (gateway.DisaggStream).
func (s *stream) Disagg() gateway.DisaggInfo {
	s.infoMu.Lock()
	defer s.infoMu.Unlock()
	return gateway.DisaggInfo{Decision: s.info.Decision.Label(), PrefillWorker: s.info.PrefillWorker,
		DecodeWorker: s.info.DecodeWorker}
}

// Recv returns the next chunk of the request, whichever worker produced it (the flow
// numbers them on across migrations and gives the finishing chunk the whole request's
// usage), then io.EOF. A request that could not be routed again (after a fault) returns
// its gateway.RouteError, now and on every later call, which the gateway answers 503 with
// Retry-After (or, after the first chunk, with an error frame). ctx.Err() when ctx ends
// first; when its deadline passed, the flow is told so (Deadline) at once.
func (s *stream) Recv(ctx context.Context) (*messages.TokenChunk, error) {
	var st stallWait
	defer st.disarm()
	for {
		if ch := s.pop(); ch != nil {
			return ch, nil
		}
		switch {
		case s.failed != nil:
			return nil, s.failed
		case s.finished:
			return nil, io.EOF
		case s.flow.Done():
			return nil, errEnded
		}
		ev, err := s.wait(ctx, &st)
		if err != nil {
			return nil, err
		}
		if ev != nil {
			s.step(ev)
		}
	}
}

// pop takes the next chunk the flow has handed on, nil when there is none.
func (s *stream) pop() *messages.TokenChunk {
	if s.head == len(s.queue) {
		return nil
	}
	ch := s.queue[s.head]
	s.queue[s.head] = nil
	if s.head++; s.head == len(s.queue) {
		s.queue, s.head = s.queue[:0], 0
	}
	s.index++
	return ch
}

// Ready returns the next chunk if the flow has one to hand on now, stepping the events
// that have already arrived, and nil when Recv would wait (or has an error or the end to
// report, or the stream must first move to a new member, which Recv does). It never
// waits (gateway.ChunkPoller).
func (s *stream) Ready() *messages.TokenChunk {
	for {
		if ch := s.pop(); ch != nil {
			return ch
		}
		if s.failed != nil || s.finished || s.flow.Done() {
			return nil
		}
		select {
		case <-s.lost:
			return nil
		default:
		}
		select {
		case ev := <-s.events:
			s.step(ev)
		default:
			return nil
		}
	}
}

// arrived appends to evs the events already waiting in the stream's channel, without
// waiting for more.
func (s *stream) arrived(evs []flow.Event) []flow.Event {
	for range cap(s.events) {
		select {
		case ev := <-s.events:
			evs = append(evs, ev)
		default:
			return evs
		}
	}
	return evs
}

// stallWait is the stall timer armed during one Recv: the flow's stall timer (timer),
// armed when Recv first waited under it. Events that do not change the flow's stall
// timer (a worker's acknowledgement, a termination notice) leave it running.
type stallWait struct {
	timer flow.Timer
	c     <-chan time.Time
	stop  func() bool
}

func (w *stallWait) disarm() {
	if w.stop != nil {
		w.stop()
	}
	*w = stallWait{}
}

// wait returns the next event, with the stall timer the flow set armed in st (from the
// moment Recv first waited under it); nil when the stream moved to another member
// instead (move stepped the flow).
func (s *stream) wait(ctx context.Context, st *stallWait) (flow.Event, error) {
	switch {
	case !s.stallSet:
		st.disarm()
	case st.c == nil || st.timer != s.stall.Timer:
		st.disarm()
		st.timer = s.stall.Timer
		st.c, st.stop = s.cfg.clock.newTimer(timerStall, s.stall.After)
	}
	stall := st.c
	select {
	case <-ctx.Done():
		if ev := ended(ctx); ev == (flow.Deadline{}) {
			s.step(ev)
		}
		return nil, ctx.Err()
	case ev := <-s.events:
		return ev, nil
	case <-stall:
		t := st.timer
		st.disarm()
		return flow.TimerFired{Timer: t}, nil
	case <-s.lost:
		s.move()
		return nil, nil
	}
}

// move carries the stream onto the member that replaced the one it ran on: effects go
// through the new member from now on, and each leg sent counts as its worker's
// termination (its chunks went to receivers of the old member, which is gone), so the
// flow takes the request to a worker again (migration) after the grace.
func (s *stream) move() {
	root, lost := s.moveTo()
	s.root, s.lost = root, lost
	for _, l := range s.legs {
		// A PID keeps the remote endpoint of the system it was first sent through: a
		// fresh one goes out through the new member (the leg's Cancel reaches its worker).
		l.worker = actor.NewPID(l.worker.Address, l.worker.Id)
	}
	ids := slices.Sorted(maps.Keys(s.legs))
	for _, id := range ids {
		s.step(flow.WorkerTerminated{Leg: id, ReceiverLost: true})
	}
}

// Close tells the flow the client is gone: it cancels what still runs unless the request
// finished, and frees the router's load tracking. While the flow is not done (a
// cancelled prefill leg's release wait) a goroutine goes on feeding it. Safe to call
// more than once.
func (s *stream) Close() {
	s.closeOnce.Do(func() {
		if s.flow == nil {
			close(s.done)
			return
		}
		s.step(flow.ClientGone{})
		if s.flow.Done() {
			s.end()
			return
		}
		go func() {
			for !s.flow.Done() {
				select {
				case ev := <-s.events:
					s.step(ev)
				case <-s.lost:
					s.move()
				}
			}
			s.end()
		}()
	})
}

// end releases what the stream still holds once its flow is done.
func (s *stream) end() {
	s.trace.end()
	for k, stop := range s.timers {
		stop()
		delete(s.timers, k)
	}
	close(s.done)
}

// step feeds ev to the flow and carries out its effects, then those of the route
// answers they brought.
func (s *stream) step(ev flow.Event) {
	for {
		if c, ok := ev.(flow.Chunk); ok {
			s.legChunk(c)
			s.trace.chunk(c)
		}
		for _, e := range s.flow.Step(ev, time.Now()) {
			s.do(e)
		}
		if len(s.routed) == 0 {
			break
		}
		ev = s.routed[0]
		s.routed = s.routed[1:]
	}
	s.routed = s.routed[:0]
	info := s.flow.Info()
	s.infoMu.Lock()
	s.info = info
	s.infoMu.Unlock()
}

// do carries out effect e.
func (s *stream) do(e flow.Effect) {
	switch e := e.(type) {
	case flow.Route:
		sp := s.trace.route(e.Request)
		resp, err := s.router.Route(e.Request)
		s.trace.routed(sp, s.req.Model, resp, err)
		if err == nil {
			s.routeAnswered(e.Request, resp)
		}
		if s.park != nil && s.park.Draining() {
			// The drain may have started while the route was asked (a wake taken just
			// before it): the flow hears of it before the answer, which may be the drain's
			// own doing (no worker: they left routing), so that a request taken out of the
			// queue gets the drain's answer.
			s.routed = append(s.routed, flow.Drain{})
		}
		// What came while the router was asked (a leg's acknowledgement or chunks: a
		// leg waits on while another worker is asked for it) goes to the flow first, as
		// it happened first.
		s.routed = s.arrived(s.routed)
		s.routed = append(s.routed, flow.Routed{Response: resp, Err: err, Room: rand.Uint64() >> 1})
	case flow.Send:
		s.send(e)
	case flow.Ack:
		s.router.Started(e.RequestID, e.Router)
	case flow.Credit:
		s.root.Send(s.pid(e.Leg, e.Worker), e.Credit)
	case flow.Cancel:
		s.root.Send(s.pid(e.Leg, e.Worker), e.Cancel)
	case flow.Forget:
		s.forget(e.Leg)
	case flow.PrefillDone:
		s.router.PrefillDone(e.RequestID)
	case flow.Free:
		s.router.Free(e.RequestID)
		delete(s.predicted, e.RequestID) // a route freed unsent predicted nothing that runs
	case flow.ReleaseKV:
		s.root.Send(s.pid(0, e.Worker), e.Release)
	case flow.Emit:
		s.queue = append(s.queue, e.Chunk)
		s.produced += len(e.Chunk.TokenIds)
		s.finished = s.finished || e.Chunk.FinishReason != ""
	case flow.Fail:
		switch err := gateway.RouteError(e.Outcome, e.Message); {
		case e.Cause == flow.FailDraining:
			s.failed = fmt.Errorf("%w: %s", gateway.ErrDraining, e.Message)
		case e.Cause == flow.FailQueueFull && s.full != nil:
			s.failed = s.full // the queue's own answer (all busy, or the concurrency limit)
		case e.Outcome == messages.RouteOutcome_ROUTE_NO_ADAPTER && s.req.Sampling.GetLoraName() != "" && s.flow.Info().Migrations > 0:
			// A migration found no worker with the adapter its worker gave up (unloaded, or
			// the worker failed): the 503 of an unavailable adapter, naming it.
			s.failed = gateway.AdapterLost(s.req.Sampling.GetLoraName(), e.Message)
		case e.Outcome == messages.RouteOutcome_ROUTE_NO_ADAPTER && s.req.Sampling.GetLoraName() != "":
			// No worker holds the adapter (any more): the 404 of an unknown model, naming it.
			s.failed = gateway.UnknownAdapter(s.req.Sampling.GetLoraName(), e.Message)
		case err != nil:
			s.failed = err
		default:
			s.failed = errEnded
		}
	case flow.Park:
		if err := s.park.Park(); err != nil {
			s.full = err
			s.routed = append(s.routed, flow.QueueFull{Message: err.Error()})
		} else {
			s.parked = true
		}
	case flow.Unpark:
		s.park.Leave()
		s.parked = false
	case flow.SetTimer:
		s.setTimer(e)
	case flow.StopTimer:
		s.stopTimer(e.Timer.Kind, e.Timer.Leg)
	case flow.Note:
		s.note(e)
	}
}

// send starts a leg: its receiver (watching the worker) first, then Generate with the
// receiver as reply_to.
func (s *stream) send(e flow.Send) {
	w := actor.NewPID(e.Worker.Ref.GetAddress(), e.Worker.Ref.GetId())
	l := &leg{worker: w, closed: make(chan struct{})}
	l.rcv = &receiver{leg: e.Leg, requestID: e.Generate.RequestId, worker: w, events: s.events, closed: l.closed}
	self := startReceiver(s.root.ActorSystem(), l.rcv)
	s.legs[e.Leg] = l
	s.legSent(e.Leg, e.Generate.RequestId)
	s.trace.send(e)
	e.Generate.ReplyTo = &messages.ActorRef{Address: self.Address, Id: self.Id}
	s.root.Send(w, e.Generate)
}

// pid is the actor of worker, leg id's when the stream knows it.
func (s *stream) pid(id flow.LegID, worker flow.Worker) *actor.PID {
	if l := s.legs[id]; l != nil {
		return l.worker
	}
	return actor.NewPID(worker.Ref.GetAddress(), worker.Ref.GetId())
}

// forget stops leg id's receiver and timers.
func (s *stream) forget(id flow.LegID) {
	s.trace.forget(id)
	if l := s.legs[id]; l != nil {
		delete(s.legs, id)
		close(l.closed)
		stopReceiver(l.rcv)
	}
	for k, stop := range s.timers {
		if k.leg == id {
			stop()
			delete(s.timers, k)
		}
	}
	if s.stallSet && s.stall.Timer.Leg == id {
		s.stallSet = false
	}
}

// setTimer arms e's timer, replacing the one of the same kind and leg: the stall timer
// when Recv next waits, the others now.
func (s *stream) setTimer(e flow.SetTimer) {
	if e.Timer.Kind == flow.TimerStall {
		s.stall, s.stallSet = e, true
		return
	}
	s.stopTimer(e.Timer.Kind, e.Timer.Leg)
	t := e.Timer
	s.timers[timerKey{t.Kind, t.Leg}] = s.cfg.clock.afterFunc(t.Kind, e.After,
		func() { s.post(flow.TimerFired{Timer: t}) })
}

func (s *stream) stopTimer(kind flow.TimerKind, id flow.LegID) {
	if kind == flow.TimerStall {
		s.stallSet = false
		return
	}
	k := timerKey{kind, id}
	if stop := s.timers[k]; stop != nil {
		stop()
		delete(s.timers, k)
	}
}

// post hands a timer's event to the stream. It may run on the goroutine stepping the
// flow (a timer that fires as it is armed), so it never waits there.
func (s *stream) post(ev flow.Event) {
	select {
	case s.events <- ev:
	default:
		go func() {
			select {
			case s.events <- ev:
			case <-s.done:
			}
		}()
	}
}

// note records n in the metrics and, where the operator should see it, the log.
func (s *stream) note(n flow.Note) {
	model := s.req.Model
	switch n.Kind {
	case flow.NoteDecided:
		if s.rec != nil {
			s.rec.decided(model, n.Decision)
		}
	case flow.NoteMigrated:
		s.cfg.Logger.Info().Str("request_id", s.req.RequestID).Str("from", n.From).Str("to", n.To).
			Str("reason", n.Fault.Label()).Int("produced", s.produced).Int("migration", s.flow.Info().Migrations).
			Msg("request migrated")
		if s.rec != nil {
			s.rec.migrated(model, n.Fault)
		}
		s.trace.migrated(n)
	case flow.NoteNotMoved:
		s.cfg.Logger.Warn().Str("request_id", s.req.RequestID).Str("worker", n.From).
			Msg("request waits on a worker that has not acknowledged it: " + n.Detail)
		if r, ok := s.rec.(notMovedRecorder); ok {
			r.notMoved(model)
		}
	case flow.NoteNotMigrated:
		s.cfg.Logger.Warn().Str("request_id", s.req.RequestID).Str("from", n.From).Str("reason", n.Fault.Label()).
			Msg("request not migrated: " + n.Detail)
	case flow.NotePrefillRetried:
		if n.Detail == "" {
			s.cfg.Logger.Info().Str("request_id", s.req.RequestID).Str("failed_prefill_worker", n.From).
				Str("reason", n.Fault.Label()).Str("decision", n.Decision.Label()).
				Str("prefill_worker", s.flow.Info().PrefillWorker).Str("decode_worker", n.To).Msg("prefill leg retried")
		} else {
			s.cfg.Logger.Warn().Str("request_id", s.req.RequestID).Str("failed_prefill_worker", n.From).
				Str("reason", n.Fault.Label()).Msg("prefill leg not retried: " + n.Detail)
		}
		if s.rec != nil {
			s.rec.prefillRetried(model, n.Fault)
		}
	case flow.NotePrefillLeg:
		if s.rec != nil {
			s.rec.prefillLeg(model, n.Duration)
		}
	case flow.NoteTransferWait:
		if s.rec != nil {
			s.rec.transferWait(model, n.Duration)
		}
	case flow.NoteReleased:
		if s.rec != nil {
			s.rec.released(model)
		}
	case flow.NoteWarning:
		s.cfg.Logger.Warn().Str("request_id", s.req.RequestID).Str("prefill_worker", n.From).Msg(n.Detail)
	case flow.NoteDeadline:
		if r, ok := s.rec.(deadlineRecorder); ok {
			r.deadline(model)
		}
	}
}

var _ gateway.ChunkPoller = (*stream)(nil)
