package frontend

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/turbine-llm/turbine/gateway"
	"github.com/turbine-llm/turbine/messages"
)

// Disaggregated serving (docs/reference.md §6): when the router decides "remote", a request runs
// as two legs. The prefill leg (the prompt, max_tokens 1, min_tokens 0, DisaggParams leg
// "prefill") goes to the prefill worker under the router's prefill_request_id; its last
// chunk carries the engine's transfer parameters (vLLM kv_transfer_params, TensorRT-LLM
// disaggregated_params), which the decode leg (the whole request, DisaggParams leg
// "decode") takes to the decode worker under the request id. The decode leg produces the
// whole output; the prefill leg's token is never shown. SGLang needs no parameters back:
// when the route names a bootstrap address both legs are sent at once with it and a
// random 63-bit bootstrap room.
//
// Faults: a prefill leg that fails in a way that allows re-sending (worker gone, engine
// failure, stall), or a decode leg whose engine could not load the prompt's KV from the
// prefill engine before its first token (FaultKVTransfer: the prefill engine died, froze
// or dropped the blocks during the transfer, or, with SGLang, while its prefill leg
// ran), is routed again without that prefill worker — the decode worker is not blamed —
// and after a second failure prefilled on the decode worker (RouteRequest.local_prefill;
// also at once when the retry finds no prefill worker under --enforce-disagg). A decode
// leg that ends before its first token (rejected, failed, cancelled) sends ReleaseKv to
// the prefill worker, whose engine otherwise keeps the pinned blocks until its own
// timeout. A decode leg that fails otherwise is migrated like an aggregated request.

// Disaggregation decisions (RouteResponse.disagg_decision): the label values of
// turbine_frontend_disagg_decisions_total.
const (
	DecisionAggregated            = "aggregated"
	DecisionRemote                = "remote"
	DecisionLocalShortPrefill     = "local_short_prefill"
	DecisionLocalPrefillQueue     = "local_prefill_queue"
	DecisionLocalNoPrefillWorkers = "local_no_prefill_workers"
	DecisionLocalRequested        = "local_requested"
)

// Legs of a disaggregated request (DisaggParams.leg).
const (
	LegPrefill = "prefill"
	LegDecode  = "decode"
)

// startRemote starts decode leg a's prefill leg on the route's prefill worker, and the
// decode leg itself when the engines bootstrap the transfer (SGLang).
func (s *stream) startRemote(a *attempt, route *messages.RouteResponse) {
	id := route.PrefillRequestId
	if id == "" {
		id = a.requestID + "/prefill"
	}
	p := s.newAttempt(id, route.PrefillWorkerId, route.PrefillWorker, a.tokens, a.sampling)
	p.leg = LegPrefill
	a.pre = p
	if route.PrefillBootstrapHost != "" {
		a.bootstrap = &messages.DisaggParams{BootstrapHost: route.PrefillBootstrapHost,
			BootstrapPort: route.PrefillBootstrapPort, BootstrapRoom: rand.Uint64() >> 1}
	}
	s.send(p, a.tokens, prefillSampling(a.sampling, a.bootstrap))
	if a.bootstrap != nil {
		s.send(a, a.tokens, decodeSampling(a.sampling, "", a.bootstrap))
	}
}

// prefillSampling is a prefill leg's sampling: base's with max_tokens 1, min_tokens 0
// and DisaggParams leg "prefill" (with the bootstrap fields when set). base is not
// changed.
func prefillSampling(base *messages.SamplingParams, bootstrap *messages.DisaggParams) *messages.SamplingParams {
	sp := cloneSampling(base)
	sp.MaxTokens, sp.MinTokens = 1, 0
	sp.Disagg = legParams(LegPrefill, "", bootstrap)
	return sp
}

// decodeSampling is a decode leg's sampling: base's with DisaggParams leg "decode",
// the prefill leg's transfer parameters (a JSON object, passed on unchanged) and the
// bootstrap fields when set. base is not changed.
func decodeSampling(base *messages.SamplingParams, kvParams string, bootstrap *messages.DisaggParams) *messages.SamplingParams {
	sp := cloneSampling(base)
	sp.Disagg = legParams(LegDecode, kvParams, bootstrap)
	return sp
}

