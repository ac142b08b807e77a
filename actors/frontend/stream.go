package frontend

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/turbine-llm/turbine/gateway"
	"github.com/turbine-llm/turbine/messages"
)

// routing is what a stream needs from its model's router: choose a worker (and, for a
// disaggregated request, a prefill worker), and keep the router's load tracking of each
// leg right (Started once the routed work is sent, PrefillDone once its prompt is
// computed, Free exactly once when it ends — also when the Route call failed, since the
// router may have recorded the request before the call gave up). Started, PrefillDone
// and Free do not block.
type routing interface {
	Route(rr *messages.RouteRequest) (*messages.RouteResponse, error)
	// Started acknowledges route, the answer to the Route call of requestID (made with
	// will_ack): the request's work was sent, and the router no longer expires it for
	// want of an acknowledgement.
	Started(requestID string, route *messages.RouteResponse)
	PrefillDone(requestID string)
	Free(requestID string)
}

// recorder takes a stream's events for the frontend's metrics. Durations are wall time.
type recorder interface {
	// migrated: the request was re-sent to another worker after a fault (migration.go).
	migrated(model, reason string)
	// decided: the router answered a Route with this disaggregation decision.
	decided(model, decision string)
	// prefillRetried: a prefill leg failed with fault and the request was routed again.
	prefillRetried(model, fault string)
	// released: ReleaseKv was sent to a prefill worker whose blocks no decode leg read.
	released(model string)
	// prefillLeg: a prefill leg took d from its Generate to its last chunk.
	prefillLeg(model string, d time.Duration)
	// transferWait: a decode leg took d from its Generate to its first token (the KV
	// transfer plus one decode step).
	transferWait(model string, d time.Duration)
}

// stream is one request's token stream, across every worker it ran on. Recv and Close
// are called by one goroutine (the HTTP handler); each leg's receiver actor only writes
// to that leg's channel.
//
// Invariants: produced holds every token handed to the caller, in order; index is the
// number of chunks handed out (the next chunk's index); every leg started is ended
// (cancelled unless finished, receiver stopped, freed in the router) exactly once, by a
// migration, a prefill retry or Close; every request id routed is freed once, its legs
// by then, a failed Route call's at once; a prefill leg's pinned KV blocks are released
// (ReleaseKv) when its decode leg ends without a token; cur is nil once the stream failed
// for good, and failed is set when it failed because it could not be routed again.
type stream struct {
	root   *actor.RootContext // of the member the stream started on
	router routing
	cfg    Config
	req    *gateway.GenerateRequest
	newID  func(clientID string) string
	rec    recorder

	cur        *attempt
	produced   []uint32
	excluded   []string // workers this request failed on
	migrations int
	index      uint32
	finished   bool
	closeOnce  sync.Once
	// failed: the request's worker failed and routing it again did not find another
	// (unroutable); Recv returns it from then on.
	failed error

	// Disaggregated serving: prefill workers whose prefill leg failed, how many prefill
	// legs failed, whether the request must be prefilled on its decode worker from now
	// on (after maxPrefillFailures-1 failures), and the latest route's decision (read by
	// the gateway while the stream runs, hence the lock).
	excludedPrefill []string
	prefillFailures int
	localPrefill    bool
	infoMu          sync.Mutex
	info            gateway.DisaggInfo
}

// maxPrefillFailures is how many failed prefill legs a request survives: after the
// first it is routed to another prefill worker, after the second it is prefilled on its
// decode worker, and a third (which local prefill makes impossible) ends it.
const maxPrefillFailures = 2

// attempt is one leg of the request on one worker under one internal request id: an
// aggregated request, a decode leg (pre set when its prompt is prefilled elsewhere), or
// a prefill leg (leg "prefill").
type attempt struct {
	requestID string
	workerID  string
	worker    *actor.PID
	receiver  *actor.PID
	arrivals  chan arrival
	closed    chan struct{}
	consumed  int32 // chunks taken since the last Credit
	sawToken  bool
	leg       string // "prefill" for a prefill leg, "" otherwise

	// tokens and sampling are the request this attempt serves, as routed (sampling
	// without disaggregation parameters): a prefill retry routes them again.
	tokens   []uint32
	sampling *messages.SamplingParams

	sent   bool      // Generate was sent
	sentAt time.Time // when
	ended  bool      // endLeg ran
	final  bool      // a prefill leg's last chunk (or fault) was taken from arrivals

	// A decode leg's prefill leg (nil for aggregated and local requests), the transfer
	// parameters the prefill leg returned, whether ReleaseKv was sent, and the SGLang
	// bootstrap parameters both legs share.
	pre       *attempt
	preDone   bool
	preCached int32 // prompt tokens the prefill leg found in its worker's prefix cache
	kvParams  string
	released  bool
	bootstrap *messages.DisaggParams
}

