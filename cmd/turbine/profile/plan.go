package profile

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/turbine-llm/turbine/bench"
	"github.com/turbine-llm/turbine/planner"
)

// The pure part of a sweep: which points to measure (Plan), and the arithmetic that
// turns the streams of one point into a profile figure (TTFTMillis, SteadyITL, Usage).
// No I/O and no clock: the shell (sweep.go) sends the requests and passes the results.

// Limits are what a plan needs of the engine being profiled.
type Limits struct {
	KVBlocks, BlockSize, MaxNumSeqs int
	// MaxModelLen is the context length in tokens; MaxNumBatchedTokens the tokens one
	// step computes at most (it sizes a batch's output so that its prefill ends within
	// the requests' budget).
	MaxModelLen, MaxNumBatchedTokens int
}

// Grid is what to sweep: prompt lengths alone on an idle engine, then contexts × batch
// sizes decoding together.
type Grid struct {
	ISLs     []int // prefill: prompt lengths, each alone on an idle engine
	Repeats  int   // prefill: requests per prompt length (their median is kept)
	Contexts []int // decode: tokens per sequence
	Batches  []int // decode: sequences decoding together (nil: 1, 2, 4, … up to max_num_seqs)
	// Window is the steady decode steps each decode point measures.
	Window int
}

// DecodePoint is one decode measurement: Batch requests of Prompt tokens, each asking
// for Output tokens, so that the steady window's sequences hold about Context tokens.
type DecodePoint struct {
	Context, Batch, Prompt, Output int
}

// Plan is the measurements of one engine, in the order they run.
type Plan struct {
	ISLs    []int
	Repeats int
	Decode  []DecodePoint
	// Window is the steady decode steps a decode point must hold (Grid.Window); Limits
	// what the engine allows a longer point (Lengthen).
	Window int
	Limits Limits
	// Skipped says, in words, which points of the grid did not fit the engine.
	Skipped []string
}

// Steps is the number of measurements: one per prefill request and per decode point.
func (p Plan) Steps() int { return len(p.ISLs)*p.Repeats + len(p.Decode) }

// DefaultISLs are the prompt lengths of a full sweep: 128 to 16384, doubling.
func DefaultISLs() []int { return doubling(128, 16384) }

// DefaultContexts are the decode contexts of a full sweep: 512 to 8192, doubling.
func DefaultContexts() []int { return doubling(512, 8192) }

// QuickGrid is `--quick`'s grid: two prompt lengths, two contexts, two batch sizes.
func QuickGrid() Grid {
	return Grid{ISLs: []int{1024, 4096}, Repeats: 3, Contexts: []int{512, 2048}, Batches: []int{1, 8}, Window: 8}
}

// DefaultGrid is a full sweep's grid.
func DefaultGrid() Grid {
	return Grid{ISLs: DefaultISLs(), Repeats: 3, Contexts: DefaultContexts(), Window: 32}
}

func doubling(from, to int) []int {
	var out []int
	for n := from; n <= to; n *= 2 {
		out = append(out, n)
	}
	return out
}

// batchesUpTo is 1, 2, 4, … below n, then n.
func batchesUpTo(n int) []int {
	var out []int
	for b := 1; b < n; b *= 2 {
		out = append(out, b)
	}
	return append(out, n)
}

// kvFill bounds the KV usage a decode point may reach at its end: above it the engine
// could preempt a sequence, and the point would measure recomputation.
const kvFill = 0.98

