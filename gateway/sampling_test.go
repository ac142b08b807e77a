package gateway

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/turbine-llm/turbine/messages"
	"github.com/turbine-llm/turbine/model"
)

// samplingBackend serves "tiny" (no engine named) and one tiny model per engine.
func samplingBackend(steps ...step) *fakeBackend {
	b := newFakeBackend(steps...)
	for _, e := range []string{"vllm", "sglang", "trtllm", "mocker"} {
		b.cards = append(b.cards, &messages.ModelCard{Model: "tiny-" + e, Engine: e, Tokenizer: "fake", ContextLength: 128,
			KvBlockSize: 16, EosTokenIds: []uint32{fakeEOS}})
	}
	return b
}

// TestSamplingFields runs each of vLLM's sampling and output fields through the whole
// handler (docs/reference.md §20): a valid value reaches SamplingParams (or the prompt),
// an invalid one is a 400 naming the field, and a field the model's engine cannot honour
// is a 400 naming the field and the engine. Every outcome is recorded in
// testdata/sampling.golden.
func TestSamplingFields(t *testing.T) {
	chat := func(m, fields string) string {
		if fields != "" {
			fields += ","
		}
		return `{"model":"` + m + `",` + fields + `"messages":[{"role":"user","content":"hi"}]}`
	}
	comp := func(m, fields string) string {
		if fields != "" {
			fields += ","
		}
		return `{"model":"` + m + `",` + fields + `"prompt":"abcdef"}`
	}
	long := strings.Repeat("y", 200) // 200 tokens > tiny's 128-token context
	hiPrompt := fakeTokenizer{}.Encode("<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n")
	cases := []struct {
		name, path, body string
		// check looks at the accepted request; nil when the request must be refused.
		check func(t *testing.T, g *GenerateRequest)
		// code and param of the refusal; message, when set, must be in its message.
		code, param, message string
	}{
		// Accepted: what reaches the engine.
		{name: "top_k", path: chatPath, body: chat("tiny", `"top_k":5`), check: func(t *testing.T, g *GenerateRequest) {
			if g.Sampling.TopK == nil || *g.Sampling.TopK != 5 {
				t.Errorf("top_k %v", g.Sampling.TopK)
			}
		}},
		{name: "top_k off", path: chatPath, body: chat("tiny", `"top_k":-1`), check: func(t *testing.T, g *GenerateRequest) {
			if g.Sampling.TopK == nil || *g.Sampling.TopK != -1 {
				t.Errorf("top_k %v", g.Sampling.TopK)
			}
		}},
		{name: "min_p", path: chatPath, body: chat("tiny", `"min_p":0.05`), check: func(t *testing.T, g *GenerateRequest) {
			if g.Sampling.MinP == nil || *g.Sampling.MinP != 0.05 {
				t.Errorf("min_p %v", g.Sampling.MinP)
			}
		}},
		{name: "repetition_penalty", path: chatPath, body: chat("tiny", `"repetition_penalty":1.3`), check: func(t *testing.T, g *GenerateRequest) {
			if g.Sampling.RepetitionPenalty == nil || *g.Sampling.RepetitionPenalty != 1.3 {
				t.Errorf("repetition_penalty %v", g.Sampling.RepetitionPenalty)
			}
		}},
		{name: "penalties", path: chatPath, body: chat("tiny", `"presence_penalty":1.5,"frequency_penalty":-1`), check: func(t *testing.T, g *GenerateRequest) {
			if g.Sampling.PresencePenalty != 1.5 || g.Sampling.FrequencyPenalty != -1 {
				t.Errorf("penalties %v %v", g.Sampling.PresencePenalty, g.Sampling.FrequencyPenalty)
			}
		}},
		{name: "logit_bias clamped", path: chatPath, body: chat("tiny", `"logit_bias":{"5":150,"7":-3.5,"9":-200}`), check: func(t *testing.T, g *GenerateRequest) {
			if fmt.Sprint(g.Sampling.LogitBias) != "map[5:100 7:-3.5 9:-100]" {
				t.Errorf("logit_bias %v", g.Sampling.LogitBias)
			}
		}},
		{name: "logit_bias empty", path: chatPath, body: chat("tiny", `"logit_bias":{}`), check: func(t *testing.T, g *GenerateRequest) {
			if g.Sampling.LogitBias != nil {
				t.Errorf("logit_bias %v", g.Sampling.LogitBias)
			}
		}},
		{name: "seed", path: chatPath, body: chat("tiny", `"seed":7`), check: func(t *testing.T, g *GenerateRequest) {
			if g.Sampling.Seed == nil || *g.Sampling.Seed != 7 {
				t.Errorf("seed %v", g.Sampling.Seed)
			}
		}},
		{name: "seed -1 is none", path: chatPath, body: chat("tiny", `"seed":-1`), check: func(t *testing.T, g *GenerateRequest) {
			if g.Sampling.Seed != nil {
				t.Errorf("seed %v", *g.Sampling.Seed)
			}
		}},
		{name: "stop six strings", path: chatPath, body: chat("tiny", `"stop":["a","b","c","d","e","f"]`), check: func(t *testing.T, g *GenerateRequest) {}},
		{name: "stop_token_ids", path: chatPath, body: chat("tiny", `"stop_token_ids":[5,258]`), check: func(t *testing.T, g *GenerateRequest) {
			if fmt.Sprint(g.Sampling.StopTokenIds) != "[5 258]" {
				t.Errorf("stop_token_ids %v", g.Sampling.StopTokenIds)
			}
		}},
		{name: "include_stop_str_in_output", path: chatPath, body: chat("tiny", `"stop":"x","include_stop_str_in_output":true`), check: func(t *testing.T, g *GenerateRequest) {}},
		{name: "skip_special_tokens", path: chatPath, body: chat("tiny", `"skip_special_tokens":false`), check: func(t *testing.T, g *GenerateRequest) {}},
		{name: "spaces_between_special_tokens", path: chatPath, body: chat("tiny", `"spaces_between_special_tokens":false`), check: func(t *testing.T, g *GenerateRequest) {}},
		{name: "min_tokens", path: chatPath, body: chat("tiny", `"min_tokens":3`), check: func(t *testing.T, g *GenerateRequest) {
			if g.Sampling.MinTokens != 3 {
				t.Errorf("min_tokens %d", g.Sampling.MinTokens)
			}
		}},
		{name: "min_tokens fills the room", path: chatPath, body: chat("tiny", fmt.Sprintf(`"min_tokens":%d`, 128-len(hiPrompt))), check: func(t *testing.T, g *GenerateRequest) {
			if g.Sampling.MinTokens != g.Sampling.MaxTokens {
				t.Errorf("min_tokens %d max_tokens %d", g.Sampling.MinTokens, g.Sampling.MaxTokens)
			}
		}},
		{name: "ignore_eos", path: chatPath, body: chat("tiny", `"ignore_eos":true`), check: func(t *testing.T, g *GenerateRequest) {
			if !g.Sampling.IgnoreEos {
				t.Error("ignore_eos not set")
			}
		}},
		{name: "bad_words", path: chatPath, body: chat("tiny", `"bad_words":["foo"," bar"]`), check: func(t *testing.T, g *GenerateRequest) {
			if !slices.Equal(g.Sampling.BadWords, []string{"foo", " bar"}) {
				t.Errorf("bad_words %q", g.Sampling.BadWords)
			}
		}},
		{name: "allowed_token_ids", path: chatPath, body: chat("tiny", `"allowed_token_ids":[4,5]`), check: func(t *testing.T, g *GenerateRequest) {
			if fmt.Sprint(g.Sampling.AllowedTokenIds) != "[4 5]" {
				t.Errorf("allowed_token_ids %v", g.Sampling.AllowedTokenIds)
			}
		}},
		{name: "truncate_prompt_tokens", path: chatPath, body: chat("tiny", `"truncate_prompt_tokens":4`), check: func(t *testing.T, g *GenerateRequest) {
			if !slices.Equal(g.TokenIDs, hiPrompt[len(hiPrompt)-4:]) {
				t.Errorf("prompt %v, want the last 4 of %v", g.TokenIDs, hiPrompt)
			}
		}},
		{name: "truncate_prompt_tokens longer than the prompt", path: chatPath, body: chat("tiny", `"truncate_prompt_tokens":100`), check: func(t *testing.T, g *GenerateRequest) {
			if !slices.Equal(g.TokenIDs, hiPrompt) {
				t.Errorf("prompt %v", g.TokenIDs)
			}
		}},
		{name: "truncate_prompt_tokens -1", path: compPath, body: `{"model":"tiny","truncate_prompt_tokens":-1,"prompt":"` + long + `"}`, check: func(t *testing.T, g *GenerateRequest) {
			if len(g.TokenIDs) != 127 || g.Sampling.MaxTokens != 1 {
				t.Errorf("%d prompt tokens, max_tokens %d", len(g.TokenIDs), g.Sampling.MaxTokens)
			}
		}},
		{name: "truncate_prompt_tokens -1 with max_tokens", path: compPath, body: `{"model":"tiny","max_tokens":8,"truncate_prompt_tokens":-1,"prompt":"` + long + `"}`, check: func(t *testing.T, g *GenerateRequest) {
			if len(g.TokenIDs) != 120 || g.Sampling.MaxTokens != 8 {
				t.Errorf("%d prompt tokens, max_tokens %d", len(g.TokenIDs), g.Sampling.MaxTokens)
			}
		}},
		{name: "truncate_prompt_tokens on token ids", path: compPath, body: `{"model":"tiny","truncate_prompt_tokens":2,"prompt":[10,11,12]}`, check: func(t *testing.T, g *GenerateRequest) {
			if fmt.Sprint(g.TokenIDs) != "[11 12]" {
				t.Errorf("prompt %v", g.TokenIDs)
			}
		}},
		{name: "priority", path: chatPath, body: chat("tiny", `"priority":-5`), check: func(t *testing.T, g *GenerateRequest) {
			if g.Sampling.Priority == nil || *g.Sampling.Priority != -5 {
				t.Errorf("priority %v", g.Sampling.Priority)
			}
		}},
		{name: "cache_salt", path: chatPath, body: chat("tiny", `"cache_salt":"tenant-a"`), check: func(t *testing.T, g *GenerateRequest) {
			if g.Sampling.CacheSalt != "tenant-a" {
				t.Errorf("cache_salt %q", g.Sampling.CacheSalt)
			}
		}},
		{name: "temperature at vLLM's bound", path: chatPath, body: chat("tiny", `"temperature":2`), check: func(t *testing.T, g *GenerateRequest) {
			if g.Sampling.Temperature == nil || *g.Sampling.Temperature != 2 {
				t.Errorf("temperature %v", g.Sampling.Temperature)
			}
		}},
		{name: "add_generation_prompt false", path: chatPath, body: chat("tiny", `"add_generation_prompt":false`), check: func(t *testing.T, g *GenerateRequest) {
			if p := (fakeTokenizer{}).Decode(g.TokenIDs); strings.HasSuffix(p, "assistant\n") {
				t.Errorf("prompt %q", p)
			}
		}},
		{name: "completions fields", path: compPath, body: comp("tiny", `"top_k":3,"min_p":0.5,"logit_bias":{"4":1},"cache_salt":"s","priority":2`), check: func(t *testing.T, g *GenerateRequest) {
			s := g.Sampling
			if s.GetTopK() != 3 || s.GetMinP() != 0.5 || s.LogitBias[4] != 1 || s.CacheSalt != "s" || s.GetPriority() != 2 {
				t.Errorf("sampling %v", s)
			}
		}},
		{name: "mock engine takes every field", path: chatPath, body: chat("tiny-mocker", `"top_k":3,"bad_words":["x"],"allowed_token_ids":[4],"priority":1,"cache_salt":"s","repetition_penalty":3`), check: func(t *testing.T, g *GenerateRequest) {}},
		{name: "vllm takes every field", path: chatPath, body: chat("tiny-vllm", `"top_k":3,"bad_words":["x"],"allowed_token_ids":[4],"priority":1,"cache_salt":"s","repetition_penalty":3`), check: func(t *testing.T, g *GenerateRequest) {}},
		{name: "sglang takes its fields", path: chatPath, body: chat("tiny-sglang", `"top_k":3,"min_p":0.1,"logit_bias":{"4":1},"seed":3,"priority":1,"cache_salt":"s","repetition_penalty":2`), check: func(t *testing.T, g *GenerateRequest) {}},
		{name: "trtllm takes its fields", path: compPath, body: comp("tiny-trtllm", `"top_k":3,"min_p":0.1,"logit_bias":{"4":1},"seed":3,"priority":0,"repetition_penalty":3`), check: func(t *testing.T, g *GenerateRequest) {}},

		{name: "vLLM fields without effect", path: chatPath, body: chat("tiny", `"use_beam_search":false,"length_penalty":1.5,"early_stopping":true,"vllm_xargs":{},"kv_transfer_params":{},"mm_processor_kwargs":{},"media_io_kwargs":{},"logits_processors":[],"thinking_token_budget":-1,"session_id":"s-1","stream_interval":4,"return_token_offsets":true,"return_mm_kwargs":false,"routed_experts_prompt_start":0,"watermarking":false`), check: func(t *testing.T, g *GenerateRequest) {}},
		{name: "truncation_side right", path: compPath, body: `{"model":"tiny","truncate_prompt_tokens":2,"truncation_side":"right","prompt":[10,11,12]}`, check: func(t *testing.T, g *GenerateRequest) {
			if fmt.Sprint(g.TokenIDs) != "[10 11]" {
				t.Errorf("prompt %v", g.TokenIDs)
			}
		}},
		{name: "truncation_side left", path: compPath, body: `{"model":"tiny","truncate_prompt_tokens":2,"truncation_side":"left","prompt":[10,11,12]}`, check: func(t *testing.T, g *GenerateRequest) {
			if fmt.Sprint(g.TokenIDs) != "[11 12]" {
				t.Errorf("prompt %v", g.TokenIDs)
			}
		}},
		{name: "chat vLLM fields", path: chatPath, body: chat("tiny", `"echo":false,"add_special_tokens":false,"include_reasoning":true,"return_token_ids":false,"return_prompt_text":false,"documents":[{"title":"a","text":"b"}]`), check: func(t *testing.T, g *GenerateRequest) {}},

		// Refused: invalid values.
		{name: "top_k below -1", path: chatPath, body: chat("tiny", `"top_k":-2`), code: "invalid_value", param: "top_k"},
		{name: "top_k fraction", path: chatPath, body: chat("tiny", `"top_k":1.5`), code: "invalid_type", param: "top_k"},
		{name: "min_p above 1", path: chatPath, body: chat("tiny", `"min_p":1.5`), code: "invalid_value", param: "min_p"},
		{name: "repetition_penalty zero", path: chatPath, body: chat("tiny", `"repetition_penalty":0`), code: "invalid_value", param: "repetition_penalty"},
		{name: "logit_bias key not an id", path: chatPath, body: chat("tiny", `"logit_bias":{"abc":1}`), code: "invalid_value", param: "logit_bias"},
		{name: "logit_bias negative key", path: chatPath, body: chat("tiny", `"logit_bias":{"-3":1}`), code: "invalid_value", param: "logit_bias"},
		{name: "logit_bias value type", path: chatPath, body: chat("tiny", `"logit_bias":{"5":"x"}`), code: "invalid_type", param: "logit_bias.5"},
		{name: "logit_bias out of vocabulary", path: chatPath, body: chat("tiny", `"logit_bias":{"50256":-100}`), code: "invalid_value", param: "logit_bias", message: "size 259"},
		{name: "stop_token_ids out of vocabulary", path: chatPath, body: chat("tiny", `"stop_token_ids":[5,259]`), code: "invalid_value", param: "stop_token_ids"},
		{name: "allowed_token_ids empty", path: chatPath, body: chat("tiny", `"allowed_token_ids":[]`), code: "invalid_value", param: "allowed_token_ids"},
		{name: "allowed_token_ids out of vocabulary", path: compPath, body: comp("tiny", `"allowed_token_ids":[3,99999]`), code: "invalid_value", param: "allowed_token_ids"},
		{name: "bad_words empty string", path: chatPath, body: chat("tiny", `"bad_words":["a",""]`), code: "invalid_value", param: "bad_words[1]"},
		{name: "bad_words not an array", path: chatPath, body: chat("tiny", `"bad_words":"a"`), code: "invalid_type", param: "bad_words"},
		{name: "priority fraction", path: chatPath, body: chat("tiny", `"priority":1.5`), code: "invalid_type", param: "priority"},
		{name: "cache_salt empty", path: chatPath, body: chat("tiny", `"cache_salt":""`), code: "invalid_value", param: "cache_salt", message: "must be a non-empty string"},
		{name: "cache_salt type", path: compPath, body: comp("tiny", `"cache_salt":5`), code: "invalid_type", param: "cache_salt"},
		{name: "include_stop_str_in_output type", path: chatPath, body: chat("tiny", `"include_stop_str_in_output":"yes"`), code: "invalid_type", param: "include_stop_str_in_output"},
		{name: "spaces_between_special_tokens type", path: chatPath, body: chat("tiny", `"spaces_between_special_tokens":1`), code: "invalid_type", param: "spaces_between_special_tokens"},
		{name: "truncate_prompt_tokens below -1", path: chatPath, body: chat("tiny", `"truncate_prompt_tokens":-2`), code: "invalid_value", param: "truncate_prompt_tokens"},
		{name: "truncate_prompt_tokens beyond the room", path: compPath, body: comp("tiny", `"max_tokens":8,"truncate_prompt_tokens":121`), code: "invalid_value", param: "truncate_prompt_tokens", message: "= 120"},
		{name: "truncate_prompt_tokens zero", path: compPath, body: comp("tiny", `"truncate_prompt_tokens":0`), code: "invalid_value", param: "prompt"},
		{name: "min_tokens beyond the room", path: chatPath, body: chat("tiny", fmt.Sprintf(`"min_tokens":%d`, 129-len(hiPrompt))), code: "invalid_value", param: "min_tokens", message: "tokens the prompt"},
		{name: "temperature above vLLM's bound", path: chatPath, body: chat("tiny", `"temperature":2.01`), code: "invalid_value", param: "temperature"},
		{name: "continue_final_message with add_generation_prompt", path: chatPath, body: chat("tiny", `"continue_final_message":true,"add_generation_prompt":true`), code: "invalid_value", param: "continue_final_message", message: "Cannot set both"},
		{name: "chat_template that does not parse", path: chatPath, body: chat("tiny", `"chat_template":"{% for m in messages %}{{ m.content }"`), code: "invalid_value", param: "chat_template"},
		{name: "chat_template type", path: chatPath, body: chat("tiny", `"chat_template":["x"]`), code: "invalid_type", param: "chat_template"},

		{name: "stop empty string", path: chatPath, body: chat("tiny", `"stop":""`), code: "invalid_value", param: "stop", message: "stop cannot contain an empty string"},
		{name: "stop list with an empty string", path: compPath, body: comp("tiny", `"stop":["a",""]`), code: "invalid_value", param: "stop[1]", message: "stop cannot contain an empty string"},
		{name: "logit_bias null value", path: chatPath, body: chat("tiny", `"logit_bias":{"5":null}`), code: "invalid_type", param: "logit_bias.5"},
		{name: "request_id not an id", path: chatPath, body: chat("tiny", `"request_id":"a b"`), code: "invalid_value", param: "request_id"},
		{name: "request_id type", path: compPath, body: comp("tiny", `"request_id":7`), code: "invalid_type", param: "request_id"},
		{name: "truncation_side value", path: compPath, body: comp("tiny", `"truncate_prompt_tokens":2,"truncation_side":"middle"`), code: "invalid_value", param: "truncation_side"},
		{name: "stream_interval zero", path: chatPath, body: chat("tiny", `"stream_interval":0`), code: "invalid_value", param: "stream_interval"},
		{name: "length_penalty type", path: chatPath, body: chat("tiny", `"length_penalty":"x"`), code: "invalid_type", param: "length_penalty"},
		{name: "return_token_ids type", path: compPath, body: comp("tiny", `"return_token_ids":"yes"`), code: "invalid_type", param: "return_token_ids"},
		{name: "chat echo type", path: chatPath, body: chat("tiny", `"echo":1`), code: "invalid_type", param: "echo"},
		{name: "chat add_special_tokens type", path: chatPath, body: chat("tiny", `"add_special_tokens":"no"`), code: "invalid_type", param: "add_special_tokens"},
		{name: "completions add_special_tokens type", path: compPath, body: comp("tiny", `"add_special_tokens":0`), code: "invalid_type", param: "add_special_tokens"},
		{name: "include_reasoning type", path: chatPath, body: chat("tiny", `"include_reasoning":"no"`), code: "invalid_type", param: "include_reasoning"},
		{name: "documents type", path: chatPath, body: chat("tiny", `"documents":{"title":"a"}`), code: "invalid_type", param: "documents"},
		{name: "documents entry type", path: chatPath, body: chat("tiny", `"documents":["a"]`), code: "invalid_type", param: "documents[0]"},
		{name: "documents value type", path: chatPath, body: chat("tiny", `"documents":[{"title":"a","year":2024}]`), code: "invalid_type", param: "documents[0].year"},

		// Refused: vLLM fields Turbine cannot honour.
		{name: "use_beam_search", path: chatPath, body: chat("tiny", `"use_beam_search":true`), code: "unsupported_parameter", param: "use_beam_search"},
		{name: "prompt_embeds", path: compPath, body: comp("tiny", `"prompt_embeds":"AAAA"`), code: "unsupported_parameter", param: "prompt_embeds"},
		{name: "kv_transfer_params", path: compPath, body: comp("tiny", `"kv_transfer_params":{"do_remote_decode":true}`), code: "unsupported_parameter", param: "kv_transfer_params"},
		{name: "ec_transfer_params", path: chatPath, body: chat("tiny", `"ec_transfer_params":{"x":1}`), code: "unsupported_parameter", param: "ec_transfer_params"},
		{name: "vllm_xargs", path: chatPath, body: chat("tiny", `"vllm_xargs":{"my_arg":1}`), code: "unsupported_parameter", param: "vllm_xargs"},
		{name: "mm_processor_kwargs", path: chatPath, body: chat("tiny", `"mm_processor_kwargs":{"num_crops":4}`), code: "unsupported_parameter", param: "mm_processor_kwargs"},
		{name: "media_io_kwargs", path: chatPath, body: chat("tiny", `"media_io_kwargs":{"image":{"mode":"RGB"}}`), code: "unsupported_parameter", param: "media_io_kwargs"},
		{name: "logits_processors", path: compPath, body: comp("tiny", `"logits_processors":["my.Processor"]`), code: "unsupported_parameter", param: "logits_processors"},
		{name: "logprob_token_ids", path: chatPath, body: chat("tiny", `"logprobs":true,"logprob_token_ids":[5]`), code: "unsupported_parameter", param: "logprob_token_ids"},
		{name: "thinking_token_budget", path: chatPath, body: chat("tiny", `"thinking_token_budget":256`), code: "unsupported_parameter", param: "thinking_token_budget"},
		{name: "repetition_detection", path: compPath, body: comp("tiny", `"repetition_detection":{"max_pattern_size":8}`), code: "unsupported_parameter", param: "repetition_detection"},
		{name: "watermarking", path: chatPath, body: chat("tiny", `"watermarking":true`), code: "unsupported_parameter", param: "watermarking"},
		{name: "structural_tag", path: chatPath, body: chat("tiny", `"structural_tag":"{}"`), code: "unsupported_parameter", param: "structural_tag"},

		// Refused: the engine cannot honour the field.
		{name: "sglang bad_words", path: chatPath, body: chat("tiny-sglang", `"bad_words":["x"]`), code: "unsupported_parameter", param: "bad_words", message: "by SGLang"},
		{name: "sglang allowed_token_ids", path: compPath, body: comp("tiny-sglang", `"allowed_token_ids":[4]`), code: "unsupported_parameter", param: "allowed_token_ids", message: "by SGLang"},
		{name: "sglang repetition_penalty above 2", path: chatPath, body: chat("tiny-sglang", `"repetition_penalty":2.5`), code: "unsupported_parameter", param: "repetition_penalty", message: "by SGLang"},
		{name: "trtllm bad_words", path: chatPath, body: chat("tiny-trtllm", `"bad_words":["x"]`), code: "unsupported_parameter", param: "bad_words", message: "by TensorRT-LLM"},
		{name: "trtllm allowed_token_ids", path: chatPath, body: chat("tiny-trtllm", `"allowed_token_ids":[4]`), code: "unsupported_parameter", param: "allowed_token_ids", message: "by TensorRT-LLM"},
		{name: "trtllm priority", path: chatPath, body: chat("tiny-trtllm", `"priority":3`), code: "unsupported_parameter", param: "priority", message: "by TensorRT-LLM"},
		{name: "trtllm cache_salt", path: compPath, body: comp("tiny-trtllm", `"cache_salt":"s"`), code: "unsupported_parameter", param: "cache_salt", message: "by TensorRT-LLM"},
	}
	var out strings.Builder
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			b := samplingBackend(finish("ok", "stop"))
			s := newTestServer(t, b)
			s.cfg.TrustRequestChatTemplate = true // for the chat_template cases (the refusal: TestRequestChatTemplateTrust)
			rr := serve(s, http.MethodPost, c.path, c.body)
			fmt.Fprintf(&out, "### %s\nPOST %s %s\n--> %d ", c.name, c.path, abbreviate(c.body), rr.Code)
			gens := b.generated()
			if c.check != nil {
				if rr.Code != http.StatusOK || len(gens) != 1 {
					t.Fatalf("status %d, %d Generate calls: %s", rr.Code, len(gens), rr.Body.String())
				}
				c.check(t, gens[0])
				b.checkClosed(t)
				js, err := json.Marshal(gens[0].Sampling)
				if err != nil {
					t.Fatal(err)
				}
				fmt.Fprintf(&out, "sampling %s, %d prompt tokens\n", js, len(gens[0].TokenIDs))
				return
			}
			var body struct {
				Error struct {
					Message string  `json:"message"`
					Param   *string `json:"param"`
					Code    string  `json:"code"`
				} `json:"error"`
			}
			if err := json.Unmarshal(rr.Body.Bytes(), &body); err != nil {
				t.Fatalf("body %q: %v", rr.Body.String(), err)
			}
			param := ""
			if body.Error.Param != nil {
				param = *body.Error.Param
			}
			if rr.Code != http.StatusBadRequest || body.Error.Code != c.code || param != c.param || !strings.Contains(body.Error.Message, c.message) {
				t.Errorf("got %d code=%q param=%q (%s); want 400 code=%q param=%q message with %q",
					rr.Code, body.Error.Code, param, body.Error.Message, c.code, c.param, c.message)
			}
			if len(gens) != 0 {
				t.Errorf("%d requests reached the Backend", len(gens))
			}
			fmt.Fprintf(&out, "%s", rr.Body.String())
		})
	}
	checkGolden(t, "sampling.golden", []byte(out.String()))
}

