package kv

import (
	"math"
	"math/rand/v2"
)

// KVPolicy is the KV-aware routing policy (docs/reference.md §3, the reference router's cost):
//
//	prefill_tokens(w) = active_prefill_tokens(w) + max(0, ISL - overlap(w)*B - tier_credit_tokens(w))
//	prefill_blocks(w) = prefill_tokens(w) / B                       (real number)
//	decode_blocks(w)  = active_blocks(w) + prompt blocks not already active on w
//	cost(w)           = overlap_weight * prefill_blocks(w) + decode_blocks(w)
//
// Temperature 0: the lowest cost wins; ties go to the worker with the smaller index
// (fewer blocks in the KV index, i.e. the emptier cache), then to a uniform draw.
// Temperature T > 0: a softmax draw with p(w) ∝ exp(-(cost(w)/(max_cost-min_cost))/T)
// (uniform when all costs are equal).
type KVPolicy struct{}

// KVCost returns cost(w) of candidate c for the request described by in (see KVPolicy).
func KVCost(in *SelectInput, c *Candidate) float64 {
	prefillBlocks, decodeBlocks := kvCostTerms(in, c)
	return in.OverlapWeight*prefillBlocks + decodeBlocks
}

// kvCostTerms returns prefill_blocks(w) and decode_blocks(w) of KVPolicy (KV blocks).
func kvCostTerms(in *SelectInput, c *Candidate) (prefillBlocks, decodeBlocks float64) {
	bs := in.BlockSize
	if bs <= 0 {
		bs = 1
	}
	// Blocks a lower tier holds count as cached at their credit (docs/reference.md §9.2).
	newTokens := math.Max(float64(in.PromptTokens-c.OverlapBlocks*bs)-c.TierCreditTokens, 0)
	prefillBlocks = (float64(c.ActivePrefillTokens) + newTokens) / float64(bs)
	newActive := in.PromptBlocks - c.ActivePrefixBlocks
	if newActive < 0 {
		newActive = 0
	}
	return prefillBlocks, float64(c.ActiveBlocks + newActive)
}

// Explain implements Explainer: cost(w) of KVCost as the sum of its two terms,
// weighted_prefill_blocks (overlap_weight × prefill_blocks(w)) and decode_blocks, both
// in KV blocks.
func (KVPolicy) Explain(in *SelectInput, c *Candidate) (float64, []Term) {
	prefill, decode := kvCostTerms(in, c)
	w := in.OverlapWeight * prefill
	return w + decode, []Term{{Name: TermWeightedPrefillBlocks, Value: w}, {Name: TermDecodeBlocks, Value: decode}}
}

// Select implements Policy.
func (KVPolicy) Select(in *SelectInput, rng *rand.Rand) (int, error) {
	n := len(in.Candidates)
	if n == 0 {
		return 0, ErrNoWorkers
	}
	if n == 1 {
		return 0, nil
	}
	// Costs on the stack for typical fleets.
	var buf [64]float64
	costs := buf[:0]
	if n > len(buf) {
		costs = make([]float64, 0, n)
	}
	minC, maxC := math.Inf(1), math.Inf(-1)
	for i := range in.Candidates {
		c := KVCost(in, &in.Candidates[i])
		costs = append(costs, c)
		minC, maxC = math.Min(minC, c), math.Max(maxC, c)
	}
	if in.Temperature > 0 {
		span := maxC - minC
		if span == 0 {
			return drawN(rng, n), nil
		}
		var sum float64
		for i, c := range costs {
			// exp(-(c/span)/T) ∝ exp(-((c-min)/span)/T): shifting keeps exp in range.
			costs[i] = math.Exp(-((c - minC) / span) / in.Temperature)
			sum += costs[i]
		}
		if rng == nil {
			return argmax(costs), nil
		}
		x := rng.Float64() * sum
		for i, p := range costs {
			if x < p {
				return i, nil
			}
			x -= p
		}
		return n - 1, nil
	}
	// argmin, ties to the smaller index, then a uniform draw among the rest.
	best, ties := -1, 0
	for i, c := range costs {
		if c != minC {
			continue
		}
		switch {
		case best < 0 || in.Candidates[i].IndexedBlocks < in.Candidates[best].IndexedBlocks:
			best, ties = i, 1
		case in.Candidates[i].IndexedBlocks == in.Candidates[best].IndexedBlocks:
			ties++
			// reservoir sampling: each tied candidate ends chosen with probability 1/ties
			if rng != nil && rng.IntN(ties) == 0 {
				best = i
			}
		}
	}
	return best, nil
}

