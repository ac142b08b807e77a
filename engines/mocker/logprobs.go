package mocker

import (
	"math"

	"github.com/turbine-llm/turbine/messages"
)

// Log probabilities (docs/reference.md §21). At each position the engine plays a
// distribution over the whole vocabulary that is geometric in the rank: the token of
// rank k (1 = most likely) has probability (1-q)·q^(k-1), with q in [0.25, 0.75) drawn
// from the position's generation state. The probabilities of any set of distinct ranks
// therefore sum to less than 1, and a lower rank never has a lower logprob. The token
// that is at the position (the sampled one, or the prompt's) takes a rank drawn from the
// same state: 1 or 2 for a sampled token (so it is always among the top 2), always 1 for
// a token of a greedy request (Request.Greedy: a greedy engine takes the most likely
// token), 1 to 8 for a prompt token; the other ranks hold ordinary words drawn from the
// state, all distinct. Everything is a function of the state before the token (seed and
// every token before it) and the token: the same sequence gives the same logprobs on
// any engine, and a request resumed with its output appended to the prompt continues
// them.

// MaxLogprobs bounds Request.Logprobs and Request.PromptLogprobs (vLLM's default
// --max-logprobs).
const MaxLogprobs = 20

const (
	logprobSalt = 0x4c6f6770726f6273 // "Logprobs"
	rankSalt    = 0x52616e6b52616e6b
)

// ratio is the position's geometric ratio q in [0.25, 0.75).
func ratio(state uint64) float64 { return 0.25 + 0.5*unitFloat(mix64(state^logprobSalt)) }

// rankLogprob is the logprob of rank k (>= 1) under ratio q.
func rankLogprob(q float64, k int) float32 {
	return float32(math.Log1p(-q) + float64(k-1)*math.Log(q))
}

// tokenLogprob returns the logprobs at a position whose state (before the token) is
// state and whose token is tok: tok's rank and logprob, and the n most likely tokens
// (n <= MaxLogprobs; fewer when the vocabulary has fewer distinct words), most likely
// first. maxRank bounds tok's rank (2 for sampled tokens, 1 for greedy ones, 8 for
// prompt tokens).
func (e *Engine) tokenLogprob(state uint64, tok uint32, n, maxRank int) *messages.TokenLogprob {
	q := ratio(state)
	rank := 1 + int(mix64(state^rankSalt)%uint64(maxRank))
	out := &messages.TokenLogprob{TokenId: tok, Rank: int32(rank), Logprob: rankLogprob(q, rank)}
	if n <= 0 {
		return out
	}
	ord := e.vocab.Ordinary
	used := map[uint32]bool{tok: true}
	out.Top = make([]*messages.TopLogprob, 0, n)
	h := mix64(state ^ (logprobSalt + 1))
	for k := 1; k <= n; k++ {
		if k == rank {
			out.Top = append(out.Top, &messages.TopLogprob{TokenId: tok, Logprob: out.Logprob})
			continue
		}
		// A word not yet used: probe from a drawn index; stop when the vocabulary has no
		// other word left.
		var w uint32
		found := false
		start := int(h % uint64(len(ord)))
		h = mix64(h + golden)
		for j := 0; j < len(ord); j++ {
			if c := ord[(start+j)%len(ord)]; !used[c] {
				w, found = c, true
				break
			}
		}
		if !found {
			if rank > k && rank <= n { // tok still belongs in the list at its rank
				out.Top = append(out.Top, &messages.TopLogprob{TokenId: tok, Logprob: out.Logprob})
			}
			break
		}
		used[w] = true
		out.Top = append(out.Top, &messages.TopLogprob{TokenId: w, Logprob: rankLogprob(q, k)})
	}
	return out
}

// promptLogprobs returns one entry per prompt token for a request seeded with seed: the
// first has no logprob (NaN: nothing precedes it) and no alternatives.
func (e *Engine) promptLogprobs(seed uint64, prompt []uint32, n int) []*messages.TokenLogprob {
	out := make([]*messages.TokenLogprob, len(prompt))
	state := seedState(seed)
	for i, t := range prompt {
		if i == 0 {
			out[i] = &messages.TokenLogprob{TokenId: t, Logprob: float32(math.NaN())}
		} else {
			out[i] = e.tokenLogprob(state, t, n, 8)
		}
		state = foldToken(state, t)
	}
	return out
}