// TestManyStopStringsEndToEnd runs a chat with more stop strings than OpenAI's four
// through the real tokenizer, detokenizer and stop matcher: the sixth one ends it.
func TestManyStopStringsEndToEnd(t *testing.T) {
	m := builtinModel(t)
	for _, stream := range []bool{false, true} {
		t.Run(fmt.Sprint("stream=", stream), func(t *testing.T) {
			s, b := builtinServer(t, oneByOne(m, "The answer is 42, said the oracle.")...)
			rr := serve(s, http.MethodPost, chatPath, fmt.Sprintf(`{"model":"chatml","stream":%v,"stop":["zebra","quux","@@","###","never","42"],"messages":[{"role":"user","content":"hi"}]}`, stream))
			if rr.Code != http.StatusOK {
				t.Fatalf("%d %s", rr.Code, rr.Body.String())
			}
			text, finish := answerText(t, rr.Body.String(), stream)
			if text != "The answer is " || finish != "stop" {
				t.Errorf("text %q finish %q", text, finish)
			}
			b.checkClosed(t)
		})
	}
}

// TestIncludeStopString keeps the matched stop string at the end of the output, streamed
// or not, and only with include_stop_str_in_output.
func TestIncludeStopString(t *testing.T) {
	m := builtinModel(t)
	for _, c := range []struct {
		include bool
		stream  bool
		want    string
	}{{false, false, "Olá "}, {true, false, "Olá END"}, {true, true, "Olá END"}, {false, true, "Olá "}} {
		t.Run(fmt.Sprintf("include=%v,stream=%v", c.include, c.stream), func(t *testing.T) {
			s, _ := builtinServer(t, oneByOne(m, "Olá END and more")...)
			rr := serve(s, http.MethodPost, chatPath, fmt.Sprintf(`{"model":"chatml","stream":%v,"stop":["END","ENDING"],"include_stop_str_in_output":%v,"messages":[{"role":"user","content":"hi"}]}`, c.stream, c.include))
			if rr.Code != http.StatusOK {
				t.Fatalf("%d %s", rr.Code, rr.Body.String())
			}
			text, finish := answerText(t, rr.Body.String(), c.stream)
			if text != c.want || finish != "stop" {
				t.Errorf("text %q finish %q, want %q", text, finish, c.want)
			}
		})
	}
}

