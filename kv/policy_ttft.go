package kv

import (
	"math"
	"math/rand/v2"
	"slices"
	"time"
)

// PolicyTTFT names the predicted-TTFT policy (TTFTPolicy), the default.
const PolicyTTFT = "ttft"

// Defaults of the TTFT policy (docs/reference.md §3.6).
const (
	// DefaultWorkWeight weighs the prefill time a choice adds to the fleet (the compute the
	// other requests on that worker wait behind) against the request's own TTFT.
	DefaultWorkWeight = 1.0
	// DefaultBusyWorkScale: the work term's weight grows with the share b of candidates
	// that have prefill queued, to 1 + (DefaultBusyWorkScale − 1)·b³ times WorkWeight
	// (busyScale). Compute a choice wastes costs the fleet little while workers idle, and
	// delays every queued request once none does. Chosen by a sweep (BENCHMARKS.md, "The
	// price of compute under load"): 16 to 64 gave the same capacity, 4 and 8 less.
	DefaultBusyWorkScale = 16.0
	// DefaultSessionSlack: a session's worker is kept while its cost is at most this much
	// above the best (a fraction of the best cost).
	DefaultSessionSlack = 0.1
	// defaultDecodeTokens: the output assumed for a worker whose requests' decode time
	// has not been observed yet (tokens), the mock engine's mean.
	defaultDecodeTokens = 128
	// nearMs and nearFraction: costs within max(nearMs, nearFraction·best) of the best
	// count as equal (the prediction's resolution).
	nearMs       = 1.0
	nearFraction = 0.05
	// hotRequests: the requests in flight per holder beyond its fair share at which a
	// prefix counts as wholly hot (hotDiscount).
	hotRequests = 8
	// prefillLagSteps: the decode steps of a worker's queue wait that computed nothing of
	// it (PrefillElapsedMs): the request reaching the engine, the step in progress
	// ending, the first token coming back to the router (docs/reference.md §3.6).
	prefillLagSteps = 4
	// minMemoryUse: the least KV usage the memory wait divides by (a prompt larger than
	// an idle worker's cache waits 1/minMemoryUse decode times, a long wait, not ∞).
	minMemoryUse = 0.05
	// speedNoise: a learnt speed closer than this to the fleet's median in log space
	// (about 10 %) counts as the median (ttftModel.setFleet).
	speedNoise = 0.1
	// speedAlpha: the weight of a new observation in a worker's speed factor.
	speedAlpha = 0.05
	// speedPriorWeight: the observations the fleet's speed counts as against a worker's
	// own (relaxedSpeed).
	speedPriorWeight = 2
	// SpeedHalfLife: what a worker's learnt speed factor says fades with the time since
	// its last observation, with this half-life (docs/reference.md §3.6): routing uses
	// the factor relaxed toward the fleet's speed (fleetPrior) in log space
	// (relaxedSpeed), and the next observation weighs more the older the factor is
	// (learnSpeedAfter). A factor learnt while requests waited in the engine for a
	// sequence slot, which the prediction does not see, would otherwise keep the worker
	// out of routing after the load drops: with no request, no observation corrects it.
	SpeedHalfLife = 5 * time.Second
	// speedSteps: the relaxation advances in steps of SpeedHalfLife/speedSteps (a factor
	// changes by at most 1.1 % per step), so that a route computes it once per step.
	speedSteps = 64
)

// relaxedSpeed is a speed factor learnt from observed first tokens, the last of them
// elapsed ago, weighed against prior (the fleet's speed, fleetPrior; 1 when not a
// positive finite number) in log space: prior·(factor/prior)^w with
// w = 2^(−elapsed/SpeedHalfLife) · n/(n + speedPriorWeight), n the observations (at
// least 1, older ones weighing less: routerWorker.evidence), elapsed counted in whole
// steps of SpeedHalfLife/speedSteps. What a worker's own observations say fades with
// their age, and counts for little while they are few (a first request is often slow:
// a connection made, an engine warming up). 0 (nothing learnt) stays 0.
func relaxedSpeed(factor, prior float64, elapsed time.Duration, observed float64) float64 {
	if !(factor > 0) {
		return factor
	}
	if !(prior > 0) || math.IsInf(prior, 0) {
		prior = 1
	}
	n := observed
	if !(n >= 1) {
		n = 1 // none counted, or not a number
	}
	w := 1.0
	if !math.IsInf(n, 1) {
		w = n / (n + speedPriorWeight)
	}
	if steps := elapsed / (SpeedHalfLife / speedSteps); steps > 0 {
		w *= math.Exp2(-float64(steps) / speedSteps)
	}
	lp := math.Log(prior)
	return math.Exp(lp + (math.Log(factor)-lp)*w)
}

