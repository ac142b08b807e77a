package kv

// Explained routing decisions (RouteInput.Explain, docs/reference.md §3.1): every
// candidate the policy weighed, with the cost it gave it and the cost's named terms, so
// that a client (the `turbine` response extension) or an operator can see why a worker
// won. Nothing here runs unless a request asks: the Router only notes, per Route, which
// candidates its first policy call saw.
//
// Which choice is explained: the first policy call of a Route — the aggregated choice,
// or in disaggregated serving the decode worker's (the prefill worker's choice that may
// follow is not shown); a request pinned to a worker (RouteInput.PinWorker) shows that
// worker alone. Policies that do not implement Explainer (round-robin, random) show
// each candidate's prefix hit with cost 0 and no terms.

// explainCandidates returns every candidate of sel as p costs it, chosen marking the
// one p picked. A policy without Explainer gives cost 0 and no terms.
func explainCandidates(p Policy, sel *SelectInput, chosen int) []ExplainedCandidate {
	out := make([]ExplainedCandidate, len(sel.Candidates))
	ex, _ := p.(Explainer)
	tiers := false
	for i := range sel.Candidates {
		c := &sel.Candidates[i]
		tiers = tiers || c.HostBlocks+c.DiskBlocks+c.RemoteBlocks > 0
	}
	for i := range sel.Candidates {
		c := &sel.Candidates[i]
		e := ExplainedCandidate{WorkerID: c.ID, OverlapBlocks: c.OverlapBlocks, Chosen: i == chosen}
		if ex != nil {
			e.Cost, e.Terms = ex.Explain(sel, c)
		}
		if tiers {
			e.Terms = append(e.Terms, tierTerms(c)...)
		}
		out[i] = e
	}
	return out
}

// tierTerms are a candidate's lower-tier facts (docs/reference.md §9.2): shown for every
// candidate once one of them has a tier hit; facts already in the cost, not terms of its
// sum.
func tierTerms(c *Candidate) []Term {
	return []Term{
		{Name: TermHostHitBlocks, Value: float64(c.HostBlocks)},
		{Name: TermDiskHitBlocks, Value: float64(c.DiskBlocks)},
		{Name: TermRemoteHitBlocks, Value: float64(c.RemoteBlocks)},
		{Name: TermTierCreditTokens, Value: c.TierCreditTokens},
	}
}

// noteChoice records, while a Route explains itself and nothing was recorded yet, the
// candidates of sel with the one p chose (index chosen).
func (r *Router) noteChoice(p Policy, sel *SelectInput, chosen int) {
	if r.explaining && r.explained == nil {
		r.explained = explainCandidates(p, sel, chosen)
	}
}

// Names of the cost terms of the built-in policies (Term.Name; the unit is in the name).
const (
	// KVPolicy: cost = weighted_prefill_blocks + decode_blocks.
	TermWeightedPrefillBlocks = "weighted_prefill_blocks" // overlap_weight × prefill_tokens(w) / B
	TermDecodeBlocks          = "decode_blocks"           // active blocks + prompt blocks not active on w
	// CacheAwarePolicy: the facts its stages compare, and the stage that decided.
	TermStage          = "stage"           // 0: load imbalanced, least loaded wins; 1: best prefix match wins; 2: smallest cache wins
	TermActiveRequests = "active_requests" // requests in flight on w (load)
	TermMatchRatio     = "match_ratio"     // share of the prompt's tokens cached on w (0..1)
	TermIndexedBlocks  = "indexed_blocks"  // w's blocks in the KV index (cache size)
	// Every policy, once some candidate has a lower-tier hit (docs/reference.md §9.2):
	// facts the cost already counts, not terms of its sum.
	TermHostHitBlocks    = "host_hit_blocks"    // prompt blocks after the GPU hit in w's node's host memory
	TermDiskHitBlocks    = "disk_hit_blocks"    // ... on its node's disk
	TermRemoteHitBlocks  = "remote_hit_blocks"  // ... in a remote tier
	TermTierCreditTokens = "tier_credit_tokens" // prompt tokens those blocks count as cached (tokens)
)