// answerText is a chat answer's content and finish_reason, streamed (SSE) or not.
func answerText(t *testing.T, body string, stream bool) (text, finish string) {
	t.Helper()
	if stream {
		res := checkStream(t, body, true, false)
		return res.text, res.finish
	}
	var r struct {
		Choices []struct {
			Message struct {
				Content string `json:"content"`
			} `json:"message"`
			FinishReason string `json:"finish_reason"`
		} `json:"choices"`
	}
	if err := json.Unmarshal([]byte(body), &r); err != nil || len(r.Choices) != 1 {
		t.Fatalf("body %s: %v", body, err)
	}
	return r.Choices[0].Message.Content, r.Choices[0].FinishReason
}

// TestChatTemplateFields renders with the real template engine: a request's
// chat_template replaces the model's, and continue_final_message leaves the last message
// open (the default add_generation_prompt is then off).
func TestChatTemplateFields(t *testing.T) {
	m := builtinModel(t)
	cases := []struct {
		name, fields, messages, want string
	}{
		{"model's template", ``, `[{"role":"user","content":"hi"}]`,
			"<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"},
		{"request's template", `"chat_template":"{% for m in messages %}[{{ m.role }}] {{ m.content }}\n{% endfor %}{% if add_generation_prompt %}[assistant] {% endif %}",`, `[{"role":"user","content":"hi"}]`,
			"[user] hi\n[assistant] "},
		{"continue_final_message", `"continue_final_message":true,`, `[{"role":"user","content":"hi"},{"role":"assistant","content":"The answer is"}]`,
			"<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\nThe answer is"},
		{"continue_final_message with add_generation_prompt false", `"continue_final_message":true,"add_generation_prompt":false,`, `[{"role":"user","content":"hi"},{"role":"assistant","content":"Sure: "}]`,
			"<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\nSure: "},
		{"continue_final_message with a request's template", `"continue_final_message":true,"chat_template":"{% for m in messages %}<{{ m.role }}>{{ m.content | trim }}</{{ m.role }}>{% endfor %}",`, `[{"role":"user","content":"hi"},{"role":"assistant","content":"Well,  "}]`,
			"<user>hi</user><assistant>Well,"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s, b := builtinServer(t, finish("", "stop"))
			rr := serve(s, http.MethodPost, chatPath, `{"model":"chatml",`+c.fields+`"messages":`+c.messages+`}`)
			if rr.Code != http.StatusOK {
				t.Fatalf("%d %s", rr.Code, rr.Body.String())
			}
			if got := m.Tokenizer.Decode(b.generated()[0].TokenIDs); got != c.want {
				t.Errorf("prompt %q, want %q", got, c.want)
			}
		})
	}
	// A template that drops the final message's text cannot be continued: a 400.
	s, b := builtinServer(t, finish("", "stop"))
	rr := serve(s, http.MethodPost, chatPath, `{"model":"chatml","continue_final_message":true,"chat_template":"{% for m in messages %}{{ m.role }}{% endfor %}","messages":[{"role":"user","content":"hi"},{"role":"assistant","content":"Hello"}]}`)
	if rr.Code != http.StatusBadRequest || !strings.Contains(rr.Body.String(), `"param":"messages"`) || len(b.generated()) != 0 {
		t.Errorf("%d %s", rr.Code, rr.Body.String())
	}
}

