package bench

import (
	"flag"
	"fmt"
	"strconv"

	"github.com/turbine-llm/turbine/engines/mocker"
	mockserver "github.com/turbine-llm/turbine/engines/mocker/server"
	"github.com/turbine-llm/turbine/planner"
)

// mockerResolved is what Fleet.resolveMocker settled: the engines' timing (a profile
// entry's; nil for the reference model) and --num-gpu-blocks before any scaling.
type mockerResolved struct {
	timing mocker.Timing
	blocks int
}

// mockerFlags registers --profile and --tensor-parallel-size.
func (f *Fleet) mockerFlags(fs *flag.FlagSet) {
	fs.StringVar(&f.Profile, "profile", f.Profile,
		"mock engines: play the engine profiled in this `file` (turbine profile): the step times of its entry for --tensor-parallel-size, "+
			"and its KV blocks, block size and max sequences unless --num-gpu-blocks, --block-size or --max-num-seqs are given (serve's --mocker-profile)")
	fs.IntVar(&f.TensorParallelSize, "tensor-parallel-size", f.TensorParallelSize,
		"mock engines: the GPUs each plays (0 or 1: one): the reference step times divided by N^0.8 and N times --num-gpu-blocks unless it is given; with --profile, the profile's entry for N (serve's --mocker-tensor-parallel-size)")
}

// resolveMocker settles the engines' limits and timing for --tensor-parallel-size and
// --profile (engines/mocker/server.ResolveParallel), as serve does for its mock engines, so that a
// simulation and a real serve of the same flags run the same engines. It does nothing
// without either flag, and the same on every call. Errors name the flag.
func (f *Fleet) resolveMocker() error {
	if err := mocker.CheckTensorParallelSize(f.TensorParallelSize); err != nil {
		return fmt.Errorf("--tensor-parallel-size %d: %v", f.TensorParallelSize, err)
	}
	if f.Profile == "" && f.TensorParallelSize <= 1 {
		return nil
	}
	if f.mocker.blocks == 0 {
		f.mocker.blocks = f.NumGPUBlocks
	}
	e := mocker.DefaultConfig()
	e.BlockSize, e.NumGPUBlocks, e.MaxNumSeqs, e.TensorParallelSize = f.BlockSize, f.mocker.blocks, f.MaxNumSeqs, f.TensorParallelSize
	var prof *planner.Profile
	if f.Profile != "" {
		p, err := planner.LoadProfile(f.Profile)
		if err != nil {
			return fmt.Errorf("--profile %s: %w", f.Profile, err)
		}
		prof = p
	}
	given := mockserver.Given{BlockSize: f.BlockSizeSet, NumGPUBlocks: f.NumGPUBlocksSet, MaxNumSeqs: f.MaxNumSeqsSet}
	if _, err := mockserver.ResolveParallel(&e, prof, given); err != nil {
		return fmt.Errorf("--profile %s: %w", f.Profile, err)
	}
	f.BlockSize, f.NumGPUBlocks, f.MaxNumSeqs, f.mocker.timing = e.BlockSize, e.NumGPUBlocks, e.MaxNumSeqs, e.Timing
	return nil
}

// mockerServeArgs are serve's flags that start its mock engines as this fleet's
// (compare against real serves).
func (f *Fleet) mockerServeArgs() []string {
	var args []string
	if f.Profile != "" {
		args = append(args, "--mocker-profile", f.Profile)
	}
	if f.TensorParallelSize > 0 {
		args = append(args, "--mocker-tensor-parallel-size", strconv.Itoa(f.TensorParallelSize))
	}
	return args
}
