package gateway

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
)

const (
	chatPath = "/v1/chat/completions"
	compPath = "/v1/completions"
)

// TestRejectedRequests runs bad requests through the whole handler: each must be refused
// with the listed status, code and param before anything reaches the Backend. The
// bodies are kept in testdata/validation.golden.
func TestRejectedRequests(t *testing.T) {
	long := strings.Repeat("x", 200) // 200 fake tokens > tiny's 128-token context
	cases := []struct {
		name, path, body string
		status           int
		code, param      string
	}{
		{"malformed json", chatPath, `{"model":"tiny",`, 400, "invalid_json", ""},
		{"body not an object", chatPath, `[1,2]`, 400, "invalid_json", ""},
		{"body not UTF-8", chatPath, "{\"model\":\"tiny\",\"messages\":[{\"role\":\"user\",\"content\":\"\xff\xfe\"}]}", 400, "invalid_json", ""},
		{"missing model", chatPath, `{"messages":[{"role":"user","content":"hi"}]}`, 400, "missing_required_parameter", "model"},
		{"model wrong type", chatPath, `{"model":7,"messages":[{"role":"user","content":"hi"}]}`, 400, "invalid_type", "model"},
		{"missing messages", chatPath, `{"model":"tiny"}`, 400, "missing_required_parameter", "messages"},
		{"null messages", chatPath, `{"model":"tiny","messages":null}`, 400, "missing_required_parameter", "messages"},
		{"empty messages", chatPath, `{"model":"tiny","messages":[]}`, 400, "invalid_value", "messages"},
		{"messages not array", chatPath, `{"model":"tiny","messages":"hi"}`, 400, "invalid_type", "messages"},
		{"message not object", chatPath, `{"model":"tiny","messages":["hi"]}`, 400, "invalid_type", "messages[0]"},
		{"missing role", chatPath, `{"model":"tiny","messages":[{"content":"hi"}]}`, 400, "missing_required_parameter", "messages[0].role"},
		{"bad role", chatPath, `{"model":"tiny","messages":[{"role":"robot","content":"hi"}]}`, 400, "invalid_value", "messages[0].role"},
		{"missing content", chatPath, `{"model":"tiny","messages":[{"role":"user"}]}`, 400, "missing_required_parameter", "messages[0].content"},
		{"empty content", chatPath, `{"model":"tiny","messages":[{"role":"system","content":"be brief"},{"role":"user","content":""}]}`, 400, "invalid_value", "messages[1].content"},
		{"content wrong type", chatPath, `{"model":"tiny","messages":[{"role":"user","content":5}]}`, 400, "invalid_type", "messages[0].content"},
		{"image part", chatPath, `{"model":"tiny","messages":[{"role":"user","content":[{"type":"text","text":"a"},{"type":"image_url","image_url":{"url":"x"}}]}]}`, 400, "unsupported_parameter", "messages[0].content[1].type"},
		{"part without text", chatPath, `{"model":"tiny","messages":[{"role":"user","content":[{"type":"text"}]}]}`, 400, "missing_required_parameter", "messages[0].content[0].text"},
		{"empty parts", chatPath, `{"model":"tiny","messages":[{"role":"user","content":[]}]}`, 400, "invalid_value", "messages[0].content"},
		{"assistant without content or tool calls", chatPath, `{"model":"tiny","messages":[{"role":"user","content":"a"},{"role":"assistant","content":null}]}`, 400, "missing_required_parameter", "messages[1].content"},
		{"tool without tool_call_id", chatPath, `{"model":"tiny","messages":[{"role":"tool","content":"42"}]}`, 400, "missing_required_parameter", "messages[0].tool_call_id"},
		{"max_tokens zero", chatPath, `{"model":"tiny","max_tokens":0,"messages":[{"role":"user","content":"hi"}]}`, 400, "invalid_value", "max_tokens"},
		{"max_tokens negative", chatPath, `{"model":"tiny","max_tokens":-3,"messages":[{"role":"user","content":"hi"}]}`, 400, "invalid_value", "max_tokens"},
		{"max_tokens fraction", chatPath, `{"model":"tiny","max_tokens":1.5,"messages":[{"role":"user","content":"hi"}]}`, 400, "invalid_type", "max_tokens"},
		{"max_tokens string", chatPath, `{"model":"tiny","max_tokens":"10","messages":[{"role":"user","content":"hi"}]}`, 400, "invalid_type", "max_tokens"},
		{"max_completion_tokens zero", chatPath, `{"model":"tiny","max_completion_tokens":0,"messages":[{"role":"user","content":"hi"}]}`, 400, "invalid_value", "max_completion_tokens"},
		{"max_tokens beyond context", chatPath, `{"model":"tiny","max_tokens":120,"messages":[{"role":"user","content":"hi"}]}`, 400, "context_length_exceeded", "max_tokens"},
		{"max_completion_tokens beyond context", chatPath, `{"model":"tiny","max_completion_tokens":500,"messages":[{"role":"user","content":"hi"}]}`, 400, "context_length_exceeded", "max_completion_tokens"},
		{"prompt beyond context", chatPath, `{"model":"tiny","messages":[{"role":"user","content":"` + long + `"}]}`, 400, "context_length_exceeded", "messages"},
		{"min_tokens above max_tokens", chatPath, `{"model":"tiny","max_tokens":5,"min_tokens":9,"messages":[{"role":"user","content":"hi"}]}`, 400, "invalid_value", "min_tokens"},
		{"n over the bound", chatPath, `{"model":"tiny","n":129,"messages":[{"role":"user","content":"hi"}]}`, 400, "invalid_value", "n"},
		{"n zero", chatPath, `{"model":"tiny","n":0,"messages":[{"role":"user","content":"hi"}]}`, 400, "invalid_value", "n"},
		{"stop_token_ids out of vocabulary", chatPath, `{"model":"tiny","stop_token_ids":[5,300],"messages":[{"role":"user","content":"hi"}]}`, 400, "invalid_value", "stop_token_ids"},
		{"stop element type", chatPath, `{"model":"tiny","stop":["a",3],"messages":[{"role":"user","content":"hi"}]}`, 400, "invalid_type", "stop[1]"},
		{"stop object", chatPath, `{"model":"tiny","stop":{"a":1},"messages":[{"role":"user","content":"hi"}]}`, 400, "invalid_type", "stop"},
		{"temperature high", chatPath, `{"model":"tiny","temperature":2.5,"messages":[{"role":"user","content":"hi"}]}`, 400, "invalid_value", "temperature"},
		{"temperature string", chatPath, `{"model":"tiny","temperature":"hot","messages":[{"role":"user","content":"hi"}]}`, 400, "invalid_type", "temperature"},
		{"top_p zero", chatPath, `{"model":"tiny","top_p":0,"messages":[{"role":"user","content":"hi"}]}`, 400, "invalid_value", "top_p"},
		{"presence_penalty", chatPath, `{"model":"tiny","presence_penalty":-2.1,"messages":[{"role":"user","content":"hi"}]}`, 400, "invalid_value", "presence_penalty"},
		{"frequency_penalty", chatPath, `{"model":"tiny","frequency_penalty":3,"messages":[{"role":"user","content":"hi"}]}`, 400, "invalid_value", "frequency_penalty"},
		{"seed fraction", chatPath, `{"model":"tiny","seed":0.5,"messages":[{"role":"user","content":"hi"}]}`, 400, "invalid_type", "seed"},
		{"logprobs", chatPath, `{"model":"tiny","logprobs":true,"top_logprobs":21,"messages":[{"role":"user","content":"hi"}]}`, 400, "invalid_value", "top_logprobs"},
		{"top_logprobs", chatPath, `{"model":"tiny","top_logprobs":3,"messages":[{"role":"user","content":"hi"}]}`, 400, "invalid_value", "top_logprobs"},
		{"json_schema without schema", chatPath, `{"model":"tiny","response_format":{"type":"json_schema","json_schema":{"name":"x"}},"messages":[{"role":"user","content":"hi"}]}`, 400, "missing_required_parameter", "response_format.json_schema.schema"},
		{"response_format bogus", chatPath, `{"model":"tiny","response_format":{"type":"yaml"},"messages":[{"role":"user","content":"hi"}]}`, 400, "invalid_value", "response_format.type"},
		{"stream_options without stream", chatPath, `{"model":"tiny","stream_options":{"include_usage":true},"messages":[{"role":"user","content":"hi"}]}`, 400, "invalid_value", "stream_options"},
		{"stream wrong type", chatPath, `{"model":"tiny","stream":"yes","messages":[{"role":"user","content":"hi"}]}`, 400, "invalid_type", "stream"},
		{"include_usage wrong type", chatPath, `{"model":"tiny","stream":true,"stream_options":{"include_usage":1},"messages":[{"role":"user","content":"hi"}]}`, 400, "invalid_type", "stream_options.include_usage"},
		{"tool_choice required without tools", chatPath, `{"model":"tiny","tool_choice":"required","messages":[{"role":"user","content":"hi"}]}`, 400, "invalid_value", "tool_choice"},
		{"tool without name", chatPath, `{"model":"tiny","tools":[{"type":"function","function":{}}],"messages":[{"role":"user","content":"hi"}]}`, 400, "missing_required_parameter", "tools[0].function.name"},
		{"tools not array", chatPath, `{"model":"tiny","tools":{},"messages":[{"role":"user","content":"hi"}]}`, 400, "invalid_type", "tools"},
		{"stop_token_ids negative", chatPath, `{"model":"tiny","stop_token_ids":[1,-1],"messages":[{"role":"user","content":"hi"}]}`, 400, "invalid_value", "stop_token_ids[1]"},
		{"logit_bias out of vocabulary", chatPath, `{"model":"tiny","logit_bias":{"50256":-100},"messages":[{"role":"user","content":"hi"}]}`, 400, "invalid_value", "logit_bias"},
		{"turbine unknown field", chatPath, `{"model":"tiny","turbine":{"return_workers":true},"messages":[{"role":"user","content":"hi"}]}`, 400, "invalid_value", "turbine.return_workers"},
		{"turbine negative weight", chatPath, `{"model":"tiny","turbine":{"overlap_weight":-1},"messages":[{"role":"user","content":"hi"}]}`, 400, "invalid_value", "turbine.overlap_weight"},
		{"turbine wrong type", chatPath, `{"model":"tiny","turbine":{"router_temperature":"hot"},"messages":[{"role":"user","content":"hi"}]}`, 400, "invalid_type", "turbine.router_temperature"},
		{"template kwargs reserved", chatPath, `{"model":"tiny","chat_template_kwargs":{"add_generation_prompt":false},"messages":[{"role":"user","content":"hi"}]}`, 400, "invalid_value", "chat_template_kwargs.add_generation_prompt"},
		{"template kwargs type", chatPath, `{"model":"tiny","chat_template_kwargs":[1],"messages":[{"role":"user","content":"hi"}]}`, 400, "invalid_type", "chat_template_kwargs"},
		{"user wrong type", chatPath, `{"model":"tiny","user":1,"messages":[{"role":"user","content":"hi"}]}`, 400, "invalid_type", "user"},
		{"template error", chatPath, `{"model":"tiny","messages":[{"role":"user","content":"TEMPLATE_ERROR"}]}`, 400, "invalid_value", "messages"},
		{"unknown model", chatPath, `{"model":"nope","messages":[{"role":"user","content":"hi"}]}`, 404, "model_not_found", "model"},
		{"tokenizer fails to load", chatPath, `{"model":"broken-model","messages":[{"role":"user","content":"hi"}]}`, 500, "internal_error", ""},

		{"completions missing prompt", compPath, `{"model":"tiny"}`, 400, "missing_required_parameter", "prompt"},
		{"completions empty prompt", compPath, `{"model":"tiny","prompt":""}`, 400, "invalid_value", "prompt"},
		{"completions empty prompt in array", compPath, `{"model":"tiny","prompt":[""]}`, 400, "invalid_value", "prompt"},
		{"completions empty token array", compPath, `{"model":"tiny","prompt":[[]]}`, 400, "invalid_value", "prompt"},
		{"completions batch with an empty prompt", compPath, `{"model":"tiny","prompt":["a",""]}`, 400, "invalid_value", "prompt[1]"},
		{"completions token batch with an empty prompt", compPath, `{"model":"tiny","prompt":[[1,2],[]]}`, 400, "invalid_value", "prompt[1]"},
		{"completions batch element type", compPath, `{"model":"tiny","prompt":["a",{"b":1}]}`, 400, "invalid_type", "prompt[1]"},
		{"completions batch token out of vocabulary", compPath, `{"model":"tiny","prompt":[[1,2],[3,300]]}`, 400, "invalid_value", "prompt[1][1]"},
		{"completions batch over the choice bound", compPath, `{"model":"tiny","n":128,"prompt":["a","b","c","d","e","f","g","h","i"]}`, 400, "invalid_value", "prompt"},
		{"completions best_of below n", compPath, `{"model":"tiny","prompt":"a","n":3,"best_of":2}`, 400, "invalid_value", "best_of"},
		{"completions prompt object", compPath, `{"model":"tiny","prompt":{"a":1}}`, 400, "invalid_type", "prompt"},
		{"completions mixed ids", compPath, `{"model":"tiny","prompt":[1,"a"]}`, 400, "invalid_type", "prompt[1]"},
		{"completions id out of vocabulary", compPath, `{"model":"tiny","prompt":[5,99999]}`, 400, "invalid_value", "prompt[1]"},
		{"completions echo", compPath, `{"model":"tiny","prompt":"a","echo":true,"max_tokens":0,"prompt_logprobs":1,"stream":true}`, 400, "invalid_value", "prompt_logprobs"},
		{"completions logprobs", compPath, `{"model":"tiny","prompt":"a","logprobs":21}`, 400, "invalid_value", "logprobs"},
		{"completions best_of", compPath, `{"model":"tiny","prompt":"a","best_of":3}`, 400, "unsupported_parameter", "best_of"},
		{"completions suffix", compPath, `{"model":"tiny","prompt":"a","suffix":"z"}`, 400, "unsupported_parameter", "suffix"},
		{"completions prompt beyond context", compPath, `{"model":"tiny","prompt":"` + long + `"}`, 400, "context_length_exceeded", "prompt"},
		{"completions unknown model", compPath, `{"model":"nope","prompt":"a"}`, 404, "model_not_found", "model"},
	}
	var out strings.Builder
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			b := newFakeBackend(finish("ok", "stop"))
			rr := serve(newTestServer(t, b), http.MethodPost, c.path, c.body)
			var body struct {
				Error struct {
					Message string  `json:"message"`
					Type    string  `json:"type"`
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
			if rr.Code != c.status || body.Error.Code != c.code || param != c.param {
				t.Errorf("got %d code=%q param=%q (%s); want %d code=%q param=%q",
					rr.Code, body.Error.Code, param, body.Error.Message, c.status, c.code, c.param)
			}
			if ct := rr.Header().Get("Content-Type"); ct != "application/json" {
				t.Errorf("Content-Type %q", ct)
			}
			if n := len(b.generated()); n != 0 {
				t.Errorf("%d requests reached the Backend", n)
			}
			fmt.Fprintf(&out, "### %s\nPOST %s %s\n--> %d %s", c.name, c.path, abbreviate(c.body), rr.Code, rr.Body.String())
		})
	}
	checkGolden(t, "validation.golden", []byte(out.String()))
}