// TestIgnoredFieldsLoggedOnce checks that a field neither OpenAI nor vLLM defines is
// ignored with one warning per field name for the server's life, while the fields the
// gateway reads are not logged.
func TestIgnoredFieldsLoggedOnce(t *testing.T) {
	var logs bytes.Buffer
	b := samplingBackend(finish("ok", "stop"))
	s, err := New(Config{Now: func() time.Time { return testTime }, Logger: zerolog.New(&logs)}, b, fakeOptions(fakePreprocessor{eos: []uint32{fakeEOS}})...)
	if err != nil {
		t.Fatal(err)
	}
	bodies := []struct{ path, body string }{
		{chatPath, `{"model":"tiny","frobnicate":1,"top_k":2,"cache_salt":"x","messages":[{"role":"user","content":"hi"}]}`},
		{chatPath, `{"model":"tiny","frobnicate":2,"zork":null,"messages":[{"role":"user","content":"hi"}]}`},
		{compPath, `{"model":"tiny","frobnicate":3,"zork":true,"min_p":0.1,"prompt":"a"}`},
	}
	for _, r := range bodies {
		if rr := serve(s, http.MethodPost, r.path, r.body); rr.Code != http.StatusOK {
			t.Fatalf("%d %s", rr.Code, rr.Body.String())
		}
	}
	var warned []string
	for _, line := range strings.Split(strings.TrimSpace(logs.String()), "\n") {
		var e struct{ Level, Field string }
		if err := json.Unmarshal([]byte(line), &e); err == nil && e.Level == "warn" {
			warned = append(warned, e.Field)
		}
	}
	if !slices.Equal(warned, []string{"frobnicate", "zork"}) {
		t.Errorf("warned about %q; want frobnicate and zork once each\n%s", warned, logs.String())
	}
}

