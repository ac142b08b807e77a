package gateway

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// Admission of generation and embeddings requests: draining (the server takes no new
// request), the bound on the requests the server runs at once
// (Config.MaxConcurrentRequests), and the bounded per-model FIFO queue of requests that
// found every worker busy or no slot free. The order across requests is decided here; a
// Backend that runs its requests' lives itself (the frontend's flows, package flow)
// parks a request that finds every worker busy in its place of this queue (Parking), and
// its flow decides when the wait ends for that request (a route, its timeout, a drain).
//
// Ownership: the queue's slices and the in-flight count are guarded by their own mutex,
// the slot count is atomic, and a ticket and a place belong to their request's handler
// goroutine (a place's retry timer only signals its waiter); no lock is held across a
// Backend call.

// ErrDraining is the error of a request admitted before Drain but still queued: 503
// service_draining.
var ErrDraining = errors.New("gateway: server draining")

// admission is the fate of a generation request on arrival (admit).
type admission int

const (
	// admitRun: a slot is free; the request takes it and holds it to the end of its answer.
	admitRun admission = iota
	// admitWait: no slot is free and the queue is on; the request waits in its model's
	// queue, and takes a slot when it reaches the head and one is free.
	admitWait
	// admitRefuse: no slot is free and there is no queue; 503 server_overloaded at once.
	admitRefuse
)

// admit decides for a request that arrives while inUse requests hold a slot, of limit
// (0: no limit); queue says whether the busy queue is on (Config.QueueDepth > 0).
func admit(inUse, limit int, queue bool) admission {
	switch {
	case limit <= 0 || inUse < limit:
		return admitRun
	case queue:
		return admitWait
	default:
		return admitRefuse
	}
}

// slots counts the generation requests that hold one of the limit slots
// (Config.MaxConcurrentRequests); a nil *slots has no limit. freed runs after every
// release (it wakes the queue heads).
type slots struct {
	limit int
	used  atomic.Int64
	freed func()
}

func newSlots(limit int, freed func()) *slots {
	if limit <= 0 {
		return nil
	}
	return &slots{limit: limit, freed: freed}
}

// admit decides (admit) for a request arriving now, taking a slot when it is admitRun;
// queue says whether the busy queue is on. Without a limit it is always admitRun.
func (l *slots) admit(queue bool) admission {
	if l == nil {
		return admitRun
	}
	for {
		n := l.used.Load()
		d := admit(int(n), l.limit, queue)
		if d != admitRun || l.used.CompareAndSwap(n, n+1) {
			return d
		}
	}
}

func (l *slots) release() {
	if l == nil {
		return
	}
	l.used.Add(-1)
	if l.freed != nil {
		l.freed()
	}
}

// inUse returns how many slots are taken (0 without a limit).
func (l *slots) inUse() int {
	if l == nil {
		return 0
	}
	return int(l.used.Load())
}

// full reports whether every slot is taken.
func (l *slots) full() bool { return l != nil && l.inUse() >= l.limit }

// ticket is one request's hold on a slot; it belongs to the request's handler goroutine.
type ticket struct {
	slots *slots
	held  bool
}

// acquire takes a slot unless the ticket holds one; it reports whether it holds one.
func (t *ticket) acquire() bool {
	if !t.held {
		t.held = t.slots.admit(false) == admitRun
	}
	return t.held
}

// release gives the slot back, if held.
func (t *ticket) release() {
	if t.held {
		t.held = false
		t.slots.release()
	}
}

// overloaded is the answer to a request refused for want of a slot.
func (s *Server) overloaded() *APIError {
	return newError(KindOverloaded, "",
		"This server is already running its limit of %d concurrent requests; retry later, or on another server.",
		s.cfg.MaxConcurrentRequests)
}

// queueRefusal is the error of a request that leaves the queue without running (the
// queue was full, or it waited past QueueTimeout; why says which): ErrAllBusy when the
// request found every worker busy (triedBusy: it held a slot and the route said so),
// else 503 server_overloaded when every slot is taken (the server's own bound held it
// back), else ErrAllBusy (the requests ahead of it waited for a worker).
func queueRefusal(triedBusy, slotsFull bool, why error) error {
	if !triedBusy && slotsFull {
		return fmt.Errorf("%w: %w", errOverloaded, why)
	}
	return fmt.Errorf("%w: %w", ErrAllBusy, why)
}

