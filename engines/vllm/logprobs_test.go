package vllm

import (
	"encoding/json"
	"math"
	"os"
	"slices"
	"testing"

	"github.com/turbine-llm/turbine/engines/internal/enginetest"
	"github.com/turbine-llm/turbine/engines/mocker/server"
	"github.com/turbine-llm/turbine/messages"
)

// A vLLM answer with logprobs 2, prompt_logprobs 1 and return_tokens_as_token_ids
// (testdata/completion_logprobs.json) reads into one entry per token.
func TestLogprobsFixture(t *testing.T) {
	b, err := os.ReadFile("testdata/completion_logprobs.json")
	if err != nil {
		t.Fatal(err)
	}
	var raw struct{ Choices []completionChoice }
	if err := json.Unmarshal(b, &raw); err != nil {
		t.Fatal(err)
	}
	c := raw.Choices[0]
	lps, err := logprobsOf(c.Logprobs, c.TokenIDs, 2)
	if err != nil {
		t.Fatal(err)
	}
	if len(lps) != 4 {
		t.Fatalf("%d entries", len(lps))
	}
	// Position 0: the token (-1.47) after one more likely one (-0.44): rank 2, and both
	// are the top 2.
	p := lps[0]
	if p.TokenId != 72579 || p.Rank != 2 || len(p.Top) != 2 || p.Top[0].TokenId != 74573 || p.Top[1].TokenId != 72579 ||
		p.Logprob != float32(-1.4701899290084839) {
		t.Fatalf("position 0: %v", p)
	}
	if lps[1].Rank != 1 || lps[1].Top[0].TokenId != 44671 {
		t.Fatalf("position 1: %v", lps[1])
	}
	prompt, err := promptLogprobsOf(c.PromptLogprobs, c.PromptTokenIDs, 1)
	if err != nil {
		t.Fatal(err)
	}
	if len(prompt) != 4 || !math.IsNaN(float64(prompt[0].Logprob)) || prompt[0].TokenId != 1000 {
		t.Fatalf("prompt %v", prompt)
	}
	// Position 1: the prompt token at rank 4; the top 1 is another token.
	if q := prompt[1]; q.TokenId != 1003 || q.Rank != 4 || len(q.Top) != 1 || q.Top[0].TokenId != 31858 {
		t.Fatalf("prompt position 1: %v", q)
	}
	if q := prompt[2]; q.Rank != 1 || len(q.Top) != 1 || q.Top[0].TokenId != 1006 {
		t.Fatalf("prompt position 2: %v", q)
	}
}

func TestLogprobsMalformed(t *testing.T) {
	ids := []uint32{5, 6}
	for _, raw := range []string{
		`{"tokens":["token_id:5"],"token_logprobs":[-1],"top_logprobs":[{"token_id:5":-1}]}`,
		`{"tokens":["token_id:5","token_id:7"],"token_logprobs":[-1,-1],"top_logprobs":[null,null]}`,
		`{"tokens":["token_id:5","six"],"token_logprobs":[-1,-1],"top_logprobs":[null,null]}`,
		`{"tokens":["token_id:5","token_id:6"],"token_logprobs":[-1,null],"top_logprobs":[null,null]}`,
		`{"tokens":["token_id:5","token_id:6"],"token_logprobs":[-1,-2],"top_logprobs":[{"x":-1},null]}`,
		`{"tokens":["token_id:5","token_id:6"],"token_logprobs":[-1,-2],"top_logprobs":[{"token_id:5":"a"},null]}`,
		`[1]`,
	} {
		if _, err := logprobsOf(json.RawMessage(raw), ids, 2); err == nil {
			t.Errorf("accepted %s", raw)
		}
	}
	for _, raw := range []string{
		`[null]`,
		`[null,null]`,
		`[null,{"7":{"logprob":-1,"rank":1}}]`,
		`[null,{"x":{"logprob":-1,"rank":1}}]`,
		`[null,{"6":{"rank":1}}]`,
		`[null,{"6":{"logprob":-1,"rank":0}}]`,
		`{}`,
	} {
		if _, err := promptLogprobsOf(json.RawMessage(raw), ids, 2); err == nil {
			t.Errorf("accepted prompt %s", raw)
		}
	}
}

func FuzzLogprobs(f *testing.F) {
	f.Add([]byte(`{"tokens":["token_id:5"],"token_logprobs":[-1],"top_logprobs":[{"token_id:5":-1,"token_id:9":-0.5}]}`), 1)
	f.Add([]byte(`[null,{"5":{"logprob":-1,"rank":2},"9":{"logprob":-0.5,"rank":1}}]`), 0)
	f.Fuzz(func(t *testing.T, raw []byte, n int) {
		n = max(0, min(n, 20))
		lps, err := logprobsOf(raw, []uint32{5}, n)
		if err == nil && len(lps) == 1 && len(lps[0].Top) > n {
			t.Fatalf("%d alternatives for n=%d", len(lps[0].Top), n)
		}
		pl, err := promptLogprobsOf(raw, []uint32{1, 5}, n)
		if err == nil && pl != nil && len(pl) != 2 {
			t.Fatalf("%d prompt entries", len(pl))
		}
	})
}

// Through the mock engine: streamed logprobs, one per token, and the same logprobs with
// prompt logprobs (sent without streaming).
func TestLogprobsThroughMock(t *testing.T) {
	_, url := enginetest.StartMock(t, server.Options{Params: server.Params{Engine: enginetest.MockConfig(1000, 5), Dialect: server.DialectVLLM}}, nil)
	e := mockEngine(url)
	prompt := []uint32{1000, 1003, 1006, 1009, 1012}
	three, one := int32(3), int32(1)
	s := &messages.SamplingParams{MaxTokens: 6, IgnoreEos: true, Logprobs: &three}
	streamed, err := collect(t, e, "a", prompt, s)
	if err != nil {
		t.Fatal(err)
	}
	if len(streamed) < 2 {
		t.Fatalf("%d chunks: not streamed", len(streamed))
	}
	var lps []*messages.TokenLogprob
	for _, c := range streamed {
		if len(c.Logprobs) != len(c.TokenIDs) || c.PromptLogprobs != nil {
			t.Fatalf("chunk with %d tokens, %d logprobs", len(c.TokenIDs), len(c.Logprobs))
		}
		lps = append(lps, c.Logprobs...)
	}
	for i, lp := range lps {
		if lp.Rank < 1 || lp.Rank > 2 || len(lp.Top) != 3 || lp.Top[lp.Rank-1].TokenId != lp.TokenId {
			t.Fatalf("position %d: %v", i, lp)
		}
	}
	s2 := &messages.SamplingParams{MaxTokens: 6, IgnoreEos: true, Logprobs: &three, PromptLogprobs: &one}
	once, err := collect(t, e, "b", prompt, s2)
	if err != nil {
		t.Fatal(err)
	}
	if len(once) != 1 || len(once[0].PromptLogprobs) != len(prompt) || !slices.Equal(once[0].TokenIDs, tokensOf(streamed)) {
		t.Fatalf("prompt logprobs answer: %+v", once)
	}
	for i, lp := range once[0].Logprobs {
		if lp.Logprob != lps[i].Logprob || lp.Rank != lps[i].Rank {
			t.Fatalf("position %d: %v, streamed %v", i, lp, lps[i])
		}
	}
	for i, lp := range once[0].PromptLogprobs[1:] {
		if lp.TokenId != prompt[i+1] || lp.Rank < 1 || len(lp.Top) != 1 {
			t.Fatalf("prompt position %d: %v", i+1, lp)
		}
	}
}
