package engines

import (
	"testing"

	"github.com/turbine-llm/turbine/messages"
)

func TestUnsupported(t *testing.T) {
	f := func(v float64) *float64 { return &v }
	i := func(v int32) *int32 { return &v }
	// every sets each field the table knows, at a value some engine refuses.
	every := &messages.SamplingParams{
		TopK: i(5), MinP: f(0.1), RepetitionPenalty: f(2.5), LogitBias: map[uint32]float64{7: 3},
		BadWords: []string{"x"}, AllowedTokenIds: []uint32{1, 2}, Priority: i(-1), CacheSalt: "s",
		StopTokenIds: []uint32{9}, Seed: func() *int64 { v := int64(1); return &v }(),
	}
	cases := []struct {
		name, engine string
		s            *messages.SamplingParams
		field        string // "" when accepted
		display      string
	}{
		{"nil params", NameSGLang, nil, "", ""},
		{"plain request on sglang", NameSGLang, &messages.SamplingParams{MaxTokens: 5}, "", ""},
		{"vllm takes everything", NameVLLM, every, "", ""},
		{"mock engine takes everything", NameMocker, every, "", ""},
		{"unknown engine refuses nothing", "llama.cpp", every, "", ""},
		{"empty engine refuses nothing", "", every, "", ""},
		{"sglang bad_words", NameSGLang, &messages.SamplingParams{BadWords: []string{"x"}}, "bad_words", "SGLang"},
		{"sglang allowed_token_ids", NameSGLang, &messages.SamplingParams{AllowedTokenIds: []uint32{3}}, "allowed_token_ids", "SGLang"},
		{"sglang repetition_penalty above 2", NameSGLang, &messages.SamplingParams{RepetitionPenalty: f(2.01)}, "repetition_penalty", "SGLang"},
		{"sglang repetition_penalty 2", NameSGLang, &messages.SamplingParams{RepetitionPenalty: f(2)}, "", ""},
		{"sglang priority", NameSGLang, &messages.SamplingParams{Priority: i(3)}, "", ""},
		{"sglang cache_salt", NameSGLang, &messages.SamplingParams{CacheSalt: "a"}, "", ""},
		{"sglang first refused field in table order", NameSGLang, every, "bad_words", "SGLang"},
		{"trtllm bad_words", NameTRTLLM, &messages.SamplingParams{BadWords: []string{"x"}}, "bad_words", "TensorRT-LLM"},
		{"trtllm allowed_token_ids", NameTRTLLM, &messages.SamplingParams{AllowedTokenIds: []uint32{3}}, "allowed_token_ids", "TensorRT-LLM"},
		{"trtllm priority", NameTRTLLM, &messages.SamplingParams{Priority: i(1)}, "priority", "TensorRT-LLM"},
		{"trtllm priority zero is the default", NameTRTLLM, &messages.SamplingParams{Priority: i(0)}, "", ""},
		{"trtllm cache_salt", NameTRTLLM, &messages.SamplingParams{CacheSalt: "a"}, "cache_salt", "TensorRT-LLM"},
		{"trtllm repetition_penalty", NameTRTLLM, &messages.SamplingParams{RepetitionPenalty: f(3)}, "", ""},
		{"trtllm logprobs", NameTRTLLM, &messages.SamplingParams{Logprobs: i(0)}, "logprobs", "TensorRT-LLM"},
		{"trtllm prompt_logprobs", NameTRTLLM, &messages.SamplingParams{PromptLogprobs: i(0)}, "prompt_logprobs", "TensorRT-LLM"},
		{"sglang logprobs", NameSGLang, &messages.SamplingParams{Logprobs: i(20), PromptLogprobs: i(20)}, "", ""},
		{"trtllm the rest", NameTRTLLM, &messages.SamplingParams{TopK: i(5), MinP: f(0.1), LogitBias: map[uint32]float64{7: 3}}, "", ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r, ok := Unsupported(c.engine, c.s)
			if ok != (c.field != "") || r.Field != c.field || r.Engine != c.display {
				t.Fatalf("Unsupported(%q) = %+v, %v; want field %q engine %q", c.engine, r, ok, c.field, c.display)
			}
			if ok && r.Reason == "" {
				t.Error("a refusal without a reason")
			}
		})
	}
}