// TestIgnoredFieldNamesBounded checks that the names remembered as logged stay bounded.
func TestIgnoredFieldNamesBounded(t *testing.T) {
	var f ignoredFields
	firsts := 0
	for i := range maxIgnoredFieldNames + 10 {
		if f.first(fmt.Sprint("field", i)) {
			firsts++
		}
	}
	if firsts != maxIgnoredFieldNames || len(f.names) != maxIgnoredFieldNames || f.first("field0") {
		t.Errorf("%d logged, %d remembered", firsts, len(f.names))
	}
}

// TestTruncatePrompt is the decision table of truncate_prompt_tokens.
func TestTruncatePrompt(t *testing.T) {
	ids := []uint32{1, 2, 3, 4, 5, 6}
	k := func(v int64) *int64 { return &v }
	cases := []struct {
		name      string
		k         *int64
		maxTokens int64
		ctxLen    int
		want      string // the ids kept, or the error's param
	}{
		{"absent", nil, 0, 10, "[1 2 3 4 5 6]"},
		{"keep last 2", k(2), 0, 10, "[5 6]"},
		{"zero keeps none", k(0), 0, 10, "[]"},
		{"longer than the prompt", k(9), 0, 10, "[1 2 3 4 5 6]"},
		{"-1 leaves one token of room", k(-1), 0, 5, "[3 4 5 6]"},
		{"-1 leaves max_tokens of room", k(-1), 3, 5, "[5 6]"},
		{"-1 with an unknown context", k(-1), 0, 0, "[1 2 3 4 5 6]"},
		{"k with an unknown context", k(3), 0, 0, "[4 5 6]"},
		{"beyond context minus max_tokens", k(3), 3, 5, "truncate_prompt_tokens"},
		{"up to context minus max_tokens", k(2), 3, 5, "[5 6]"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cr := &commonRequest{MaxTokens: c.maxTokens}
			cr.TruncatePromptTokens = c.k
			got, aerr := truncatePrompt(ids, cr, c.ctxLen)
			res := fmt.Sprint(got)
			if aerr != nil {
				res = aerr.Param
			}
			if res != c.want {
				t.Errorf("got %s, want %s", res, c.want)
			}
		})
	}
}