// errOverloaded marks a request refused for want of a slot (Config.MaxConcurrentRequests).
var errOverloaded = errors.New("gateway: concurrency limit reached")

// Parking is a generation request's place in its model's busy queue (Config.QueueDepth),
// handed to the Backend as GenerateRequest.Parking while the queue is on. A Backend may
// park a request that finds every worker busy there instead of answering ErrAllBusy, and
// route it again each time Ready says so; whatever Generate returns afterwards is the
// request's answer (the gateway does not queue it again). The methods are called from
// the goroutine of the Generate call (Wake's channel may be read from any).
type Parking interface {
	// Timeout is how long the request may still wait: Config.QueueTimeout less the time
	// it already waited in the queue for a slot.
	Timeout() time.Duration
	// Joined is when the request first joined its model's queue (it waited there for its
	// turn or a slot before the Backend got it, or the Backend parked it); zero when it
	// has not. Its whole wait counts from then.
	Joined() time.Time
	// Park puts the request at the end of its model's queue, or keeps its place when it
	// holds one, and gives its concurrency slot back meanwhile. Errors: ErrAllBusy
	// (wrapped) when the queue is full; the request is not in the queue then.
	Park() error
	// Wake receives (it holds one signal at most) when the parked request should look
	// again: a slot was freed, a stream of its model ended, Config.QueueRetry passed, or
	// the server started draining. Nil before the first Park.
	Wake() <-chan struct{}
	// Ready reports whether the parked request is the head of its model's queue and took
	// a slot: route it again (and Park again if every worker is still busy).
	Ready() bool
	// Draining reports whether the server drains: a parked request then fails with
	// ErrDraining.
	Draining() bool
	// Leave takes the request out of the queue (routed, failed or gone) and wakes the next
	// head. Harmless when it is not in the queue, and more than once.
	Leave()
}

// place is a request's Parking: its ticket, and its waiter while it is in the queue.
type place struct {
	s      *Server
	model  string
	t      *ticket
	w      *waiter   // nil: not in the queue
	joined time.Time // when it first joined (zero: never)
	parked bool      // the Backend parked it (Park): its Generate's answer is final

	mu    sync.Mutex
	retry *time.Timer // while parked: signals w every Config.QueueRetry
}

var _ Parking = (*place)(nil)

// newPlace returns the place of a request of model holding t; nil when the queue is off.
func (s *Server) newPlace(model string, t *ticket) *place {
	if s.queue == nil {
		return nil
	}
	return &place{s: s, model: model, t: t}
}

// join puts the request at the end of its model's queue unless it is in it; busy says
// whether it found every worker busy (queueError). Errors: the queue is full
// (queueError).
func (p *place) join(busy bool) error {
	if p.w != nil {
		return nil
	}
	w, ok := p.s.queue.join(p.model)
	if !ok {
		return p.s.queueError(busy, fmt.Errorf("the queue of %d requests for %q is full", p.s.cfg.QueueDepth, p.model))
	}
	p.w = w
	if p.joined.IsZero() {
		p.joined = time.Now()
	}
	p.s.metrics.queued(p.model, p.s.queue)
	return nil
}

// isParked reports whether the Backend parked the request (false for a nil place).
func (p *place) isParked() bool { return p != nil && p.parked }

func (p *place) Timeout() time.Duration {
	if p.joined.IsZero() {
		return p.s.cfg.QueueTimeout
	}
	return max(p.s.cfg.QueueTimeout-time.Since(p.joined), time.Nanosecond)
}

func (p *place) Joined() time.Time { return p.joined }

func (p *place) Park() error {
	p.parked = true
	p.t.release() // the head takes one when Ready
	if err := p.join(true); err != nil {
		return err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.retry == nil {
		p.retry = time.AfterFunc(p.s.cfg.QueueRetry, p.tick)
	}
	return nil
}

// tick signals the parked request to retry, and comes again Config.QueueRetry later.
func (p *place) tick() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.retry != nil {
		p.w.signal()
		p.retry.Reset(p.s.cfg.QueueRetry)
	}
}

func (p *place) Wake() <-chan struct{} {
	if p.w == nil {
		return nil
	}
	return p.w.wake
}

