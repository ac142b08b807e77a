package kv

import (
	"fmt"
	"github.com/turbine-llm/turbine/internal/threadcpu"
	"math/rand/v2"
	"runtime"
	"testing"
)

// activeBenchPrompts returns n prompts of BenchmarkRoute's shape (512 blocks of 16
// tokens: a 64-block system prompt shared by all, then blocks of their own), as
// sequence hashes; prompts i and i+n/2 are the same (two conversations share each).
func activeBenchPrompts(n int) [][]uint64 {
	out := make([][]uint64, n)
	for i := range out {
		out[i] = SequenceHashes(benchPromptTokens(nil, i%(n/2)), benchBlockSize, "")
	}
	return out
}

// BenchmarkActiveAddFree: the load tracking's share of a route and of its end, on
// BenchmarkRouteHashes' load (256 requests of 8,192 tokens in flight over 64 workers):
// ActivePrefix and Add of one request, and Free of the one added 256 calls earlier.
// Read cpu-µs/op (the thread's CPU time per request, Free included).
func BenchmarkActiveAddFree(b *testing.B) {
	const inFlight, workers = 256, 64
	prompts := activeBenchPrompts(512)
	a := NewActiveSequences(0)
	ids := make([]string, inFlight)
	for i := range ids {
		ids[i] = fmt.Sprint("a-", i)
	}
	rng := rand.New(rand.NewPCG(5, 5))
	out := make([]uint32, workers)
	for i := 0; i < inFlight; i++ {
		a.Add(ids[i], WorkerID(rng.IntN(workers)), prompts[rng.IntN(len(prompts))], 100, t0)
	}
	b.ReportAllocs()
	defer threadcpu.Lock()()
	cpu0, _ := threadcpu.Used()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		id := ids[i%inFlight]
		a.Free(id)
		p := prompts[rng.IntN(len(prompts))]
		a.ActivePrefix(p, out)
		a.Add(id, WorkerID(rng.IntN(workers)), p, 100, t0)
	}
	b.StopTimer()
	if cpu1, ok := threadcpu.Used(); ok {
		b.ReportMetric(float64((cpu1-cpu0).Nanoseconds())/float64(b.N)/1e3, "cpu-µs/op")
	}
}

// BenchmarkActiveMemory: heap per active block (distinct blocks active on some worker)
// with 256 requests of 8,192 tokens in flight over 64 workers, two per prompt.
func BenchmarkActiveMemory(b *testing.B) {
	prompts := activeBenchPrompts(256)
	for i := 0; i < b.N; i++ {
		before := heapInUse()
		a := NewActiveSequences(0)
		for k, p := range prompts {
			a.Add(fmt.Sprint("m-", k), WorkerID(k%64), p, 100, t0)
		}
		after := heapInUse()
		b.ReportMetric(float64(after-before)/float64(a.Blocks()), "heap-B/active-block")
		runtime.KeepAlive(a)
	}
}
