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

// errCancelled marks a stream that its caller cancelled: nothing more is sent.
var errCancelled = errors.New("worker: request cancelled")

// errDraining is the cause of requests a draining worker ends after its grace period:
// they get a migratable error chunk, so that another worker completes them.
var errDraining = errors.New("worker: draining (shutting down)")

// errEngineFrozen is the cause of requests ended because their engine stopped answering
// (maxFailedScrapes load scrapes in a row): a migratable error chunk lets another worker
// complete them instead of leaving them stalled on a frozen process.
var errEngineFrozen = errors.New("worker: engine does not answer")

// handedOver reports whether a request cancelled with cause is ended with a migratable
// error chunk rather than silently (a caller's own cancellation): a drain, a frozen
// engine, an unload of the request's adapter.
func handedOver(cause error) bool {
	return errors.Is(cause, errDraining) || errors.Is(cause, errEngineFrozen) || errors.Is(cause, errAdapterUnloaded)
}

// generate starts m on the engine; chunks go to m.ReplyTo, at most the granted credits
// ahead of the receiver (initial_credits 0 means no flow control).
func (w *workerActor) generate(c actor.Context, m *messages.Generate) {
	if m.ReplyTo == nil || m.RequestId == "" {
		w.log.Warn().Str("request_id", m.RequestId).Msg("Generate without reply_to or request id: dropped")
		return
	}
	replyTo := actor.NewPID(m.ReplyTo.Address, m.ReplyTo.Id)
	sys := c.ActorSystem()
	send := func(ch *messages.TokenChunk) {
		w.noteProgress()
		sys.Root.Send(replyTo, ch)
	}
	if _, dup := w.requests[m.RequestId]; dup {
		send(&messages.TokenChunk{RequestId: m.RequestId, FinishReason: "error", WorkerId: w.cfg.WorkerID,
			Error: "worker: duplicate request id " + m.RequestId})
		return
	}
	if w.draining {
		send(&messages.TokenChunk{RequestId: m.RequestId, FinishReason: "error", WorkerId: w.cfg.WorkerID,
			Error: errDraining.Error(), Fault: messages.Fault_FAULT_ENGINE_ERROR})
		return
	}
	if !w.ready || w.engine == nil {
		send(&messages.TokenChunk{RequestId: m.RequestId, FinishReason: "error", WorkerId: w.cfg.WorkerID,
			Error: "worker: engine not ready", Fault: messages.Fault_FAULT_ENGINE_ERROR})
		return
	}
	// A request naming a LoRA adapter uses it from now on (it is not evicted), waiting
	// for its load on demand when the worker does not hold it, or holds it no more once
	// the eviction under way is done (loraops.go).
	var wait *loraLoad
	var loraGen uint64
	lora := m.GetSampling().GetLoraName()
	if lora != "" {
		var msg string
		var fault messages.Fault
		if loraGen, wait, msg, fault = w.useLora(c, m); msg != "" {
			send(&messages.TokenChunk{RequestId: m.RequestId, FinishReason: "error", WorkerId: w.cfg.WorkerID,
				Error: msg, Fault: fault})
			return
		}
	}
	ctx, cancel := context.WithCancelCause(w.ctx)
	w.canary.touch(w.cfg.Now())
	r := &inflight{cancel: cancel, credits: make(chan int32, 1024), replyTo: replyTo, lora: lora, loraGen: loraGen}
	w.requests[m.RequestId] = r
	// The caller learns at once that the request reached this worker (flow.Accepted):
	// before an adapter's load or the engine's queue, which its accept timeout does not
	// bound. A Generate answered with an error chunk above needs no more.
	sys.Root.Send(replyTo, &messages.GenerateAccepted{RequestId: m.RequestId, WorkerId: w.cfg.WorkerID})
	w.noteProgress() // a request just started counts as progress
	c.Watch(replyTo)
	self := c.Self()
	engine, engCtx := w.engine, w.engCtx
	workerID, loraWait := w.cfg.WorkerID, w.cfg.LoraWaitTimeout
	prefill := m.GetSampling().GetDisagg().GetLeg() == messages.Leg_LEG_PREFILL
	go func() {
		done := requestDone{id: m.RequestId}
		defer func() { sys.Root.Send(self, done) }()
		if wait != nil {
			if msg, fault, ok := awaitLora(ctx, wait, lora, workerID, loraWait); !ok {
				if msg != "" {
					send(&messages.TokenChunk{RequestId: m.RequestId, FinishReason: "error", WorkerId: workerID,
						Error: msg, Fault: fault})
				}
				return
			}
		}
		release := func(params string) { w.releaseUndelivered(engCtx, engine, m.RequestId, params) }
		ctx, span := startGenerate(ctx, m, workerID) // worker.generate (trace.go); nil while tracing is off
		sendLast := func(ch *messages.TokenChunk) {
			if prefill && ch.FinishReason != "" && ch.FinishReason != "error" {
				done.kvParams = ch.KvTransferParams
				r.kvParams.Store(&ch.KvTransferParams)
			}
			send(ch)
		}
		err := streamChunks(ctx, engine, m, r.credits, span.counting(sendLast), w.noteProgress, w.cfg.WorkerID, release)
		span.end(err)
		var refused *engines.InvalidRequestError
		switch {
		case err == nil, errors.Is(err, errCancelled), ctx.Err() != nil:
		case errors.As(err, &refused):
			// The client's request, not the engine, is at fault: the client is told.
			w.log.Debug().Err(err).Str("request_id", m.RequestId).Msg("engine refused the request")
		default:
			w.log.Warn().Err(err).Str("request_id", m.RequestId).Msg("engine request failed")
		}
	}()
}