// TestKeepStop checks the include_stop_str_in_output wrapper over the real matcher.
func TestKeepStop(t *testing.T) {
	m := withStopString(model.NewStopMatcher([]string{"STOP"}), true)
	var out strings.Builder
	for _, piece := range []string{"ab", "cS", "TO", "Pde"} {
		e, stopped := m.Push(piece)
		out.WriteString(e)
		if stopped {
			break
		}
	}
	if out.String() != "abcSTOP" {
		t.Errorf("emitted %q", out.String())
	}
	if e, stopped := m.Push("more"); e != "" || !stopped {
		t.Errorf("after the stop: %q %v", e, stopped)
	}
	if m.(matcher).Matched() != "STOP" {
		t.Errorf("matched %q", m.(matcher).Matched())
	}
	if plain := model.NewStopMatcher([]string{"x"}); withStopString(plain, false) != StopMatcher(plain) {
		t.Error("wrapped without include")
	}
}

// TestVLLMFieldsNotWarned checks that vLLM's own request fields, honoured or accepted
// without effect, are not logged as unknown, and that the warning for a field vLLM does
// not define says so.
func TestVLLMFieldsNotWarned(t *testing.T) {
	var logs bytes.Buffer
	b := samplingBackend(finish("ok", "stop"))
	s, err := New(Config{Now: func() time.Time { return testTime }, Logger: zerolog.New(&logs)}, b, fakeOptions(fakePreprocessor{eos: []uint32{fakeEOS}})...)
	if err != nil {
		t.Fatal(err)
	}
	bodies := []struct{ path, body string }{
		{chatPath, `{"model":"tiny","use_beam_search":false,"length_penalty":1,"echo":false,"add_special_tokens":false,"documents":[],"request_id":"r-1","return_token_ids":true,"session_id":"s","include_reasoning":true,"return_prompt_text":false,"store":true,"messages":[{"role":"user","content":"hi"}]}`},
		{compPath, `{"model":"tiny","use_beam_search":false,"early_stopping":false,"add_special_tokens":true,"vllm_xargs":{},"kv_transfer_params":{},"truncation_side":"left","stream_interval":2,"prompt":"a"}`},
	}
	for _, r := range bodies {
		if rr := serve(s, http.MethodPost, r.path, r.body); rr.Code != http.StatusOK {
			t.Fatalf("%d %s", rr.Code, rr.Body.String())
		}
	}
	var warned []string
	for _, line := range strings.Split(strings.TrimSpace(logs.String()), "\n") {
		var e struct{ Level, Field, Message string }
		if err := json.Unmarshal([]byte(line), &e); err == nil && e.Level == "warn" {
			warned = append(warned, e.Field)
			if !strings.Contains(e.Message, "vLLM's OpenAI server does not define it") {
				t.Errorf("warning %q", e.Message)
			}
		}
	}
	// store is OpenAI's, but vLLM's chat requests do not define it: vLLM ignores it too.
	if !slices.Equal(warned, []string{"store"}) {
		t.Errorf("warned about %q; want store only\n%s", warned, logs.String())
	}
}

// TestChatTemplateUndefinedVariable: a request's chat_template that renders nothing (its
// variables are undefined, as {{ prompt }} is in a chat template) is a 400 naming
// chat_template, not an empty prompt.
func TestChatTemplateUndefinedVariable(t *testing.T) {
	for _, path := range []string{chatPath, "/tokenize"} {
		s, b := builtinServer(t, finish("", "stop"))
		s.cfg.TrustRequestChatTemplate = true
		rr := serve(s, http.MethodPost, path, `{"model":"chatml","chat_template":"{{ prompt }}{{ system_message }}","messages":[{"role":"user","content":"hi"}]}`)
		if rr.Code != http.StatusBadRequest || !strings.Contains(rr.Body.String(), `"param":"chat_template"`) ||
			!strings.Contains(rr.Body.String(), "empty prompt") || len(b.generated()) != 0 {
			t.Errorf("%s: %d %s", path, rr.Code, rr.Body.String())
		}
	}
}

// TestChatDocuments: documents reach the chat template as vLLM passes them.
func TestChatDocuments(t *testing.T) {
	s, b := builtinServer(t, finish("", "stop"))
	s.cfg.TrustRequestChatTemplate = true
	rr := serve(s, http.MethodPost, chatPath, `{"model":"chatml","chat_template":"{% for d in documents %}[{{ d.title }}] {{ d.text }}\n{% endfor %}{% if documents is none %}none{% endif %}{{ messages[0].content }}","documents":[{"title":"A","text":"alpha"},{"title":"B","text":"beta"}],"messages":[{"role":"user","content":"hi"}]}`)
	if rr.Code != http.StatusOK {
		t.Fatalf("%d %s", rr.Code, rr.Body.String())
	}
	if got := builtinModel(t).Tokenizer.Decode(b.generated()[0].TokenIDs); got != "[A] alpha\n[B] beta\nhi" {
		t.Errorf("prompt %q", got)
	}
}

// imStartPreprocessor is the fake preprocessor with a tokenizer that puts <|im_start|>
// (as a BOS) before a raw prompt.
type imStartPreprocessor struct{ fakePreprocessor }

func (imStartPreprocessor) EncodePrompt(text string) []uint32 {
	return append([]uint32{fakeImStart}, fakeTokenizer{}.Encode(text)...)
}

// TestAddSpecialTokens: chat prompts are tokenized without the tokenizer's special
// tokens unless add_special_tokens is true; completions prompts with them unless false.
func TestAddSpecialTokens(t *testing.T) {
	for _, c := range []struct {
		path, fields string
		bos          bool
	}{
		{chatPath, ``, false},
		{chatPath, `"add_special_tokens":true,`, true},
		{compPath, ``, true},
		{compPath, `"add_special_tokens":false,`, false},
	} {
		b := samplingBackend(finish("ok", "stop"))
		s, err := New(Config{Now: func() time.Time { return testTime }}, b, fakeOptions(imStartPreprocessor{fakePreprocessor{eos: []uint32{fakeEOS}}})...)
		if err != nil {
			t.Fatal(err)
		}
		body := `{"model":"tiny",` + c.fields + `"prompt":"abc"}`
		if c.path == chatPath {
			body = `{"model":"tiny",` + c.fields + `"messages":[{"role":"user","content":"abc"}]}`
		}
		if rr := serve(s, http.MethodPost, c.path, body); rr.Code != http.StatusOK {
			t.Fatalf("%d %s", rr.Code, rr.Body.String())
		}
		ids := b.generated()[0].TokenIDs
		// The fake chat template starts with <|im_start|> itself: a BOS makes it two.
		bos := ids[0] == fakeImStart && (c.path == compPath || ids[1] == fakeImStart)
		if bos != c.bos {
			t.Errorf("%s %s: prompt %v", c.path, c.fields, ids)
		}
	}
}