func (p *place) Ready() bool {
	return p.w != nil && p.s.queue.head(p.model, p.w) && p.t.acquire()
}

func (p *place) Draining() bool { return p.s.draining.Load() }

func (p *place) Leave() {
	if p == nil || p.w == nil {
		return
	}
	p.mu.Lock()
	if p.retry != nil {
		p.retry.Stop()
		p.retry = nil
	}
	p.mu.Unlock()
	p.s.queue.leave(p.model, p.w)
	p.w = nil
}

// queue holds the requests of each model that wait for a worker to stop being busy, in
// arrival order. Only the head of a model's queue retries the route, so requests leave in
// the order they came; at most depth wait per model.
type queue struct {
	depth int
	mu    sync.Mutex
	lines map[string][]*waiter
}

// waiter is one queued request; wake (capacity 1) tells it to look again.
type waiter struct{ wake chan struct{} }

func newQueue(depth int) *queue { return &queue{depth: depth, lines: map[string][]*waiter{}} }

// join appends a waiter for model; ok is false when the model's queue is full.
func (q *queue) join(model string) (w *waiter, ok bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if len(q.lines[model]) >= q.depth {
		return nil, false
	}
	w = &waiter{wake: make(chan struct{}, 1)}
	q.lines[model] = append(q.lines[model], w)
	return w, true
}

// leave removes w from model's queue and wakes the new head.
func (q *queue) leave(model string, w *waiter) {
	q.mu.Lock()
	defer q.mu.Unlock()
	line := q.lines[model]
	for i, x := range line {
		if x == w {
			line = append(line[:i:i], line[i+1:]...)
			break
		}
	}
	if len(line) == 0 {
		delete(q.lines, model)
		return
	}
	q.lines[model] = line
	line[0].signal()
}

// head reports whether w is first in model's queue.
func (q *queue) head(model string, w *waiter) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	line := q.lines[model]
	return len(line) > 0 && line[0] == w
}

// len returns how many requests wait for model.
func (q *queue) len(model string) int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.lines[model])
}

// notify wakes the head of model's queue: load on its workers went down.
func (q *queue) notify(model string) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if line := q.lines[model]; len(line) > 0 {
		line[0].signal()
	}
}

// notifyHeads wakes the head of every model's queue: a slot was freed.
func (q *queue) notifyHeads() {
	q.mu.Lock()
	defer q.mu.Unlock()
	for _, line := range q.lines {
		line[0].signal()
	}
}

// wakeAll wakes every waiter (the server started draining).
func (q *queue) wakeAll() {
	q.mu.Lock()
	defer q.mu.Unlock()
	for _, line := range q.lines {
		for _, w := range line {
			w.signal()
		}
	}
}

