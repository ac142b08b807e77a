package server

import (
	"fmt"
	"math"
	"slices"
	"strconv"

	"github.com/turbine-llm/turbine/engines/mocker"
)

// Sampling settings beyond the seed and the stop rules (docs/reference.md §20), as each
// dialect's engine reads them. The mock engine honours allowed_token_ids and logit_bias
// in its deterministic draw (engines/mocker, sample.go), priority in its waiting queue
// (vLLM dialect) and cache_salt in its block hashes and KV events; it checks top_k,
// min_p, repetition_penalty and the penalties as its engine does, reads temperature 0
// or top_k 1 as greedy sampling (each output token is then the most likely one in its
// logprobs) and otherwise ignores them (it has no logits to reshape), and accepts
// bad_words without effect (its words are drawn from the vocabulary, not spelled).

// penalties are the range-checked settings a dialect reads; nil: absent.
type penalties struct {
	topK                                  *int
	minP, repetition, presence, frequency *float64
	// repetitionMax bounds repetition_penalty (SGLang: 2; others: none, 0).
	repetitionMax float64
}

// check returns the engine's message for a setting out of its range, "" when all are in
// range.
func (p penalties) check() string {
	switch {
	case p.topK != nil && *p.topK < -1:
		return fmt.Sprintf("top_k must be -1 (disable), 0 (disable) or at least 1, got %d.", *p.topK)
	case p.minP != nil && !(*p.minP >= 0 && *p.minP <= 1):
		return fmt.Sprintf("min_p must be in [0, 1], got %v.", *p.minP)
	case p.repetition != nil && !(*p.repetition > 0):
		return fmt.Sprintf("repetition_penalty must be greater than zero, got %v.", *p.repetition)
	case p.repetition != nil && p.repetitionMax > 0 && *p.repetition > p.repetitionMax:
		return fmt.Sprintf("repetition_penalty must be in (0, %g] (1.0 = no penalty), got %v.", p.repetitionMax, *p.repetition)
	case p.presence != nil && !(*p.presence >= -2 && *p.presence <= 2):
		return fmt.Sprintf("presence_penalty must be in [-2, 2], got %v.", *p.presence)
	case p.frequency != nil && !(*p.frequency >= -2 && *p.frequency <= 2):
		return fmt.Sprintf("frequency_penalty must be in [-2, 2], got %v.", *p.frequency)
	}
	return ""
}

// logitBias reads a logit_bias object (token ids as decimal strings): ids must be in the
// vocabulary and biases finite; a bias outside [-100, 100] is clamped when clamp (vLLM)
// and refused otherwise (trtllm-serve). nil for an empty object.
func (s *Server) logitBias(raw map[string]float64, clamp bool) (map[uint32]float64, string) {
	if len(raw) == 0 {
		return nil, ""
	}
	vocab := s.tok.VocabSize()
	out := make(map[uint32]float64, len(raw))
	var bad []string
	for k, b := range raw {
		id, err := strconv.ParseUint(k, 10, 32)
		if err != nil {
			return nil, fmt.Sprintf("Invalid logit_bias key '%s': must be a valid integer token ID", k)
		}
		if int(id) >= vocab {
			bad = append(bad, k)
			continue
		}
		switch {
		case math.IsNaN(b) || math.IsInf(b, 0):
			return nil, fmt.Sprintf("logit_bias value for token ID %d must be finite", id)
		case b < -100 || b > 100:
			if !clamp {
				return nil, fmt.Sprintf("logit_bias value for token ID %d must be in [-100, 100]", id)
			}
			b = max(-100, min(100, b))
		}
		out[uint32(id)] = b
	}
	if len(bad) > 0 {
		slices.Sort(bad)
		return nil, fmt.Sprintf("token_id(s) %v in logit_bias contain out-of-vocab token ids. Vocabulary size: %d", bad, vocab)
	}
	return out, ""
}

// allowedTokenIDs reads vLLM's allowed_token_ids: not empty, every id in the vocabulary.
func (s *Server) allowedTokenIDs(ids []int64) ([]uint32, string) {
	if ids == nil {
		return nil, ""
	}
	if len(ids) == 0 {
		return nil, "allowed_token_ids is not None and empty!"
	}
	vocab := int64(s.tok.VocabSize())
	out := make([]uint32, len(ids))
	for i, id := range ids {
		if id < 0 || id >= vocab {
			return nil, "allowed_token_ids contains out-of-vocab token id!"
		}
		out[i] = uint32(id)
	}
	return out, ""
}

