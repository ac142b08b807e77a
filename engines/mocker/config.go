// Package mocker is the pure core of the mock engine (docs/reference.md §7): a paged KV cache
// with a prefix cache, a continuous-batching scheduler with chunked prefill and
// preemption, deterministic token generation, the reference timing model (or a
// profile's, Config.Timing) with its tensor-parallel scaling (parallel.go, §27.1) and
// LoRA adapter slots with a modelled load time (lora.go, §26.1). It does no I/O, starts no
// goroutines and reads no clock: the caller passes the time to Step and is told how long
// the step takes (and an adapter load), so the same core runs a live server (real clock,
// engines/mocker/server) or a simulation (virtual clock).
package mocker

import (
	"errors"
	"fmt"
	"math"

	"github.com/turbine-llm/turbine/kv"
)

// Config holds the engine's limits. Names follow vLLM's engine arguments.
type Config struct {
	// BlockSize is the number of tokens per KV block (vLLM --block-size).
	BlockSize int
	// NumGPUBlocks is the number of KV blocks (vLLM --num-gpu-blocks-override).
	NumGPUBlocks int
	// MaxNumSeqs bounds the running requests (vLLM --max-num-seqs).
	MaxNumSeqs int
	// MaxNumBatchedTokens bounds the tokens computed per step (vLLM --max-num-batched-tokens).
	MaxNumBatchedTokens int
	// MaxModelLen is the context length in tokens, prompt plus output (vLLM --max-model-len).
	MaxModelLen int
	// EnablePrefixCaching keeps full blocks for reuse and emits KV events.
	EnablePrefixCaching bool
	// EnableChunkedPrefill lets a prompt's prefill span several steps.
	EnableChunkedPrefill bool
	// SpeedupRatio divides every step duration (1 = the reference timing); above 0 and
	// at most MaxSpeedupRatio.
	SpeedupRatio float64
	// MeanOutputTokens is the mean output length, in tokens, of requests that may end on
	// EOS (ignore_eos false): EOS is drawn with probability 1/MeanOutputTokens per token.
	MeanOutputTokens int
	// Seed is the generation seed of requests that carry none.
	Seed uint64
	// MaxLoras is the number of LoRA adapters the engine holds at once (vLLM's
	// --max-loras, with --max-cpu-loras the same; docs/reference.md §26.1): LoadLora
	// refuses one more. 0: adapters off, LoadLora refuses every adapter.
	MaxLoras int
	// MaxLoraRank is the largest adapter rank LoadLora takes (vLLM's --max-lora-rank);
	// 0: DefaultMaxLoraRank.
	MaxLoraRank int
	// LoraLoadMillis is the modelled time, in milliseconds, of loading one adapter
	// (divided by SpeedupRatio, like every modelled time): the engine computes nothing
	// meanwhile (LoadLora). 0: loads take no time.
	LoraLoadMillis float64
	// Timing replaces the reference timing model (PrefillMillis, DecodeMillis) when not
	// nil: an engine profile (docs/reference.md §27.1), measured at TensorParallelSize
	// and used as it is.
	Timing Timing
	// TensorParallelSize is the GPUs the engine plays (vLLM --tensor-parallel-size; 0 or
	// 1: one, at most MaxTensorParallelSize): the reference timing's steps are divided by
	// TensorParallelSpeedup (parallel.go). The KV blocks are NumGPUBlocks as given: the
	// caller scales them (KVBlocksForTP).
	TensorParallelSize int
	// Tiers is the node's KV block manager below the GPU cache (tier.go, docs/reference.md
	// §9): evicted blocks are offloaded to it and a prefix it holds is onboarded instead
	// of computed. nil: no lower tier.
	Tiers LowerTier
	// TierGBps is each lower tier's bandwidth into GPU memory in GB/s (1e9 bytes/s) at
	// the reference timing, divided like every modelled time by SpeedupRatio; a tier at
	// 0 takes kv.DefaultTierBandwidth's.
	TierGBps kv.TierBandwidth
	// KVBytesPerToken is the model's KV cache size per token in bytes (0 to
	// MaxKVBytesPerToken; 0: kv.DefaultKVBytesPerToken), which sizes offloaded and
	// onboarded blocks (BlockBytes).
	KVBytesPerToken int64
}

// Defaults of the LoRA adapter model (docs/reference.md §26.1).
const (
	// DefaultMaxLoraRank is vLLM's --max-lora-rank default.
	DefaultMaxLoraRank = 16
	// DefaultLoraLoadMillis is the modelled load time of one adapter: reading a rank-16
	// adapter of an 8B model (tens of megabytes of safetensors) from a local disk and
	// copying it to the GPU takes tens of milliseconds.
	DefaultLoraLoadMillis = 50
)

// MaxNumGPUBlocks bounds Config.NumGPUBlocks (--num-gpu-blocks-override, and a
// profile's kv_blocks): 16,777,216 blocks, a block table of about 700 MB, far above any
// real engine's cache; more is refused instead of allocated.
const MaxNumGPUBlocks = 1 << 24