// arrival is a chunk from the receiver; fault is the migratable fault it reports ("" for
// ordinary chunks and for failures that are not migratable).
type arrival struct {
	chunk *messages.TokenChunk
	fault string
}

func newStream(root *actor.RootContext, r routing, cfg Config, req *gateway.GenerateRequest,
	newID func(string) string, rec recorder) *stream {
	if cfg.clock == nil {
		cfg.clock = wallClock{}
	}
	return &stream{root: root, router: r, cfg: cfg, req: req, newID: newID, rec: rec}
}

// start routes tokens (excluding the workers and prefill workers already failed on) and
// starts the request under a new request id: on the chosen worker, or, when the router
// decides "remote", as a prefill leg on the prefill worker followed by the decode leg on
// the chosen (decode) worker. A vLLM-style decode leg is sent once its prefill leg
// returned the transfer parameters (Recv does that); an SGLang-style one (bootstrap
// address in the route) is sent with its prefill leg. Once the work is sent the routing
// is acknowledged (routing.Started). Errors: gateway.ErrAllBusy, ErrUnknownModel,
// ErrNoPrefillWorkers, ErrNoWorkers (wrapped) from the router's answer, or, when the
// Route call itself failed, routeCallFailed's error (503 with Retry-After); the id is
// freed then, since the router may have recorded it. Every error but ErrUnknownModel
// means the request could not be routed now (see unroutable).
func (s *stream) start(tokens []uint32, sampling *messages.SamplingParams) error {
	id := s.newID(s.req.RequestID)
	rr := &messages.RouteRequest{RequestId: id, TokenIds: tokens, ExcludeWorkers: s.excluded,
		ExcludePrefillWorkers: s.excludedPrefill, LocalPrefill: s.localPrefill, WillAck: true}
	if s.req.OverlapWeight != nil {
		rr.HasOverlapWeight, rr.OverlapWeight = true, *s.req.OverlapWeight
	}
	if s.req.Temperature != nil {
		rr.HasTemperature, rr.Temperature = true, *s.req.Temperature
	}
	route, err := s.router.Route(rr)
	if err != nil {
		// A call that timed out may have been recorded by a router too busy to answer in
		// time: free the id whatever happened (freeing an unknown id is harmless).
		s.router.Free(id)
		return routeCallFailed(err)
	}
	switch route.ErrorCode {
	case "":
	case "all_busy":
		return fmt.Errorf("%w: %s", gateway.ErrAllBusy, route.Error)
	case "unknown_model":
		return fmt.Errorf("%w: %s", gateway.ErrUnknownModel, route.Error)
	case "no_prefill_workers":
		return fmt.Errorf("%w: %s", gateway.ErrNoPrefillWorkers, route.Error)
	default:
		return fmt.Errorf("%w: %s", gateway.ErrNoWorkers, route.Error)
	}
	if route.Worker == nil {
		s.router.Free(id)
		return fmt.Errorf("%w: the router chose worker %q without its address", gateway.ErrNoWorkers, route.WorkerId)
	}
	decision := route.DisaggDecision
	if decision == "" {
		decision = DecisionAggregated
	}
	if decision == DecisionRemote && route.PrefillWorker == nil {
		// The router tracks a prefill leg it gave no address for: let it go, and
		// prefill on the decode worker.
		s.cfg.Logger.Warn().Str("request_id", id).Str("prefill_worker", route.PrefillWorkerId).
			Msg("route without the prefill worker's address: prefilling on the decode worker")
		if route.PrefillRequestId != "" {
			s.router.Free(route.PrefillRequestId)
		}
		decision = DecisionLocalRequested
	}
	if s.rec != nil {
		s.rec.decided(s.req.Model, decision)
	}
	a := s.newAttempt(id, route.WorkerId, route.Worker, tokens, sampling)
	info := gateway.DisaggInfo{Decision: decision}
	if decision != DecisionAggregated {
		info.DecodeWorker = route.WorkerId
	}
	if decision == DecisionRemote {
		info.PrefillWorker = route.PrefillWorkerId
		s.startRemote(a, route)
	} else {
		s.send(a, tokens, sampling)
	}
	s.router.Started(id, route)
	s.infoMu.Lock()
	s.info = info
	s.infoMu.Unlock()
	s.cur = a
	return nil
}

