package frontend

import (
	"time"

	"github.com/turbine-llm/turbine/flow"
	"github.com/turbine-llm/turbine/gateway"
	"github.com/turbine-llm/turbine/messages"
)

// Hits you can verify (docs/reference.md §3.2): a stream keeps, for each leg that
// computes its prompt, the router's predicted prefix hit for the worker that runs it,
// and when the leg finishes normally hands the prediction and the cached tokens the
// worker's engine reports on its last chunk to the recorder (hitRecorder). The leg that
// produced the delivered figure is always compared with the prediction of its own
// route: a migrated request's new leg, or a prefill leg retried elsewhere, has a route
// of its own. Which leg computes the prompt: the only leg of an aggregated or locally
// prefilled request (the route's worker and overlap_blocks), the prefill leg of a
// remote one (prefill_worker_id and prefill_overlap_blocks); a remote decision's decode
// leg loads its KV over the transfer and is not compared.

// hitRecorder is implemented by recorders that take predicted against delivered hits
// (setRecorder).
type hitRecorder interface {
	// cachedTokens: a leg of model on worker finished; the router predicted predicted
	// prompt tokens cached there and the engine reported delivered (tokens).
	cachedTokens(model, worker string, predicted, delivered int)
}

// prediction is the router's predicted prefix hit for one leg (tokens), on worker.
type prediction struct {
	worker string
	tokens int
}

// predictedTokens is the prefix hit an engine will report for a worker holding
// overlap leading blocks of a prompt of promptTokens tokens (blockSize tokens per
// block): whole blocks, at most those before the prompt's last token, which an engine
// always computes (vLLM caps its hit at the prompt's length − 1; so does the mock
// engine). 0 when the block size is unknown.
func predictedTokens(overlap, blockSize, promptTokens int) int {
	if blockSize <= 0 || promptTokens <= 0 || overlap <= 0 {
		return 0
	}
	return min(overlap, (promptTokens-1)/blockSize) * blockSize
}

// routeAnswered notes the predictions of route rr's answer resp (ROUTE_OK with a
// worker), under the request id of the leg that computes the prompt, and, when rr asked
// for it, the route's explanation. The block size must be known (Generate sets it from
// the model card); without it nothing is predicted.
func (s *stream) routeAnswered(rr *messages.RouteRequest, resp *messages.RouteResponse) {
	if resp == nil || resp.Outcome != messages.RouteOutcome_ROUTE_OK || resp.Worker == nil {
		return
	}
	n := len(rr.TokenIds)
	if rr.PromptTokens != nil {
		n = int(rr.GetPromptTokens())
	}
	id, p := rr.RequestId, prediction{worker: resp.WorkerId, tokens: predictedTokens(int(resp.OverlapBlocks), s.blockSize, n)}
	if resp.DisaggDecision == messages.DisaggDecision_DISAGG_REMOTE && resp.PrefillRequestId != "" {
		id, p = resp.PrefillRequestId, prediction{worker: resp.PrefillWorkerId,
			tokens: predictedTokens(int(resp.PrefillOverlapBlocks), s.blockSize, n)}
	}
	if s.blockSize > 0 {
		if s.predicted == nil {
			s.predicted = map[string]prediction{}
		}
		s.predicted[id] = p
	}
	if rr.Explain {
		ex := explanation(resp, p.tokens)
		s.infoMu.Lock()
		s.explained = ex
		s.infoMu.Unlock()
	}
}

// legSent moves the prediction of request id to leg, which now runs it.
func (s *stream) legSent(leg flow.LegID, id string) {
	p, ok := s.predicted[id]
	if !ok {
		return
	}
	delete(s.predicted, id)
	if s.legPredicted == nil {
		s.legPredicted = map[flow.LegID]prediction{}
	}
	s.legPredicted[leg] = p
}

// legChunk records predicted against delivered for a leg's last chunk when it finished
// normally (stop or length, no error); it must see the chunk before the flow, which may
// change it.
func (s *stream) legChunk(c flow.Chunk) {
	ch := c.Chunk
	if ch == nil || ch.FinishReason != "stop" && ch.FinishReason != "length" || ch.Error != "" ||
		ch.Fault != messages.Fault_FAULT_NONE {
		return
	}
	p, ok := s.legPredicted[c.Leg]
	if !ok {
		return
	}
	delete(s.legPredicted, c.Leg)
	if hr, ok := s.rec.(hitRecorder); ok {
		hr.cachedTokens(s.req.Model, p.worker, p.tokens, int(ch.CachedTokens))
	}
}

// RouteExplanation returns the latest route's explanation (gateway.ExplainedStream);
// nil unless the request asked for it.
func (s *stream) RouteExplanation() *gateway.RouteExplanation {
	s.infoMu.Lock()
	defer s.infoMu.Unlock()
	return s.explained
}

// explanation is the `route` object of resp's candidates, with the predicted overlap.
func explanation(resp *messages.RouteResponse, predicted int) *gateway.RouteExplanation {
	ex := &gateway.RouteExplanation{PredictedOverlapTokens: predicted,
		Candidates: make([]gateway.RouteCandidate, len(resp.Candidates))}
	for i, c := range resp.Candidates {
		terms := make(map[string]gateway.JSONFloat, len(c.Terms))
		for _, t := range c.Terms {
			terms[t.Name] = gateway.JSONFloat(t.Value)
		}
		ex.Candidates[i] = gateway.RouteCandidate{WorkerID: c.WorkerId, OverlapBlocks: int(c.OverlapBlocks),
			Cost: gateway.JSONFloat(c.Cost), Terms: terms, Chosen: c.Chosen}
	}
	return ex
}

// cachedTokens implements hitRecorder: the per-worker counters, the shortfall
// histogram, and the gap detector, whose opening is logged once at warn level (and its
// closing at info) and shown in the gap gauge.
func (r *setRecorder) cachedTokens(model, worker string, predicted, delivered int) {
	r.counter(metricPredictedCached, "model", model, "worker", worker).Add(predicted)
	r.counter(metricDeliveredCached, "model", model, "worker", worker).Add(delivered)
	r.set.GetOrCreatePrometheusHistogramExt(series(metricCachedShortfall, "model", model), shortfallBuckets).
		Update(float64(max(predicted-delivered, 0)))
	r.mu.Lock()
	if r.gaps == nil {
		r.gaps = newHitGapDetector(hitGapConfig{})
	}
	// The gauge and the log follow the detector's changes in its order: under the lock.
	defer r.mu.Unlock()
	ch := r.gaps.observe(time.Now(), model, worker, int64(predicted), int64(delivered))
	gauge := r.set.GetOrCreateGauge(series(metricCacheHitGap, "model", model, "worker", worker), nil)
	switch {
	case ch.Opened:
		gauge.Set(1)
		r.log.Warn().Str("model", model).Str("worker", worker).Int64("predicted_cached_tokens", ch.Predicted).
			Int64("delivered_cached_tokens", ch.Delivered).Int("requests", ch.Requests).
			Msg("prefix-cache hits below the router's prediction: the worker's engine delivers fewer cached tokens " +
				"than the router's KV index expects; likely causes: index drift, lost KV events, a chat template or " +
				"tokenizer mismatch between the router and the engine")
	case ch.Closed:
		gauge.Set(0)
		r.log.Info().Str("model", model).Str("worker", worker).Int64("predicted_cached_tokens", ch.Predicted).
			Int64("delivered_cached_tokens", ch.Delivered).Msg("prefix-cache hits match the router's prediction again")
	}
}
