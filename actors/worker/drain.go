package worker

import (
	"fmt"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/turbine-llm/turbine/messages"
)

// Drain asks a worker actor to shut down gracefully (docs/reference.md §10): it leaves routing at
// once (Deregister with the Router grain, its card withdrawn from the Catalog), refuses
// new requests with a migratable error, lets the requests in flight run for Grace, then
// ends the rest with a migratable error chunk so that the gateway moves them to another
// worker. Done is closed when no request is left. The engine keeps running until the
// actor is stopped. A second Drain adds its Done, and a shorter Grace than what is left
// of the first brings the end of the requests forward (a later one changes nothing).
type Drain struct {
	Grace time.Duration
	Done  chan struct{}
}

// DrainAndStop drains the worker at pid within grace, then stops it (its engine with
// it). It returns after the worker has stopped; a worker that does not report drained
// within grace plus 10 s is stopped anyway.
func DrainAndStop(root *actor.RootContext, pid *actor.PID, grace time.Duration) {
	done := make(chan struct{})
	root.Send(pid, &Drain{Grace: grace, Done: done})
	select {
	case <-done:
	case <-time.After(grace + drainOverrun):
	}
	_ = root.StopFuture(pid).Wait()
}

func (w *workerActor) drain(c actor.Context, m *Drain) {
	if m.Done != nil {
		w.drainDone = append(w.drainDone, m.Done)
	}
	self, sys := c.Self(), c.ActorSystem()
	deadline := time.Now().Add(m.Grace)
	if w.draining {
		if deadline.Before(w.drainDeadline) {
			w.log.Info().Int("in_flight", len(w.requests)).Dur("grace", m.Grace).Msg("draining: grace shortened")
			w.drainDeadline = deadline
			time.AfterFunc(m.Grace, func() { sys.Root.Send(self, drainExpired{}) })
		}
		w.drained()
		return
	}
	w.draining, w.drainDeadline = true, deadline
	w.log.Info().Int("in_flight", len(w.requests)).Dur("grace", m.Grace).Msg("draining: leaving routing")
	w.withdraw()
	time.AfterFunc(m.Grace, func() { sys.Root.Send(self, drainExpired{}) })
	w.drained()
}

// withdraw deregisters from the Router grain (through the relay, after what it already
// queued) and withdraws the card from the Catalog, off the actor's goroutine.
func (w *workerActor) withdraw() {
	select {
	case w.relay.in <- relayLeave{reason: "worker draining", done: make(chan struct{})}:
	default:
		w.log.Warn().Msg("relay queue full: the router drops this worker at its TTL instead")
	}
	if w.cfg.Catalog == nil {
		return
	}
	card, ref := w.cfg.Card, &messages.ActorRef{Address: w.self.Address, Id: w.self.Id}
	go func() {
		if _, err := w.cfg.Catalog.Announce(&messages.AnnounceModel{Card: card, WorkerId: w.cfg.WorkerID, TtlMs: 0, Worker: ref}); err != nil {
			w.log.Debug().Err(err).Msg("catalog withdraw failed")
		}
	}()
}

// drained closes the Done channels of Drain once a draining worker has no request left.
func (w *workerActor) drained() {
	if !w.draining || len(w.requests) > 0 {
		return
	}
	for _, d := range w.drainDone {
		close(d)
	}
	if len(w.drainDone) > 0 {
		w.log.Info().Msg("drained: no request left")
	}
	w.drainDone = nil
}

// abortDraining ends the requests still running when the grace period is over; each
// sends a migratable error chunk.
func (w *workerActor) abortDraining() {
	if len(w.requests) > 0 {
		w.log.Warn().Int("requests", len(w.requests)).Msg("drain grace over: ending the rest as migratable")
	}
	for _, r := range w.requests {
		r.cancel(errDraining)
	}
}

// startCanary sends an idle ready engine its canary request when one is due.
func (w *workerActor) startCanary(c actor.Context) {
	if !w.ready || w.engine == nil || w.stopping || w.draining || !w.canary.due(w.cfg.Now(), len(w.requests)) {
		return
	}
	w.canary.start()
	w.canaries++
	id := fmt.Sprintf("canary-%s-%d", w.cfg.WorkerID, w.canaries)
	tok := uint32(0)
	if ids := w.cfg.Card.GetEosTokenIds(); len(ids) > 0 {
		tok = ids[0]
	}
	engine, epoch, timeout := w.engine, w.epoch, w.cfg.CanaryTimeout
	self, sys := c.Self(), c.ActorSystem()
	run := runCanary
	if w.cfg.Card.GetRunner() == messages.Runner_RUNNER_POOLING {
		run = runEmbedCanary
	}
	go func() {
		err := run(w.ctx, engine, id, tok, timeout)
		sys.Root.Send(self, canaryDone{epoch: epoch, err: err})
	}()
}

func (w *workerActor) onCanary(c actor.Context, m canaryDone) {
	if m.epoch != w.epoch {
		w.canary.reset(w.cfg.Now())
		return
	}
	if !w.canary.finish(w.cfg.Now(), m.err) {
		return
	}
	if m.err != nil {
		w.log.Warn().Err(m.err).Msg("canary failed: out of routing until one passes")
	} else {
		w.log.Info().Msg("canary passed: back in routing")
	}
	w.heartbeatNow(c)
}
