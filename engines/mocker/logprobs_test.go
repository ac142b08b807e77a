package mocker

import (
	"fmt"
	"math"
	"slices"
	"testing"

	"github.com/turbine-llm/turbine/messages"
)

// logprobRun runs one request to its end and returns its output tokens, their logprobs
// and its prompt logprobs.
func logprobRun(t *testing.T, cfg Config, r Request) (toks []uint32, lps, prompt []*messages.TokenLogprob) {
	t.Helper()
	e := newEngine(t, cfg)
	mustAdd(t, e, r)
	for i := 0; e.HasWork(); i++ {
		if i > 10000 {
			t.Fatal("engine did not finish")
		}
		for _, o := range e.Step(t0).Outputs {
			if len(o.Logprobs) != len(o.TokenIDs) && r.Logprobs != nil {
				t.Fatalf("output with %d tokens and %d logprobs", len(o.TokenIDs), len(o.Logprobs))
			}
			toks = append(toks, o.TokenIDs...)
			lps = append(lps, o.Logprobs...)
			if o.PromptLogprobs != nil {
				if prompt != nil {
					t.Fatal("prompt logprobs on two outputs")
				}
				prompt = o.PromptLogprobs
			}
		}
	}
	return toks, lps, prompt
}

// checkPosition checks one position's logprobs: the token's rank and logprob agree with
// the list (when it is in it), the list is most likely first with distinct tokens, and
// the probabilities of the token and the list sum to at most 1.
func checkPosition(t *testing.T, where string, lp *messages.TokenLogprob, n, maxRank int) {
	t.Helper()
	if lp.Rank < 1 || int(lp.Rank) > maxRank || lp.Logprob > 0 || math.IsNaN(float64(lp.Logprob)) {
		t.Fatalf("%s: rank %d logprob %v", where, lp.Rank, lp.Logprob)
	}
	if len(lp.Top) > n {
		t.Fatalf("%s: %d alternatives, asked %d", where, len(lp.Top), n)
	}
	seen := map[uint32]bool{}
	sum := 0.0
	inTop := false
	for k, top := range lp.Top {
		if seen[top.TokenId] {
			t.Fatalf("%s: token %d twice", where, top.TokenId)
		}
		seen[top.TokenId] = true
		sum += math.Exp(float64(top.Logprob))
		if k > 0 && top.Logprob > lp.Top[k-1].Logprob {
			t.Fatalf("%s: alternative %d more likely than %d", where, k, k-1)
		}
		if top.TokenId == lp.TokenId {
			inTop = true
			if top.Logprob != lp.Logprob || k+1 != int(lp.Rank) {
				t.Fatalf("%s: token at %d with %v, rank %d logprob %v", where, k+1, top.Logprob, lp.Rank, lp.Logprob)
			}
		}
	}
	if !inTop {
		sum += math.Exp(float64(lp.Logprob))
		if int(lp.Rank) <= len(lp.Top) {
			t.Fatalf("%s: rank %d but not among the %d alternatives", where, lp.Rank, len(lp.Top))
		}
	}
	if sum > 1+1e-6 {
		t.Fatalf("%s: probabilities sum to %v", where, sum)
	}
}

func TestLogprobsNormalisedAndDeterministic(t *testing.T) {
	cfg := smallConfig()
	for _, n := range []int{0, 1, 5, 20} {
		r := Request{ID: "a", Prompt: seqTokens(100, 9), MaxTokens: 24, Logprobs: &n, PromptLogprobs: &n, IgnoreEOS: true}
		toks, lps, prompt := logprobRun(t, cfg, r)
		if len(lps) != len(toks) || len(prompt) != len(r.Prompt) {
			t.Fatalf("n=%d: %d tokens, %d logprobs, %d prompt logprobs", n, len(toks), len(lps), len(prompt))
		}
		ranks := map[int32]int{}
		for i, lp := range lps {
			if lp.TokenId != toks[i] {
				t.Fatalf("n=%d: logprob %d is of token %d, not %d", n, i, lp.TokenId, toks[i])
			}
			// The test vocabulary has 10 words; the sampled token is always among the top 2.
			checkPosition(t, "output", lp, min(n, 10), 2)
			ranks[lp.Rank]++
		}
		if !math.IsNaN(float64(prompt[0].Logprob)) || prompt[0].Top != nil || prompt[0].TokenId != r.Prompt[0] {
			t.Fatalf("n=%d: first prompt position %v", n, prompt[0])
		}
		for i, lp := range prompt[1:] {
			if lp.TokenId != r.Prompt[i+1] {
				t.Fatalf("n=%d: prompt logprob %d is of token %d", n, i+1, lp.TokenId)
			}
			checkPosition(t, "prompt", lp, min(n, 10), 8)
		}
		if ranks[1] == 0 || ranks[2] == 0 {
			t.Errorf("n=%d: sampled ranks %v: want both 1 and 2", n, ranks)
		}
		// Same request, same logprobs; and the same tokens as without logprobs.
		toks2, lps2, prompt2 := logprobRun(t, cfg, r)
		plain, _, _ := logprobRun(t, cfg, Request{ID: "a", Prompt: r.Prompt, MaxTokens: 24, IgnoreEOS: true})
		if !slices.Equal(toks, toks2) || !slices.Equal(toks, plain) || !equalLogprobs(lps, lps2) || !equalLogprobs(prompt, prompt2) {
			t.Fatalf("n=%d: a second run differs", n)
		}
	}
}