// fleetPrior is the fleet's speed from its workers' learnt factors (v, reordered): their
// median in log space when at least two are positive and finite, else 1, the profile's
// (docs/reference.md §3.6). One factor alone may be its worker's own (it queued, it was
// paused), not the fleet's.
func fleetPrior(v []float64) float64 {
	n := 0
	for _, f := range v {
		if f > 0 && !math.IsInf(f, 0) {
			v[n] = f
			n++
		}
	}
	v = v[:n]
	slices.Sort(v)
	return sortedPrior(v)
}

// sortedPrior is fleetPrior of factors already filtered and sorted.
func sortedPrior(v []float64) float64 {
	n := len(v)
	if n < 2 {
		return 1
	}
	return math.Sqrt(v[(n-1)/2] * v[n/2])
}

// Prediction is a candidate's predicted TTFT split into its terms, in milliseconds at
// the worker's observed speed.
type Prediction struct {
	// QueueMs: prefilling the tokens queued ahead of the request on the worker.
	QueueMs float64
	// PrefillMs: prefilling the request's own uncached tokens after them.
	PrefillMs float64
	// DecodeMs: the decode part of those prefill steps (the worker's running requests,
	// slower as its KV cache fills).
	DecodeMs float64
	// MemoryWaitMs: waiting for KV blocks to free when the request's would not fit in
	// the worker's cache beside its active requests' (an engine admits a request once
	// its blocks fit, as vLLM's scheduler does).
	MemoryWaitMs float64
	// SlotWaitMs: waiting in the engine's queue for a sequence slot when the worker
	// already has MaxNumSeqs requests or more.
	SlotWaitMs float64
	// AdapterMs: loading the request's LoRA adapter first, twice over when that evicts
	// another adapter (which later requests may have to load again), after waiting for a
	// slot when every unpinned adapter there is in use; not scaled by Speed.
	AdapterMs float64
	// Speed: the worker's observed speed factor applied (1: as profiled).
	Speed float64
	// OwnPrefillMs: the request's own prefill time on an idle worker (the work it adds).
	OwnPrefillMs float64
}

// Total is the predicted TTFT (ms).
func (p Prediction) Total() float64 {
	return p.QueueMs + p.PrefillMs + p.DecodeMs + p.MemoryWaitMs + p.SlotWaitMs + p.AdapterMs
}

// PredictTTFT predicts the TTFT of a prompt of promptTokens tokens on candidate c
// (docs/reference.md §3.6). A nil profile is DefaultProfile.
func PredictTTFT(prof *Profile, promptTokens, blockSize int, c *Candidate) Prediction {
	var p Prediction
	m := newTTFTModel(prof, blockSize)
	m.predict(promptTokens, (promptTokens+m.bs-1)/m.bs, c, &p)
	return p
}

// ttftModel is a profile prepared for predicting many candidates' TTFT for one request:
// the full chunk's step time computed once. Its figures are the profile's, to the bit.
type ttftModel struct {
	prof          Profile
	chunk, fullMs float64
	bs            int
	// fleet: the candidates' median learnt speed (fleetSpeed), 0 when not given; a
	// worker's learnt speed strictly between lo and hi counts as it (setFleet).
	// unobserved: the speed of a candidate with none learnt (fleetPrior; 1 when not given).
	fleet, lo, hi float64
	unobserved    float64
	// own: the last prefill time asked of the request's own tokens on a candidate (most
	// share a hit length).
	own prefillMemo
}

// prefillMemo remembers one prefill time: ms for tok tokens.
type prefillMemo struct{ tok, ms float64 }

