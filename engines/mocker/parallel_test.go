package mocker

import (
	"math"
	"strings"
	"testing"
	"time"
)

// msOf is d in milliseconds.
func msOf(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// TestTensorParallelSpeedup: n^0.8, and 1 for sizes of one GPU or less.
func TestTensorParallelSpeedup(t *testing.T) {
	for _, tc := range []struct {
		n    int
		want float64
	}{{-1, 1}, {0, 1}, {1, 1}, {2, 1.7411011265922482}, {4, 3.0314331330207964}, {8, 5.278031643091577}} {
		if got := TensorParallelSpeedup(tc.n); math.Abs(got-tc.want) > 1e-12 {
			t.Errorf("TensorParallelSpeedup(%d) = %v, want %v", tc.n, got, tc.want)
		}
	}
	if got := KVBlocksForTP(16384, 4); got != 65536 {
		t.Errorf("KVBlocksForTP(16384, 4) = %d, want 65536", got)
	}
	if got := KVBlocksForTP(100, 0); got != 100 {
		t.Errorf("KVBlocksForTP(100, 0) = %d, want 100", got)
	}
}

// stepTimes runs one request of isl prompt tokens and out output tokens alone on an
// engine of cfg and returns its prefill step's and its last decode step's durations.
func stepTimes(t *testing.T, cfg Config, isl, out int) (prefill, decode time.Duration, usage float64) {
	t.Helper()
	e := newEngine(t, cfg)
	mustAdd(t, e, Request{ID: "r", Prompt: seqTokens(1000, isl), MaxTokens: out, IgnoreEOS: true})
	rr := run(t, e, t0)
	if len(rr.steps) != out {
		t.Fatalf("%d steps, want %d (one prefill, then one per token)", len(rr.steps), out)
	}
	last := rr.steps[len(rr.steps)-1]
	if last.DecodeSeqs != 1 || last.PrefillTokens != 0 {
		t.Fatalf("last step %+v: want one decode", last)
	}
	blocks := (isl + out - 1 + cfg.BlockSize - 1) / cfg.BlockSize // the tokens computed by the last step
	return rr.steps[0].Duration, last.Duration, float64(blocks) / float64(cfg.NumGPUBlocks)
}

// TestTensorParallelReferenceTiming: an engine of n GPUs without a profile steps in the
// reference time divided by n^0.8, prefill and decode alike; one GPU (0 or 1) keeps the
// reference time exactly.
func TestTensorParallelReferenceTiming(t *testing.T) {
	const isl, out = 1000, 4
	for _, n := range []int{0, 1, 2, 4, 8} {
		cfg := smallConfig()
		cfg.NumGPUBlocks, cfg.MaxNumBatchedTokens, cfg.MaxModelLen = 512, 2048, 2048
		cfg.TensorParallelSize = n
		prefill, decode, u := stepTimes(t, cfg, isl, out)
		s := TensorParallelSpeedup(n)
		if want := PrefillMillis(isl) / s; math.Abs(msOf(prefill)-want) > 1e-5 {
			t.Errorf("TP %d: prefill step %v, want %.6f ms", n, prefill, want)
		}
		if want := DecodeMillis(u) / s; math.Abs(msOf(decode)-want) > 1e-5 {
			t.Errorf("TP %d: decode step %v at usage %v, want %.6f ms", n, decode, u, want)
		}
		if n <= 1 && prefill != StepDuration(isl, false, 0, 1) {
			t.Errorf("TP %d: prefill step %v differs from the one-GPU StepDuration %v", n, prefill, StepDuration(isl, false, 0, 1))
		}
	}
}

// fixedTiming is a profile-like Timing: constant times, whatever the step.
type fixedTiming struct{ prefill, decode float64 }

func (f fixedTiming) PrefillMillis(t int) float64 {
	if t <= 0 {
		return 0
	}
	return f.prefill
}
func (f fixedTiming) DecodeMillis(_, _ float64) float64 { return f.decode }

// TestTensorParallelProfileAsIs: a Timing (a profile measured at the engine's own size)
// is used as it is: the tensor-parallel size does not divide it again, and the speedup
// ratio still does.
func TestTensorParallelProfileAsIs(t *testing.T) {
	for _, n := range []int{1, 4} {
		cfg := smallConfig()
		cfg.Timing, cfg.TensorParallelSize, cfg.SpeedupRatio = fixedTiming{prefill: 40, decode: 12}, n, 2
		prefill, decode, _ := stepTimes(t, cfg, 20, 3)
		if prefill != 20*time.Millisecond || decode != 6*time.Millisecond {
			t.Errorf("TP %d with a profile: steps %v and %v, want 20ms and 6ms (the profile's over the speedup, undivided by the size)", n, prefill, decode)
		}
	}
}

// TestTensorParallelValidate: sizes outside 0..64 are refused, naming the flag and the
// range.
func TestTensorParallelValidate(t *testing.T) {
	for _, n := range []int{-1, 65, 1000} {
		c := DefaultConfig()
		c.TensorParallelSize = n
		err := c.Validate()
		if err == nil || !strings.Contains(err.Error(), "--tensor-parallel-size") || !strings.Contains(err.Error(), "1..64") {
			t.Errorf("TensorParallelSize %d: error %v, want one naming --tensor-parallel-size and 1..64", n, err)
		}
	}
	for _, n := range []int{0, 1, 2, 64} {
		c := DefaultConfig()
		c.TensorParallelSize = n
		if err := c.Validate(); err != nil {
			t.Errorf("TensorParallelSize %d: %v", n, err)
		}
	}
}

// TestStepTiming: the timing model is the profile when one is set, else the reference
// model of the engine's size.
func TestStepTiming(t *testing.T) {
	c := DefaultConfig()
	c.TensorParallelSize = 2
	if got, ok := c.StepTiming().(ReferenceTiming); !ok || got.TensorParallelSize != 2 {
		t.Fatalf("StepTiming without a profile = %#v, want ReferenceTiming{2}", c.StepTiming())
	}
	c.Timing = fixedTiming{1, 2}
	if _, ok := c.StepTiming().(fixedTiming); !ok {
		t.Fatalf("StepTiming with a profile = %#v, want the profile", c.StepTiming())
	}
	// A mixed step pays both times; the context reaches the profile's decode time.
	var ctx ctxTiming
	c.Timing = &ctx
	c.SpeedupRatio = 1
	if d := c.StepDuration(100, 3, 0.5, 777); d != 101*time.Millisecond || ctx.context != 777 || ctx.usage != 0.5 {
		t.Fatalf("StepDuration = %v (context %v, usage %v), want 101ms with context 777 and usage 0.5", d, ctx.context, ctx.usage)
	}
	if d := c.StepDuration(100, 0, 0.5, 0); d != 100*time.Millisecond {
		t.Fatalf("StepDuration of a prefill-only step = %v, want 100ms", d)
	}
}

type ctxTiming struct{ usage, context float64 }

func (c *ctxTiming) PrefillMillis(t int) float64 { return float64(t) }
func (c *ctxTiming) DecodeMillis(u, context float64) float64 {
	c.usage, c.context = u, context
	return 1
}

// TestTimingContextIsDecodersMean: the context a profile's decode time gets is the mean
// length of the sequences decoding in the step (prompt plus output so far), not of the
// ones still prefilling.
func TestTimingContextIsDecodersMean(t *testing.T) {
	cfg := smallConfig()
	var ctx ctxTiming
	cfg.Timing = &ctx
	e := newEngine(t, cfg)
	mustAdd(t, e, Request{ID: "a", Prompt: seqTokens(1000, 10), MaxTokens: 5, IgnoreEOS: true})
	mustAdd(t, e, Request{ID: "b", Prompt: seqTokens(2000, 20), MaxTokens: 5, IgnoreEOS: true})
	e.Step(t0) // both prefill and produce their first token
	res := e.Step(t0)
	if res.DecodeSeqs != 2 || ctx.context != (11+21)/2.0 {
		t.Fatalf("decode step of %d sequences saw context %v, want the mean of 11 and 21", res.DecodeSeqs, ctx.context)
	}
}
