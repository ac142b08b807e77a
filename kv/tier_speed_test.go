package kv

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"
)

// BenchmarkRouteTiers: the tier walk's cost (docs/reference.md §9.2). 64 workers on 8
// nodes, no GPU hits; each node's block manager holds the whole 512-block prompts of its
// workers in host memory (half of them also on disk) and node n0 serves remote tiers, so
// every candidate walks the prompt to its end. Compare p50-µs with BenchmarkRouteHashes
// (no inventory: the walk is skipped).
func BenchmarkRouteTiers(b *testing.B) {
	const nodes, workers, prompts = 8, 64, 64
	cfg := DefaultConfig(benchBlockSize)
	cfg.NoDump = true
	r, err := NewRouter(cfg)
	if err != nil {
		b.Fatal(err)
	}
	for w := 0; w < workers; w++ {
		if _, err := r.Register(WorkerSpec{ID: fmt.Sprint("w", w), Node: fmt.Sprint("n", w%nodes), BlockSize: benchBlockSize,
			Ready: true, Epoch: 1}); err != nil {
			b.Fatal(err)
		}
	}
	hashes := make([][]uint64, prompts)
	var toks []uint32
	for p := range hashes {
		toks = benchPromptTokens(toks, p)
		hashes[p] = SequenceHashes(toks, benchBlockSize, "")
	}
	for n := 0; n < nodes; n++ {
		inv := Inventory{Epoch: 1, Seq: 1, Snapshot: true, ServesRemote: n == 0}
		for p := n; p < prompts; p += nodes {
			inv.Changes = append(inv.Changes, TierChange{Tier: TierHost, SeqHashes: hashes[p]},
				TierChange{Tier: TierDisk, SeqHashes: hashes[p][:len(hashes[p])/2]})
		}
		r.ApplyInventory(fmt.Sprint("n", n), inv)
	}
	rng := rand.New(rand.NewPCG(1, 1))
	lat := make([]time.Duration, 0, b.N)
	var tier int64
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		p := hashes[i%prompts]
		start := time.Now()
		d, err := r.Route(RouteInput{RequestID: "req", BlockHashes: p, PromptTokens: len(p) * benchBlockSize}, t0, rng)
		lat = append(lat, time.Since(start))
		if err != nil {
			b.Fatal(err)
		}
		tier += int64(d.HostBlocks + d.DiskBlocks + d.RemoteBlocks)
		r.Free("req")
	}
	b.StopTimer()
	b.ReportMetric(float64(percentile(lat, 0.50).Nanoseconds())/1e3, "p50-µs")
	b.ReportMetric(float64(percentile(lat, 0.99).Nanoseconds())/1e3, "p99-µs")
	b.ReportMetric(float64(tier)/float64(b.N), "tier-blocks/route")
}
