package profile

import (
	"bytes"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/turbine-llm/turbine/bench"
	"github.com/turbine-llm/turbine/engines/mocker"
	"github.com/turbine-llm/turbine/planner"
)

var refLimits = Limits{KVBlocks: 16384, BlockSize: 64, MaxNumSeqs: 256, MaxModelLen: 32768, MaxNumBatchedTokens: 8192}

// TestNewPlan: the grid laid on an engine's limits — prompt lengths that leave no room
// for an output token, batches above max_num_seqs and batches whose sequences would not
// fit the KV cache or the context length are skipped, each with its reason; the decode
// output covers the window plus the batch's prefill steps.
func TestNewPlan(t *testing.T) {
	for _, tc := range []struct {
		name        string
		g           Grid
		lim         Limits
		wantISLs    []int
		wantDecode  []DecodePoint
		wantSkipped []string
		wantErr     string
	}{
		{name: "full sweep on the reference engine: every batch up to 256 except where the cache is full",
			g: DefaultGrid(), lim: refLimits, wantISLs: DefaultISLs()},
		{name: "short context length", lim: Limits{KVBlocks: 1000, BlockSize: 16, MaxNumSeqs: 4, MaxModelLen: 1024, MaxNumBatchedTokens: 512},
			g:        Grid{ISLs: []int{512, 1023, 1024, 4096}, Repeats: 1, Contexts: []int{512, 1024}, Batches: []int{1, 4, 8}, Window: 8},
			wantISLs: []int{512, 1023},
			wantDecode: []DecodePoint{
				{Context: 512, Batch: 1, Prompt: 508, Output: 8 + 1 + 2},
				{Context: 512, Batch: 4, Prompt: 508, Output: 8 + 4 + 2},
			},
			wantSkipped: []string{"ISL 1024 (context length 1024)", "ISL 4096 (context length 1024)", "batch 8 (max_num_seqs 4)",
				"context 1024 × batch 1 (1032 tokens per sequence at the end, context length 1024)",
				"context 1024 × batch 4 (1038 tokens per sequence at the end, context length 1024)", "batch 8 (max_num_seqs 4)"}},
		{name: "small cache", lim: Limits{KVBlocks: 100, BlockSize: 16, MaxNumSeqs: 64, MaxModelLen: 4096, MaxNumBatchedTokens: 8192},
			g:           Grid{ISLs: []int{100}, Repeats: 2, Contexts: []int{400}, Batches: []int{2, 4}, Window: 4},
			wantISLs:    []int{100},
			wantDecode:  []DecodePoint{{Context: 400, Batch: 2, Prompt: 398, Output: 4 + 1 + 2}},
			wantSkipped: []string{"context 400 × batch 4 (104 KV blocks at the end, 100 in the cache)"}},
		{name: "nothing fits", lim: Limits{KVBlocks: 10, BlockSize: 16, MaxNumSeqs: 1, MaxModelLen: 100, MaxNumBatchedTokens: 64},
			g: Grid{ISLs: []int{50}, Repeats: 1, Contexts: []int{1000}, Window: 4}, wantErr: "nothing to measure"},
		{name: "bad limits", lim: Limits{}, g: DefaultGrid(), wantErr: "every one must be positive"},
		{name: "bad window", lim: refLimits, g: Grid{ISLs: []int{1}, Repeats: 1, Contexts: []int{8}, Window: 1}, wantErr: "a window of 1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := NewPlan(tc.g, tc.lim)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(p.ISLs, tc.wantISLs) {
				t.Errorf("ISLs %v, want %v", p.ISLs, tc.wantISLs)
			}
			if tc.wantDecode != nil && !slices.Equal(p.Decode, tc.wantDecode) {
				t.Errorf("decode points %+v, want %+v", p.Decode, tc.wantDecode)
			}
			if tc.wantSkipped != nil && !slices.Equal(p.Skipped, tc.wantSkipped) {
				t.Errorf("skipped %q, want %q", p.Skipped, tc.wantSkipped)
			}
			for _, d := range p.Decode {
				end := d.Prompt + d.Output
				if d.Batch > tc.lim.MaxNumSeqs || end > tc.lim.MaxModelLen || float64(d.Batch*ceilDiv(end, tc.lim.BlockSize)) > kvFill*float64(tc.lim.KVBlocks) {
					t.Errorf("point %+v does not fit %+v", d, tc.lim)
				}
			}
		})
	}
	// The full sweep: contexts 512..8192 × batches 1..256, all but the batches whose
	// sequences fill more than 98 % of the 16384 blocks.
	p, _ := NewPlan(DefaultGrid(), refLimits)
	if len(p.Decode) != 5*9-3 || p.Steps() != 8*3+42 {
		t.Fatalf("full sweep: %d decode points, %d steps (skipped %q)", len(p.Decode), p.Steps(), p.Skipped)
	}
}