// TestBodyRequestID: a body's request_id is the request's id (the answer's id, the
// Backend's request id, X-Request-Id) when the client sent no X-Request-Id header, as in
// vLLM, where the header wins.
func TestBodyRequestID(t *testing.T) {
	for _, c := range []struct {
		path, header, body, wantID, wantBackend string
	}{
		{chatPath, "", `{"model":"tiny","request_id":"my-req.7",` + hiChat + `}`, "chatcmpl-my-req.7", "my-req.7"},
		{compPath, "", `{"model":"tiny","request_id":"abc","prompt":"x"}`, "cmpl-abc", "abc"},
		{chatPath, "hdr-1", `{"model":"tiny","request_id":"body-1",` + hiChat + `}`, "chatcmpl-hdr-1", "hdr-1"},
	} {
		b := samplingBackend(finish("ok", "stop"))
		s := newTestServer(t, b)
		req := httptest.NewRequest(http.MethodPost, c.path, strings.NewReader(c.body))
		req.Header.Set("Content-Type", "application/json")
		if c.header != "" {
			req.Header.Set("X-Request-Id", c.header)
		}
		rr := httptest.NewRecorder()
		s.ServeHTTP(rr, req)
		var resp struct{ ID string }
		if err := json.Unmarshal(rr.Body.Bytes(), &resp); err != nil || rr.Code != http.StatusOK {
			t.Fatalf("%d %s", rr.Code, rr.Body.String())
		}
		if resp.ID != c.wantID || rr.Header().Get("X-Request-Id") != c.wantBackend || b.generated()[0].RequestID != c.wantBackend {
			t.Errorf("%s: id %q, X-Request-Id %q, backend %q; want %q, %q", c.body, resp.ID, rr.Header().Get("X-Request-Id"),
				b.generated()[0].RequestID, c.wantID, c.wantBackend)
		}
	}
}

// stopReasonOf returns the answer's stop_reason (raw JSON; "" when absent) and
// finish_reason: the choice's in a body, the finishing chunk's in a stream, where
// completions chunks carry null before it and chat chunks none.
func stopReasonOf(t *testing.T, body string, stream, chat bool) (stopReason, finish string) {
	t.Helper()
	type choice struct {
		FinishReason *string         `json:"finish_reason"`
		StopReason   json.RawMessage `json:"stop_reason"`
	}
	if !stream {
		var r struct{ Choices []choice }
		if err := json.Unmarshal([]byte(body), &r); err != nil || len(r.Choices) != 1 || r.Choices[0].FinishReason == nil {
			t.Fatalf("body %s: %v", body, err)
		}
		return string(r.Choices[0].StopReason), *r.Choices[0].FinishReason
	}
	for _, f := range sseFrames(t, body) {
		var c struct{ Choices []choice }
		if f == "[DONE]" || json.Unmarshal([]byte(f), &c) != nil || len(c.Choices) == 0 {
			continue
		}
		ch := c.Choices[0]
		if ch.FinishReason != nil {
			return string(ch.StopReason), *ch.FinishReason
		}
		if want := map[bool]string{true: "", false: "null"}[chat]; string(ch.StopReason) != want {
			t.Errorf("chunk before the finish has stop_reason %q: %s", ch.StopReason, f)
		}
	}
	t.Fatalf("no finishing chunk: %s", body)
	return "", ""
}

// TestStopReason is vLLM's stop_reason on chat and completions choices, streamed and
// not: the stop string that matched, the stop_token_ids id that ended the output, or
// null (an EOS token, the length limit, the engine's own stop).
func TestStopReason(t *testing.T) {
	for _, c := range []struct {
		name, fields string
		steps        []step
		want, finish string
	}{
		{"stop string", `"stop":["END","zz"],`, []step{tokens("Hello EN"), finish("D more", "length")}, `"END"`, "stop"},
		{"stop string kept", `"stop":["END"],"include_stop_str_in_output":true,`, []step{finish("Hello END more", "length")}, `"END"`, "stop"},
		{"stop token id", `"stop_token_ids":[7],`, []step{chunk(append(toks("Hi"), 7, fakeByteBase+'x'), "", "")}, `7`, "stop"},
		{"eos", `"stop_token_ids":[7],`, []step{chunk(append(toks("Hi"), fakeEOS), "", "")}, `null`, "stop"},
		{"eos listed in stop_token_ids", `"stop_token_ids":[0],`, []step{chunk(append(toks("Hi"), fakeEOS), "", "")}, `null`, "stop"},
		{"eos as a stop token id with ignore_eos", `"ignore_eos":true,"stop_token_ids":[0],`, []step{chunk(append(toks("Hi"), fakeEOS), "", "")}, `0`, "stop"},
		{"length", `"stop":["END"],`, []step{finish("Hello", "length")}, `null`, "length"},
		{"engine stop", ``, []step{finish("Hello", "stop")}, `null`, "stop"},
	} {
		for _, path := range []string{chatPath, compPath} {
			for _, stream := range []bool{false, true} {
				t.Run(fmt.Sprintf("%s %s stream=%v", c.name, path, stream), func(t *testing.T) {
					body := fmt.Sprintf(`{"model":"tiny",%s"stream":%v,"prompt":"x",`+hiChat+`}`, c.fields, stream)
					b := samplingBackend(c.steps...)
					// The model's stop matcher, which tells the stop string it found.
					opts := append(fakeOptions(fakePreprocessor{eos: []uint32{fakeEOS}}),
						WithStopMatcher(func(stops []string) StopMatcher { return model.NewStopMatcher(stops) }))
					s, err := New(Config{Now: func() time.Time { return testTime }}, b, opts...)
					if err != nil {
						t.Fatal(err)
					}
					rr := serve(s, http.MethodPost, path, body)
					if rr.Code != http.StatusOK {
						t.Fatalf("%d %s", rr.Code, rr.Body.String())
					}
					got, finish := stopReasonOf(t, rr.Body.String(), stream, path == chatPath)
					if got != c.want || finish != c.finish {
						t.Errorf("stop_reason %s finish_reason %s, want %s %s\n%s", got, finish, c.want, c.finish, rr.Body.String())
					}
				})
			}
		}
	}
}

// TestChatEcho: with echo, the answer starts with the last message's content when that
// message has the answer's role (the assistant's, or with add_generation_prompt false
// the last message's own), as vLLM does; streamed, it is a chunk of its own after the
// role chunk.
func TestChatEcho(t *testing.T) {
	for _, c := range []struct {
		name, fields, messages, want string
	}{
		{"user message, generation prompt", `"echo":true,`, `[{"role":"user","content":"hi"}]`, "Hello"},
		{"user message, no generation prompt", `"echo":true,"add_generation_prompt":false,`, `[{"role":"user","content":"hi"}]`, "hiHello"},
		{"assistant message", `"echo":true,`, `[{"role":"user","content":"hi"},{"role":"assistant","content":"Well, "}]`, "Well, Hello"},
		{"continue_final_message", `"echo":true,"continue_final_message":true,`, `[{"role":"user","content":"hi"},{"role":"assistant","content":"Well, "}]`, "Well, Hello"},
		{"echo off", `"echo":false,`, `[{"role":"user","content":"hi"},{"role":"assistant","content":"Well, "}]`, "Hello"},
	} {
		for _, stream := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s stream=%v", c.name, stream), func(t *testing.T) {
				b := samplingBackend(tokens("Hel"), finish("lo", "stop"))
				rr := serve(newTestServer(t, b), http.MethodPost, chatPath, fmt.Sprintf(`{"model":"tiny",%s"stream":%v,"messages":%s}`, c.fields, stream, c.messages))
				if rr.Code != http.StatusOK {
					t.Fatalf("%d %s", rr.Code, rr.Body.String())
				}
				if text, _ := answerText(t, rr.Body.String(), stream); text != c.want {
					t.Errorf("content %q, want %q", text, c.want)
				}
			})
		}
	}
}