func (w *waiter) signal() {
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// activity counts generation requests between arrival and their answer's end, so that a
// draining server can wait for the last one.
type activity struct {
	mu   sync.Mutex
	n    int
	idle chan struct{} // closed while n == 0
}

func newActivity() *activity {
	a := &activity{idle: make(chan struct{})}
	close(a.idle)
	return a
}

func (a *activity) begin() {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.n == 0 {
		a.idle = make(chan struct{})
	}
	a.n++
}

func (a *activity) end() {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.n--
	if a.n == 0 {
		close(a.idle)
	}
}

func (a *activity) wait(ctx context.Context) error {
	a.mu.Lock()
	idle := a.idle
	a.mu.Unlock()
	select {
	case <-idle:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Drain makes the server refuse new generation requests with 503 (code
// "service_draining", with Retry-After) and answer /health with 503 "draining";
// requests already running go on, and queued ones are refused. /live stays 200.
// Drain is idempotent.
func (s *Server) Drain() {
	if s.draining.Swap(true) {
		return
	}
	if s.queue != nil {
		s.queue.wakeAll()
	}
	s.cfg.Logger.Info().Msg("draining: new requests are refused")
}

// Draining reports whether Drain was called.
func (s *Server) Draining() bool { return s.draining.Load() }

// WaitIdle blocks until no generation request is running (none queued, none streaming)
// or ctx ends (then it returns ctx.Err()).
func (s *Server) WaitIdle(ctx context.Context) error { return s.active.wait(ctx) }

// admitRequest decides a generation request's admission on arrival, before its body is
// read: it returns the request's ticket (holding a slot when one was free), or the 503
// server_overloaded answer when no slot is free and there is no queue.
func (s *Server) admitRequest() (*ticket, *APIError) {
	switch s.slots.admit(s.queue != nil) {
	case admitRun:
		return &ticket{slots: s.slots, held: true}, nil
	case admitWait:
		return &ticket{slots: s.slots}, nil // startGeneration queues it
	default:
		return nil, s.overloaded()
	}
}

// startGeneration runs req on the Backend, holding t's slot, once admitted lets it; with
// the queue on, the Backend gets the request's place in it (GenerateRequest.Parking).
// Errors: those of Backend.Generate, and admitted's.
func (s *Server) startGeneration(ctx context.Context, req *GenerateRequest, t *ticket) (Stream, error) {
	pl := s.newPlace(req.Model, t)
	defer pl.Leave()
	if pl != nil {
		r := *req
		r.Parking = pl
		req = &r
	}
	var st Stream
	err := s.admitted(ctx, req.Model, t, pl, func() error {
		var err error
		st, err = s.backend.Generate(ctx, req)
		return err
	})
	return st, err
}

// admitted runs try (a request of model on the Backend) holding t's slot, and returns
// its error. A request that holds no slot (none was free on arrival: admitWait), or
// whose try finds every worker busy (an error that is ErrAllBusy), waits in its model's
// queue when the queue is on (Config.QueueDepth > 0), giving its slot back meanwhile:
// the head of the queue takes a slot and tries again each time a slot is freed, one of
// this server's requests for the model ends (released), and every QueueRetry, for at
// most QueueTimeout; a request arriving while others wait joins the queue's end without
// trying. pl is the request's place (nil with the queue off): a try whose Backend parked
// the request there (Parking) has its answer, busy or not. Errors: try's, ErrAllBusy
// (wrapped) when the queue is full or the wait timed out behind busy workers, the 503
// server_overloaded *APIError when it did so for want of a slot, ErrDraining, ctx.Err().
func (s *Server) admitted(ctx context.Context, model string, t *ticket, pl *place, try func() error) error {
	busy := false
	if s.queue == nil || s.queue.len(model) == 0 {
		if t.acquire() {
			err := try()
			if s.queue == nil || !errors.Is(err, ErrAllBusy) || pl.isParked() {
				return err
			}
			busy = true
		} else if s.queue == nil { // not from admitRequest, which refuses these on arrival
			return s.overloaded()
		}
	}
	t.release() // the head of the queue takes a slot when it tries
	return s.waitInQueue(ctx, pl, busy, try)
}

// queueError is the error of a request that leaves the queue without running
// (queueRefusal): the 503 server_overloaded *APIError wrapping why, or ErrAllBusy.
func (s *Server) queueError(triedBusy bool, why error) error {
	err := queueRefusal(triedBusy, s.slots.full(), why)
	if errors.Is(err, errOverloaded) {
		aerr := s.overloaded()
		aerr.Cause = err
		return aerr
	}
	return err
}

// waitInQueue queues the request of place pl (see admitted); busy says whether it found
// every worker busy before.
func (s *Server) waitInQueue(ctx context.Context, pl *place, busy bool, try func() error) error {
	if err := pl.join(busy); err != nil {
		return err
	}
	defer pl.Leave()
	w, model, t := pl.w, pl.model, pl.t
	timeout := time.NewTimer(s.cfg.QueueTimeout)
	defer timeout.Stop()
	retry := time.NewTicker(s.cfg.QueueRetry)
	defer retry.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-timeout.C:
			return s.queueError(busy, fmt.Errorf("waited --queue-timeout %v", s.cfg.QueueTimeout))
		case <-w.wake:
		case <-retry.C:
		}
		if s.draining.Load() {
			return ErrDraining
		}
		if !s.queue.head(model, w) || !t.acquire() {
			continue
		}
		if err := try(); !errors.Is(err, ErrAllBusy) || pl.isParked() {
			return err
		}
		busy = true
	}
}

// released tells the queue of model that one of its streams ended.
func (s *Server) released(model string) {
	if s.queue != nil {
		s.queue.notify(model)
	}
}
