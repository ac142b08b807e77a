package kv

import (
	"fmt"
	"github.com/turbine-llm/turbine/internal/threadcpu"
	"math/rand/v2"
	"testing"
	"time"
)

// BenchmarkRouteHashes: BenchmarkRoute's decision (8,192-token prompts, 64 workers,
// ~1 M indexed blocks, 256 requests in flight) from block hashes the caller computed
// (RouteInput.BlockHashes, as the Router grain gets them from a frontend): the index
// walk, the load lookup, the policy and recording the active sequence, without hashing.
// Read p50-µs and p99-µs (wall time per route, on a possibly busy machine) and
// cpu-µs/route (the thread's CPU time per route, which waiting for a core does not
// inflate; it includes freeing the request 256 routes later).
func BenchmarkRouteHashes(b *testing.B) {
	f := benchRouter(b)
	r := f.r
	rng := rand.New(rand.NewPCG(1, 1))
	const nPrompts = 256
	type prompt struct {
		hashes []uint64
		tokens int
	}
	prompts := make([]prompt, nPrompts)
	for i := range prompts {
		toks := benchPromptTokens(nil, rng.IntN(benchWorkers*benchPromptsPerW))
		prompts[i] = prompt{SequenceHashes(toks, benchBlockSize, ""), len(toks)}
	}
	const inFlight = 256
	ids := make([]string, inFlight)
	for i := range ids {
		ids[i] = fmt.Sprint("hreq-", i)
	}
	lat := make([]time.Duration, 0, b.N)
	var hit, total int64
	b.ReportAllocs()
	defer threadcpu.Lock()()
	cpu0, _ := threadcpu.Used()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		id := ids[i%inFlight]
		r.Free(id)
		p := prompts[i%nPrompts]
		start := time.Now()
		d, err := r.Route(RouteInput{RequestID: id, BlockHashes: p.hashes, PromptTokens: p.tokens}, t0, rng)
		lat = append(lat, time.Since(start))
		if err != nil {
			b.Fatal(err)
		}
		hit += int64(d.OverlapBlocks)
		total += int64(d.PromptBlocks)
	}
	b.StopTimer()
	cpu1, cpuOK := threadcpu.Used()
	for _, id := range ids {
		r.Free(id)
	}
	b.ReportMetric(float64(percentile(lat, 0.50).Nanoseconds())/1e3, "p50-µs")
	b.ReportMetric(float64(percentile(lat, 0.99).Nanoseconds())/1e3, "p99-µs")
	if cpuOK {
		b.ReportMetric(float64((cpu1-cpu0).Nanoseconds())/float64(b.N)/1e3, "cpu-µs/route")
	}
	b.ReportMetric(float64(hit)/float64(total), "hit-ratio")
}