// TestScale: a time measured at speedup R is (measured − overhead) × R + overhead; at 1
// it is as measured.
func TestScale(t *testing.T) {
	for _, tc := range []struct {
		measured, overhead time.Duration
		speedup, want      float64
	}{
		{10 * time.Millisecond, time.Millisecond, 1, 10},
		{10 * time.Millisecond, time.Millisecond, 4, 37},
		{10 * time.Millisecond, 0, 4, 40},
		{3 * time.Millisecond, time.Millisecond, 0.5, 2},
	} {
		if got := Scale(tc.measured, tc.overhead, tc.speedup); math.Abs(got-tc.want) > 1e-9 {
			t.Errorf("Scale(%v, %v, %g) = %g, want %g", tc.measured, tc.overhead, tc.speedup, got, tc.want)
		}
	}
}

// TestTTFTMillis: the median TTFT at speedup 1, the least scaled one at another; a
// failed request is an error naming its kind.
func TestTTFTMillis(t *testing.T) {
	rs := []bench.Result{{TTFT: 12 * time.Millisecond}, {TTFT: 10 * time.Millisecond}, {TTFT: 50 * time.Millisecond}}
	if got, err := TTFTMillis(rs, 2*time.Millisecond, 1); err != nil || got != 12 {
		t.Fatalf("TTFTMillis at speedup 1 = %v, %v; want the median, 12", got, err)
	}
	if got, err := TTFTMillis(rs, 2*time.Millisecond, 2); err != nil || got != 18 {
		t.Fatalf("TTFTMillis at speedup 2 = %v, %v; want the least, (10-2)×2+2 = 18", got, err)
	}
	if _, err := TTFTMillis([]bench.Result{{Error: "http_400", Detail: "too long"}}, 0, 1); err == nil || !strings.Contains(err.Error(), "http_400 too long") {
		t.Fatalf("failed request: error %v", err)
	}
	if _, err := TTFTMillis(nil, 0, 1); err == nil {
		t.Fatal("no request: no error")
	}
}

// stream builds a result whose first token comes at first and the next ones gaps apart.
func stream(first time.Duration, gaps ...time.Duration) bench.Result {
	return bench.Result{Start: 0, TTFT: first, ITL: gaps}
}

func ms(n float64) time.Duration { return time.Duration(n * float64(time.Millisecond)) }

// TestSteadyITL: the window runs from the last first token to the first last token;
// each request's mean gap within it, the median over requests, scaled. A request whose
// gaps come in bursts (a timer that catches up) has the same mean.
func TestSteadyITL(t *testing.T) {
	// a: tokens at 0, 10, 20, …, 100; b: first token at 30 (its prefill came last),
	// then every 10 to 100; c: at 30, bursts of 0 and 20 ms gaps, to 110.
	a := stream(0, ms(10), ms(10), ms(10), ms(10), ms(10), ms(10), ms(10), ms(10), ms(10), ms(10))
	b := stream(ms(30), ms(10), ms(10), ms(10), ms(10), ms(10), ms(10), ms(10))
	c := stream(ms(30), ms(20), 0, ms(20), 0, ms(20), 0, ms(20))
	itl, w, err := SteadyITL([]bench.Result{a, b, c}, 3)
	if err != nil {
		t.Fatal(err)
	}
	if w.From != ms(30) || w.To != ms(100) || w.Gaps != 6 {
		t.Fatalf("window %v..%v with %d gaps, want 30ms..100ms and 6 (c's tokens at 30, 50, 50, 70, 70, 90, 90)", w.From, w.To, w.Gaps)
	}
	if math.Abs(itl-30) > 1e-9 {
		t.Fatalf("ITL %v, want 10 ms × 3", itl)
	}
	// The prefill of the last request inflates the gaps before the window; they do not count.
	slow := stream(0, ms(100), ms(10), ms(10), ms(10))
	late := stream(ms(100), ms(10), ms(10))
	if itl, _, err := SteadyITL([]bench.Result{slow, late}, 1); err != nil || math.Abs(itl-10) > 1e-9 {
		t.Fatalf("ITL %v, %v; want 10 (the 100 ms gap before the window left out)", itl, err)
	}
	// No two tokens of any request in the window.
	if _, _, err := SteadyITL([]bench.Result{stream(0, ms(10)), stream(ms(50), ms(10))}, 1); err == nil || !strings.Contains(err.Error(), "no steady decode window") {
		t.Fatalf("no window: error %v", err)
	}
	if _, _, err := SteadyITL([]bench.Result{{Error: "timeout"}}, 1); err == nil || !strings.Contains(err.Error(), "timeout") {
		t.Fatalf("failed request: error %v", err)
	}
}

