package vllm

import (
	"maps"
	"strconv"

	"github.com/turbine-llm/turbine/engines/internal/enginehttp"
	"github.com/turbine-llm/turbine/messages"
)

// SamplingExtras returns the members of a /v1/completions body that carry the sampling
// settings of s beyond those CompletionRequest names (docs/reference.md §20), under
// vLLM's names (CompletionRequest of vllm/entrypoints/openai): presence_penalty and
// frequency_penalty (when not 0), top_k (-1 when s turns it off with 0 or less), min_p,
// repetition_penalty, logit_bias (token ids as decimal strings), bad_words,
// allowed_token_ids, priority (lower runs first, as in vLLM) and cache_salt. Absent
// settings are left out, so the engine's defaults apply; nil when s sets none. vLLM
// honours every one of them (a non-zero priority needs --scheduling-policy priority).
func SamplingExtras(s *messages.SamplingParams) map[string]any {
	if s == nil {
		return nil
	}
	m := map[string]any{}
	if s.GetPresencePenalty() != 0 || s.GetFrequencyPenalty() != 0 {
		m["presence_penalty"], m["frequency_penalty"] = s.GetPresencePenalty(), s.GetFrequencyPenalty()
	}
	if s.TopK != nil {
		k := s.GetTopK()
		if k <= 0 {
			k = -1
		}
		m["top_k"] = k
	}
	if s.MinP != nil {
		m["min_p"] = s.GetMinP()
	}
	if s.RepetitionPenalty != nil {
		m["repetition_penalty"] = s.GetRepetitionPenalty()
	}
	if lb := s.GetLogitBias(); len(lb) > 0 {
		m["logit_bias"] = LogitBias(lb)
	}
	if w := s.GetBadWords(); len(w) > 0 {
		m["bad_words"] = w
	}
	if ids := s.GetAllowedTokenIds(); len(ids) > 0 {
		m["allowed_token_ids"] = ids
	}
	if s.Priority != nil {
		m["priority"] = s.GetPriority()
	}
	if salt := s.GetCacheSalt(); salt != "" {
		m["cache_salt"] = salt
	}
	if len(m) == 0 {
		return nil
	}
	return m
}

// LogitBias returns a logit_bias map as the OpenAI protocol writes it: token ids as
// decimal strings (JSON object keys), each with its bias.
func LogitBias(lb map[uint32]float64) map[string]float64 {
	out := make(map[string]float64, len(lb))
	for id, b := range lb {
		out[strconv.FormatUint(uint64(id), 10)] = b
	}
	return out
}

// requestFrom is the completion of an aggregated request: the prompt, limits, stop
// tokens, every sampling setting (SamplingExtras) and the output constraint
// (structured_outputs). A request with a LoRA adapter (SamplingParams.lora_name) names
// it as the model, as vLLM takes it (docs/reference.md §26.1). A disaggregated leg's
// fields are the caller's to add. Errors: a malformed JSON Schema.
func requestFrom(model, requestID string, tokens []uint32, s *messages.SamplingParams) (CompletionRequest, error) {
	if lora := s.GetLoraName(); lora != "" {
		model = lora
	}
	req := CompletionRequest{Model: model, PromptTokenIDs: tokens, RequestID: requestID,
		MaxTokens: int(s.GetMaxTokens()), MinTokens: int(s.GetMinTokens()), IgnoreEOS: s.GetIgnoreEos(),
		StopTokenIDs: s.GetStopTokenIds()}
	req.Temperature, req.TopP, req.Seed = enginehttp.OptionalSampling(s)
	req.Extra = SamplingExtras(s)
	so, err := StructuredOutputs(s.GetStructured())
	if err != nil {
		return CompletionRequest{}, err
	}
	if so != nil {
		req.Extra = maps.Clone(req.Extra)
		if req.Extra == nil {
			req.Extra = map[string]any{}
		}
		req.Extra["structured_outputs"] = so
	}
	return req, nil
}