func abbreviate(s string) string {
	if len(s) > 160 {
		return s[:150] + "…(" + fmt.Sprint(len(s)) + " bytes)"
	}
	return s
}

// TestAcceptedRequests checks what legal requests turn into on the Backend.
func TestAcceptedRequests(t *testing.T) {
	f := func(v float64) *float64 { return &v }
	cases := []struct {
		name, path, body string
		check            func(t *testing.T, g *GenerateRequest)
	}{
		{"defaults", chatPath, `{"model":"tiny","messages":[{"role":"user","content":"hi"}],"unknown_field":{"x":1}}`, func(t *testing.T, g *GenerateRequest) {
			prompt := "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
			want := fakeTokenizer{}.Encode(prompt)
			if fmt.Sprint(g.TokenIDs) != fmt.Sprint(want) {
				t.Errorf("token ids %v want %v", g.TokenIDs, want)
			}
			// No max_tokens: what is left of tiny's 128-token context.
			if g.Sampling.MaxTokens != int32(128-len(want)) || g.Sampling.Temperature != nil || g.Sampling.TopP != nil || g.Sampling.Seed != nil {
				t.Errorf("sampling %v", g.Sampling)
			}
			if g.Model != "tiny" || g.RequestID != "req-1" || g.OverlapWeight != nil || g.Temperature != nil {
				t.Errorf("request %+v", g)
			}
		}},
		{"sampling fields", chatPath, `{"model":"tiny","max_tokens":7,"min_tokens":2,"seed":42,"temperature":0.7,"top_p":0.9,"presence_penalty":0.5,"frequency_penalty":-0.5,"stop":"\n","stop_token_ids":[5,6],"ignore_eos":true,"user":"u","n":1,"logprobs":false,"response_format":{"type":"text"},"messages":[{"role":"user","content":"hi"}]}`, func(t *testing.T, g *GenerateRequest) {
			sp := g.Sampling
			if sp.MaxTokens != 7 || sp.MinTokens != 2 || sp.Seed == nil || *sp.Seed != 42 || sp.Temperature == nil || *sp.Temperature != 0.7 ||
				sp.TopP == nil || *sp.TopP != 0.9 || sp.PresencePenalty != 0.5 || sp.FrequencyPenalty != -0.5 || !sp.IgnoreEos ||
				fmt.Sprint(sp.StopTokenIds) != "[5 6]" {
				t.Errorf("sampling %v", sp)
			}
		}},
		{"max_completion_tokens wins", chatPath, `{"model":"tiny","max_tokens":100,"max_completion_tokens":9,"messages":[{"role":"user","content":"hi"}]}`, func(t *testing.T, g *GenerateRequest) {
			if g.Sampling.MaxTokens != 9 {
				t.Errorf("max_tokens %d", g.Sampling.MaxTokens)
			}
		}},
		{"turbine router overrides", chatPath, `{"model":"tiny","turbine":{"overlap_weight":2.0,"router_temperature":0.5,"return_worker":true},"messages":[{"role":"user","content":"hi"}]}`, func(t *testing.T, g *GenerateRequest) {
			if g.OverlapWeight == nil || *g.OverlapWeight != *f(2) || g.Temperature == nil || *g.Temperature != 0.5 {
				t.Errorf("overrides %v %v", g.OverlapWeight, g.Temperature)
			}
		}},
		{"text parts joined", chatPath, `{"model":"tiny","messages":[{"role":"user","content":[{"type":"text","text":"a"},{"type":"text","text":"b"}]}]}`, func(t *testing.T, g *GenerateRequest) {
			if !strings.Contains(fakeTokenizer{}.Decode(g.TokenIDs), "user\na\nb<|im_end|>") {
				t.Errorf("prompt %q", fakeTokenizer{}.Decode(g.TokenIDs))
			}
		}},
		{"tools reach the template", chatPath, `{"model":"agent","tools":[{"type":"function","function":{"name":"get_weather","parameters":{"type":"object"}}}],"tool_choice":"auto","messages":[{"role":"user","content":"hi"},{"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function","function":{"name":"get_weather","arguments":"{}"}}]},{"role":"tool","tool_call_id":"c1","content":"sunny"}]}`, func(t *testing.T, g *GenerateRequest) {
			p := fakeTokenizer{}.Decode(g.TokenIDs)
			// The tools reach the template as sent (key order kept, as HF transformers does).
			if !strings.Contains(p, `[{"type":"function","function":{"name":"get_weather","parameters":{"type":"object"}}}]`) || !strings.Contains(p, "tool\nsunny") {
				t.Errorf("prompt %q", p)
			}
		}},
		{"tool_choice none drops tools", chatPath, `{"model":"tiny","tools":[{"type":"function","function":{"name":"get_weather"}}],"tool_choice":"none","messages":[{"role":"user","content":"hi"}]}`, func(t *testing.T, g *GenerateRequest) {
			if strings.Contains(fakeTokenizer{}.Decode(g.TokenIDs), "get_weather") {
				t.Error("tools reached the template")
			}
		}},
		{"template kwargs", chatPath, `{"model":"tiny","chat_template_kwargs":{"enable_thinking":false},"messages":[{"role":"user","content":"hi"}]}`, func(t *testing.T, g *GenerateRequest) {
			if !strings.Contains(fakeTokenizer{}.Decode(g.TokenIDs), `{"enable_thinking":false}`) {
				t.Errorf("prompt %q", fakeTokenizer{}.Decode(g.TokenIDs))
			}
		}},
		{"nulls are absent", chatPath, `{"model":"tiny","max_tokens":null,"stop":null,"temperature":null,"stream_options":null,"tools":null,"messages":[{"role":"user","content":"hi","name":null}]}`, func(t *testing.T, g *GenerateRequest) {
			if g.Sampling.Temperature != nil {
				t.Error("temperature set")
			}
		}},
		{"integral float accepted", chatPath, `{"model":"tiny","max_tokens":5.0,"messages":[{"role":"user","content":"hi"}]}`, func(t *testing.T, g *GenerateRequest) {
			if g.Sampling.MaxTokens != 5 {
				t.Errorf("max_tokens %d", g.Sampling.MaxTokens)
			}
		}},
		{"model with a slash", chatPath, `{"model":"org/big-model","messages":[{"role":"user","content":"hi"}]}`, func(t *testing.T, g *GenerateRequest) {
			if g.Model != "org/big-model" {
				t.Errorf("model %q", g.Model)
			}
		}},
		{"completion text prompt", compPath, `{"model":"tiny","prompt":"abc","max_tokens":4}`, func(t *testing.T, g *GenerateRequest) {
			if fmt.Sprint(g.TokenIDs) != fmt.Sprint(toks("abc")) || g.Sampling.MaxTokens != 4 {
				t.Errorf("got %v %v", g.TokenIDs, g.Sampling)
			}
		}},
		{"completion prompt in array", compPath, `{"model":"tiny","prompt":["abc"]}`, func(t *testing.T, g *GenerateRequest) {
			if fmt.Sprint(g.TokenIDs) != fmt.Sprint(toks("abc")) {
				t.Errorf("got %v", g.TokenIDs)
			}
		}},
		{"completion token ids", compPath, `{"model":"tiny","prompt":[10,11,12]}`, func(t *testing.T, g *GenerateRequest) {
			if fmt.Sprint(g.TokenIDs) != "[10 11 12]" || g.Sampling.MaxTokens != 125 {
				t.Errorf("got %v %v", g.TokenIDs, g.Sampling)
			}
		}},
		{"completion nested token ids", compPath, `{"model":"tiny","prompt":[[10,11]]}`, func(t *testing.T, g *GenerateRequest) {
			if fmt.Sprint(g.TokenIDs) != "[10 11]" {
				t.Errorf("got %v", g.TokenIDs)
			}
		}},
		{"completion exactly fills context", compPath, `{"model":"tiny","prompt":"` + strings.Repeat("y", 120) + `","max_tokens":8}`, func(t *testing.T, g *GenerateRequest) {
			if g.Sampling.MaxTokens != 8 {
				t.Errorf("max_tokens %d", g.Sampling.MaxTokens)
			}
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			b := agentBackend(finish("ok", "stop"))
			rr := serve(newTestServer(t, b), http.MethodPost, c.path, c.body)
			if rr.Code != http.StatusOK {
				t.Fatalf("status %d: %s", rr.Code, rr.Body.String())
			}
			gens := b.generated()
			if len(gens) != 1 {
				t.Fatalf("%d Generate calls", len(gens))
			}
			c.check(t, gens[0])
			b.checkClosed(t)
		})
	}
}