// NewPlan lays the grid on an engine of limits lim. A prompt length must leave room for
// one output token; a decode point is dropped when its sequences would not fit the
// context length or kvFill of the KV cache at their end, or its batch exceeds
// max_num_seqs (each drop is listed in Skipped). Errors: limits or a grid that cannot
// be measured (non-positive values), or nothing left to measure.
func NewPlan(g Grid, lim Limits) (Plan, error) {
	switch {
	case lim.KVBlocks < 1 || lim.BlockSize < 1 || lim.MaxNumSeqs < 1 || lim.MaxModelLen < 2 || lim.MaxNumBatchedTokens < 1:
		return Plan{}, fmt.Errorf("profile: engine limits %+v: every one must be positive (max model len at least 2)", lim)
	case g.Repeats < 1 || g.Window < 2:
		return Plan{}, fmt.Errorf("profile: %d repeats and a window of %d steps: want at least 1 and 2", g.Repeats, g.Window)
	}
	p := Plan{Repeats: g.Repeats, Window: g.Window, Limits: lim}
	for _, isl := range g.ISLs {
		if isl < 1 || isl+1 > lim.MaxModelLen {
			p.Skipped = append(p.Skipped, fmt.Sprintf("ISL %d (context length %d)", isl, lim.MaxModelLen))
			continue
		}
		p.ISLs = append(p.ISLs, isl)
	}
	slices.Sort(p.ISLs)
	p.ISLs = slices.Compact(p.ISLs)
	batches := g.Batches
	if len(batches) == 0 {
		batches = batchesUpTo(lim.MaxNumSeqs)
	}
	for _, c := range slices.Compact(slices.Sorted(slices.Values(g.Contexts))) {
		for _, b := range slices.Compact(slices.Sorted(slices.Values(batches))) {
			prompt := c - g.Window/2
			// The first admitted sequences decode while the later ones prefill: give
			// every request enough output for the window to start after the last
			// admission (a step computes at most MaxNumBatchedTokens prompt tokens).
			prefillSteps := (b*max(prompt, 1) + lim.MaxNumBatchedTokens - 1) / lim.MaxNumBatchedTokens
			out := g.Window + prefillSteps + 2
			end := prompt + out
			switch {
			case c < 1 || b < 1:
				p.Skipped = append(p.Skipped, fmt.Sprintf("context %d × batch %d (not positive)", c, b))
			case prompt < 1:
				p.Skipped = append(p.Skipped, fmt.Sprintf("context %d (shorter than half the %d-step window)", c, g.Window))
			case b > lim.MaxNumSeqs:
				p.Skipped = append(p.Skipped, fmt.Sprintf("batch %d (max_num_seqs %d)", b, lim.MaxNumSeqs))
			case end > lim.MaxModelLen:
				p.Skipped = append(p.Skipped, fmt.Sprintf("context %d × batch %d (%d tokens per sequence at the end, context length %d)", c, b, end, lim.MaxModelLen))
			case !fits(b, end, lim):
				p.Skipped = append(p.Skipped, fmt.Sprintf("context %d × batch %d (%d KV blocks at the end, %d in the cache)", c, b, b*ceilDiv(end, lim.BlockSize), lim.KVBlocks))
			default:
				p.Decode = append(p.Decode, DecodePoint{Context: c, Batch: b, Prompt: prompt, Output: out})
			}
		}
	}
	if len(p.ISLs) == 0 || len(p.Decode) == 0 {
		return p, fmt.Errorf("profile: nothing to measure on this engine: %d prompt lengths and %d decode points fit (skipped: %v)",
			len(p.ISLs), len(p.Decode), p.Skipped)
	}
	return p, nil
}

func ceilDiv(a, b int) int { return (a + b - 1) / b }

// fits reports whether batch sequences of end tokens fit the engine: the context length
// and kvFill of its KV blocks.
func fits(batch, end int, lim Limits) bool {
	return end <= lim.MaxModelLen && float64(batch*ceilDiv(end, lim.BlockSize)) <= kvFill*float64(lim.KVBlocks)
}

// Lengthen returns pt with twice the output beyond its window, for a batch whose steady
// window came out short (its requests reached the engine further apart than its
// prefill alone would put them); ok is false when the longer sequences would not fit
// the engine (Plan.Limits).
func (p Plan) Lengthen(pt DecodePoint) (DecodePoint, bool) {
	extra := max(pt.Output-p.Window, 1)
	longer := pt
	longer.Output = p.Window + 2*extra
	if !fits(pt.Batch, longer.Prompt+longer.Output, p.Limits) {
		return pt, false
	}
	return longer, true
}