// MaxSpeedupRatio bounds Config.SpeedupRatio, which must be above 0 and at most this:
// a million times faster than the timing model makes a 1 ms decode step last 1 ns,
// time.Duration's unit; faster still and every step rounds to nothing. It is the one
// bound of --speedup-ratio: turbine serve, node and mocker check it through
// CheckSpeedupRatio, and a simulation (bench/sim) takes no faster engine.
const MaxSpeedupRatio = 1e6

// CheckSpeedupRatio checks a speedup ratio against its bound: above 0 and at most
// MaxSpeedupRatio (NaN and infinities are out). The error gives the range; the caller
// names the flag or field.
func CheckSpeedupRatio(r float64) error {
	if r > 0 && r <= MaxSpeedupRatio {
		return nil
	}
	return fmt.Errorf("want above 0 and at most %g (faster, a 1 ms step would round to nothing)", float64(MaxSpeedupRatio))
}

// DefaultConfig returns the reference mocker's defaults (docs/reference.md §7).
func DefaultConfig() Config {
	return Config{
		BlockSize:            64,
		NumGPUBlocks:         16384,
		MaxNumSeqs:           256,
		MaxNumBatchedTokens:  8192,
		MaxModelLen:          32768,
		EnablePrefixCaching:  true,
		EnableChunkedPrefill: true,
		SpeedupRatio:         1,
		MeanOutputTokens:     128,
		MaxLoraRank:          DefaultMaxLoraRank,
		LoraLoadMillis:       DefaultLoraLoadMillis,
	}
}

// Validate checks the limits against each other, naming the vLLM flag that is wrong.
func (c Config) Validate() error {
	switch {
	case c.BlockSize <= 0:
		return fmt.Errorf("mocker: --block-size %d must be positive", c.BlockSize)
	case c.NumGPUBlocks <= 0:
		return fmt.Errorf("mocker: --num-gpu-blocks-override %d must be positive", c.NumGPUBlocks)
	case c.NumGPUBlocks > MaxNumGPUBlocks:
		return fmt.Errorf("mocker: --num-gpu-blocks-override %d: want at most %d", c.NumGPUBlocks, MaxNumGPUBlocks)
	case c.MaxNumSeqs <= 0:
		return fmt.Errorf("mocker: --max-num-seqs %d must be positive", c.MaxNumSeqs)
	case c.MaxNumBatchedTokens <= 0:
		return fmt.Errorf("mocker: --max-num-batched-tokens %d must be positive", c.MaxNumBatchedTokens)
	case c.MaxModelLen <= 1:
		return fmt.Errorf("mocker: --max-model-len %d must be at least 2", c.MaxModelLen)
	case CheckSpeedupRatio(c.SpeedupRatio) != nil:
		return fmt.Errorf("mocker: --speedup-ratio %v: %v", c.SpeedupRatio, CheckSpeedupRatio(c.SpeedupRatio))
	case c.MeanOutputTokens <= 0:
		return fmt.Errorf("mocker: --mean-output-tokens %d must be positive", c.MeanOutputTokens)
	case c.MaxLoras < 0:
		return fmt.Errorf("mocker: --max-loras %d must not be negative (0: adapters off)", c.MaxLoras)
	case c.MaxLoraRank < 0:
		return fmt.Errorf("mocker: --max-lora-rank %d must not be negative (0: %d)", c.MaxLoraRank, DefaultMaxLoraRank)
	case !(c.LoraLoadMillis >= 0) || math.IsInf(c.LoraLoadMillis, 0):
		return fmt.Errorf("mocker: --lora-load-ms %v must be a finite number of milliseconds, at least 0", c.LoraLoadMillis)
	case CheckTensorParallelSize(c.TensorParallelSize) != nil:
		return fmt.Errorf("mocker: --tensor-parallel-size %d: %v", c.TensorParallelSize, CheckTensorParallelSize(c.TensorParallelSize))
	case c.checkTiers() != nil:
		return c.checkTiers()
	}
	if c.MaxModelLen > c.NumGPUBlocks*c.BlockSize {
		return fmt.Errorf("mocker: --max-model-len %d exceeds the KV cache (%d blocks of %d tokens = %d tokens)",
			c.MaxModelLen, c.NumGPUBlocks, c.BlockSize, c.NumGPUBlocks*c.BlockSize)
	}
	if !c.EnableChunkedPrefill && c.MaxNumBatchedTokens < c.MaxModelLen {
		return fmt.Errorf("mocker: --max-num-batched-tokens %d is smaller than --max-model-len %d without chunked prefill",
			c.MaxNumBatchedTokens, c.MaxModelLen)
	}
	return nil
}

// ErrDuplicateID is returned by Add for a request id already in the engine.
var ErrDuplicateID = errors.New("mocker: duplicate request id")