// A request resumed with part of its output appended to its prompt (a migration)
// continues the same logprobs.
func TestLogprobsContinueAfterResume(t *testing.T) {
	cfg := smallConfig()
	n := 3
	r := Request{ID: "a", Prompt: seqTokens(100, 6), MaxTokens: 12, Logprobs: &n, IgnoreEOS: true}
	toks, lps, _ := logprobRun(t, cfg, r)
	resumed := Request{ID: "b", Prompt: append(slices.Clone(r.Prompt), toks[:5]...), MaxTokens: 7, Logprobs: &n, IgnoreEOS: true}
	toks2, lps2, _ := logprobRun(t, cfg, resumed)
	if !slices.Equal(toks[5:], toks2) || !equalLogprobs(lps[5:], lps2) {
		t.Fatalf("resumed leg: %v %v, want %v %v", toks2, lps2, toks[5:], lps[5:])
	}
}

func TestLogprobsOutOfRange(t *testing.T) {
	e := newEngine(t, smallConfig())
	for _, n := range []int{-1, MaxLogprobs + 1} {
		if err := e.Add(Request{ID: "x", Prompt: []uint32{1}, MaxTokens: 1, Logprobs: &n}); err == nil {
			t.Errorf("logprobs %d accepted", n)
		}
		if err := e.Add(Request{ID: "y", Prompt: []uint32{1}, MaxTokens: 1, PromptLogprobs: &n}); err == nil {
			t.Errorf("prompt_logprobs %d accepted", n)
		}
	}
}

func equalLogprobs(a, b []*messages.TokenLogprob) bool {
	return slices.EqualFunc(a, b, func(x, y *messages.TokenLogprob) bool {
		same := x.TokenId == y.TokenId && x.Rank == y.Rank &&
			(x.Logprob == y.Logprob || math.IsNaN(float64(x.Logprob)) && math.IsNaN(float64(y.Logprob)))
		return same && slices.EqualFunc(x.Top, y.Top, func(p, q *messages.TopLogprob) bool {
			return p.TokenId == q.TokenId && p.Logprob == q.Logprob
		})
	})
}

// A greedy request (temperature 0) takes the most likely token: every output token has
// rank 1, with the same tokens and the same normalised distribution otherwise; prompt
// logprobs do not depend on it.
func TestLogprobsGreedyRankOne(t *testing.T) {
	cfg := smallConfig()
	for _, n := range []int{0, 1, 5, 20} {
		r := Request{ID: "a", Prompt: seqTokens(100, 9), MaxTokens: 24, Logprobs: &n, PromptLogprobs: &n, IgnoreEOS: true}
		toks, lps, prompt := logprobRun(t, cfg, r)
		r.Greedy = true
		gtoks, glps, gprompt := logprobRun(t, cfg, r)
		if !slices.Equal(toks, gtoks) || !equalLogprobs(prompt, gprompt) || len(glps) != len(gtoks) {
			t.Fatalf("n=%d: greedy run gave %v (%d logprobs), want the tokens %v and the same prompt logprobs", n, gtoks, len(glps), toks)
		}
		for i, lp := range glps {
			if lp.TokenId != gtoks[i] {
				t.Fatalf("n=%d: logprob %d is of token %d, not %d", n, i, lp.TokenId, gtoks[i])
			}
			checkPosition(t, fmt.Sprintf("n=%d greedy output %d", n, i), lp, min(n, 10), 1)
			if n > 0 && (lp.Top[0].TokenId != lp.TokenId || lp.Top[0].Logprob < lps[i].Logprob) {
				t.Fatalf("n=%d: position %d: most likely %v, sampled %d", n, i, lp.Top[0], lp.TokenId)
			}
		}
		again, againLps, _ := logprobRun(t, cfg, r)
		if !slices.Equal(gtoks, again) || !equalLogprobs(glps, againLps) {
			t.Fatalf("n=%d: a second greedy run differs", n)
		}
	}
}