// ms returns m's prefill time of t tokens (ms), from memo when it holds t.
func (m *ttftModel) ms(memo *prefillMemo, t float64) float64 {
	if t != memo.tok || memo.ms == 0 {
		memo.tok = t
		memo.ms, _ = m.prefill(t)
	}
	return memo.ms
}

// setFleet gives m the fleet's median speed f (fleetSpeed): a learnt speed within
// speedNoise of it in log space is taken as f, being within the noise of the
// observations it is learnt from (each a ratio that what the prediction does not see
// moves by tens of per cent); acting on such a difference would only unbalance a
// uniform fleet. prior is the speed of a candidate with none learnt (fleetPrior).
func (m *ttftModel) setFleet(f, prior float64) {
	m.fleet, m.lo, m.hi, m.unobserved = f, f*math.Exp(-speedNoise), f*math.Exp(speedNoise), prior
}

// setFleetOf is setFleet for in's candidates, an unobserved one taken at in.SpeedPrior
// when given (a positive finite number), else at fleetPrior of the candidates' factors.
func (m *ttftModel) setFleetOf(in *SelectInput) {
	f, prior := fleetSpeed(in.Candidates)
	if p := in.SpeedPrior; p > 0 && !math.IsInf(p, 0) {
		prior = p
	}
	m.setFleet(f, prior)
}

func newTTFTModel(prof *Profile, blockSize int) ttftModel {
	m := ttftModel{bs: max(blockSize, 1), unobserved: 1}
	if prof == nil {
		m.prof = DefaultProfile()
	} else {
		m.prof = *prof
	}
	m.chunk = float64(max(m.prof.ChunkTokens, 1))
	m.fullMs = m.prof.StepPrefillMs(m.chunk)
	return m
}

// prefill is the prefill time of t tokens in chunks and its steps (Profile.PrefillMs).
func (m *ttftModel) prefill(t float64) (ms, steps float64) {
	if t <= 0 {
		return 0, 0
	}
	full := math.Floor(t / m.chunk)
	ms, steps = full*m.fullMs, full
	if rem := t - full*m.chunk; rem > 0 {
		ms += m.prof.StepPrefillMs(rem)
		steps++
	}
	return ms, steps
}

// decodeTimeMs is how long c's requests decode, from first token to end, at the
// profile's speed (ms; predict scales it by speed after): the observed mean divided by
// speed, or defaultDecodeTokens decode steps at KV usage u while none was observed.
func (m *ttftModel) decodeTimeMs(c *Candidate, speed, u float64) float64 {
	if ms := c.MeanDecodeSeconds * 1000 / speed; ms > 0 {
		return ms
	}
	return defaultDecodeTokens * m.prof.DecodeMs(u)
}

// predict writes PredictTTFT's answer for c into p; promptBlocks is the prompt's blocks
// (promptTokens/bs rounded up).
func (m *ttftModel) predict(promptTokens, promptBlocks int, c *Candidate, p *Prediction) {
	m.shared(&sharedRequest{promptTokens: promptTokens, promptBlocks: promptBlocks}, c, p)
}

// TTFTPolicy routes a request to the worker where it would get its first token soonest,
// counting the compute it adds there (docs/reference.md §3.6):
//
//	cost(w) = predicted_ttft(w) − credit(w) + WorkWeight · busy · hot · fleet · (own_prefill(w) − min_v own_prefill(v))
//
// predicted_ttft is the worker's queued prefill less what its head has computed
// (Candidate.PrefillElapsedMs), the request's uncached prefill in
// chunks, the decode part of those steps at the worker's KV usage, and waits for KV
// blocks when its cache would overflow and for a sequence slot, all scaled by
// the worker's observed speed (Candidate.SpeedFactor, taken as the fleet's median when
// within speedNoise of it); own_prefill is the request's prefill at the profile's speed,
// so the last term is the compute a choice wastes against the best-cached worker; busy
// (busyScale) raises its weight as the fleet's prefill queues fill, and hot
// (hotDiscount) lowers it for a prefix whose holders already carry more than their
// share of the load. credit (the replica credit, shared) takes off (n − 1)/n of what a
// missing prefix hit adds, for a prefix in demand n (SelectInput.PrefixDemand); own_prefill
// is lowered likewise. A prefix hit shortens every term; a long queue or a full cache
// moves the request elsewhere as soon as recomputing there is faster. The session's
// worker (Candidate.SessionWorker) is kept while its cost is within SessionSlack of the
// best. Costs within max(1 ms, 5 %) of the best count as equal (the prediction's
// resolution): among them the fewest running requests win, then the emptier cache (fewer
// indexed blocks), then a uniform draw.
type TTFTPolicy struct {
	WorkWeight   float64
	SessionSlack float64
	// BusyWorkScale is the most busyScale multiplies WorkWeight by (≤ 1: not scaled).
	BusyWorkScale float64
}

