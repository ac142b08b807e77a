package planner

import (
	"bytes"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/turbine-llm/turbine/engines/mocker"
)

// TestTTFTBelowTheFirstPoint: below the smallest profiled prompt, TTFT is extrapolated
// from the first two points, but never below the first point's TTFT scaled down in
// proportion to the prompt (a steep start would otherwise give short prompts no time at
// all, and the mock engine that plays the profile would prefill them for free).
func TestTTFTBelowTheFirstPoint(t *testing.T) {
	e := &EngineProfile{TensorParallelSize: 1, KVBlocks: 100, MaxNumSeqs: 8,
		Prefill: []PrefillPoint{{ISL: 1000, TTFTMs: 25, TokensPerSecPerGPU: 40000}, {ISL: 2000, TTFTMs: 60, TokensPerSecPerGPU: 33333}},
		Decode:  []DecodePoint{{Context: 100, Batch: 1, KVUsage: 0.1, ITLMs: 10, TokensPerSecPerGPU: 100}}}
	gentle := &EngineProfile{Prefill: []PrefillPoint{{ISL: 1000, TTFTMs: 25}, {ISL: 2000, TTFTMs: 30}}}
	if got := gentle.TTFT(500); got != 22.5 { // the line (intercept 20 ms) is above the first point's rate
		t.Errorf("gentle start: TTFT(500) = %v, want 22.5 on the line", got)
	}
	for _, tc := range []struct{ isl, want float64 }{
		{1000, 25},
		{900, 22.5},  // the line through the first two points gives 21.5: the first point's rate, 25 × 0.9
		{100, 2.5},   // the line gives -6.5: the first point's rate, 25 × 100/1000
		{1, 0.025},   // likewise
		{0, 0.01},    // never below 0.01 ms
		{3000, 95},   // above the last point: the line
		{1500, 42.5}, // between points
	} {
		if got := e.TTFT(tc.isl); math.Abs(got-tc.want) > 1e-9 {
			t.Errorf("TTFT(%v) = %v, want %v", tc.isl, got, tc.want)
		}
	}
}

// TestProfileTimingOfAMockEngineProfile: a profile of the reference mock engine's own
// figures, played through Timing, gives back the reference step times at its points
// (the round trip `turbine profile` → `turbine mocker --profile` rests on).
func TestProfileTimingOfAMockEngineProfile(t *testing.T) {
	ref := mocker.ReferenceTiming{TensorParallelSize: 2}
	e := EngineProfile{TensorParallelSize: 2, KVBlocks: 32768, MaxNumSeqs: 256}
	for _, isl := range []int{128, 512, 2048, 8192} {
		ms := ref.PrefillMillis(isl)
		e.Prefill = append(e.Prefill, PrefillPoint{ISL: isl, TTFTMs: ms, TokensPerSecPerGPU: float64(isl) / ms * 1000 / 2})
	}
	for _, u := range []float64{0.01, 0.25, 0.5, 0.9} {
		ms := ref.DecodeMillis(u, 1024)
		e.Decode = append(e.Decode, DecodePoint{Context: 1024, Batch: 1, KVUsage: u, ITLMs: ms, TokensPerSecPerGPU: 1 / ms * 1000 / 2})
	}
	p := &Profile{Version: ProfileVersion, Engine: "mocker", Model: "m", BlockSize: 64, Parallel: []EngineProfile{e}}
	if err := p.Validate(); err != nil {
		t.Fatal(err)
	}
	var tm mocker.Timing = p.Parallel[0].Timing()
	for _, pt := range e.Prefill {
		if got := tm.PrefillMillis(pt.ISL); math.Abs(got-ref.PrefillMillis(pt.ISL)) > 1e-9 {
			t.Errorf("PrefillMillis(%d) = %v, want %v", pt.ISL, got, ref.PrefillMillis(pt.ISL))
		}
	}
	for _, pt := range e.Decode {
		for _, ctx := range []float64{10, 1024, 1e6} { // one context profiled: any context reads it
			if got := tm.DecodeMillis(pt.KVUsage, ctx); math.Abs(got-pt.ITLMs) > 1e-9 {
				t.Errorf("DecodeMillis(%v, %v) = %v, want %v", pt.KVUsage, ctx, got, pt.ITLMs)
			}
		}
	}
	// Between points, within the reference curve's curvature: 5 % at most here.
	for _, u := range []float64{0.1, 0.4, 0.7} {
		if got, want := tm.DecodeMillis(u, 1024), ref.DecodeMillis(u, 1024); math.Abs(got-want) > 0.05*want {
			t.Errorf("DecodeMillis(%v) = %v, reference %v", u, got, want)
		}
	}
	if tm.PrefillMillis(0) != 0 || tm.PrefillMillis(-5) != 0 {
		t.Error("a step without prefill tokens takes prefill time")
	}
}

// FuzzParseProfile: whatever the input, ParseProfile returns a profile or an error
// without panicking; a profile it accepts encodes, parses back to the same value, and
// interpolates to finite positive times within its measured range.
func FuzzParseProfile(f *testing.F) {
	for _, path := range []string{filepath.Join("testdata", "profile-small.json"), filepath.Join("..", "cmd", "turbine", "mocker", "testdata", "profile.json")} {
		if b, err := os.ReadFile(path); err == nil {
			f.Add(b)
		}
	}
	f.Add([]byte(`{"version":1,"engine":"vllm","model":"m","block_size":16,"tensor_parallel":[{"tensor_parallel_size":1,"kv_blocks":10,"max_num_seqs":1,` +
		`"prefill":[{"isl":1,"ttft_ms":1,"tokens_per_s_per_gpu":1}],"decode":[{"context":1,"batch":1,"kv_usage":0,"itl_ms":1,"tokens_per_s_per_gpu":1}]}]}`))
	f.Add([]byte(`{"version":1}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		p, err := ParseProfile(data)
		if err != nil {
			return
		}
		var buf bytes.Buffer
		if err := p.Encode(&buf); err != nil {
			t.Fatalf("an accepted profile does not encode: %v", err)
		}
		q, err := ParseProfile(buf.Bytes())
		if err != nil {
			t.Fatalf("an encoded profile does not parse: %v\n%s", err, buf.Bytes())
		}
		if !reflect.DeepEqual(p, q) {
			t.Fatalf("round trip changed the profile:\n%+v\n%+v", p, q)
		}
		for i := range p.Parallel {
			e := &p.Parallel[i]
			for _, pt := range e.Prefill {
				if v := e.TTFT(float64(pt.ISL)); !(v >= 0.01) || math.IsInf(v, 0) {
					t.Fatalf("TTFT(%d) = %v", pt.ISL, v)
				}
				if v := e.PrefillThroughput(float64(pt.ISL)); !(v > 0) || math.IsInf(v, 0) {
					t.Fatalf("PrefillThroughput(%d) = %v", pt.ISL, v)
				}
			}
			for _, u := range []float64{0, 0.5, 1} {
				for _, pt := range e.Decode {
					if v := e.ITL(u, float64(pt.Context)); !(v > 0) || math.IsInf(v, 0) {
						t.Fatalf("ITL(%v, %d) = %v", u, pt.Context, v)
					}
				}
			}
			_, _ = e.DecodeThroughput(p.BlockSize, 50, 1024)
		}
	})
}