func TestBodyTooLarge(t *testing.T) {
	b := newFakeBackend(finish("ok", "stop"))
	s, err := New(Config{MaxBodyBytes: 64}, b, fakeOptions(fakePreprocessor{})...)
	if err != nil {
		t.Fatal(err)
	}
	body := `{"model":"tiny","messages":[{"role":"user","content":"` + strings.Repeat("z", 100) + `"}]}`
	rr := serve(s, http.MethodPost, chatPath, body)
	if rr.Code != http.StatusRequestEntityTooLarge || !strings.Contains(rr.Body.String(), "request_too_large") {
		t.Errorf("got %d %s", rr.Code, rr.Body.String())
	}
	// Without a Content-Length the limit still holds (chunked upload).
	req, _ := http.NewRequest(http.MethodPost, chatPath, strings.NewReader(body))
	req.ContentLength = -1
	rec := newRecorder()
	s.ServeHTTP(rec, req)
	if rec.Code != http.StatusRequestEntityTooLarge {
		t.Errorf("chunked: got %d %s", rec.Code, rec.Body.String())
	}
}

func TestConfigValidation(t *testing.T) {
	if _, err := New(Config{MaxBodyBytes: -1}, newFakeBackend()); err == nil || !strings.Contains(err.Error(), "MaxBodyBytes") {
		t.Errorf("got %v", err)
	}
	if _, err := New(Config{}, nil); err == nil {
		t.Error("nil backend accepted")
	}
}
