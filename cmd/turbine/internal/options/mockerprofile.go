package options

import (
	"flag"
	"fmt"

	"github.com/turbine-llm/turbine/engines/mocker"
	"github.com/turbine-llm/turbine/engines/mocker/server"
	"github.com/turbine-llm/turbine/planner"
)

// mockerFlags registers --mocker-profile and --mocker-tensor-parallel-size.
func (o *Engine) mockerFlags(fs *flag.FlagSet) {
	fs.StringVar(&o.MockerProfile, "mocker-profile", o.MockerProfile,
		"mock engines: play the engine profiled in this `file` (turbine profile): the step times of its entry for --mocker-tensor-parallel-size, "+
			"and its KV blocks, block size and max sequences unless --num-gpu-blocks, --block-size or --max-num-seqs are given; the file must be at this path on every machine whose mock engines read it")
	fs.IntVar(&o.MockerTensorParallelSize, "mocker-tensor-parallel-size", o.MockerTensorParallelSize,
		"mock engines: the GPUs each plays (none is used; 0 or 1: one): the reference step times divided by N^0.8 and N times --num-gpu-blocks unless it is given; with --mocker-profile, the profile's entry for N")
}

// resolveMocker settles the mock engines' limits for --mocker-tensor-parallel-size and
// --mocker-profile (server.ResolveParallel: the profile entry's KV blocks, block size
// and max sequences for the flags not given; without a profile, --num-gpu-blocks times
// the size unless it was given), so that the model deployment card, the router and
// every mock engine see the same figures. It does nothing without either flag, and the
// same on every call. Errors name the flag: a size outside 0..64, a profile that does
// not load or lacks the size, a --block-size that differs from the profile's.
func (o *Engine) resolveMocker() error {
	if o.MockerProfile == "" && o.MockerTensorParallelSize <= 1 {
		if err := mocker.CheckTensorParallelSize(o.MockerTensorParallelSize); err != nil {
			return fmt.Errorf("--mocker-tensor-parallel-size %d: %v", o.MockerTensorParallelSize, err)
		}
		return nil
	}
	if err := mocker.CheckTensorParallelSize(o.MockerTensorParallelSize); err != nil {
		return fmt.Errorf("--mocker-tensor-parallel-size %d: %v", o.MockerTensorParallelSize, err)
	}
	if o.mockerBlocks == 0 {
		o.mockerBlocks = o.NumGPUBlocks
	}
	e := mocker.DefaultConfig()
	e.BlockSize, e.NumGPUBlocks, e.MaxNumSeqs, e.TensorParallelSize = o.BlockSize, o.mockerBlocks, o.MaxNumSeqs, o.MockerTensorParallelSize
	var prof *planner.Profile
	if o.MockerProfile != "" {
		p, err := planner.LoadProfile(o.MockerProfile)
		if err != nil {
			return fmt.Errorf("--mocker-profile %s: %w", o.MockerProfile, err)
		}
		tp := max(o.MockerTensorParallelSize, 1)
		if _, err := p.ForTP(tp); err != nil {
			return fmt.Errorf("--mocker-profile %s, --mocker-tensor-parallel-size %d: %w", o.MockerProfile, tp, err)
		}
		if o.BlockSizeSet && o.BlockSize != p.BlockSize {
			return fmt.Errorf("--block-size %d differs from --mocker-profile %s's block_size %d (its KV usage counts blocks of that size): give %d or leave it out",
				o.BlockSize, o.MockerProfile, p.BlockSize, p.BlockSize)
		}
		prof = p
	}
	if _, err := server.ResolveParallel(&e, prof, server.Given{BlockSize: o.BlockSizeSet, NumGPUBlocks: o.NumGPUBlocksSet, MaxNumSeqs: o.MaxNumSeqsSet}); err != nil {
		return fmt.Errorf("--mocker-profile %s: %w", o.MockerProfile, err)
	}
	o.BlockSize, o.NumGPUBlocks, o.MaxNumSeqs = e.BlockSize, e.NumGPUBlocks, e.MaxNumSeqs
	return nil
}
