package sglang

import (
	"encoding/json"
	"math"
	"os"
	"slices"
	"testing"

	"github.com/turbine-llm/turbine/engines"
	"github.com/turbine-llm/turbine/engines/internal/enginetest"
	"github.com/turbine-llm/turbine/messages"
)

// An SGLang answer with return_logprob, top_logprobs_num 2 and logprob_start_len 0
// (testdata/generate_logprobs.json) reads into one entry per token.
func TestLogprobsFixture(t *testing.T) {
	b, err := os.ReadFile("testdata/generate_logprobs.json")
	if err != nil {
		t.Fatal(err)
	}
	var f struct {
		MetaInfo logprobMeta `json:"meta_info"`
	}
	if err := json.Unmarshal(b, &f); err != nil {
		t.Fatal(err)
	}
	out, err := outputLogprobs(f.MetaInfo, []uint32{13}, 2, 2)
	if err != nil {
		t.Fatal(err)
	}
	// The second output token (-1.51) after a more likely one (-0.36): rank 2.
	if p := out[0]; len(out) != 1 || p.TokenId != 13 || p.Rank != 2 || p.Logprob != float32(-1.5129) ||
		len(p.Top) != 2 || p.Top[0].TokenId != 11 || p.Top[1].TokenId != 13 {
		t.Fatalf("output %v", out)
	}
	out, err = outputLogprobs(f.MetaInfo, []uint32{12095, 13}, 2, 1)
	if err != nil || out[0].Rank != 1 || len(out[0].Top) != 1 || out[0].Top[0].TokenId != 12095 {
		t.Fatalf("output with 1 alternative: %v %v", out, err)
	}
	prompt, err := promptLogprobs(f.MetaInfo, []uint32{785, 6722, 315}, 1)
	if err != nil {
		t.Fatal(err)
	}
	if len(prompt) != 3 || !math.IsNaN(float64(prompt[0].Logprob)) || prompt[0].TokenId != 785 {
		t.Fatalf("prompt %v", prompt)
	}
	// Prompt position 1: outside the top 2, so rank 3 (a lower bound); the top 1 is
	// another token.
	if q := prompt[1]; q.Rank != 3 || len(q.Top) != 1 || q.Top[0].TokenId != 374 || q.Logprob != -7.25 {
		t.Fatalf("prompt position 1: %v", q)
	}
	if q := prompt[2]; q.Rank != 1 || q.Top[0].TokenId != 315 {
		t.Fatalf("prompt position 2: %v", q)
	}
}

func TestLogprobsMalformed(t *testing.T) {
	meta := func(out, top string) logprobMeta {
		return logprobMeta{OutputTokenLogprobs: json.RawMessage(out), OutputTopLogprobs: json.RawMessage(top)}
	}
	for _, m := range []logprobMeta{
		{},
		meta(`[[-1, 5, null]]`, ``), // one entry for two ids
		meta(`[[-1, 5, null], [-1, 7, null]]`, ``),       // not the output id
		meta(`[[-1, 5, null], [null, 6, null]]`, ``),     // a null output logprob
		meta(`[[-1, 5, null], ["a", 6, null]]`, ``),      // not a number
		meta(`[[-1, 5, null], [-1, -6, null]]`, ``),      // not a token id
		meta(`[[-1, 5, null], [-1, 6.5, null]]`, ``),     // not a token id
		meta(`[[-1, 5, null], [-1]]`, ``),                // too short
		meta(`[[-1, 5, null], [-1, 6, null]]`, `[null]`), // top of another length
		meta(`[[-1, 5, null], [-1, 6, null]]`, `[1, 2]`), // top not lists
		meta(`[[-1, 5, null], [-1, 6, null]]`, `null`),   // top asked, absent
		meta(`[[-1, 5, null], [-1, 6, null]]`, `[null, [[null, 3, null]]]`),
		meta(`{}`, ``),
	} {
		if _, err := outputLogprobs(m, []uint32{5, 6}, 2, 1); err == nil {
			t.Errorf("accepted %s / %s", m.OutputTokenLogprobs, m.OutputTopLogprobs)
		}
	}
	for _, in := range []string{
		`[[null, 1, null]]`,                  // one entry for two tokens
		`[[null, 1, null], [-1, 7, null]]`,   // not the prompt token
		`[[null, 1, null], [null, 5, null]]`, // null after the first
		`[[null, 1, null], 5]`,
		`{}`,
	} {
		if _, err := promptLogprobs(logprobMeta{InputTokenLogprobs: json.RawMessage(in)}, []uint32{1, 5}, 0); err == nil {
			t.Errorf("accepted prompt %s", in)
		}
	}
	if lps, err := promptLogprobs(logprobMeta{InputTokenLogprobs: json.RawMessage(`[]`)}, []uint32{1, 5}, 0); lps != nil || err != nil {
		t.Fatalf("an empty input list (not there yet): %v %v", lps, err)
	}
}

