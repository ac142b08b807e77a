package server

import (
	"fmt"

	"github.com/turbine-llm/turbine/engines/mocker"
	"github.com/turbine-llm/turbine/planner"
)

// Given says which of an engine's limits were given explicitly (a flag or its
// environment variable): ResolveParallel keeps those and derives the others.
type Given struct {
	BlockSize, NumGPUBlocks, MaxNumSeqs bool
}

// ResolveParallel settles the limits and the timing of a mock engine of
// e.TensorParallelSize GPUs (docs/reference.md §27.1):
//
//   - with a profile (prof not nil), the engine plays the profile's entry for that size:
//     its timing is the entry's (EngineProfile.Timing, used as it is: the measurement
//     already holds what the size does), its KV blocks and max running sequences are the
//     entry's unless given, and its block size is the profile's (a given one must equal
//     it: KV usage, which the decode times are measured against, counts blocks);
//   - without one, the reference timing applies (divided by n^0.8 in the core) and the
//     engine has n times e.NumGPUBlocks (mocker.KVBlocksForTP) unless they were given:
//     e.NumGPUBlocks is then one GPU's.
//
// It returns the profile entry used (nil without a profile). Errors: a size outside
// 0..mocker.MaxTensorParallelSize, a size the profile lacks (listing the profiled
// ones), a given block size that differs from the profile's. Call it once per
// configuration: without a profile it multiplies e.NumGPUBlocks.
func ResolveParallel(e *mocker.Config, prof *planner.Profile, given Given) (*planner.EngineProfile, error) {
	if err := mocker.CheckTensorParallelSize(e.TensorParallelSize); err != nil {
		return nil, fmt.Errorf("--tensor-parallel-size %d: %v", e.TensorParallelSize, err)
	}
	tp := max(e.TensorParallelSize, 1)
	if prof == nil {
		if !given.NumGPUBlocks {
			e.NumGPUBlocks = mocker.KVBlocksForTP(e.NumGPUBlocks, tp)
		}
		return nil, nil
	}
	ep, err := prof.ForTP(tp)
	if err != nil {
		return nil, fmt.Errorf("--tensor-parallel-size %d: %w", tp, err)
	}
	if given.BlockSize && e.BlockSize != prof.BlockSize {
		return nil, fmt.Errorf("--block-size %d differs from the profile's block_size %d (its KV usage counts blocks of that size): give %d or leave it out",
			e.BlockSize, prof.BlockSize, prof.BlockSize)
	}
	e.BlockSize = prof.BlockSize
	if !given.NumGPUBlocks {
		e.NumGPUBlocks = ep.KVBlocks
	}
	if !given.MaxNumSeqs {
		e.MaxNumSeqs = ep.MaxNumSeqs
	}
	e.Timing = ep.Timing()
	return ep, nil
}