// NewTTFTPolicy returns the policy with its defaults.
func NewTTFTPolicy() TTFTPolicy {
	return TTFTPolicy{WorkWeight: DefaultWorkWeight, SessionSlack: DefaultSessionSlack, BusyWorkScale: DefaultBusyWorkScale}
}

// busyScale is what the work term's weight is multiplied by for candidates cands:
// 1 + (BusyWorkScale − 1)·b³, b the share of them with prefill queued
// (Candidate.ActivePrefillTokens > 0); 1 when BusyWorkScale ≤ 1 or not a finite number.
// Cubed: while a few workers idle, a copy made there costs little (1.6 times the weight
// with a third of the fleet busy, 2.9 with half); the weight rises steeply only as the
// last idle workers fill.
func (p TTFTPolicy) busyScale(cands []Candidate) float64 {
	if !(p.BusyWorkScale > 1) || math.IsInf(p.BusyWorkScale, 0) || len(cands) == 0 {
		return 1
	}
	busy := 0
	for i := range cands {
		if cands[i].ActivePrefillTokens > 0 {
			busy++
		}
	}
	b := float64(busy) / float64(len(cands))
	return 1 + (p.BusyWorkScale-1)*b*b*b
}

// work returns what the work term is measured from: the least compute any candidate would
// spend on the request (ms at the profile's speed, shared as in shared), and the weight
// that applies to the compute above it (WorkWeight times busyScale and hot, the
// hotDiscount).
func (p TTFTPolicy) work(in *SelectInput, m *ttftModel, q *sharedRequest, hot float64) (minOwn, weight float64) {
	minOwn = math.Inf(1)
	var pr Prediction
	for i := range in.Candidates {
		_, own, _ := m.shared(q, &in.Candidates[i], &pr)
		minOwn = min(minOwn, own)
	}
	return minOwn, p.WorkWeight * p.busyScale(in.Candidates) * hot * m.fleet
}

// replicaShare is the share of what a missing prefix hit adds that the requests drawing
// on the prefix bear (0..1; shared): (n − 1)/n for a demand of n > 1 earlier requests
// (SelectInput.PrefixDemand), the later ones being expected alike and one of them
// discounted as weak evidence; 0 for n ≤ 1 or not a finite number.
func replicaShare(n float64) float64 {
	if !(n > 1) || math.IsInf(n, 0) {
		return 0
	}
	return (n - 1) / n
}

// fleetSpeed is the median of the candidates' learnt speed factors (1 while none is
// known): the work term, at the profile's speed, is scaled by it into the time the
// fleet's engines really take, as the predicted terms are by each worker's own factor.
// prior is fleetPrior of the same factors: an unobserved candidate's speed.
func fleetSpeed(cands []Candidate) (median, prior float64) {
	var buf [64]float64
	v := buf[:0]
	for i := range cands {
		if f := cands[i].SpeedFactor; f > 0 && !math.IsInf(f, 0) {
			v = append(v, f)
		}
	}
	if len(v) == 0 {
		return 1, 1
	}
	slices.Sort(v)
	n := len(v)
	return (v[(n-1)/2] + v[n/2]) / 2, sortedPrior(v)
}

