package server

import (
	"encoding/json"
	"fmt"
	"testing"
)

// TestGreedyPerDialect: each dialect marks a request greedy (mocker.Request.Greedy) when
// its engine samples greedily: temperature 0 (below vLLM's 1e-5) or top_k 1.
func TestGreedyPerDialect(t *testing.T) {
	for _, tc := range []struct {
		dialect DialectName
		fields  string
		want    bool
	}{
		{DialectVLLM, ``, false},
		{DialectVLLM, `,"temperature":0`, true},
		{DialectVLLM, `,"temperature":0.000001`, true},
		{DialectVLLM, `,"temperature":0.7`, false},
		{DialectVLLM, `,"temperature":1,"top_k":1`, true},
		{DialectVLLM, `,"top_k":2`, false},
		{DialectVLLM, `,"top_k":-1`, false},
		{DialectSGLang, ``, false},
		{DialectSGLang, `,"temperature":0`, true},
		{DialectSGLang, `,"temperature":0.5`, false},
		{DialectSGLang, `,"top_k":1`, true},
		{DialectTRTLLM, ``, false},
		{DialectTRTLLM, `,"temperature":0`, true},
		{DialectTRTLLM, `,"temperature":1.2`, false},
		{DialectTRTLLM, `,"top_k":1`, true},
		{DialectTRTLLM, `,"top_k":0`, false},
	} {
		o := testOptions(t)
		o.Dialect = tc.dialect
		s, _ := startServer(t, o)
		var got bool
		switch tc.dialect {
		case DialectVLLM:
			p, aerr := s.parseCompletion([]byte(`{"prompt":[1,2,3],"max_tokens":2` + tc.fields + `}`))
			if aerr != nil {
				t.Fatalf("%s %s: %v", tc.dialect, tc.fields, aerr)
			}
			got = p.req.Greedy
		case DialectSGLang:
			r, _, _, msg := s.parseSGLang([]byte(`{"input_ids":[1,2,3],"sampling_params":{"max_new_tokens":2` + tc.fields + `}}`))
			if msg != "" {
				t.Fatalf("%s %s: %s", tc.dialect, tc.fields, msg)
			}
			got = r.Greedy
		case DialectTRTLLM:
			p, _, msg := s.parseTRTLLM([]byte(`{"model":"turbine-mock","prompt":[1,2,3],"max_tokens":2` + tc.fields + `}`))
			if msg != "" {
				t.Fatalf("%s %s: %s", tc.dialect, tc.fields, msg)
			}
			got = p.req.Greedy
		}
		if got != tc.want {
			t.Errorf("%s %s: greedy %v, want %v", tc.dialect, tc.fields, got, tc.want)
		}
	}
}

// TestGreedyLogprobsTopOne: over HTTP, a greedy request's tokens are the most likely of
// their positions in both dialects that serve logprobs; the same request sampled at
// temperature 1 has a token that is not (so the check can tell them apart).
func TestGreedyLogprobsTopOne(t *testing.T) {
	prompt := jsonIDs(promptIDs(6))
	t.Run("vllm", func(t *testing.T) {
		_, hs := startServer(t, testOptions(t))
		notTop := func(temperature string) int {
			body := fmt.Sprintf(`{"prompt":%s,"max_tokens":16,"ignore_eos":true,"temperature":%s,"logprobs":3,"return_tokens_as_token_ids":true}`,
				prompt, temperature)
			resp, b := postJSON(t, hs.URL+"/v1/completions", body)
			if resp.StatusCode != 200 {
				t.Fatalf("%d %s", resp.StatusCode, b)
			}
			var out struct {
				Choices []struct {
					Logprobs struct {
						TokenLogprobs []float64            `json:"token_logprobs"`
						Tokens        []string             `json:"tokens"`
						TopLogprobs   []map[string]float64 `json:"top_logprobs"`
					} `json:"logprobs"`
				} `json:"choices"`
			}
			if err := json.Unmarshal(b, &out); err != nil || len(out.Choices) != 1 || len(out.Choices[0].Logprobs.Tokens) != 16 {
				t.Fatalf("%v: %s", err, b)
			}
			lp := out.Choices[0].Logprobs
			n := 0
			for i, tok := range lp.Tokens {
				if lp.TopLogprobs[i][tok] != lp.TokenLogprobs[i] {
					t.Fatalf("position %d: token %s with %v, listed %v", i, tok, lp.TokenLogprobs[i], lp.TopLogprobs[i])
				}
				for _, v := range lp.TopLogprobs[i] {
					if v > lp.TokenLogprobs[i] {
						n++
						break
					}
				}
			}
			return n
		}
		if n := notTop("0"); n != 0 {
			t.Errorf("temperature 0: %d of 16 tokens are not the most likely", n)
		}
		if n := notTop("1"); n == 0 {
			t.Errorf("temperature 1: every token is the most likely")
		}
	})
	t.Run("sglang", func(t *testing.T) {
		_, hs := startServer(t, sglangOptions(t, false))
		notTop := func(temperature string) int {
			body := fmt.Sprintf(`{"input_ids":%s,"sampling_params":{"max_new_tokens":16,"ignore_eos":true,"temperature":%s},"return_logprob":true,"top_logprobs_num":3}`,
				prompt, temperature)
			resp, b := postJSON(t, hs.URL+"/generate", body)
			if resp.StatusCode != 200 {
				t.Fatalf("%d %s", resp.StatusCode, b)
			}
			var out struct {
				Meta sglangLogprobMeta `json:"meta_info"`
			}
			if err := json.Unmarshal(b, &out); err != nil || len(out.Meta.OutputTokenLogprobs) != 16 || len(out.Meta.OutputTopLogprobs) != 16 {
				t.Fatalf("%v: %s", err, b)
			}
			n := 0
			for i, tr := range out.Meta.OutputTokenLogprobs {
				if top := out.Meta.OutputTopLogprobs[i][0]; top[1] != tr[1] || top[0] != tr[0] {
					n++
				}
			}
			return n
		}
		if n := notTop("0"); n != 0 {
			t.Errorf("temperature 0: %d of 16 tokens are not the most likely", n)
		}
		if n := notTop("1"); n == 0 {
			t.Errorf("temperature 1: every token is the most likely")
		}
	})
}