// TestUsage: the mean of the samples inside the window; computed from context × batch
// when none is, clamped to 1.
func TestUsage(t *testing.T) {
	w := Window{From: ms(10), To: ms(20)}
	samples := []UsageSample{{ms(5), 0.9}, {ms(10), 0.2}, {ms(15), 0.4}, {ms(25), 0.9}, {ms(12), math.NaN()}}
	if u, sampled := Usage(samples, w, 1000, 4, 64, 100); !sampled || math.Abs(u-0.3) > 1e-12 {
		t.Fatalf("usage %v sampled %v, want 0.3 sampled", u, sampled)
	}
	if u, sampled := Usage(samples[:1], w, 1000, 4, 64, 100); sampled || u != 4*16/100.0 {
		t.Fatalf("usage %v sampled %v, want 0.64 computed", u, sampled)
	}
	if u, _ := Usage(nil, w, 1000, 40, 64, 100); u != 1 {
		t.Fatalf("usage %v, want clamped to 1", u)
	}
}

// TestFitQuadratic: the reference prefill model is recovered from its own values; too
// few distinct points do not fit.
func TestFitQuadratic(t *testing.T) {
	var xs, ys []float64
	for _, isl := range DefaultISLs()[:7] {
		xs, ys = append(xs, float64(isl)), append(ys, mocker.PrefillMillis(isl))
	}
	q, ok := FitQuadratic(xs, ys)
	if !ok || math.Abs(q.A-4.209989e-7) > 1e-12 || math.Abs(q.B-1.518344e-2) > 1e-8 || math.Abs(q.C-16.50142) > 1e-5 {
		t.Fatalf("fit %+v %v, want the reference coefficients", q, ok)
	}
	if got := q.Format("ISL"); got != "4.21e-07·ISL² + 0.0152·ISL + 16.5" {
		t.Fatalf("Format = %q", got)
	}
	if _, ok := FitQuadratic([]float64{1, 1, 2}, []float64{1, 2, 3}); ok {
		t.Fatal("two distinct x values fitted")
	}
}

// TestPlot: the SVG has a row of two panels per tensor-parallel size; an invalid profile
// is refused.
func TestPlot(t *testing.T) {
	prof := referenceProfile(1, 2)
	var buf bytes.Buffer
	if err := Plot(&buf, prof); err != nil {
		t.Fatal(err)
	}
	svg := buf.String()
	for _, want := range []string{"<svg", "TP 1: TTFT against prompt length", "TP 2: ITL against KV usage", "context 2048", "interpolated"} {
		if !strings.Contains(svg, want) {
			t.Errorf("SVG lacks %q", want)
		}
	}
	prof.Parallel[0].Prefill = nil
	if err := Plot(&buf, prof); err == nil {
		t.Fatal("an invalid profile was plotted")
	}
}

// referenceProfile is the reference mock engine's model at the given sizes, on a few
// points (KV usage computed as the mock engine counts it).
func referenceProfile(sizes ...int) *planner.Profile {
	prof := &planner.Profile{Version: planner.ProfileVersion, Engine: "mocker", Model: "m", BlockSize: 64}
	for _, n := range sizes {
		ref := mocker.ReferenceTiming{TensorParallelSize: n}
		ep := planner.EngineProfile{TensorParallelSize: n, KVBlocks: 16384 * n, MaxNumSeqs: 256}
		for _, isl := range []int{128, 1024, 8192} {
			ep.Prefill = append(ep.Prefill, PrefillPoint(isl, ref.PrefillMillis(isl), n))
		}
		for _, c := range []int{512, 2048} {
			for _, b := range []int{1, 16, 256} {
				u := float64(b*ceilDiv(c, 64)) / float64(ep.KVBlocks)
				ep.Decode = append(ep.Decode, DecodePointOf(DecodePoint{Context: c, Batch: b}, u, ref.DecodeMillis(u, float64(c)), n))
			}
		}
		prof.Parallel = append(prof.Parallel, ep)
	}
	return prof
}

// TestLengthen: a decode point run again gets twice the output beyond its window, as
// long as its sequences still fit the engine.
func TestLengthen(t *testing.T) {
	lim := Limits{KVBlocks: 100, BlockSize: 16, MaxNumSeqs: 8, MaxModelLen: 1100, MaxNumBatchedTokens: 8192}
	p, err := NewPlan(Grid{ISLs: []int{10}, Repeats: 1, Contexts: []int{1000}, Batches: []int{1}, Window: 8}, lim)
	if err != nil {
		t.Fatal(err)
	}
	pt := p.Decode[0] // prompt 996, output 8 + 1 + 2
	var outs []int
	for {
		longer, ok := p.Lengthen(pt)
		if !ok {
			break
		}
		outs = append(outs, longer.Output)
		pt = longer
	}
	// 8 + 6, 8 + 12, 8 + 24, 8 + 48, 8 + 96 = 104: 996 + 104 = 1100 tokens, the context length.
	if want := []int{14, 20, 32, 56, 104}; !slices.Equal(outs, want) {
		t.Fatalf("outputs %v, want %v", outs, want)
	}
}