// samplingEps is the temperature below which vLLM samples greedily (SGLang's bound is
// lower, 1e-6; a temperature between the two is rare enough not to tell them apart).
const samplingEps = 1e-5

// greedy says whether a request with these settings (nil: absent) is sampled greedily:
// temperature 0 (below samplingEps) or top_k 1, which both leave the engine the most
// likely token only (docs/reference.md §21, the mock engine).
func greedy(temperature *float64, topK *int) bool {
	return temperature != nil && *temperature < samplingEps || topK != nil && *topK == 1
}

// vllmSampling checks and applies vLLM's sampling extras of cr to r.
func (s *Server) vllmSampling(cr *completionRequest, r *mocker.Request) *apiError {
	pen := penalties{topK: cr.TopK, minP: cr.MinP, repetition: cr.RepetitionPenalty, presence: cr.PresencePenalty,
		frequency: cr.FrequencyPenalty}
	if msg := pen.check(); msg != "" {
		return badRequest("", "%s", msg)
	}
	var msg string
	if r.LogitBias, msg = s.logitBias(cr.LogitBias, true); msg != "" {
		return badRequest("logit_bias", "%s", msg)
	}
	if r.AllowedTokenIDs, msg = s.allowedTokenIDs(cr.AllowedTokenIDs); msg != "" {
		return badRequest("allowed_token_ids", "%s", msg)
	}
	if cr.CacheSalt != nil {
		switch n := len(*cr.CacheSalt); {
		case n == 0:
			return badRequest("cache_salt", "Parameter 'cache_salt' must be a non-empty string if provided.")
		case n > 1024:
			return badRequest("cache_salt", "cache_salt should have at most 1024 characters, got %d.", n)
		}
		r.CacheSalt = *cr.CacheSalt
	}
	if cr.Priority != nil {
		r.Priority = *cr.Priority
	}
	r.Greedy = greedy(cr.Temperature, cr.TopK)
	return nil
}

// sglangSampling checks and applies SGLang's sampling extras (sampling_params) and its
// top-level priority and cache_salt to r. SGLang runs higher priorities first (without
// --schedule-low-priority-values-first), so the engine queues by the negated value.
func (s *Server) sglangSampling(g *sglangGenerateReq, sp *sglangSampling, r *mocker.Request) string {
	pen := penalties{minP: sp.MinP, repetition: sp.RepetitionPenalty, presence: sp.PresencePenalty,
		frequency: sp.FrequencyPenalty, repetitionMax: 2}
	if msg := pen.check(); msg != "" {
		return msg
	}
	var msg string
	if r.LogitBias, msg = s.logitBias(sp.LogitBias, true); msg != "" {
		return msg
	}
	if g.Priority != nil {
		r.Priority = -*g.Priority
	}
	if g.CacheSalt != nil {
		r.CacheSalt = *g.CacheSalt
	}
	r.Greedy = greedy(sp.Temperature, sp.TopK)
	return ""
}

// trtllmSampling checks and applies trtllm-serve's sampling extras of cr to r. Its
// priority (a float in [0, 1], higher first, 0.5 by default) is checked and queues the
// request by its negated value in hundredths. validation is true for the request
// model's own errors.
func (s *Server) trtllmSampling(cr *trtllmCompletionReq, r *mocker.Request) (validation bool, msg string) {
	pen := penalties{minP: cr.MinP, repetition: cr.RepetitionPenalty, presence: cr.PresencePenalty,
		frequency: cr.FrequencyPenalty}
	if cr.TopK != nil && *cr.TopK < 0 {
		return false, fmt.Sprintf("top_k must be non-negative, got %d.", *cr.TopK)
	}
	if msg := pen.check(); msg != "" {
		return false, msg
	}
	if p := cr.Priority; p != nil {
		if !(*p >= 0 && *p <= 1) {
			return true, fmt.Sprintf("1 validation error for CompletionRequest\npriority\n  Input should be less than or equal to 1 and greater than or equal to 0, got %v", *p)
		}
		r.Priority = -int(math.Round(*p * 100))
	}
	if r.LogitBias, msg = s.logitBias(cr.LogitBias, false); msg != "" {
		return false, msg
	}
	r.Greedy = greedy(cr.Temperature, cr.TopK)
	return false, ""
}