func legParams(leg, kvParams string, bootstrap *messages.DisaggParams) *messages.DisaggParams {
	d := &messages.DisaggParams{Leg: leg, KvTransferParams: kvParams}
	if bootstrap != nil {
		d.BootstrapHost, d.BootstrapPort, d.BootstrapRoom = bootstrap.BootstrapHost, bootstrap.BootstrapPort, bootstrap.BootstrapRoom
	}
	return d
}

func cloneSampling(base *messages.SamplingParams) *messages.SamplingParams {
	if base == nil {
		return &messages.SamplingParams{}
	}
	return proto.Clone(base).(*messages.SamplingParams)
}

// onPrefill handles an arrival from the current decode leg's prefill leg. It returns nil
// when the stream goes on, or the chunk that ends it (a prefill failure that re-routing
// cannot mend).
func (s *stream) onPrefill(ar arrival) *messages.TokenChunk {
	a := s.cur
	p := a.pre
	ch := ar.chunk
	if ch.FinishReason != "" || ar.fault != "" {
		p.final = true
	}
	switch {
	case a.sawToken:
		// The decode leg has its KV already (SGLang: both legs ran at once): whatever
		// the prefill leg says now changes nothing for the client.
		if ch.FinishReason != "" {
			s.prefillFinished(a, ch)
		}
		return nil
	case ar.fault != "":
		return s.retryPrefill(ar)
	case ch.FinishReason == "error" || ch.FinishReason == "abort" || ch.Error != "":
		// Not migratable (the engine refused this prompt): the decode worker's engine
		// would refuse it too. The client gets the failure as for an aggregated request.
		s.cfg.Logger.Warn().Str("request_id", s.req.RequestID).Str("prefill_worker", p.workerID).
			Str("error", ch.Error).Msg("prefill leg failed")
		s.end(a, "prefill leg failed")
		s.cur = nil
		msg := ch.Error
		if msg == "" {
			msg = "finished with " + ch.FinishReason
		}
		return &messages.TokenChunk{RequestId: a.requestID, FinishReason: "error", WorkerId: p.workerID,
			Error: "prefill leg on " + p.workerID + ": " + msg}
	case ch.FinishReason != "":
		s.prefillFinished(a, ch)
		if !a.sent {
			if a.kvParams == "" && a.bootstrap == nil {
				s.cfg.Logger.Warn().Str("request_id", s.req.RequestID).Str("prefill_worker", p.workerID).
					Msg("prefill leg returned no transfer parameters: the decode worker prefills the prompt again")
			}
			s.send(a, a.tokens, decodeSampling(a.sampling, a.kvParams, a.bootstrap))
		}
		return nil
	default:
		// The prefill leg's token is not the client's; keep its credits flowing.
		s.root.Send(p.worker, &messages.Credit{RequestId: p.requestID, Credits: 1})
		return nil
	}
}

// prefillFinished ends decode leg a's prefill leg after its last chunk ch: the transfer
// parameters are kept for the decode leg (and for ReleaseKv), the router is told the
// leg's prompt is computed and the leg is over.
func (s *stream) prefillFinished(a *attempt, ch *messages.TokenChunk) {
	p := a.pre
	a.preDone = true
	a.preCached = ch.CachedTokens
	a.kvParams = ch.KvTransferParams
	if s.rec != nil {
		s.rec.prefillLeg(s.req.Model, time.Since(p.sentAt))
	}
	s.router.PrefillDone(p.requestID)
	s.endLeg(p, "")
}