// streamChunks runs one request on engine and sends numbered chunks within the granted
// credits, merging the chunks that wait for one (chunkSender); produced (when not nil) is
// called for every chunk the engine hands over, sent or merged: the engine's progress,
// whatever the caller's pace. The sampling
// parameters go to the engine as they came, with the leg of a disaggregated request
// (SamplingParams.disagg); the last chunk carries the engine's transfer parameters
// (kv_transfer_params, set by a prefill leg). It returns
// errCancelled when ctx ended (nothing more is sent, except a migratable error chunk
// when ctx's cause is errDraining), nil after the last chunk, or the engine error (after
// sending an error chunk with its fault, engineFailure: migratable unless the engine
// refused the request itself).
//
// A last chunk whose transfer parameters are not sent, because ctx ended before it
// could be (a prefill leg cancelled once its engine pinned the prompt's blocks, whose
// engine answered anyway: engines.FinishPrefill), is passed to release: nobody else
// learns which blocks the engine keeps for a decode leg that will never read them.
func streamChunks(ctx context.Context, engine engines.Engine, m *messages.Generate, credits <-chan int32,
	send func(*messages.TokenChunk), produced func(), workerID string, release func(kvTransferParams string)) error {
	out := newChunkSender(ctx, m.InitialCredits, credits, send)
	finished := false
	undelivered := ""
	defer func() {
		if undelivered != "" {
			release(undelivered)
		}
	}()
	err := engine.Generate(ctx, m.RequestId, m.TokenIds, m.Sampling, func(ec engines.Chunk) error {
		if len(ec.TokenIDs) == 0 && ec.FinishReason == "" {
			return nil
		}
		if produced != nil {
			produced()
		}
		if ctx.Err() != nil {
			if ec.FinishReason != "" {
				undelivered = ec.KVTransferParams
			}
			return errCancelled
		}
		ch := &messages.TokenChunk{RequestId: m.RequestId, TokenIds: ec.TokenIDs,
			FinishReason: ec.FinishReason, WorkerId: workerID, Logprobs: ec.Logprobs, PromptLogprobs: ec.PromptLogprobs}
		if ec.FinishReason != "" {
			ch.KvTransferParams = ec.KVTransferParams
			ch.PromptTokens = int32(ec.PromptTokens)
			ch.CachedTokens = int32(ec.CachedTokens)
			ch.CompletionTokens = int32(ec.CompletionTokens)
			finished = true
		}
		out.put(ch)
		return nil
	})
	// What waits for a credit leaves before anything else, or not at all once ctx ended:
	// then the stream did not finish for its caller, whose last chunk was never sent.
	if left := out.drain(); len(left) > 0 {
		if last := left[len(left)-1]; last.FinishReason != "" {
			undelivered = last.KvTransferParams
		}
		finished = false
	}
	if ctx.Err() != nil {
		if cause := context.Cause(ctx); handedOver(cause) && !finished {
			out.sendNow(&messages.TokenChunk{RequestId: m.RequestId, FinishReason: "error", WorkerId: workerID,
				Error: cause.Error(), Fault: messages.Fault_FAULT_ENGINE_ERROR})
		}
		return errCancelled
	}
	if err != nil {
		msg, fault := engineFailure(err)
		out.sendNow(&messages.TokenChunk{RequestId: m.RequestId, FinishReason: "error", WorkerId: workerID,
			Error: msg, Fault: fault})
		return err
	}
	if !finished {
		err := errors.New("engine: stream ended without a finish reason")
		out.sendNow(&messages.TokenChunk{RequestId: m.RequestId, FinishReason: "error", WorkerId: workerID,
			Error: err.Error(), Fault: messages.Fault_FAULT_ENGINE_ERROR})
		return err
	}
	return nil
}

// engineFailure is the error text and fault of a failed engine request: "engine: <err>"
// and FAULT_KV_TRANSFER when a decode leg could not load its KV from the prefill engine
// (engines.ErrKVTransfer: the prefill side failed); the engine's own message and
// FAULT_INVALID_REQUEST when it refused the request itself (*engines.InvalidRequestError,
// as embedFault: never re-sent, the client is told that message, docs/reference.md §10);
// else "engine: <err>" and FAULT_ENGINE_ERROR.
func engineFailure(err error) (string, messages.Fault) {
	if errors.Is(err, engines.ErrKVTransfer) {
		return fmt.Sprintf("engine: %v", err), messages.Fault_FAULT_KV_TRANSFER
	}
	if msg, fault := embedFault(err); fault == messages.Fault_FAULT_INVALID_REQUEST {
		return msg, fault
	}
	return fmt.Sprintf("engine: %v", err), messages.Fault_FAULT_ENGINE_ERROR
}

