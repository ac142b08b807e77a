package profile

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/turbine-llm/turbine/engines/mocker"
	"github.com/turbine-llm/turbine/planner"
)

// Figures the summary quotes: the decode throughput per GPU at this ITL target and
// context (planner.EngineProfile.DecodeThroughput).
const (
	summaryITLTargetMs = 50
	summaryContext     = 2048
)

// report writes what was measured: per tensor-parallel size the engine's limits, the
// range of TTFT and ITL, the throughput per GPU, least-squares fits of the reference
// shapes and how KV usage was obtained; then the files written and the time taken.
func report(w io.Writer, o *Options, prof *planner.Profile, runs []entryRun, took time.Duration) {
	target := "mock engines"
	if o.URL != "" {
		target = o.URL
	}
	fmt.Fprintf(w, "turbine profile: %s (%s), model %s, KV blocks of %d tokens\n", o.Engine, target, prof.Model, prof.BlockSize)
	if o.URL == "" && o.SpeedupRatio != 1 {
		fmt.Fprintf(w, "speedup %g: the mock engines ran %g times as fast as their timing model; every time below was measured, less what HTTP and the engine loop add to a TTFT, and multiplied by %g\n",
			o.SpeedupRatio, o.SpeedupRatio, o.SpeedupRatio)
	}
	for i := range prof.Parallel {
		ep := &prof.Parallel[i]
		r := runs[i]
		fmt.Fprintf(w, "\nTP %d: %d KV blocks, max %d sequences; %d prompt lengths and %d decode points in %s\n",
			ep.TensorParallelSize, ep.KVBlocks, ep.MaxNumSeqs, len(ep.Prefill), len(ep.Decode), r.counts.took.Round(10*time.Millisecond))
		first, last := ep.Prefill[0], ep.Prefill[len(ep.Prefill)-1]
		best := slices.MaxFunc(ep.Prefill, func(a, b planner.PrefillPoint) int { return cmpFloat(a.TokensPerSecPerGPU, b.TokensPerSecPerGPU) })
		fmt.Fprintf(w, "  prefill: TTFT %.1f ms at ISL %d to %.1f ms at ISL %d; at most %.0f tokens/s per GPU (ISL %d)\n",
			first.TTFTMs, first.ISL, last.TTFTMs, last.ISL, best.TokensPerSecPerGPU, best.ISL)
		lo := slices.MinFunc(ep.Decode, func(a, b planner.DecodePoint) int { return cmpFloat(a.ITLMs, b.ITLMs) })
		hi := slices.MaxFunc(ep.Decode, func(a, b planner.DecodePoint) int { return cmpFloat(a.ITLMs, b.ITLMs) })
		fmt.Fprintf(w, "  decode: ITL %.1f ms (batch %d, context %d, KV %.1f %%) to %.1f ms (batch %d, context %d, KV %.1f %%)\n",
			lo.ITLMs, lo.Batch, lo.Context, 100*lo.KVUsage, hi.ITLMs, hi.Batch, hi.Context, 100*hi.KVUsage)
		if tput, ok := ep.DecodeThroughput(prof.BlockSize, summaryITLTargetMs, summaryContext); ok {
			fmt.Fprintf(w, "  decode throughput: %.0f tokens/s per GPU at ITL ≤ %d ms, context %d\n", tput, summaryITLTargetMs, summaryContext)
		} else {
			fmt.Fprintf(w, "  decode throughput: no batch keeps ITL ≤ %d ms at context %d (one sequence: %.0f tokens/s per GPU)\n", summaryITLTargetMs, summaryContext, tput)
		}
		pf, df := fitText(ep, o.maxNumBatchedTokens())
		if pf != "" || df != "" {
			fmt.Fprintf(w, "  fit: %s\n", strings.Join(nonEmpty(pf, df), "; "))
		}
		if o.URL == "" && o.MockerProfile == "" {
			ref := mocker.ReferenceTiming{TensorParallelSize: ep.TensorParallelSize}
			s := mocker.TensorParallelSpeedup(ep.TensorParallelSize)
			fmt.Fprintf(w, "  reference (the mock engine's model ÷ %d^%g = ÷ %.3f): TTFT ≈ %s ms; ITL ≈ %s ms\n",
				ep.TensorParallelSize, mocker.TensorParallelExponent, s,
				Quadratic{4.209989e-7 / s, 1.518344e-2 / s, 16.50142 / s}.Format("ISL"),
				Quadratic{-25.74 / s, 54.01 / s, 5.74 / s}.Format("u"))
			fmt.Fprintf(w, "  measured / reference: TTFT %s; ITL %s\n", ratioRange(ep.Prefill, func(p planner.PrefillPoint) float64 {
				return p.TTFTMs / totalPrefill(ref, p.ISL, o.maxNumBatchedTokens())
			}),
				ratioRange(ep.Decode, func(p planner.DecodePoint) float64 { return p.ITLMs / ref.DecodeMillis(p.KVUsage, float64(p.Context)) }))
		}
		if r.counts.sampled+r.counts.computed > 0 {
			fmt.Fprintf(w, "  KV usage: sampled from the engine's /metrics at %d decode points, computed (batch × context blocks / KV blocks) at %d\n",
				r.counts.sampled, r.counts.computed)
		}
		if len(r.counts.short) > 0 {
			fmt.Fprintf(w, "  short steady windows (fewer than %d steps even with longer outputs; the host could not keep up): %s\n",
				r.plan.Window/2, strings.Join(r.counts.short, ", "))
		}
		if len(r.counts.overhead) > 0 {
			fmt.Fprintf(w, "  host overhead taken out of each TTFT before ×%g: %.2f to %.2f ms\n", o.SpeedupRatio, slices.Min(r.counts.overhead), slices.Max(r.counts.overhead))
		}
	}
	files := o.Out
	if o.Plot != "" {
		files += " and " + o.Plot
	}
	fmt.Fprintf(w, "\nwrote %s (tensor-parallel sizes %v) in %s\n", files, prof.TensorParallelSizes(), took.Round(100*time.Millisecond))
}

