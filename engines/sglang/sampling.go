package sglang

import (
	"fmt"

	"github.com/turbine-llm/turbine/messages"
)

// generateRequest is the /generate request of an aggregated request: rid, input ids and
// sampling_params (samplingFrom), with the settings SGLang takes elsewhere under its own
// names (docs/reference.md §20):
//
//	top_k          sampling_params.top_k; off (0 or less) is -1, as SGLang spells it
//	min_p, repetition_penalty
//	               sampling_params, as named
//	logit_bias     sampling_params.logit_bias, token ids as decimal strings
//	priority       top-level priority, negated: vLLM runs lower values first, SGLang
//	               (without --schedule-low-priority-values-first) higher ones; it takes
//	               effect with --enable-priority-scheduling
//	cache_salt     top-level cache_salt (SGLang mixes it into its radix cache keys and
//	               reports it in its KV events, docs/reference.md §1)
//	lora_name      top-level lora_path, which SGLang reads as a loaded adapter's name
//	               (docs/reference.md §26.1)
//
// A disaggregated leg's bootstrap fields are the caller's to add. Errors: bad_words or
// allowed_token_ids, which SGLang's sampling parameters do not have (the frontend
// refuses them first; this is the second guard).
func generateRequest(requestID string, tokens []uint32, s *messages.SamplingParams) (GenerateRequest, error) {
	switch {
	case len(s.GetBadWords()) > 0:
		return GenerateRequest{}, fmt.Errorf("sglang: bad_words: SGLang has no such sampling parameter")
	case len(s.GetAllowedTokenIds()) > 0:
		return GenerateRequest{}, fmt.Errorf("sglang: allowed_token_ids: SGLang has no such sampling parameter")
	}
	req := GenerateRequest{RID: requestID, InputIDs: tokens, Sampling: samplingFrom(s)}
	if s == nil {
		return req, nil
	}
	p := &req.Sampling
	if s.TopK != nil {
		p.TopK = int(s.GetTopK())
		if p.TopK <= 0 {
			p.TopK = -1
		}
	}
	if s.MinP != nil {
		v := s.GetMinP()
		p.MinP = &v
	}
	if s.RepetitionPenalty != nil {
		v := s.GetRepetitionPenalty()
		p.RepetitionPenalty = &v
	}
	if lb := s.GetLogitBias(); len(lb) > 0 {
		p.Extra = map[string]any{"logit_bias": logitBias(lb)}
	}
	if s.Priority != nil {
		req.Extra = map[string]any{"priority": -int64(s.GetPriority())}
	}
	if salt := s.GetCacheSalt(); salt != "" {
		if req.Extra == nil {
			req.Extra = map[string]any{}
		}
		req.Extra["cache_salt"] = salt
	}
	if lora := s.GetLoraName(); lora != "" {
		if req.Extra == nil {
			req.Extra = map[string]any{}
		}
		req.Extra["lora_path"] = lora
	}
	return req, nil
}

// logitBias writes token ids as decimal strings (JSON object keys), each with its bias.
func logitBias(lb map[uint32]float64) map[string]float64 {
	out := make(map[string]float64, len(lb))
	for id, b := range lb {
		out[fmt.Sprint(id)] = b
	}
	return out
}