// routeCallFailed is the error of a Route call that failed (it timed out — the router
// is overloaded or moving — or the router could not be reached): the request could not
// be routed now, answered 503 with Retry-After. It wraps gateway.ErrNoWorkers and err.
func routeCallFailed(err error) error {
	return &gateway.APIError{Kind: gateway.KindNoWorkers,
		Message: "The request could not be routed to a worker in time; retry later.",
		Cause:   fmt.Errorf("%w: frontend: route call failed: %w", gateway.ErrNoWorkers, err)}
}

// causeOf is what to log of err: an APIError's cause (its message is the client's), else
// err.
func causeOf(err error) error {
	var ae *gateway.APIError
	if errors.As(err, &ae) && ae.Cause != nil {
		return ae.Cause
	}
	return err
}

// unroutable reports whether err, from start, says the request could not be routed now
// (no worker, every worker busy, no prefill worker, the Route call failed): a retry may
// succeed, so the client gets 503 with Retry-After rather than a worker failure.
func unroutable(err error) bool {
	return errors.Is(err, gateway.ErrNoWorkers) || errors.Is(err, gateway.ErrAllBusy)
}

// newAttempt spawns the receiver of a leg on worker ref; nothing is sent yet.
func (s *stream) newAttempt(id, workerID string, ref *messages.ActorRef, tokens []uint32,
	sampling *messages.SamplingParams) *attempt {
	a := &attempt{requestID: id, workerID: workerID, worker: actor.NewPID(ref.Address, ref.Id),
		arrivals: make(chan arrival, 4*int(s.cfg.Credits)+8), closed: make(chan struct{}),
		tokens: tokens, sampling: sampling}
	clk := s.cfg.clock
	a.receiver = s.root.Spawn(actor.PropsFromProducer(func() actor.Actor { return &receiver{a: a, clock: clk} }))
	return a
}

// send sends Generate for leg a with sampling.
func (s *stream) send(a *attempt, tokens []uint32, sampling *messages.SamplingParams) {
	a.sent, a.sentAt = true, time.Now()
	s.root.Send(a.worker, &messages.Generate{
		RequestId:      a.requestID,
		TokenIds:       tokens,
		Sampling:       sampling,
		ReplyTo:        &messages.ActorRef{Address: a.receiver.Address, Id: a.receiver.Id},
		InitialCredits: s.cfg.Credits,
	})
}

// WorkerID names the worker serving the request now (the decode worker of a
// disaggregated request; "" once it failed for good).
func (s *stream) WorkerID() string {
	if s.cur == nil {
		return ""
	}
	return s.cur.workerID
}

// Disagg returns the latest route's disaggregation decision (gateway.DisaggStream).
func (s *stream) Disagg() gateway.DisaggInfo {
	s.infoMu.Lock()
	defer s.infoMu.Unlock()
	return s.info
}

// Recv returns the next chunk of the request, whichever worker produced it: chunk
// indexes run on across migrations, and the finishing chunk's usage counts the original
// prompt and every token produced. A prefill leg's chunks are never returned: the decode
// leg produces the whole output. A decode leg that failed to load its KV from the
// prefill engine (FaultKVTransfer) retries the prefill (retryPrefill) rather than
// migrating away from its decode worker. A fault that cannot be migrated is returned as
// an error chunk (finish reason "error") naming why — except when routing the request
// again found no worker (unroutable: no live or free worker, the Route call failed):
// then Recv returns start's error, now and on every later call, which the gateway
// answers 503 with Retry-After (or, after the first chunk, with an error frame).
func (s *stream) Recv(ctx context.Context) (*messages.TokenChunk, error) {
	for !s.finished {
		if s.failed != nil {
			return nil, s.failed
		}
		ar, leg, err := s.next(ctx)
		if err != nil {
			return nil, err
		}
		if leg != s.cur {
			if ch := s.onPrefill(ar); ch != nil {
				return s.hand(ch), nil
			}
			continue
		}
		if ar.fault == FaultKVTransfer {
			if s.cur.pre != nil && !s.cur.sawToken {
				// The decode leg could not load its KV from the prefill engine: the
				// prefill side failed, not this decode worker.
				if ch := s.retryPrefill(ar); ch != nil {
					return s.hand(ch), nil
				}
				continue
			}
			ar.fault = FaultEngineError // no prefill leg to blame: an engine failure like any other
		}
		if ar.fault != "" {
			if ch := s.migrate(ar); ch != nil {
				return s.hand(ch), nil
			}
			continue
		}
		if s.cur.pre != nil && !s.cur.sawToken && len(ar.chunk.TokenIds) > 0 && s.rec != nil {
			s.rec.transferWait(s.req.Model, time.Since(s.cur.sentAt))
		}
		return s.hand(ar.chunk), nil
	}
	return nil, io.EOF
}

