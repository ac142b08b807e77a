package frontend

import (
	"context"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/turbine-llm/turbine/gateway"
	"github.com/turbine-llm/turbine/messages"
)

// routing is what a stream needs from its model's router: choose a worker, and keep the
// router's load tracking of each attempt right (PrefillDone once its first token
// arrives, Free exactly once when it ends). PrefillDone and Free do not block.
type routing interface {
	Route(rr *messages.RouteRequest) (*messages.RouteResponse, error)
	PrefillDone(requestID string)
	Free(requestID string)
}

// stream is one request's token stream, across every worker it ran on. Recv and Close
// are called by one goroutine (the HTTP handler); each attempt's receiver actor only
// writes to that attempt's channel.
//
// Invariants: produced holds every token handed to the caller, in order; index is the
// number of chunks handed out (the next chunk's index); every attempt started is ended
// (cancelled unless finished, receiver stopped, freed in the router) exactly once, by a
// migration or by Close; cur is nil once the stream failed for good.
type stream struct {
	root     *actor.RootContext // of the member the stream started on
	router   routing
	cfg      Config
	req      *gateway.GenerateRequest
	newID    func(clientID string) string
	migrated func(model, reason string)

	cur        *attempt
	produced   []uint32
	excluded   []string // workers this request failed on
	migrations int
	index      uint32
	finished   bool
	closeOnce  sync.Once
}

// attempt is the request running on one worker under one internal request id.
type attempt struct {
	requestID string
	workerID  string
	worker    *actor.PID
	receiver  *actor.PID
	arrivals  chan arrival
	closed    chan struct{}
	consumed  int32 // chunks taken since the last Credit
	sawToken  bool
}

// arrival is a chunk from the receiver; fault is the migratable fault it reports ("" for
// ordinary chunks and for failures that are not migratable).
type arrival struct {
	chunk *messages.TokenChunk
	fault string
}

func newStream(root *actor.RootContext, r routing, cfg Config, req *gateway.GenerateRequest,
	newID func(string) string, migrated func(model, reason string)) *stream {
	return &stream{root: root, router: r, cfg: cfg, req: req, newID: newID, migrated: migrated}
}

// start routes tokens (excluding the workers already failed on) and sends Generate to the
// chosen worker under a new request id. Errors: gateway.ErrAllBusy, ErrUnknownModel,
// ErrNoWorkers (wrapped) from the router's answer, or the router call's error.
func (s *stream) start(tokens []uint32, sampling *messages.SamplingParams) error {
	id := s.newID(s.req.RequestID)
	rr := &messages.RouteRequest{RequestId: id, TokenIds: tokens, ExcludeWorkers: s.excluded}
	if s.req.OverlapWeight != nil {
		rr.HasOverlapWeight, rr.OverlapWeight = true, *s.req.OverlapWeight
	}
	if s.req.Temperature != nil {
		rr.HasTemperature, rr.Temperature = true, *s.req.Temperature
	}
	route, err := s.router.Route(rr)
	if err != nil {
		return fmt.Errorf("frontend: route: %w", err)
	}
	switch route.ErrorCode {
	case "":
	case "all_busy":
		return fmt.Errorf("%w: %s", gateway.ErrAllBusy, route.Error)
	case "unknown_model":
		return fmt.Errorf("%w: %s", gateway.ErrUnknownModel, route.Error)
	default:
		return fmt.Errorf("%w: %s", gateway.ErrNoWorkers, route.Error)
	}
	a := &attempt{requestID: id, workerID: route.WorkerId, worker: actor.NewPID(route.Worker.Address, route.Worker.Id),
		arrivals: make(chan arrival, 4*int(s.cfg.Credits)+8), closed: make(chan struct{})}
	a.receiver = s.root.Spawn(actor.PropsFromProducer(func() actor.Actor { return &receiver{a: a} }))
	s.root.Send(a.worker, &messages.Generate{
		RequestId:      id,
		TokenIds:       tokens,
		Sampling:       sampling,
		ReplyTo:        &messages.ActorRef{Address: a.receiver.Address, Id: a.receiver.Id},
		InitialCredits: s.cfg.Credits,
	})
	s.cur = a
	return nil
}

// WorkerID names the worker serving the request now ("" once it failed for good).
func (s *stream) WorkerID() string {
	if s.cur == nil {
		return ""
	}
	return s.cur.workerID
}

// Recv returns the next chunk of the request, whichever worker produced it: chunk
// indexes run on across migrations, and the finishing chunk's usage counts the original
// prompt and every token produced. A fault that cannot be migrated is returned as an
// error chunk (finish reason "error") naming why.
func (s *stream) Recv(ctx context.Context) (*messages.TokenChunk, error) {
	for !s.finished {
		ar, err := s.next(ctx)
		if err != nil {
			return nil, err
		}
		if ar.fault != "" {
			if ch := s.migrate(ar); ch != nil {
				return s.hand(ch), nil
			}
			continue
		}
		return s.hand(ar.chunk), nil
	}
	return nil, io.EOF
}

// next waits for the current attempt's next arrival; after StallTimeout without one it
// reports a FaultStalled arrival.
func (s *stream) next(ctx context.Context) (arrival, error) {
	a := s.cur
	var stall <-chan time.Time
	if s.cfg.StallTimeout > 0 {
		t := time.NewTimer(s.cfg.StallTimeout)
		defer t.Stop()
		stall = t.C
	}
	select {
	case <-ctx.Done():
		return arrival{}, ctx.Err()
	case ar := <-a.arrivals:
		return ar, nil
	case <-stall:
		return arrival{fault: FaultStalled, chunk: &messages.TokenChunk{RequestId: a.requestID, FinishReason: "error",
			WorkerId: a.workerID, Migratable: true,
			Error: fmt.Sprintf("worker %s sent nothing for %v", a.workerID, s.cfg.StallTimeout)}}, nil
	}
}

// hand numbers ch as the stream's next chunk, records its tokens, grants the current
// worker credits and, on the finishing chunk, sets its usage to the whole stream's.
func (s *stream) hand(ch *messages.TokenChunk) *messages.TokenChunk {
	ch.Index = s.index
	s.index++
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
// worker. It returns nil when the stream goes on, or the chunk that ends it: the fault's
// error chunk naming why it was not migrated (still marked migratable: another try may
// succeed, which the gateway answers with 502), or a "length" finish when max_tokens was
// already used up.
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
		return fail(err.Error())
	}
	s.cfg.Logger.Info().Str("request_id", s.req.RequestID).Str("from", failed.workerID).Str("to", s.cur.workerID).
		Str("reason", ar.fault).Int("produced", len(s.produced)).Int("migration", s.migrations).
		Msg("request migrated")
	if s.migrated != nil {
		s.migrated(s.req.Model, ar.fault)
	}
	return nil
}

// end ends attempt a: its engine request is cancelled for reason unless reason is ""
// (cancelling one that already ended is harmless), its receiver stopped, and its load
// freed in the router.
func (s *stream) end(a *attempt, reason string) {
	close(a.closed)
	if reason != "" {
		s.root.Send(a.worker, &messages.Cancel{RequestId: a.requestID, Reason: reason})
	}
	s.root.Stop(a.receiver)
	s.router.Free(a.requestID)
}

// Close cancels the current attempt in its engine unless the request finished, and frees
// its load in the router. Safe to call more than once.
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

// receiver puts one attempt's chunks in index order into the attempt's channel.
type receiver struct {
	a       *attempt
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
			time.AfterFunc(terminatedGrace, func() { sys.Root.Send(self, workerGone{}) })
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