// shared writes c's prediction into pr and returns its total less the replica credit
// (ms) and the request's own prefill on c (ms at the profile's speed), both with the
// prefix shared (docs/reference.md §3.6): when c holds less than the longest prefix hit
// (q.best), computing the missing blocks on c makes a copy that later requests on the
// prefix draw on too, so the request bears only 1 − q.share (replicaShare) of what
// those blocks add to c's prediction (the credit is the rest) and to its own prefill.
// The prediction in pr, when not nil, is c's, unshared.
func (m *ttftModel) shared(q *sharedRequest, c *Candidate, pr *Prediction) (cost, own, credit float64) {
	// One function, the terms in locals: Select calls it once per candidate.
	promptTokens, promptBlocks := q.promptTokens, q.promptBlocks
	speed := c.SpeedFactor
	if !(speed > 0) {
		// Not observed yet: as fast as the fleet (setFleetOf).
		speed = m.unobserved
	}
	if speed > m.lo && speed < m.hi {
		speed = m.fleet
	}
	// An engine always computes at least the prompt's last token; blocks onboarded from
	// a lower tier count at their credit (docs/reference.md §9.2).
	newTok := max(float64(promptTokens-c.OverlapBlocks*m.bs)-c.TierCreditTokens, 1)
	queued := float64(max(c.ActivePrefillTokens, 0))
	var queueMs float64
	if queued > 0 {
		queueMs, _ = m.prefill(queued)
	}
	allMs, steps := m.prefill(queued + newTok)
	ownRaw := m.ms(&m.own, newTok)

	var u float64
	if c.TotalBlocks > 0 {
		u = float64(c.ActiveBlocks) / float64(c.TotalBlocks)
	}
	step := m.prof.DecodeMs(u)
	// The queue's head has been computed since it began, less the lag (at the profile's
	// speed, as the terms before scaling).
	var done float64
	if c.PrefillElapsedMs > 0 {
		done = max(min(c.PrefillElapsedMs/speed-prefillLagSteps*step, queueMs), 0)
		queueMs -= done
		allMs -= done
	}
	var decodeMs, decodeStep, memoryMs, slotMs, adapterMs float64
	if c.ActiveRequests > 0 {
		decodeStep = step
		decodeMs = steps * step
	}
	if c.TotalBlocks > 0 {
		newActive := float64(max(promptBlocks-c.ActivePrefixBlocks, 0))
		if proj := (float64(c.ActiveBlocks) + newActive) / float64(c.TotalBlocks); proj > 1 {
			// The blocks beyond the cache free as the active requests end, all of
			// them over about one decode time (docs/reference.md §3.6).
			memoryMs = (proj - 1) / max(u, minMemoryUse) * m.decodeTimeMs(c, speed, u)
		}
	}
	if c.MaxNumSeqs > 0 && c.ActiveRequests >= c.MaxNumSeqs {
		// The request waits for the requests ahead of it to finish, MaxNumSeqs of
		// them at a time, each in about the worker's mean decode time.
		slotMs = float64(c.ActiveRequests+1-c.MaxNumSeqs) * m.decodeTimeMs(c, speed, u) / float64(c.MaxNumSeqs)
	}
	if c.AdapterLoadMs > 0 {
		adapterMs = c.AdapterLoadMs
		if c.AdapterEvicts {
			adapterMs *= 2
		}
		adapterMs += max(c.AdapterWaitMs, 0)
	}
	queueS, prefill, decode := queueMs*speed, (allMs-queueMs)*speed, decodeMs*speed
	total := queueS + prefill + decode + memoryMs*speed + slotMs*speed + adapterMs // Prediction.Total
	if pr != nil {
		*pr = Prediction{
			QueueMs: queueS, PrefillMs: prefill, DecodeMs: decode,
			MemoryWaitMs: memoryMs * speed, SlotWaitMs: slotMs * speed, AdapterMs: adapterMs,
			Speed: speed, OwnPrefillMs: ownRaw * speed,
		}
	}
	own = ownRaw * speed / speed
	if q.share <= 0 || c.OverlapBlocks >= q.best {
		return total, own, 0
	}
	// As predict with a hit of best blocks and no tier credit: only the prefill steps
	// and their decode part change.
	all2, steps2 := m.prefill(queued + q.heldTok)
	all2 -= done
	held := total - prefill - decode + speed*((all2-queueMs)+steps2*decodeStep)
	credit = max(total-held, 0) * q.share
	own -= max(own-q.heldMs, 0) * q.share
	return total - credit, own, credit
}