// next waits for the next arrival of the current request: from its leg (cur) or from
// cur's prefill leg while that runs, and returns it with the leg it came from. After
// StallTimeout without one it reports a FaultStalled arrival of the leg being waited
// for: the prefill leg while the decode leg waits for its transfer parameters, else cur.
func (s *stream) next(ctx context.Context) (arrival, *attempt, error) {
	a := s.cur
	var pre <-chan arrival
	waited := a
	if p := a.pre; p != nil && !p.ended {
		pre = p.arrivals
		if !a.sent {
			waited = p
		}
	}
	var stall <-chan time.Time
	if s.cfg.StallTimeout > 0 {
		c, stop := s.cfg.clock.newTimer(timerStall, s.cfg.StallTimeout)
		defer stop()
		stall = c
	}
	select {
	case <-ctx.Done():
		return arrival{}, nil, ctx.Err()
	case ar := <-a.arrivals:
		return ar, a, nil
	case ar := <-pre:
		return ar, a.pre, nil
	case <-stall:
		return arrival{fault: FaultStalled, chunk: &messages.TokenChunk{RequestId: waited.requestID, FinishReason: "error",
			WorkerId: waited.workerID, Migratable: true,
			Error: fmt.Sprintf("worker %s sent nothing for %v", waited.workerID, s.cfg.StallTimeout)}}, waited, nil
	}
}

// hand numbers ch as the stream's next chunk, records its tokens, grants the current
// worker credits and, on the finishing chunk, sets its usage to the whole stream's.
func (s *stream) hand(ch *messages.TokenChunk) *messages.TokenChunk {
	ch.Index = s.index
	s.index++
	if a := s.cur; a != nil && a.pre != nil {
		// A remotely prefilled prompt was computed on the prefill worker: its prefix-cache
		// hit is the request's. The decode worker's own count would describe KV it loaded
		// over the transfer (or, in SGLang, before the prefill leg has even finished).
		ch.CachedTokens = 0
		if a.preDone {
			ch.CachedTokens = a.preCached
		}
	}
	s.produced = append(s.produced, ch.TokenIds...)
	if ch.FinishReason != "" {
		s.finished = true
		finalUsage(ch, len(s.req.TokenIDs), len(s.produced))
	}
	a := s.cur
	if a == nil {
		return ch
	}
	if !a.sawToken && len(ch.TokenIds) > 0 {
		a.sawToken = true
		s.router.PrefillDone(a.requestID)
	}
	if a.consumed++; a.consumed >= s.cfg.Credits/2 && !s.finished {
		s.root.Send(a.worker, &messages.Credit{RequestId: a.requestID, Credits: a.consumed})
		a.consumed = 0
	}
	return ch
}

// migrate ends the failed attempt and re-sends the rest of the request to another
// worker. It returns nil when the stream goes on (or failed: routing found no worker), or
// the chunk that ends it: the fault's error chunk naming why it was not migrated (a
// structured output request, unmovable; the limit, refusal), still marked migratable:
// another try may succeed, which the gateway answers with 502; or a "length" finish when
// max_tokens was already used up.
func (s *stream) migrate(ar arrival) *messages.TokenChunk {
	failed := s.cur
	s.end(failed, "migrating the request: "+ar.fault)
	s.cur = nil
	fail := func(why string) *messages.TokenChunk {
		ch := ar.chunk
		ch.FinishReason, ch.TokenIds = "error", nil
		ch.Error = fmt.Sprintf("%s; not migrated: %s", ch.Error, why)
		return ch
	}
	if why := unmovable(s.req.Sampling); why != "" {
		return fail(why)
	}
	if why := refusal(s.cfg.MigrationLimit, s.migrations); why != "" {
		return fail(why)
	}
	tokens, sampling, more := continuation(s.req.TokenIDs, s.req.Sampling, s.produced)
	if !more {
		return &messages.TokenChunk{RequestId: failed.requestID, FinishReason: "length", WorkerId: failed.workerID}
	}
	s.excluded = append(s.excluded, failed.workerID)
	s.migrations++
	if err := s.start(tokens, sampling); err != nil {
		if unroutable(err) {
			s.cfg.Logger.Warn().Err(causeOf(err)).Str("request_id", s.req.RequestID).Str("from", failed.workerID).
				Str("reason", ar.fault).Msg("request not migrated: it could not be routed again")
			s.failed = err
			return nil
		}
		return fail(err.Error())
	}
	s.cfg.Logger.Info().Str("request_id", s.req.RequestID).Str("from", failed.workerID).Str("to", s.cur.workerID).
		Str("reason", ar.fault).Int("produced", len(s.produced)).Int("migration", s.migrations).
		Msg("request migrated")
	if s.rec != nil {
		s.rec.migrated(s.req.Model, ar.fault)
	}
	return nil
}

