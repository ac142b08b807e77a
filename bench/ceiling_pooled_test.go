package bench

import (
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// TestCeilingPooled checks the pooled ceiling on workloads small enough to follow by
// hand: 4 tokens per hash id, caches of a few blocks.
func TestCeilingPooled(t *testing.T) {
	const B = 4
	req := func(n int, ids ...int64) Request { return Request{InputLength: n, HashIDs: ids} }
	prefixed := func(n int, ids ...int64) Request {
		r := req(n, ids...)
		r.PrefixTokens, r.PrefixID = 6, 9 // one whole block and 2 tokens of the next
		return r
	}
	for _, tc := range []struct {
		name     string
		capacity int64 // tokens
		reqs     []Request
		want     float64
	}{
		{"empty", 8, nil, 0},
		{"no room hits nothing", 0, []Request{req(4, 1), req(4, 1)}, 0},
		{"a large enough cache is the infinite one", 1 << 40,
			// 1, 1 (3 of 4: the last token is computed), 1 2 (4), 3 (0).
			[]Request{req(4, 1), req(4, 1), req(8, 1, 2), req(4, 3)}, (3.0 + 4) / 20},
		{"a hit makes its block the most recent",
			// 2 blocks. [1] [2] [1]: hit, 1 is now newer than 2; [3] evicts 2, not 1;
			// [1] hits again; [2] misses.
			8, []Request{req(4, 1), req(4, 2), req(4, 1), req(4, 3), req(4, 1), req(4, 2)}, (3.0 + 3) / 24},
		{"the least recently used block goes first",
			// 2 blocks. After [1] [2], [1 9] hits 1 and inserts 9 (1 token): 9 tokens,
			// 2 goes. [2 8] misses; it evicts 9 then 1. [1 7] misses.
			8, []Request{req(4, 1), req(4, 2), req(5, 1, 9), req(5, 2, 8), req(5, 1, 7)}, 4.0 / 23},
		{"a request's tail goes before its head",
			// 3 blocks. [1 2 3] is touched 3, 2, 1; [4] evicts 3; [1 2 3] hits 1 2.
			12, []Request{req(12, 1, 2, 3), req(4, 4), req(12, 1, 2, 3)}, 8.0 / 28},
		{"a request larger than the cache keeps its head",
			// 2 blocks: [1 2 3] keeps 1 2; the repeat hits them.
			8, []Request{req(12, 1, 2, 3), req(12, 1, 2, 3)}, 8.0 / 24},
		{"a short last block costs the tokens it holds, the most any request had",
			// 6 tokens: [1 2] of 6 tokens holds 4 + 2, all of it. [1 2] of 8 hits both
			// (7 of 8) and raises 2 to 4 tokens: 8 > 6, so 2 (touched before 1) goes.
			// The third hits 1 only.
			6, []Request{req(6, 1, 2), req(8, 1, 2), req(8, 1, 2)}, (7.0 + 4) / 22},
		{"a shared prefix's remainder counts in full while cached",
			// 8 tokens: 1 (4 tokens), the remainder (2), 2 less the remainder (2): it
			// fits; the second request hits the whole 6-token prefix.
			8, []Request{prefixed(8, 1, 2), prefixed(8, 1, 3)}, 6.0 / 16},
		{"a shared prefix's remainder goes before the prefix's blocks",
			// 4 tokens: of 2 (2), the remainder (2) and 1 (4), only 1 stays: the second
			// request hits its first block, not the remainder.
			4, []Request{prefixed(8, 1, 2), prefixed(8, 1, 3)}, 4.0 / 16},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := CeilingPooled(tc.reqs, B, tc.capacity); math.Abs(got-tc.want) > 1e-12 {
				t.Errorf("CeilingPooled = %v, want %v", got, tc.want)
			}
			if got := refPooled(tc.reqs, B, tc.capacity); math.Abs(got-tc.want) > 1e-12 {
				t.Errorf("the reference model gives %v, want %v", got, tc.want)
			}
		})
	}
}

// TestCeilingPooledMatchesModels runs seeded random workloads, with partial last blocks,
// shared prefixes and recurring ids, through CeilingPooled and a plain reference model
// of the same definition (refPooled), and checks that a cache holding everything gives
// Ceiling.
func TestCeilingPooledMatchesModels(t *testing.T) {
	const B = 8
	for seed := range uint64(40) {
		rng := rand.New(rand.NewPCG(seed, 7))
		reqs := randomWorkload(rng, B, 60)
		var size int64
		for _, r := range reqs {
			size += int64(r.InputLength)
		}
		for _, capacity := range []int64{0, 5, B, 3 * B, 10 * B, 40 * B, size / 2, size} {
			got, want := CeilingPooled(reqs, B, capacity), refPooled(reqs, B, capacity)
			if math.Abs(got-want) > 1e-12 {
				t.Fatalf("seed %d, capacity %d: CeilingPooled %v, reference model %v", seed, capacity, got, want)
			}
		}
		if got, want := CeilingPooled(reqs, B, size), Ceiling(reqs, B); math.Abs(got-want) > 1e-12 {
			t.Fatalf("seed %d: a cache of the whole workload gives %v, Ceiling %v", seed, got, want)
		}
	}
}