// sharedRequest is what shared needs of the request, the same for all its candidates.
type sharedRequest struct {
	promptTokens, promptBlocks int
	// best: the longest prefix hit among the candidates (blocks); share: replicaShare of
	// the prefix's demand; heldTok, heldMs: the request's uncached tokens with a hit of
	// best blocks and their prefill time (ms).
	best            int
	share           float64
	heldTok, heldMs float64
}

// sharedRequestOf is in's sharedRequest on model m.
func (m *ttftModel) sharedRequestOf(in *SelectInput) sharedRequest {
	q := sharedRequest{promptTokens: in.PromptTokens, promptBlocks: (in.PromptTokens + m.bs - 1) / m.bs,
		best: bestOverlap(in.Candidates), share: replicaShare(in.PrefixDemand)}
	q.heldTok = max(float64(in.PromptTokens-q.best*m.bs), 1)
	q.heldMs, _ = m.prefill(q.heldTok) // once per request
	return q
}

// cost is c's predicted TTFT less its replica credit plus the weighted compute it adds
// beyond the cheapest candidate's (work).
func (p TTFTPolicy) cost(m *ttftModel, q *sharedRequest, c *Candidate, minOwn, weight float64) (float64, Prediction, float64, float64) {
	var pr Prediction
	v, own, credit := m.shared(q, c, &pr)
	work := weight * (own - minOwn)
	return v + work, pr, credit, work
}

// hotDiscount is the share of the work weight that applies (0..1): all of it while the
// workers holding the longest prefix hit carry no more than their share of the fleet's
// requests in flight, falling to 0 as they carry all of them. Such a prefix is hot: a copy
// on another worker is an investment that later requests share, not waste.
func hotDiscount(cands []Candidate) float64 {
	best := bestOverlap(cands)
	if best == 0 {
		return 1
	}
	holders, load, total := 0, 0, 0
	for i := range cands {
		total += cands[i].ActiveRequests
		if cands[i].OverlapBlocks == best {
			holders++
			load += cands[i].ActiveRequests
		}
	}
	if total == 0 || holders == len(cands) {
		return 1
	}
	share, fair := float64(load)/float64(total), float64(holders)/float64(len(cands))
	// Hot by share, and by count: the holders carry hotRequests requests each beyond their
	// fair share (a handful of requests in flight makes no prefix hot).
	byShare := (1 - share) / (1 - fair)
	byCount := 1 - (float64(load)-fair*float64(total))/(hotRequests*float64(holders))
	return math.Max(0, math.Min(1, math.Max(byShare, byCount)))
}

// Select implements Policy.
func (p TTFTPolicy) Select(in *SelectInput, rng *rand.Rand) (int, error) {
	n := len(in.Candidates)
	if n == 0 {
		return 0, ErrNoWorkers
	}
	var buf [64]float64
	costs := buf[:0]
	if n > len(buf) {
		costs = make([]float64, 0, n)
	}
	// One prediction per candidate: its total into costs, its own prefill (at the
	// profile's speed) into owns; then the work term on top.
	var obuf [64]float64
	owns := obuf[:0]
	if n > len(obuf) {
		owns = make([]float64, 0, n)
	}
	minOwn := math.Inf(1)
	m := newTTFTModel(in.Profile, in.BlockSize)
	m.setFleetOf(in)
	q := m.sharedRequestOf(in)
	hot := hotDiscount(in.Candidates)
	session := -1
	for i := range in.Candidates {
		c := &in.Candidates[i]
		cost, own, _ := m.shared(&q, c, nil)
		costs, owns = append(costs, cost), append(owns, own)
		minOwn = min(minOwn, own)
		if c.SessionWorker {
			session = i
		}
	}
	weight := p.WorkWeight * p.busyScale(in.Candidates) * hot * m.fleet
	bestC := math.Inf(1)
	for i := range costs {
		costs[i] += weight * (owns[i] - minOwn)
		bestC = min(bestC, costs[i])
	}
	if session >= 0 && costs[session] <= bestC*(1+p.SessionSlack) {
		return session, nil
	}
	// Predictions this close are equal within their error: among them the fewest running
	// requests, then the emptier cache, then a uniform draw.
	band := bestC + max(nearMs, nearFraction*bestC)
	best, ties := -1, 0
	for i, v := range costs {
		if v > band {
			continue
		}
		c, b := &in.Candidates[i], (*Candidate)(nil)
		if best >= 0 {
			b = &in.Candidates[best]
		}
		switch {
		case b == nil || c.ActiveRequests < b.ActiveRequests ||
			(c.ActiveRequests == b.ActiveRequests && c.IndexedBlocks < b.IndexedBlocks):
			best, ties = i, 1
		case c.ActiveRequests == b.ActiveRequests && c.IndexedBlocks == b.IndexedBlocks:
			ties++
			// reservoir sampling: each tied candidate ends chosen with probability 1/ties
			if rng != nil && rng.IntN(ties) == 0 {
				best = i
			}
		}
	}
	return best, nil
}