// end ends attempt a and its prefill leg: each leg still running is cancelled for
// reason (or, for a prefill leg outliving its decode leg, because the decode leg ended),
// its receiver stopped and its load freed in the router; a decode leg that ends without
// a token tells its prefill worker to release the KV blocks it pinned for it.
func (s *stream) end(a *attempt, reason string) {
	if p := a.pre; p != nil {
		why := reason
		if why == "" {
			why = "the decode leg ended"
		}
		switch {
		case a.sawToken:
			s.endLeg(p, why)
		case !p.ended && !p.final && p.sent:
			s.settlePrefill(a, why)
		default:
			s.endLeg(p, why)
			s.release(a)
		}
	}
	s.endLeg(a, reason)
}

// endLeg ends one leg once: cancelled in its engine unless reason is "" or Generate was
// never sent (cancelling one that already ended is harmless), its receiver stopped, and
// its load freed in the router.
func (s *stream) endLeg(a *attempt, reason string) {
	if a.ended {
		return
	}
	a.ended = true
	close(a.closed)
	if reason != "" && a.sent {
		s.root.Send(a.worker, &messages.Cancel{RequestId: a.requestID, Reason: reason})
	}
	s.root.Stop(a.receiver)
	s.router.Free(a.requestID)
}

// Close cancels the current attempt (and its prefill leg) in its engine unless the
// request finished, and frees their load in the router. Safe to call more than once.
func (s *stream) Close() {
	s.closeOnce.Do(func() {
		switch {
		case s.cur == nil:
		case s.finished:
			s.end(s.cur, "")
		default:
			s.end(s.cur, "client closed the stream")
		}
	})
}

// receiver puts one leg's chunks in index order into the leg's channel.
type receiver struct {
	a       *attempt
	clock   clock // makes the terminatedGrace timer
	next    uint32
	pending map[uint32]*messages.TokenChunk
	done    bool
}

func (r *receiver) Receive(c actor.Context) {
	switch m := c.Message().(type) {
	case *actor.Started:
		c.Watch(r.a.worker)
	case *messages.TokenChunk:
		if r.done || m.RequestId != r.a.requestID {
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
		r.deliver(arrival{chunk: m, fault: faultOf(m)})
		for p, ok := r.pending[r.next]; ok; p, ok = r.pending[r.next] {
			delete(r.pending, p.Index)
			r.deliver(arrival{chunk: p, fault: faultOf(p)})
		}
	case *actor.Terminated:
		if !r.done && m.Who.Equal(r.a.worker) {
			// The notice of a worker that stopped can overtake its last chunks (a draining
			// worker stops right after its last request ends): wait a moment for them.
			self, sys := c.Self(), c.ActorSystem()
			r.clock.afterFunc(timerTerminatedGrace, terminatedGrace, func() { sys.Root.Send(self, workerGone{}) })
		}
	case workerGone:
		if !r.done {
			r.deliver(arrival{fault: FaultWorkerTerminated, chunk: &messages.TokenChunk{RequestId: r.a.requestID,
				Index: r.next, FinishReason: "error", Error: "worker " + r.a.workerID + " terminated",
				Migratable: true, WorkerId: r.a.workerID}})
		}
	}
}

// workerGone tells a receiver that terminatedGrace has passed since its worker stopped.
type workerGone struct{}

// terminatedGrace is how long a receiver waits, after its worker's termination notice,
// for chunks the worker sent before it stopped; then the attempt counts as lost
// (migrated). Messages already on the wire arrive within milliseconds.
const terminatedGrace = 100 * time.Millisecond

func (r *receiver) deliver(ar arrival) {
	r.next = ar.chunk.Index + 1
	if ar.chunk.FinishReason != "" {
		r.done = true
	}
	// The channel holds more than the credits granted, so this only blocks when a
	// worker ignores flow control; an ended attempt takes nothing more.
	select {
	case r.a.arrivals <- ar:
	case <-r.a.closed:
	}
}