func argmax(v []float64) int {
	best := 0
	for i, x := range v {
		if x > v[best] {
			best = i
		}
	}
	return best
}

func drawN(rng *rand.Rand, n int) int {
	if rng == nil {
		return 0
	}
	return rng.IntN(n)
}

// RoundRobinPolicy cycles through workers by worker id: it picks the first candidate
// whose id follows the last one chosen (wrapping around), so workers joining, leaving
// or turning busy do not reset or skew the cycle.
type RoundRobinPolicy struct {
	last    WorkerID
	started bool
}

// Select implements Policy.
func (p *RoundRobinPolicy) Select(in *SelectInput, _ *rand.Rand) (int, error) {
	if len(in.Candidates) == 0 {
		return 0, ErrNoWorkers
	}
	next, lowest := -1, 0
	for i, c := range in.Candidates {
		if c.Worker < in.Candidates[lowest].Worker {
			lowest = i
		}
		if p.started && c.Worker <= p.last {
			continue
		}
		if next < 0 || c.Worker < in.Candidates[next].Worker {
			next = i
		}
	}
	if next < 0 {
		next = lowest
	}
	p.last, p.started = in.Candidates[next].Worker, true
	return next, nil
}

// RandomPolicy picks a uniformly random candidate (the first one when rng is nil).
type RandomPolicy struct{}

// Select implements Policy.
func (RandomPolicy) Select(in *SelectInput, rng *rand.Rand) (int, error) {
	if len(in.Candidates) == 0 {
		return 0, ErrNoWorkers
	}
	return drawN(rng, len(in.Candidates)), nil
}

// Defaults of CacheAwarePolicy: the sgl-router launcher's (--cache-threshold 0.3,
// --balance-abs-threshold 64, --balance-rel-threshold 1.5).
const (
	DefaultCacheThreshold      = 0.3
	DefaultBalanceAbsThreshold = 64
	DefaultBalanceRelThreshold = 1.5
)

// CacheAwarePolicy is SGLang's sgl-router cache_aware policy on the router's KV index
// (docs/reference.md §3, "The other routing policies"):
//
//	imbalanced = max_load - min_load > BalanceAbsThreshold  and  max_load > min_load * BalanceRelThreshold
//	imbalanced:                      the least-loaded worker
//	balanced, best ratio > CacheThreshold: the worker with the highest prefix match ratio
//	balanced, otherwise:             the worker with the smallest cache
//
// The facts map onto a Candidate as follows:
//   - load is ActiveRequests, the worker's requests in flight (sgl-router's running
//     request count); ties in load go to fewer ActiveBlocks.
//   - the prefix match ratio is min(OverlapBlocks*BlockSize, PromptTokens) / PromptTokens:
//     the prompt tokens the worker's KV cache holds (whole blocks, from the engines' KV
//     events) over the prompt. sgl-router matches characters against an approximate tree
//     of the text it routed; the KV index reflects what the engines really cached.
//   - the cache size is IndexedBlocks, the worker's blocks in the KV index (sgl-router:
//     the size of the worker's tree).
//
// Requests are a coarse load measure: a worker holding a few long contexts counts as
// lightly loaded (docs/reference.md §3 lists this among peers' failure modes). The policy is
// kept faithful to sgl-router so that `turbine bench compare` measures it as it is.
//
// Among equally good workers (equal load; equal highest match; equal cache size) the
// lower load wins, then a uniform draw from rng (the first of them when rng is nil).
type CacheAwarePolicy struct {
	// CacheThreshold: the match ratio (0..1) the best worker must exceed to be chosen
	// for its cache.
	CacheThreshold float64
	// BalanceAbsThreshold: the load spread (requests) above which, together with
	// BalanceRelThreshold, the load counts as imbalanced.
	BalanceAbsThreshold int
	// BalanceRelThreshold: the ratio max_load / min_load above which, together with
	// BalanceAbsThreshold, the load counts as imbalanced.
	BalanceRelThreshold float64
}

// NewCacheAwarePolicy returns the policy with sgl-router's default thresholds.
func NewCacheAwarePolicy() CacheAwarePolicy {
	return CacheAwarePolicy{CacheThreshold: DefaultCacheThreshold, BalanceAbsThreshold: DefaultBalanceAbsThreshold,
		BalanceRelThreshold: DefaultBalanceRelThreshold}
}