// Explain implements Explainer: the predicted terms (adapter_ms only when an adapter
// must be loaded), replica_credit_ms (negative; only when not 0) and work_ms add up to
// the cost;
// speed_factor is the multiplier already applied to the predicted terms, not a term.
func (p TTFTPolicy) Explain(in *SelectInput, c *Candidate) (float64, []Term) {
	m := newTTFTModel(in.Profile, in.BlockSize)
	m.setFleetOf(in)
	q := m.sharedRequestOf(in)
	minOwn, weight := p.work(in, &m, &q, hotDiscount(in.Candidates))
	v, pr, credit, work := p.cost(&m, &q, c, minOwn, weight)
	terms := []Term{
		{Name: "queue_ms", Value: pr.QueueMs},
		{Name: "prefill_ms", Value: pr.PrefillMs},
		{Name: "decode_ms", Value: pr.DecodeMs},
		{Name: "memory_wait_ms", Value: pr.MemoryWaitMs},
		{Name: "work_ms", Value: work},
		{Name: "speed_factor", Value: pr.Speed},
	}
	if credit > 0 {
		terms = append(terms[:5], append([]Term{{Name: "replica_credit_ms", Value: -credit}}, terms[5:]...)...)
	}
	if pr.AdapterMs > 0 {
		terms = append(terms[:4], append([]Term{{Name: "adapter_ms", Value: pr.AdapterMs}}, terms[4:]...)...)
	}
	if pr.SlotWaitMs > 0 {
		terms = append(terms[:4], append([]Term{{Name: "slot_wait_ms", Value: pr.SlotWaitMs}}, terms[4:]...)...)
	}
	return v, terms
}

// learnSpeed folds one observed/predicted TTFT ratio into a worker's speed factor
// (0: none yet), in log space so that a slow outlier and a fast one weigh alike; each
// ratio is clamped to [0.001, 1000].
func learnSpeed(old, ratio float64) float64 { return learnSpeedAfter(old, ratio, 0) }

// learnSpeedAfter is learnSpeed for a factor learnt elapsed before the observation:
// the observation's weight is 1 − (1 − speedAlpha)·2^(−elapsed/SpeedHalfLife), speedAlpha
// for a fresh factor and nearly 1 for one several half-lives old. A steady ratio is still
// learnt exactly, however sparse the observations.
func learnSpeedAfter(old, ratio float64, elapsed time.Duration) float64 {
	if !(ratio > 0) || math.IsInf(ratio, 0) {
		return old
	}
	ratio = math.Max(1e-3, math.Min(1e3, ratio))
	if !(old > 0) {
		return ratio
	}
	keep := 1 - speedAlpha
	if elapsed > 0 {
		keep *= math.Exp2(-elapsed.Seconds() / SpeedHalfLife.Seconds())
	}
	return math.Exp(keep*math.Log(old) + (1-keep)*math.Log(ratio))
}

// smooth folds x into an exponential moving average (0: none yet).
func smooth(old, x float64) float64 {
	if !(x >= 0) || math.IsInf(x, 0) {
		return old
	}
	if old == 0 {
		return x
	}
	return (1-speedAlpha)*old + speedAlpha*x
}
