package mocker

import (
	"fmt"
	"math"
	"time"
)

// Tensor parallelism (docs/reference.md §27.1). A mock engine of n GPUs
// (Config.TensorParallelSize) shards the model over them: each GPU holds 1/n of the
// weights and of every KV block, so the engine has n times the KV blocks of one GPU
// (KVBlocksForTP; `turbine mocker` applies it unless --num-gpu-blocks-override is
// given), and each step's compute is split n ways at the price of the all-reduces
// between the shards, so a step takes the one-GPU time divided by n^TensorParallelExponent
// (ReferenceTiming). Latency improves with n while the throughput per GPU falls: a TP-4
// engine steps 4^0.8 = 3.03 times faster than a TP-1 engine on four times the GPUs.
//
// The division applies to the reference timing model only. A profile (Config.Timing)
// is the measurement of an engine of its own tensor-parallel size, which already
// includes what the size does: its times are used as they are.

// TensorParallelExponent is e in the step-time division n^e of an engine of n GPUs.
const TensorParallelExponent = 0.8

// MaxTensorParallelSize bounds Config.TensorParallelSize (the largest a profile holds).
const MaxTensorParallelSize = 64

// TensorParallelSpeedup is n^TensorParallelExponent, the factor by which a step of an
// engine of n GPUs is faster than one GPU's; 1 for n <= 1.
func TensorParallelSpeedup(n int) float64 {
	if n <= 1 {
		return 1
	}
	return math.Pow(float64(n), TensorParallelExponent)
}

// KVBlocksForTP is the KV blocks of an engine of n GPUs each holding perGPU blocks'
// worth of memory: perGPU × n (perGPU for n <= 1).
func KVBlocksForTP(perGPU, n int) int { return perGPU * max(n, 1) }

// CheckTensorParallelSize checks a tensor-parallel size: 0 (one GPU) to
// MaxTensorParallelSize. The error gives the range; the caller names the flag or field.
func CheckTensorParallelSize(n int) error {
	if n < 0 || n > MaxTensorParallelSize {
		return fmt.Errorf("want 1..%d (0: one GPU)", MaxTensorParallelSize)
	}
	return nil
}

// ReferenceTiming is the reference timing model (PrefillMillis, DecodeMillis) of an
// engine of TensorParallelSize GPUs (0 or 1: one), each time divided by
// TensorParallelSpeedup. It implements Timing; the zero value is the one-GPU model.
type ReferenceTiming struct {
	TensorParallelSize int
}

// PrefillMillis is PrefillMillis(t) / TensorParallelSpeedup, in ms (0 for t <= 0).
func (r ReferenceTiming) PrefillMillis(t int) float64 {
	return PrefillMillis(t) / TensorParallelSpeedup(r.TensorParallelSize)
}

// DecodeMillis is DecodeMillis(u) / TensorParallelSpeedup, in ms: the reference decode
// step does not depend on the context.
func (r ReferenceTiming) DecodeMillis(u, _ float64) float64 {
	return DecodeMillis(u) / TensorParallelSpeedup(r.TensorParallelSize)
}

// StepTiming is the engine's timing model: Timing when set (a profile, used as it is),
// else the reference model of TensorParallelSize GPUs.
func (c Config) StepTiming() Timing {
	if c.Timing != nil {
		return c.Timing
	}
	return ReferenceTiming{TensorParallelSize: c.TensorParallelSize}
}

// StepDuration is the duration of a step that computes prefillTokens new prompt tokens
// and one decode token for each of decodeSeqs sequences holding context tokens each on
// average, at KV usage u: the prefill and decode times of StepTiming add up (a mixed
// batch pays both), divided by SpeedupRatio.
func (c Config) StepDuration(prefillTokens, decodeSeqs int, u, context float64) time.Duration {
	if c.Timing == nil && c.TensorParallelSize <= 1 {
		return StepDuration(prefillTokens, decodeSeqs > 0, u, c.SpeedupRatio)
	}
	t := c.StepTiming()
	ms := t.PrefillMillis(prefillTokens)
	if decodeSeqs > 0 {
		ms += t.DecodeMillis(u, context)
	}
	return time.Duration(ms / c.SpeedupRatio * float64(time.Millisecond))
}