func FuzzLogprobs(f *testing.F) {
	f.Add([]byte(`[[-1, 5, null]]`), []byte(`[[[-0.5, 9, null], [-1, 5, null]]]`), 1)
	f.Add([]byte(`[[null, 1, "a"], [-1, 5, "b"]]`), []byte(`[null, [[-1, 5, "b"]]]`), 0)
	f.Fuzz(func(t *testing.T, tokens, top []byte, n int) {
		n = max(0, min(n, 20))
		m := logprobMeta{OutputTokenLogprobs: tokens, OutputTopLogprobs: top, InputTokenLogprobs: tokens, InputTopLogprobs: top}
		lps, err := outputLogprobs(m, []uint32{5}, 1, n)
		if err == nil && (len(lps) != 1 || len(lps[0].Top) > n || lps[0].Rank < 1) {
			t.Fatalf("%v for n=%d", lps, n)
		}
		pl, err := promptLogprobs(m, []uint32{1, 5}, n)
		if err == nil && pl != nil && len(pl) != 2 {
			t.Fatalf("%d prompt entries", len(pl))
		}
	})
}

// Through the mock engine, with cumulative and incremental output_ids: one logprob per
// output token, the same in both modes, and the prompt's once.
func TestLogprobsThroughMock(t *testing.T) {
	prompt := enginetest.Prompt(9)
	three, one := int32(3), int32(1)
	run := func(incremental bool, s *messages.SamplingParams) []engines.Chunk {
		m := startMock(t, 1000, incremental)
		c, _ := New(m.url, nil, Options{IncrementalOutput: incremental})
		e, _ := NewEngine(c, 16)
		var got []engines.Chunk
		if err := e.Generate(enginetest.Ctx(t), "r", prompt, s, func(ch engines.Chunk) error { got = append(got, ch); return nil }); err != nil {
			t.Fatal(err)
		}
		return got
	}
	flat := func(chs []engines.Chunk) (lps, prompts []*messages.TokenLogprob) {
		for _, c := range chs {
			if len(c.Logprobs) != len(c.TokenIDs) {
				t.Fatalf("chunk with %d tokens, %d logprobs", len(c.TokenIDs), len(c.Logprobs))
			}
			if c.PromptLogprobs != nil && prompts != nil {
				t.Fatal("prompt logprobs twice")
			}
			lps = append(lps, c.Logprobs...)
			if c.PromptLogprobs != nil {
				prompts = c.PromptLogprobs
			}
		}
		return lps, prompts
	}
	s := &messages.SamplingParams{MaxTokens: 6, IgnoreEos: true, Logprobs: &three, PromptLogprobs: &one}
	cum, inc := run(false, s), run(true, s)
	if len(cum) < 2 {
		t.Fatalf("%d chunks: not streamed", len(cum))
	}
	a, pa := flat(cum)
	b, pb := flat(inc)
	if len(a) != 6 || len(b) != 6 || len(pa) != len(prompt) || len(pb) != len(prompt) {
		t.Fatalf("%d and %d logprobs, %d and %d prompt logprobs", len(a), len(b), len(pa), len(pb))
	}
	for i := range a {
		if a[i].TokenId != b[i].TokenId || a[i].Logprob != b[i].Logprob || a[i].Rank != b[i].Rank ||
			a[i].Rank < 1 || a[i].Rank > 2 || len(a[i].Top) != 3 || a[i].Top[a[i].Rank-1].TokenId != a[i].TokenId {
			t.Fatalf("position %d: %v and %v", i, a[i], b[i])
		}
	}
	if !math.IsNaN(float64(pa[0].Logprob)) || pa[0].TokenId != prompt[0] {
		t.Fatalf("first prompt entry %v", pa[0])
	}
	for i, q := range pa[1:] {
		if q.TokenId != prompt[i+1] || q.Rank < 1 || q.Rank > 8 || len(q.Top) != 1 || pb[i+1].Logprob != q.Logprob {
			t.Fatalf("prompt position %d: %v", i+1, q)
		}
	}
	// Output logprobs only: no prompt logprobs; prompt logprobs only: no output ones.
	if _, p := flat(run(false, &messages.SamplingParams{MaxTokens: 3, IgnoreEos: true, Logprobs: &one})); p != nil {
		t.Fatal("prompt logprobs not asked for")
	}
	chs := run(false, &messages.SamplingParams{MaxTokens: 3, IgnoreEos: true, PromptLogprobs: &one})
	for _, c := range chs {
		if c.Logprobs != nil {
			t.Fatal("output logprobs not asked for")
		}
	}
	if n := slices.IndexFunc(chs, func(c engines.Chunk) bool { return c.PromptLogprobs != nil }); n < 0 {
		t.Fatal("no prompt logprobs")
	}
}