// TestCeilingPooledGrowsWithTheCache: with blocks of one size LRU has the inclusion
// property (a larger cache holds what a smaller one holds), so the pooled ceiling never
// falls as the cache grows, and never passes the infinite one.
func TestCeilingPooledGrowsWithTheCache(t *testing.T) {
	const B = 8
	for seed := range uint64(20) {
		rng := rand.New(rand.NewPCG(seed, 11))
		reqs := randomWorkload(rng, B, 80)
		for i := range reqs { // whole blocks only, no prefix remainder
			reqs[i].InputLength = len(reqs[i].HashIDs) * B
			reqs[i].PrefixTokens = 0
		}
		prev, inf := 0.0, Ceiling(reqs, B)
		for blocks := int64(0); blocks <= 200; blocks++ {
			got := CeilingPooled(reqs, B, blocks*B)
			if got < prev-1e-12 || got > inf+1e-12 {
				t.Fatalf("seed %d, %d blocks: %v after %v, infinite %v", seed, blocks, got, prev, inf)
			}
			prev = got
		}
	}
}

// TestCeilingPooledMooncake gives the pooled ceiling of the whole Mooncake conversation
// trace for 8 engines of 16,384 blocks of 64 tokens (turbine serve's defaults): 27.3 %
// (docs/reference.md §12.1), against the infinite ceiling's 37.4 %.
func TestCeilingPooledMooncake(t *testing.T) {
	path := filepath.Join(repoRoot(t), "..", "shared", "data", "mooncake_fast25_conversation_trace.jsonl")
	f, err := os.Open(path)
	if err != nil {
		t.Skipf("trace not available: %v", err)
	}
	defer f.Close()
	reqs, err := ReadMooncake(f, path, DefaultBlockTokens, 0)
	if err != nil {
		t.Fatal(err)
	}
	inf := Ceiling(reqs, DefaultBlockTokens)
	pooled := CeilingPooled(reqs, DefaultBlockTokens, 8*16384*64)
	t.Logf("%d requests: infinite ceiling %.2f%%, pooled (8 × 16,384 × 64 tokens) %.2f%%", len(reqs), 100*inf, 100*pooled)
	if math.Abs(pooled-0.273) > 0.0005 || pooled >= inf {
		t.Fatalf("pooled ceiling %.4f: want 0.273, below the infinite %.4f", pooled, inf)
	}
}

// randomWorkload draws n requests that continue, repeat or branch off earlier prompts
// (so ids recur as leading runs, with last blocks of varying length) or start afresh,
// some with a shared prefix ending inside a block.
func randomWorkload(rng *rand.Rand, blockTokens, n int) []Request {
	var reqs []Request
	next := int64(1)
	fresh := func(k int) []int64 {
		ids := make([]int64, k)
		for i := range ids {
			ids[i], next = next, next+1
		}
		return ids
	}
	for range n {
		var ids []int64
		if len(reqs) > 0 && rng.IntN(3) > 0 {
			base := reqs[rng.IntN(len(reqs))].HashIDs
			keep := rng.IntN(len(base) + 1)
			ids = append(slices.Clone(base[:keep]), fresh(rng.IntN(4))...)
		}
		if len(ids) == 0 {
			ids = fresh(1 + rng.IntN(5))
		}
		r := Request{HashIDs: ids, InputLength: (len(ids)-1)*blockTokens + 1 + rng.IntN(blockTokens)}
		if rng.IntN(4) == 0 && r.InputLength > blockTokens+2 {
			// A prefix of one block and 2 tokens: its first block is the group's.
			group := int64(rng.IntN(3))
			r.HashIDs[0] = -1 - group
			r.PrefixTokens, r.PrefixID = blockTokens+2, 1000+group
		}
		reqs = append(reqs, r)
	}
	return reqs
}

// refPooled is CeilingPooled's definition written plainly: the cache is a slice of
// entries, most recently used first.
func refPooled(reqs []Request, blockTokens int, capacity int64) float64 {
	type entry struct {
		key  lruKey
		cost int64
	}
	var cache []entry
	find := func(k lruKey) int {
		return slices.IndexFunc(cache, func(e entry) bool { return e.key == k })
	}
	touch := func(k lruKey, cost int64) {
		if i := find(k); i >= 0 {
			cost = max(cost, cache[i].cost)
			cache = slices.Delete(cache, i, i+1)
		}
		cache = slices.Insert(cache, 0, entry{k, cost})
	}
	var hit, total int64
	for _, r := range reqs {
		k := 0
		for k < len(r.HashIDs) && find(lruKey{id: r.HashIDs[k]}) >= 0 {
			k++
		}
		whole, rem := 0, 0
		if r.PrefixTokens > 0 {
			whole, rem = r.PrefixTokens/blockTokens, r.PrefixTokens%blockTokens
		}
		h := k * blockTokens
		if rem > 0 && k >= whole && h < r.PrefixTokens && find(lruKey{id: r.PrefixID, remainder: true}) >= 0 {
			h = r.PrefixTokens
		}
		hit += int64(max(min(h, r.InputLength-1), 0))
		total += int64(r.InputLength)
		for j := len(r.HashIDs) - 1; j >= 0; j-- {
			held := min(blockTokens, r.InputLength-j*blockTokens)
			if rem > 0 && j == whole {
				touch(lruKey{id: r.HashIDs[j]}, int64(held-rem))
				touch(lruKey{id: r.PrefixID, remainder: true}, int64(rem))
			} else {
				touch(lruKey{id: r.HashIDs[j]}, int64(held))
			}
		}
		for {
			var used int64
			for _, e := range cache {
				used += e.cost
			}
			if used <= capacity {
				break
			}
			cache = cache[:len(cache)-1]
		}
	}
	if total == 0 {
		return 0
	}
	return float64(hit) / float64(total)
}
