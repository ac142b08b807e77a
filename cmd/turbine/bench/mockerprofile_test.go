package bench

import (
	"bytes"
	"context"
	"math"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/turbine-llm/turbine/bench"
	"github.com/turbine-llm/turbine/engines/mocker"
	"github.com/turbine-llm/turbine/planner"
)

// profileFixture is a profile of tensor-parallel sizes 1 and 2 (blocks of 16 tokens;
// TP 2: 8192 blocks, 32 sequences, TTFT 65 ms at ISL 512).
const profileFixture = "../mocker/testdata/profile.json"

// simulateOne simulates three requests of 512 prompt and 2 output tokens, far apart
// (each alone on the idle engine), on one worker, and returns the run's summary.
func simulateOne(t *testing.T, extra ...string) bench.Summary {
	t.Helper()
	dir := t.TempDir()
	var stdout, stderr bytes.Buffer
	args := append([]string{"--simulate", "--isl", "512", "--osl", "2", "--rate", "0.001", "--requests", "3", "--workers", "1",
		"--max-model-len", "4096", "--out", dir, "--progress-interval", "0"}, extra...)
	if err := Run(context.Background(), args, &stdout, &stderr); err != nil {
		t.Fatalf("%v\n%s", err, stderr.String())
	}
	return readSummary(t, filepath.Join(dir, "summary.json"))
}

// TestSimulateTensorParallelAndProfile: --tensor-parallel-size divides the reference
// timing by n^0.8; --profile makes the simulated engines the profile's entry for the
// size (its TTFT, its ITL at the usage and context the request decodes at), as serve's
// --mocker-profile makes its mock engines.
func TestSimulateTensorParallelAndProfile(t *testing.T) {
	if s := simulateOne(t, "--tensor-parallel-size", "4"); math.Abs(s.TTFT.P50-mocker.PrefillMillis(512)/mocker.TensorParallelSpeedup(4)) > 1e-3 {
		t.Fatalf("TP 4, reference timing: TTFT p50 %v, want %v", s.TTFT.P50, mocker.PrefillMillis(512)/mocker.TensorParallelSpeedup(4))
	}
	prof, err := planner.LoadProfile(profileFixture)
	if err != nil {
		t.Fatal(err)
	}
	ep, _ := prof.ForTP(2)
	s := simulateOne(t, "--profile", profileFixture, "--tensor-parallel-size", "2")
	if want := ep.TTFT(512); math.Abs(s.TTFT.P50-want) > 1e-3 || s.Succeeded != 3 {
		t.Fatalf("profile TP 2: %d succeeded, TTFT p50 %v, want %v", s.Succeeded, s.TTFT.P50, want)
	}
	// The one decode step: one sequence of 513 tokens in 33 of the entry's 8192 blocks.
	if want := ep.ITL(33.0/8192, 513); math.Abs(s.ITL.P50-want) > 1e-3 {
		t.Fatalf("profile TP 2: ITL p50 %v, want %v", s.ITL.P50, want)
	}
}

// TestProfileFlagsRefused: --profile and --tensor-parallel-size are simulation flags (a
// real run measures --url as it is), and a profile that lacks the size or disagrees
// with --block-size is refused naming the flag.
func TestProfileFlagsRefused(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--url", "http://127.0.0.1:1", "--model", "m", "--isl", "10", "--osl", "2", "--rate", "1", "--requests", "1", "--profile", profileFixture},
			"--profile: only with --simulate"},
		{[]string{"--simulate", "--isl", "10", "--osl", "2", "--rate", "1", "--requests", "1", "--profile", profileFixture, "--tensor-parallel-size", "4"},
			"--profile " + profileFixture + ": --tensor-parallel-size 4: planner: tensor-parallel size 4 not in the profile (profiled: [1 2])"},
		{[]string{"--simulate", "--isl", "10", "--osl", "2", "--rate", "1", "--requests", "1", "--profile", profileFixture, "--block-size", "64"},
			"--block-size 64 differs from the profile's block_size 16"},
		{[]string{"--simulate", "--isl", "10", "--osl", "2", "--rate", "1", "--requests", "1", "--profile", "missing.json"},
			"--profile missing.json: planner: profile: open missing.json"},
		{[]string{"--simulate", "--isl", "10", "--osl", "2", "--rate", "1", "--requests", "1", "--tensor-parallel-size", "65"},
			"--tensor-parallel-size 65: want 1..64"},
	} {
		err := Run(context.Background(), append(tc.args, "--out", t.TempDir()), &bytes.Buffer{}, &bytes.Buffer{})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: error %v, want %q", tc.args, err, tc.want)
		}
	}
}

// TestCompareServeArgsCarryProfile: a comparison against real serves starts them with
// the fleet's profile and size, and with the limits the profile settled.
func TestCompareServeArgsCarryProfile(t *testing.T) {
	f := DefaultFleet(2)
	f.Profile, f.TensorParallelSize, f.MaxModelLen = profileFixture, 2, 4096
	if err := f.validate([]string{"kv"}, "--modes"); err != nil {
		t.Fatal(err)
	}
	args := f.serveArgs("kv", "m")
	for _, want := range [][]string{{"--mocker-profile", profileFixture}, {"--mocker-tensor-parallel-size", "2"},
		{"--num-gpu-blocks", "8192"}, {"--block-size", "16"}, {"--max-num-seqs", "32"}} {
		i := slices.Index(args, want[0])
		if i < 0 || i+1 >= len(args) || args[i+1] != want[1] {
			t.Errorf("serve args %q: want %s %s", args, want[0], want[1])
		}
	}
}