// releaseUndelivered releases the KV blocks engine pinned for prefill leg requestID,
// whose transfer parameters kvTransferParams were never sent (streamChunks), within
// releaseKVTimeout. engCtx lives as long as the engine process (a parked engine outlives
// the worker). It runs on the request's goroutine.
func (w *workerActor) releaseUndelivered(engCtx context.Context, engine engines.Engine, requestID, kvTransferParams string) {
	log := w.log.With().Str("request_id", requestID).Logger()
	rel, ok := engine.(engines.KVReleaser)
	switch {
	case engCtx.Err() != nil:
		log.Debug().Msg("cancelled prefill leg: the engine is stopping (its pinned KV blocks end with it)")
		return
	case !ok:
		log.Debug().Msg("cancelled prefill leg: the engine cannot release KV blocks on request; it frees pinned blocks on its own timeout")
		return
	}
	ctx, cancel := context.WithTimeout(engCtx, releaseKVTimeout)
	defer cancel()
	if err := rel.ReleaseKV(ctx, requestID, kvTransferParams); err != nil {
		log.Warn().Err(err).Msg("cancelled prefill leg: the engine did not release its pinned KV blocks (they stay until its own timeout)")
		return
	}
	log.Debug().Msg("cancelled prefill leg: its pinned KV blocks released")
}

// receiverGone handles the end of a watched receiver of chunks (a gateway's stream of
// one request) for the finished prefill legs it received. One whose member could no
// longer be reached (actor.TerminatedReason_AddressTerminated: a partition, or a gateway
// that died) may never have had the leg's last chunk, and neither a decode leg nor the
// gateway's ReleaseKv can come from there: the leg's blocks are released
// Config.PinnedReleaseGrace later (sweepPinned), unless the receiver's stop or a ReleaseKv
// comes first (a decode leg already reading them then finishes its read). One that
// stopped ended its request: its gateway releases what no decode leg read, possibly
// without the parameters (a ReleaseKv queued behind this notice), which the worker fills
// in for pinnedStoppedKeep. Releasing blocks already read does nothing.
func (w *workerActor) receiverGone(m *actor.Terminated) {
	now := w.cfg.Now()
	for id, p := range w.pinned {
		if p.stopped || !p.replyTo.Equal(m.Who) {
			continue
		}
		if m.Why == actor.TerminatedReason_AddressTerminated {
			if p.lostAt.IsZero() {
				p.lostAt = now
			}
		} else {
			p.stopped, p.at, p.lostAt = true, now, time.Time{}
		}
		w.pinned[id] = p
	}
}

// sweepPinned releases the blocks of finished prefill legs whose receiver has been
// unreachable for Config.PinnedReleaseGrace, and forgets legs whose receiver stopped
// pinnedStoppedKeep ago or that waited pinnedKeep without news of it (the engine frees
// their blocks on its own timeout).
func (w *workerActor) sweepPinned() {
	now := w.cfg.Now()
	for id, p := range w.pinned {
		switch {
		case !p.lostAt.IsZero() && now.Sub(p.lostAt) >= w.cfg.PinnedReleaseGrace:
			delete(w.pinned, id)
			w.log.Info().Str("request_id", id).Str("receiver", p.replyTo.Address).
				Msg("prefill leg's receiver unreachable: asking the engine to release the blocks it pinned")
			w.releaseKV(&messages.ReleaseKv{RequestId: id, KvTransferParams: p.kvParams})
		case p.stopped && now.Sub(p.at) > pinnedStoppedKeep, now.Sub(p.at) > pinnedKeep:
			delete(w.pinned, id)
		}
	}
}

// releaseKV asks the engine to release the KV blocks it pinned for a prefill leg whose
// decode leg will not read them (messages.ReleaseKv), off the actor's goroutine and
// within releaseKVTimeout. An engine without engines.KVReleaser frees them on its own
// timeout; an engine that is not running took them with it.
func (w *workerActor) releaseKV(m *messages.ReleaseKv) {
	log := w.log.With().Str("request_id", m.RequestId).Logger()
	if w.engine == nil {
		log.Debug().Msg("ReleaseKv: no engine running (its pinned KV blocks ended with it)")
		return
	}
	rel, ok := w.engine.(engines.KVReleaser)
	if !ok {
		log.Debug().Msg("ReleaseKv: the engine cannot release KV blocks on request; it frees pinned blocks on its own timeout")
		return
	}
	engCtx := w.engCtx // the engine's lifetime: a parked engine outlives the worker
	go func() {
		ctx, cancel := context.WithTimeout(engCtx, releaseKVTimeout)
		defer cancel()
		if err := rel.ReleaseKV(ctx, m.RequestId, m.KvTransferParams); err != nil {
			log.Warn().Err(err).Msg("ReleaseKv: the engine did not release the pinned KV blocks (they stay until its own timeout)")
			return
		}
		log.Debug().Msg("ReleaseKv: pinned KV blocks released")
	}()
}