// Scale turns a time measured on an engine running speedup times faster than its timing
// model back into the model's: (measured − overhead) × speedup + overhead, where
// overhead is what the host adds and does not speed up (HTTP, the engine loop; 0 when
// unknown). Speedup 1 leaves the measurement as it is.
func Scale(measured, overhead time.Duration, speedup float64) float64 {
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	if speedup == 1 {
		return ms(measured)
	}
	return (ms(measured)-ms(overhead))*speedup + ms(overhead)
}

// median of xs (the mean of the two middle values for an even count); NaN when empty.
func median(xs []float64) float64 {
	s := slices.Sorted(slices.Values(xs))
	return bench.Percentile(s, 50)
}

// minTTFT is the least TTFT in ms a profile keeps (planner.EngineProfile.TTFT's floor).
const minTTFT = 0.01

// TTFTMillis is a prefill point's TTFT, scaled (Scale) with the overhead measured for
// that prompt length: at speedup 1 the median of the requests' TTFTs (the engine as it
// serves); at any other speedup the least of them (Typical), since what varies between
// repeats there is the host's noise, which only ever adds time, and the speedup would
// multiply it. Errors: a request that failed (its error kind and detail), or no request.
func TTFTMillis(results []bench.Result, overhead time.Duration, speedup float64) (float64, error) {
	var ttft []float64
	for _, r := range results {
		if r.Error != "" {
			return 0, fmt.Errorf("request failed: %s %s", r.Error, r.Detail)
		}
		ttft = append(ttft, float64(r.TTFT))
	}
	if len(ttft) == 0 {
		return 0, errors.New("no request")
	}
	return max(Scale(time.Duration(Typical(ttft, speedup)), overhead, speedup), minTTFT), nil
}

// Typical is the figure kept of repeated measurements at a speedup: the median at 1,
// the least at any other (see TTFTMillis); NaN when there is none.
func Typical(xs []float64, speedup float64) float64 {
	if len(xs) == 0 {
		return math.NaN()
	}
	if speedup == 1 {
		return median(xs)
	}
	return slices.Min(xs)
}

// Window is the steady state of a decode batch: from the moment the last request got its
// first token (every prompt computed: each step after it is pure decode) to the moment
// the first request got its last token (the batch shrinks after it). Times are offsets
// from the run's origin, as bench.Result's. Gaps is the fewest token gaps a request has
// in it (the steps measured).
type Window struct {
	From, To time.Duration
	Gaps     int
}

// tokenTimes returns the times of r's tokens: its first at Start + TTFT, then one per
// ITL gap.
func tokenTimes(r bench.Result) []time.Duration {
	t := r.Start + r.TTFT
	out := make([]time.Duration, 0, len(r.ITL)+1)
	out = append(out, t)
	for _, g := range r.ITL {
		t += g
		out = append(out, t)
	}
	return out
}

// SteadyITL is a decode point's ITL in ms: within the batch's steady window, each
// request's mean gap (its last token's time in the window less its first's, over the
// gaps between), then the median over requests, scaled by speedup. A request's mean
// gap, not its single gaps: an engine whose timer cannot wait less than a millisecond
// catches up in bursts (docs/reference.md §7, "What the host adds"), and a client that
// reads two frames at once splits a gap in two; neither changes the mean. Errors: a
// request that failed, or a window in which no request has two tokens (ask more output
// tokens).
func SteadyITL(results []bench.Result, speedup float64) (float64, Window, error) {
	if len(results) == 0 {
		return 0, Window{}, errors.New("no request")
	}
	w := Window{From: math.MinInt64, To: math.MaxInt64}
	times := make([][]time.Duration, len(results))
	for i, r := range results {
		if r.Error != "" {
			return 0, Window{}, fmt.Errorf("request failed: %s %s", r.Error, r.Detail)
		}
		times[i] = tokenTimes(r)
		w.From = max(w.From, times[i][0])
		w.To = min(w.To, times[i][len(times[i])-1])
	}
	var means []float64
	w.Gaps = math.MaxInt
	for _, ts := range times {
		var first, last time.Duration
		n := 0
		for _, t := range ts {
			if t < w.From || t > w.To {
				continue
			}
			if n == 0 {
				first = t
			}
			last = t
			n++
		}
		w.Gaps = min(w.Gaps, max(n-1, 0))
		if n >= 2 {
			means = append(means, float64(last-first)/float64(n-1)/float64(time.Millisecond)*speedup)
		}
	}
	if len(means) == 0 {
		return 0, w, fmt.Errorf("no steady decode window (from %v to %v no request has two tokens): ask more output tokens", w.From, w.To)
	}
	return median(means), w, nil
}