// totalPrefill is the reference TTFT of a prompt of isl tokens alone on an engine that
// computes at most chunk tokens per step: the sum of its chunks' prefill times.
func totalPrefill(t mocker.Timing, isl, chunk int) float64 {
	var ms float64
	for left := isl; left > 0; left -= chunk {
		ms += t.PrefillMillis(min(left, chunk))
	}
	return ms
}

// fitText returns the least-squares fits of TTFT against ISL (prompts of one step: at most
// chunk tokens) and of ITL against KV usage, as text ("" when too few points).
func fitText(ep *planner.EngineProfile, chunk int) (prefill, decode string) {
	var xs, ys []float64
	for _, p := range ep.Prefill {
		if p.ISL <= chunk {
			xs, ys = append(xs, float64(p.ISL)), append(ys, p.TTFTMs)
		}
	}
	if q, ok := FitQuadratic(xs, ys); ok {
		prefill = "TTFT ≈ " + q.Format("ISL") + " ms"
	}
	xs, ys = nil, nil
	for _, p := range ep.Decode {
		xs, ys = append(xs, p.KVUsage), append(ys, p.ITLMs)
	}
	if q, ok := FitQuadratic(xs, ys); ok {
		decode = "ITL ≈ " + q.Format("u") + " ms"
	}
	return prefill, decode
}

// Format writes the quadratic in x, e.g. "4.21e-07·ISL² + 0.0152·ISL + 16.5".
func (q Quadratic) Format(x string) string {
	return fmt.Sprintf("%.3g·%s² %s·%s %s", q.A, x, signed(q.B), x, signed(q.C))
}

func signed(v float64) string {
	if v < 0 {
		return fmt.Sprintf("- %.3g", -v)
	}
	return fmt.Sprintf("+ %.3g", v)
}

func nonEmpty(ss ...string) []string {
	var out []string
	for _, s := range ss {
		if s != "" {
			out = append(out, s)
		}
	}
	return out
}

func cmpFloat(a, b float64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// ratioRange is "0.98 to 1.07 (median 1.01)" over the points' ratios.
func ratioRange[P any](pts []P, ratio func(P) float64) string {
	var rs []float64
	for _, p := range pts {
		if r := ratio(p); finite(r) {
			rs = append(rs, r)
		}
	}
	if len(rs) == 0 {
		return "-"
	}
	return fmt.Sprintf("%.2f to %.2f (median %.2f)", slices.Min(rs), slices.Max(rs), median(rs))
}
