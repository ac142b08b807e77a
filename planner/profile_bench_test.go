package planner

import (
	"math"
	"testing"

	"github.com/turbine-llm/turbine/engines/mocker"
)

// sweptProfile is a profile of the shape `turbine profile` writes: the reference mock
// engine's step times (docs/reference.md §7) at TP 1 and 2, 14 prompt lengths and two
// contexts of 21 KV usages each, validated.
func sweptProfile(tb testing.TB) *Profile {
	tb.Helper()
	p := &Profile{Version: ProfileVersion, Engine: "mocker", Model: "m", BlockSize: 16}
	for _, tp := range []int{1, 2} {
		e := EngineProfile{TensorParallelSize: tp, KVBlocks: 16384 * tp, MaxNumSeqs: 256}
		for _, isl := range []int{1, 64, 128, 256, 512, 1024, 1536, 2048, 3072, 4096, 5120, 6144, 7168, 8192} {
			ms := mocker.PrefillMillis(isl) / float64(tp)
			e.Prefill = append(e.Prefill, PrefillPoint{ISL: isl, TTFTMs: ms, TokensPerSecPerGPU: float64(isl) / ms * 1000 / float64(tp)})
		}
		for _, ctx := range []int{16384 * tp, 4096 * tp} { // out of order: Validate sorts
			for step := 20; step >= 0; step-- {
				u := float64(step) / 20
				ms := mocker.DecodeMillis(u) / float64(tp) * (1 + float64(ctx)/1e5)
				batch := max(1, int(u*float64(e.KVBlocks*16)/float64(ctx)))
				e.Decode = append(e.Decode, DecodePoint{Context: ctx, Batch: batch, KVUsage: u, ITLMs: ms,
					TokensPerSecPerGPU: float64(batch) / ms * 1000 / float64(tp)})
			}
		}
		p.Parallel = append(p.Parallel, e)
	}
	if err := p.Validate(); err != nil {
		tb.Fatal(err)
	}
	return p
}

// benchSteps is how many steps one iteration of BenchmarkProfileTiming plays.
const benchSteps = 1024

// BenchmarkProfileTiming: the cost of one engine step's time through
// EngineProfile.Timing, as a simulation pays it once per step (ns/step; allocs/op is per
// benchSteps steps): decode steps at KV usages and contexts across and beyond the
// measured ones, prefill steps of 1 to 16k tokens.
func BenchmarkProfileTiming(b *testing.B) {
	e, err := sweptProfile(b).ForTP(2)
	if err != nil {
		b.Fatal(err)
	}
	tm := e.Timing()
	usage, ctx, tokens := make([]float64, benchSteps), make([]float64, benchSteps), make([]int, benchSteps)
	for i := range benchSteps {
		usage[i] = float64(i*37%1000) / 1000
		ctx[i] = float64(100 + i*997%40000)
		tokens[i] = 1 + i*7919%16384
	}
	perStep := func(b *testing.B) {
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/benchSteps, "ns/step")
		b.ReportMetric(0, "ns/op")
	}
	var sink float64
	b.Run("decode", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			for i := range benchSteps {
				sink += tm.DecodeMillis(usage[i], ctx[i])
			}
		}
		perStep(b)
	})
	b.Run("prefill", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			for i := range benchSteps {
				sink += tm.PrefillMillis(tokens[i])
			}
		}
		perStep(b)
	})
	if math.IsNaN(sink) {
		b.Fatal("NaN step time")
	}
}

// BenchmarkDecodeThroughput: one SLA decision's decode capacity at one context (101 ITL
// reads).
func BenchmarkDecodeThroughput(b *testing.B) {
	e, err := sweptProfile(b).ForTP(2)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		e.DecodeThroughput(16, 30, float64(1000+i%30000))
	}
}
