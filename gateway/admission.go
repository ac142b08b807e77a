package gateway

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// Admission of generation requests: draining (the server takes no new request) and the
// bounded per-model FIFO queue of requests that found every worker busy.
//
// Ownership: the queue's slices and the in-flight count are guarded by their own mutex;
// no lock is held across a Backend call.

// errDraining is what a request admitted before Drain but still queued gets.
var errDraining = errors.New("gateway: server draining")

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

// startGeneration runs req on the Backend. When every worker is busy and the queue is on
// (Config.QueueDepth > 0), the request waits in its model's queue, retrying the route each
// time one of this server's streams for the model ends and every QueueRetry, for at most
// QueueTimeout; a request arriving while others wait joins the queue's end without
// trying. Errors: those of Backend.Generate, ErrAllBusy (wrapped) when the queue is full
// or the wait timed out, errDraining, ctx.Err().
func (s *Server) startGeneration(ctx context.Context, req *GenerateRequest) (Stream, error) {
	if s.queue == nil || s.queue.len(req.Model) == 0 {
		st, err := s.backend.Generate(ctx, req)
		if s.queue == nil || !errors.Is(err, ErrAllBusy) {
			return st, err
		}
	}
	return s.waitInQueue(ctx, req)
}

func (s *Server) waitInQueue(ctx context.Context, req *GenerateRequest) (Stream, error) {
	w, ok := s.queue.join(req.Model)
	if !ok {
		return nil, fmt.Errorf("%w: the queue of %d requests for %q is full", ErrAllBusy, s.cfg.QueueDepth, req.Model)
	}
	defer s.queue.leave(req.Model, w)
	s.metrics.queued(req.Model, s.queue)
	timeout := time.NewTimer(s.cfg.QueueTimeout)
	defer timeout.Stop()
	retry := time.NewTicker(s.cfg.QueueRetry)
	defer retry.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-timeout.C:
			return nil, fmt.Errorf("%w: no worker freed up within --queue-timeout %v", ErrAllBusy, s.cfg.QueueTimeout)
		case <-w.wake:
		case <-retry.C:
		}
		if s.draining.Load() {
			return nil, errDraining
		}
		if !s.queue.head(req.Model, w) {
			continue
		}
		st, err := s.backend.Generate(ctx, req)
		if !errors.Is(err, ErrAllBusy) {
			return st, err
		}
	}
}

// released tells the queue of model that one of its streams ended.
func (s *Server) released(model string) {
	if s.queue != nil {
		s.queue.notify(model)
	}
}
