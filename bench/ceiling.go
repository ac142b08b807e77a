package bench

// Ceiling is the prefix-cache hit rate an infinite cache shared by every worker would
// reach on reqs: the prompt tokens served from cache over all prompt tokens (0 when
// there are none). No routing policy can beat it on this workload.
//
// Requests are taken in workload order (the order they are sent). A request's hit is its
// leading hash ids that any earlier request already had — hash ids are prefix-chained,
// so those blocks hold exactly the same tokens — counted in tokens (blockTokens per id)
// and capped at InputLength-1, since an engine always computes at least the prompt's last
// token (vLLM recomputes it on a full hit to produce the first output token's logits).
// A shared prefix that ends inside a block (Request.PrefixTokens) counts in full once
// an earlier request had the same PrefixID, since it then holds exactly the same
// tokens. Traces without prefix information (Azure, synthetic without a shared prefix)
// share no id and have ceiling 0.
func Ceiling(reqs []Request, blockTokens int) float64 {
	hit, total := ceilingTokens(reqs, blockTokens)
	if total == 0 {
		return 0
	}
	return float64(hit) / float64(total)
}

// CeilingBlocks is Ceiling counted in hash-id blocks without the last-token cap: the
// leading ids seen in an earlier request over all ids.
func CeilingBlocks(reqs []Request) float64 {
	seen := make(map[int64]struct{})
	var hit, total int
	for _, r := range reqs {
		k := leadingSeen(r.HashIDs, seen)
		hit += k
		total += len(r.HashIDs)
		for _, id := range r.HashIDs[k:] {
			seen[id] = struct{}{}
		}
	}
	if total == 0 {
		return 0
	}
	return float64(hit) / float64(total)
}

func ceilingTokens(reqs []Request, blockTokens int) (hit, total int64) {
	seen := make(map[int64]struct{})
	prefixes := make(map[int64]struct{}) // PrefixIDs seen
	for _, r := range reqs {
		k := leadingSeen(r.HashIDs, seen)
		total += int64(r.InputLength)
		h := k * blockTokens
		if r.PrefixTokens > h && k >= r.PrefixTokens/blockTokens {
			if _, ok := prefixes[r.PrefixID]; ok {
				h = r.PrefixTokens
			}
		}
		hit += int64(max(min(h, r.InputLength-1), 0))
		for _, id := range r.HashIDs[k:] {
			seen[id] = struct{}{}
		}
		if r.PrefixTokens > 0 {
			prefixes[r.PrefixID] = struct{}{}
		}
	}
	return hit, total
}

// leadingSeen counts the leading ids of ids that are in seen.
func leadingSeen(ids []int64, seen map[int64]struct{}) int {
	for k, id := range ids {
		if _, ok := seen[id]; !ok {
			return k
		}
	}
	return len(ids)
}