// MatchRatio is the share of in's prompt tokens that c's KV cache holds (0 for an
// empty prompt).
func MatchRatio(in *SelectInput, c *Candidate) float64 {
	if in.PromptTokens <= 0 {
		return 0
	}
	bs := max(in.BlockSize, 1)
	return float64(min(c.OverlapBlocks*bs, in.PromptTokens)) / float64(in.PromptTokens)
}

// Select implements Policy.
func (p CacheAwarePolicy) Select(in *SelectInput, rng *rand.Rand) (int, error) {
	cands := in.Candidates
	if len(cands) == 0 {
		return 0, ErrNoWorkers
	}
	stage, top := p.stage(in)
	switch stage {
	case stageLoad:
		return pickMin(cands, rng, func(c *Candidate) (int, int) { return c.ActiveRequests, c.ActiveBlocks }), nil
	case stageCache:
		return pickMin(cands, rng, func(c *Candidate) (int, int) {
			if c.OverlapBlocks != top {
				return math.MaxInt, 0
			}
			return c.ActiveRequests, c.ActiveBlocks
		}), nil
	}
	return pickMin(cands, rng, func(c *Candidate) (int, int) { return c.IndexedBlocks, c.ActiveRequests }), nil
}

// Stages of CacheAwarePolicy.Select (TermStage).
const (
	stageLoad  = 0 // the load is imbalanced: the least-loaded worker
	stageCache = 1 // the best match ratio exceeds CacheThreshold: the best-matching worker
	stageSize  = 2 // otherwise: the smallest cache
)

// stage is the stage of Select that decides for in (at least one candidate), and the
// highest overlap (blocks) among the candidates.
func (p CacheAwarePolicy) stage(in *SelectInput) (stage, top int) {
	cands := in.Candidates
	minLoad, maxLoad := cands[0].ActiveRequests, cands[0].ActiveRequests
	best := 0 // highest overlap
	for i := range cands {
		minLoad, maxLoad = min(minLoad, cands[i].ActiveRequests), max(maxLoad, cands[i].ActiveRequests)
		if cands[i].OverlapBlocks > cands[best].OverlapBlocks {
			best = i
		}
	}
	switch {
	case maxLoad-minLoad > p.BalanceAbsThreshold && float64(maxLoad) > float64(minLoad)*p.BalanceRelThreshold:
		return stageLoad, cands[best].OverlapBlocks
	case MatchRatio(in, &cands[best]) > p.CacheThreshold:
		return stageCache, cands[best].OverlapBlocks
	}
	return stageSize, cands[best].OverlapBlocks
}

// Explain implements Explainer. The cost is the key the policy minimises in the stage
// that decides the request (TermStage, the same for every candidate): the active
// requests when the load is imbalanced; 1 − match_ratio when the best match ratio
// exceeds CacheThreshold (the load then breaks ties among the best matches); otherwise
// the indexed blocks. Terms: stage, active_requests, match_ratio (0..1), indexed_blocks.
func (p CacheAwarePolicy) Explain(in *SelectInput, c *Candidate) (float64, []Term) {
	stage := stageSize
	if len(in.Candidates) > 0 {
		stage, _ = p.stage(in)
	}
	ratio := MatchRatio(in, c)
	var cost float64
	switch stage {
	case stageLoad:
		cost = float64(c.ActiveRequests)
	case stageCache:
		cost = 1 - ratio
	default:
		cost = float64(c.IndexedBlocks)
	}
	return cost, []Term{{Name: TermStage, Value: float64(stage)}, {Name: TermActiveRequests, Value: float64(c.ActiveRequests)},
		{Name: TermMatchRatio, Value: ratio}, {Name: TermIndexedBlocks, Value: float64(c.IndexedBlocks)}}
}

// pickMin returns the candidate with the smallest key (compared as a pair), drawing
// uniformly from rng among equal keys (the first of them when rng is nil).
func pickMin(cands []Candidate, rng *rand.Rand, key func(*Candidate) (int, int)) int {
	best, ties := 0, 1
	b1, b2 := key(&cands[0])
	for i := 1; i < len(cands); i++ {
		k1, k2 := key(&cands[i])
		switch {
		case k1 < b1 || (k1 == b1 && k2 < b2):
			best, ties, b1, b2 = i, 1, k1, k2
		case k1 == b1 && k2 == b2:
			ties++
			// reservoir sampling: each tied candidate ends chosen with probability 1/ties
			if rng != nil && rng.IntN(ties) == 0 {
				best = i
			}
		}
	}
	return best
}