// UsageSample is the engine's KV usage (0..1) at a time (an offset from the run's origin).
type UsageSample struct {
	At    time.Duration
	Usage float64
}

// Usage is a decode point's KV usage: the mean of the samples taken within the window
// (sampled true), else, when none was, what batch sequences of context tokens hold in
// kvBlocks blocks of blockSize tokens (sampled false), clamped to [0, 1].
func Usage(samples []UsageSample, w Window, context, batch, blockSize, kvBlocks int) (usage float64, sampled bool) {
	var sum float64
	n := 0
	for _, s := range samples {
		if s.At >= w.From && s.At <= w.To && !math.IsNaN(s.Usage) {
			sum += s.Usage
			n++
		}
	}
	if n > 0 {
		return min(max(sum/float64(n), 0), 1), true
	}
	return min(float64(batch*ceilDiv(context, blockSize))/float64(kvBlocks), 1), false
}

// PrefillPoint builds a profile's prefill point of an engine of tp GPUs.
func PrefillPoint(isl int, ttftMs float64, tp int) planner.PrefillPoint {
	return planner.PrefillPoint{ISL: isl, TTFTMs: ttftMs, TokensPerSecPerGPU: float64(isl) / (ttftMs / 1000) / float64(max(tp, 1))}
}

// DecodePointOf builds a profile's decode point of an engine of tp GPUs.
func DecodePointOf(pt DecodePoint, usage, itlMs float64, tp int) planner.DecodePoint {
	return planner.DecodePoint{Context: pt.Context, Batch: pt.Batch, KVUsage: usage, ITLMs: itlMs,
		TokensPerSecPerGPU: float64(pt.Batch) / (itlMs / 1000) / float64(max(tp, 1))}
}

// Quadratic is a·x² + b·x + c.
type Quadratic struct{ A, B, C float64 }

// At is the quadratic's value at x.
func (q Quadratic) At(x float64) float64 { return q.A*x*x + q.B*x + q.C }

// FitQuadratic fits a·x² + b·x + c to the points by least squares (the shape of the
// reference mock engine's timing, docs/reference.md §7). ok is false with fewer than
// three distinct x values.
func FitQuadratic(xs, ys []float64) (q Quadratic, ok bool) {
	if len(xs) != len(ys) || len(slices.Compact(slices.Sorted(slices.Values(xs)))) < 3 {
		return Quadratic{}, false
	}
	// Normal equations, with x scaled to [0, 1] to keep them well conditioned.
	scale := slices.Max(xs)
	if scale == 0 {
		return Quadratic{}, false
	}
	var s [5]float64 // Σ x^k
	var t [3]float64 // Σ y·x^k
	for i, x := range xs {
		x /= scale
		p := 1.0
		for k := range 5 {
			s[k] += p
			if k < 3 {
				t[k] += ys[i] * p
			}
			p *= x
		}
	}
	m := [3][3]float64{{s[4], s[3], s[2]}, {s[3], s[2], s[1]}, {s[2], s[1], s[0]}}
	v := [3]float64{t[2], t[1], t[0]}
	det := det3(m)
	if det == 0 || math.IsNaN(det) {
		return Quadratic{}, false
	}
	var sol [3]float64
	for j := range 3 {
		mj := m
		for i := range 3 {
			mj[i][j] = v[i]
		}
		sol[j] = det3(mj) / det
	}
	return Quadratic{A: sol[0] / (scale * scale), B: sol[1] / scale, C: sol[2]}, true
}

func det3(m [3][3]float64) float64 {
	return m[0][0]*(m[1][1]*m[2][2]-m[1][2]*m[2][1]) - m[0][1]*(m[1][0]*m[2][2]-m[1][2]*m[2][0]) + m[0][2]*(m[1][0]*m[2][1]-m[1][1]*m[2][0])
}
