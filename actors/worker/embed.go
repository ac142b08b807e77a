package worker

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/turbine-llm/turbine/engines"
	"github.com/turbine-llm/turbine/messages"
)

// embed answers m (a request from a gateway, docs/reference.md §23) with
// messages.Embedding: the engine's embedding of m's tokens, computed off the actor's
// goroutine through engines.Embedder, or an Embedding whose error says why not (an
// engine that serves no embeddings, one not ready, a draining worker, a duplicate id,
// the engine's failure), and whose fault says what kind of failure it was (embedFault).
// The request is in flight like a generation: Cancel, the caller's termination and a
// drain end it.
func (w *workerActor) embed(c actor.Context, m *messages.Embed) {
	sender := c.Sender()
	if sender == nil || m.RequestId == "" {
		w.log.Warn().Str("request_id", m.RequestId).Msg("Embed without a sender or request id: dropped")
		return
	}
	sys := c.ActorSystem()
	reply := func(e *messages.Embedding) {
		e.RequestId, e.WorkerId = m.RequestId, w.cfg.WorkerID
		sys.Root.Send(sender, e)
	}
	embedder, ok := w.engine.(engines.Embedder)
	switch {
	case w.draining:
		reply(&messages.Embedding{Error: errDraining.Error(), Fault: messages.Fault_FAULT_ENGINE_ERROR})
		return
	case !w.ready || w.engine == nil:
		reply(&messages.Embedding{Error: "worker: engine not ready", Fault: messages.Fault_FAULT_ENGINE_ERROR})
		return
	case !ok || w.cfg.Card.GetRunner() != messages.Runner_RUNNER_POOLING:
		reply(&messages.Embedding{Error: fmt.Sprintf("worker: model %q is not served as an embedding model (--runner pooling)", w.cfg.Card.GetModel())})
		return
	}
	if _, dup := w.requests[m.RequestId]; dup {
		reply(&messages.Embedding{Error: "worker: duplicate request id " + m.RequestId})
		return
	}
	ctx, cancel := context.WithCancelCause(w.ctx)
	w.canary.touch(w.cfg.Now())
	w.requests[m.RequestId] = &inflight{cancel: cancel, replyTo: sender}
	w.noteProgress()
	self := c.Self()
	go func() {
		defer sys.Root.Send(self, requestDone{id: m.RequestId})
		v, n, err := embedder.Embed(ctx, m.RequestId, m.TokenIds, int(m.Dimensions))
		w.noteProgress()
		switch {
		case context.Cause(ctx) != nil && !errors.Is(context.Cause(ctx), context.Canceled):
			reply(&messages.Embedding{Error: context.Cause(ctx).Error(), Fault: messages.Fault_FAULT_ENGINE_ERROR})
		case ctx.Err() != nil:
			// Cancelled by its caller, or the worker stops: nobody reads an answer.
		case err != nil:
			w.log.Warn().Err(err).Str("request_id", m.RequestId).Msg("engine embedding failed")
			msg, fault := embedFault(err)
			reply(&messages.Embedding{Error: msg, Fault: fault})
		default:
			reply(&messages.Embedding{Vector: v, PromptTokens: int32(n)})
		}
	}()
}

// embedFault is the error text and fault of an engine's failed embedding: the engine's
// own message and FAULT_INVALID_REQUEST when it refused the input
// (*engines.InvalidRequestError: the client is told that message), else the error's
// text and FAULT_ENGINE_ERROR.
func embedFault(err error) (string, messages.Fault) {
	var inv *engines.InvalidRequestError
	if errors.As(err, &inv) {
		msg := inv.Message
		if msg == "" {
			msg = fmt.Sprintf("the engine refused the input (HTTP %d)", inv.Status)
		}
		return msg, messages.Fault_FAULT_INVALID_REQUEST
	}
	return err.Error(), messages.Fault_FAULT_ENGINE_ERROR
}

// runEmbedCanary is runCanary for an embedding model: it embeds the one token tok and
// waits at most timeout.
func runEmbedCanary(ctx context.Context, engine engines.Engine, id string, tok uint32, timeout time.Duration) error {
	e, ok := engine.(engines.Embedder)
	if !ok {
		return fmt.Errorf("worker: canary %s: the engine serves no embeddings", id)
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	v, _, err := e.Embed(ctx, id, []uint32{tok}, 0)
	switch {
	case err != nil && errors.Is(ctx.Err(), context.DeadlineExceeded):
		return fmt.Errorf("worker: canary %s: no answer within %v", id, timeout)
	case err != nil:
		return fmt.Errorf("worker: canary %s: %w", id, err)
	case len(v) == 0:
		return fmt.Errorf("worker: canary %s: an empty embedding", id)
	}
	return nil
}
