package trtllm

import (
	"errors"
	"strconv"

	"github.com/turbine-llm/turbine/engines/internal/enginehttp"
	"github.com/turbine-llm/turbine/messages"
)

// requestFrom is the completion of an aggregated request: the prompt, limits, stop
// tokens, every sampling setting under trtllm-serve's names (CompletionRequest of
// tensorrt_llm/serve/openai_protocol.py, docs/reference.md §20) and the output
// constraint (response_format):
//
//	top_k          top_k; off (0 or less) is left out (trtllm-serve's default 0 is off)
//	min_p, repetition_penalty, presence_penalty, frequency_penalty
//	               as named (the penalties when not 0)
//	logit_bias     logit_bias, token ids as decimal strings
//
// A disaggregated leg's fields are the caller's to add. Errors: what trtllm-serve has
// no field for (it refuses unknown fields): bad_words, allowed_token_ids, a non-zero
// priority (trtllm-serve's is a float in [0, 1], higher first, with no mapping from
// vLLM's integers; 0, vLLM's default, is left out) and cache_salt; and a malformed
// JSON Schema. The frontend refuses the first four first; this is the second guard.
func requestFrom(model, requestID string, tokens []uint32, s *messages.SamplingParams) (CompletionRequest, error) {
	switch {
	case len(s.GetBadWords()) > 0:
		return CompletionRequest{}, errors.New("trtllm: bad_words: trtllm-serve has no such field")
	case len(s.GetAllowedTokenIds()) > 0:
		return CompletionRequest{}, errors.New("trtllm: allowed_token_ids: trtllm-serve has no such field")
	case s.GetPriority() != 0:
		return CompletionRequest{}, errors.New("trtllm: priority: trtllm-serve's priority is a float in [0, 1], not vLLM's integer")
	case s.GetCacheSalt() != "":
		return CompletionRequest{}, errors.New("trtllm: cache_salt: trtllm-serve has no such field")
	case s.Logprobs != nil || s.PromptLogprobs != nil:
		return CompletionRequest{}, errors.New("trtllm: logprobs: the adapter does not read trtllm-serve's logprobs, and trtllm-serve has no prompt logprobs (docs/reference.md §21)")
	}
	req := CompletionRequest{Model: model, PromptTokenIDs: tokens, RequestID: requestID,
		MaxTokens: int(s.GetMaxTokens()), MinTokens: int(s.GetMinTokens()), IgnoreEOS: s.GetIgnoreEos(),
		StopTokenIDs: s.GetStopTokenIds(), TopK: max(0, int(s.GetTopK()))}
	req.Temperature, req.TopP, req.Seed = enginehttp.OptionalSampling(s)
	req.Extra = map[string]any{}
	if s.GetPresencePenalty() != 0 || s.GetFrequencyPenalty() != 0 {
		req.Extra["presence_penalty"], req.Extra["frequency_penalty"] = s.GetPresencePenalty(), s.GetFrequencyPenalty()
	}
	if s.MinP != nil {
		req.Extra["min_p"] = s.GetMinP()
	}
	if s.RepetitionPenalty != nil {
		req.Extra["repetition_penalty"] = s.GetRepetitionPenalty()
	}
	if lb := s.GetLogitBias(); len(lb) > 0 {
		m := make(map[string]float64, len(lb))
		for id, b := range lb {
			m[strconv.FormatUint(uint64(id), 10)] = b
		}
		req.Extra["logit_bias"] = m
	}
	rf, err := ResponseFormat(s.GetStructured())
	if err != nil {
		return CompletionRequest{}, err
	}
	if rf != nil {
		req.Extra["response_format"] = rf
	}
	return req, nil
}