// TestReturnTokenIDs: return_token_ids adds the prompt's token ids and the output's, in
// vLLM's shapes: chat has prompt_token_ids on the body (on the first chunk when
// streamed) and token_ids on the choice (each chunk's new ones when streamed);
// completions have both on the choice (prompt_token_ids on the first chunk when
// streamed). The output's ids include the token that ended it.
func TestReturnTokenIDs(t *testing.T) {
	out := append(toks("Hello"), fakeEOS)
	steps := []step{chunk(toks("He"), "", ""), chunk(toks("ll"), "", ""), chunk(append(toks("o"), fakeEOS), "", "")}
	type choice struct {
		PromptTokenIDs []uint32 `json:"prompt_token_ids"`
		TokenIDs       []uint32 `json:"token_ids"`
	}
	type answer struct {
		PromptTokenIDs []uint32 `json:"prompt_token_ids"`
		Choices        []choice `json:"choices"`
	}
	for _, path := range []string{chatPath, compPath} {
		for _, stream := range []bool{false, true} {
			for _, on := range []bool{false, true} {
				t.Run(fmt.Sprintf("%s stream=%v return_token_ids=%v", path, stream, on), func(t *testing.T) {
					b := samplingBackend(steps...)
					rr := serve(newTestServer(t, b), http.MethodPost, path, fmt.Sprintf(`{"model":"tiny","return_token_ids":%v,"stream":%v,"prompt":"abc",`+hiChat+`}`, on, stream))
					if rr.Code != http.StatusOK {
						t.Fatalf("%d %s", rr.Code, rr.Body.String())
					}
					var prompt, ids []uint32
					promptSeen := 0
					frames := []string{rr.Body.String()}
					if stream {
						frames = sseFrames(t, rr.Body.String())
					}
					for _, f := range frames {
						var a answer
						if f == "[DONE]" || json.Unmarshal([]byte(f), &a) != nil {
							continue
						}
						if a.PromptTokenIDs != nil {
							prompt, promptSeen = a.PromptTokenIDs, promptSeen+1
							if path != chatPath {
								t.Errorf("completions answer with a top-level prompt_token_ids: %s", f)
							}
						}
						for _, ch := range a.Choices {
							if ch.PromptTokenIDs != nil {
								prompt, promptSeen = ch.PromptTokenIDs, promptSeen+1
								if path == chatPath {
									t.Errorf("chat choice with prompt_token_ids: %s", f)
								}
							}
							ids = append(ids, ch.TokenIDs...)
						}
					}
					if !on {
						if promptSeen != 0 || ids != nil {
							t.Errorf("token ids without return_token_ids: %s", rr.Body.String())
						}
						return
					}
					if promptSeen != 1 || !slices.Equal(prompt, b.generated()[0].TokenIDs) || !slices.Equal(ids, out) {
						t.Errorf("prompt %v (%d times), output %v; want %v once, %v\n%s", prompt, promptSeen, ids, b.generated()[0].TokenIDs, out, rr.Body.String())
					}
				})
			}
		}
	}
}

// TestIncludeReasoningFalse: include_reasoning false leaves the reasoning out of the
// answer (the content is unchanged), streamed or not, as vLLM does.
func TestIncludeReasoningFalse(t *testing.T) {
	for _, stream := range []bool{false, true} {
		answer := func(include bool) string {
			b := agentBackend(tokens("<think>\nponder\n</think>\n\nThe an"), finish("swer.", "stop"))
			rr := serve(newTestServer(t, b), http.MethodPost, chatPath, fmt.Sprintf(`{"model":"agent","include_reasoning":%v,"stream":%v,"messages":[{"role":"user","content":"hi"}]}`, include, stream))
			if rr.Code != http.StatusOK {
				t.Fatalf("%d %s", rr.Code, rr.Body.String())
			}
			if strings.Contains(rr.Body.String(), "ponder") == !include {
				t.Errorf("stream=%v include_reasoning=%v: %s", stream, include, rr.Body.String())
			}
			text, _ := answerText(t, rr.Body.String(), stream)
			return text
		}
		if with, without := answer(true), answer(false); without != with || !strings.Contains(with, "The answer.") {
			t.Errorf("stream=%v: content %q without reasoning, %q with", stream, without, with)
		}
	}
}

// TestReturnPromptText: return_prompt_text adds the rendered prompt (prompt_text) to the
// body, or to the first chunk of a stream.
func TestReturnPromptText(t *testing.T) {
	const want = "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
	for _, stream := range []bool{false, true} {
		b := samplingBackend(finish("ok", "stop"))
		rr := serve(newTestServer(t, b), http.MethodPost, chatPath, fmt.Sprintf(`{"model":"tiny","return_prompt_text":true,"stream":%v,`+hiChat+`}`, stream))
		if rr.Code != http.StatusOK {
			t.Fatalf("%d %s", rr.Code, rr.Body.String())
		}
		first := rr.Body.String()
		if stream {
			first = sseFrames(t, first)[0]
		}
		var a struct {
			PromptText *string `json:"prompt_text"`
		}
		if err := json.Unmarshal([]byte(first), &a); err != nil || a.PromptText == nil || *a.PromptText != want {
			t.Errorf("stream=%v: %s", stream, rr.Body.String())
		}
		if strings.Count(rr.Body.String(), "prompt_text") != 1 {
			t.Errorf("stream=%v: prompt_text more than once: %s", stream, rr.Body.String())
		}
	}
}

// TestVLLMFieldsWithSeveralChoices: with n = 2, each chat choice has its own token_ids,
// echo and stop_reason, and the body the prompt's ids and text once.
func TestVLLMFieldsWithSeveralChoices(t *testing.T) {
	b := samplingBackend(chunk(append(toks("Hi"), 7), "", ""))
	rr := serve(newTestServer(t, b), http.MethodPost, chatPath, `{"model":"tiny","n":2,"return_token_ids":true,"return_prompt_text":true,"echo":true,"add_generation_prompt":false,"stop_token_ids":[7],`+hiChat+`}`)
	var resp struct {
		PromptTokenIDs []uint32 `json:"prompt_token_ids"`
		PromptText     string   `json:"prompt_text"`
		Choices        []struct {
			Message    struct{ Content string }
			StopReason json.RawMessage `json:"stop_reason"`
			TokenIDs   []uint32        `json:"token_ids"`
		}
	}
	if err := json.Unmarshal(rr.Body.Bytes(), &resp); err != nil || rr.Code != http.StatusOK || len(resp.Choices) != 2 {
		t.Fatalf("%d %s", rr.Code, rr.Body.String())
	}
	if !slices.Equal(resp.PromptTokenIDs, b.generated()[0].TokenIDs) || resp.PromptText != "<|im_start|>user\nhi<|im_end|>\n" {
		t.Errorf("prompt %v %q", resp.PromptTokenIDs, resp.PromptText)
	}
	for i, c := range resp.Choices {
		if c.Message.Content != "hiHi" || string(c.StopReason) != "7" || !slices.Equal(c.TokenIDs, append(toks("Hi"), 7)) {
			t.Errorf("choice %d: %q %s %v", i, c.Message.Content, c.StopReason, c.TokenIDs)
		}
	}
}