// retryPrefill handles a prefill leg that failed with a migratable fault before the
// decode leg produced anything, or a decode leg that could not load the KV its prefill
// leg computed (FaultKVTransfer): both legs end (the decode leg's route is freed, and the
// prefill worker told to release what it may have pinned), and the request is routed
// again without that prefill worker — after maxPrefillFailures-1 failures, or when no
// prefill worker is left and disaggregation is enforced, with local prefill on a decode
// worker. The decode worker is not excluded. It returns nil when the request goes on (or
// failed: routing found no worker, see stream.failed), or the chunk that ends it.
// Prefill retries do not count against the migration limit: no token was produced, and
// their number is bounded by maxPrefillFailures.
func (s *stream) retryPrefill(ar arrival) *messages.TokenChunk {
	a := s.cur
	p := a.pre
	s.end(a, "prefill leg failed: "+ar.fault)
	s.cur = nil
	s.prefillFailures++
	s.excludedPrefill = append(s.excludedPrefill, p.workerID)
	s.localPrefill = s.localPrefill || s.prefillFailures >= maxPrefillFailures
	fail := func(why string) *messages.TokenChunk {
		ch := ar.chunk
		ch.RequestId, ch.FinishReason, ch.TokenIds, ch.Migratable = a.requestID, "error", nil, true
		ch.Error = fmt.Sprintf("prefill leg on %s: %s; not retried: %s", p.workerID, ch.Error, why)
		return ch
	}
	if s.prefillFailures > maxPrefillFailures {
		return fail(fmt.Sprintf("%d prefill legs failed", s.prefillFailures))
	}
	if s.rec != nil {
		s.rec.prefillRetried(s.req.Model, ar.fault)
	}
	err := s.start(a.tokens, a.sampling)
	if errors.Is(err, gateway.ErrNoPrefillWorkers) && !s.localPrefill {
		// Enforced disaggregation refuses new requests without a prefill worker; this one
		// was admitted and its prefill failed: its decode worker finishes it.
		s.localPrefill = true
		err = s.start(a.tokens, a.sampling)
	}
	if err != nil {
		if unroutable(err) { // Recv returns it: 503, retryable
			s.cfg.Logger.Warn().Err(causeOf(err)).Str("request_id", s.req.RequestID).Str("failed_prefill_worker", p.workerID).
				Str("reason", ar.fault).Msg("prefill leg not retried: the request could not be routed again")
			s.failed = err
			return nil
		}
		return fail(err.Error())
	}
	s.cfg.Logger.Info().Str("request_id", s.req.RequestID).Str("failed_prefill_worker", p.workerID).
		Str("reason", ar.fault).Str("decision", s.Disagg().Decision).Str("prefill_worker", s.Disagg().PrefillWorker).
		Str("decode_worker", s.cur.workerID).Msg("prefill leg retried")
	return nil
}

// settlePrefill ends decode leg a's prefill leg p, which has not delivered its last
// chunk, when a ends before its first token: p is cancelled and freed in the router at
// once, and ReleaseKv goes to p's worker once p's last chunk arrives — with the transfer
// parameters of a leg that finished before the cancel reached it, whose blocks its engine
// pinned — or after Config.PrefillReleaseWait without one (the cancel stopped it first).
func (s *stream) settlePrefill(a *attempt, reason string) {
	p := a.pre
	p.ended, a.released = true, true
	s.root.Send(p.worker, &messages.Cancel{RequestId: p.requestID, Reason: reason})
	s.router.Free(p.requestID)
	root, rec, model, wait, clk := s.root, s.rec, s.req.Model, s.cfg.PrefillReleaseWait, s.cfg.clock
	go func() {
		kvParams := ""
		timeout, stop := clk.newTimer(timerPrefillRelease, wait)
		defer stop()
	wait:
		for {
			select {
			case ar := <-p.arrivals:
				if ar.chunk.FinishReason != "" || ar.fault != "" {
					kvParams = ar.chunk.KvTransferParams
					break wait
				}
			case <-timeout:
				break wait
			}
		}
		close(p.closed)
		root.Stop(p.receiver)
		if rec != nil {
			rec.released(model)
		}
		root.Send(p.worker, &messages.ReleaseKv{RequestId: p.requestID, KvTransferParams: kvParams})
	}()
}

// release tells decode leg a's prefill worker, once, to release the KV blocks its engine
// pinned for a (ReleaseKv with the transfer parameters, when the prefill leg returned
// them). Harmless when the blocks are already gone.
func (s *stream) release(a *attempt) {
	if a.released || a.pre == nil || !a.pre.sent {
		return
	}
	a.released = true
	s.root.Send(a.pre.worker, &messages.ReleaseKv{RequestId: a.pre.requestID, KvTransferParams: a.kvParams})
	if s.rec != nil {
		s.rec.released(s.req.Model)
	}
}
