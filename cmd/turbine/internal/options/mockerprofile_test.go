package options

import (
	"flag"
	"slices"
	"strings"
	"testing"

	"github.com/turbine-llm/turbine/cmd/turbine/internal/cli"
)

// profileFixture is a profile of tensor-parallel sizes 1 and 2, blocks of 16 tokens;
// TP 2: 8192 KV blocks, 32 sequences.
const profileFixture = "../../mocker/testdata/profile.json"

func parseEngine(t *testing.T, args ...string) (Engine, error) {
	t.Helper()
	o := DefaultEngine()
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	o.Flags(fs)
	if err := cli.Parse(fs, args); err != nil {
		t.Fatal(err)
	}
	return o, o.Validate()
}

// TestMockerTensorParallelAndProfile: --mocker-tensor-parallel-size multiplies the mock
// engines' default KV blocks (not given ones); --mocker-profile gives them the profile
// entry's blocks, block size and max sequences unless given; the card carries the
// settled figures and the mock engines' command line names the profile and the size.
func TestMockerTensorParallelAndProfile(t *testing.T) {
	for _, tc := range []struct {
		name                    string
		args                    []string
		env                     map[string]string
		blocks, blockSize, seqs int
		wantErr                 string
	}{
		{name: "defaults", blocks: 16384, blockSize: 64, seqs: 256},
		{name: "TP 4", args: []string{"--mocker-tensor-parallel-size", "4"}, blocks: 65536, blockSize: 64, seqs: 256},
		{name: "TP 4, blocks given", args: []string{"--mocker-tensor-parallel-size", "4", "--num-gpu-blocks", "1000", "--max-model-len", "4096"},
			blocks: 1000, blockSize: 64, seqs: 256},
		{name: "TP 2, blocks from the environment", args: []string{"--mocker-tensor-parallel-size", "2", "--max-model-len", "4096"},
			env: map[string]string{"TURBINE_NUM_GPU_BLOCKS": "3000"}, blocks: 3000, blockSize: 64, seqs: 256},
		{name: "profile, TP 1", args: []string{"--mocker-profile", profileFixture, "--max-model-len", "4096"}, blocks: 4096, blockSize: 16, seqs: 32},
		{name: "profile, TP 2", args: []string{"--mocker-profile", profileFixture, "--mocker-tensor-parallel-size", "2", "--max-model-len", "4096"},
			blocks: 8192, blockSize: 16, seqs: 32},
		{name: "profile, limits given", args: []string{"--mocker-profile", profileFixture, "--block-size", "16", "--num-gpu-blocks", "500", "--max-num-seqs", "8",
			"--max-model-len", "4096"}, blocks: 500, blockSize: 16, seqs: 8},
		{name: "profile lacks the size", args: []string{"--mocker-profile", profileFixture, "--mocker-tensor-parallel-size", "4"},
			wantErr: "--mocker-profile " + profileFixture + ", --mocker-tensor-parallel-size 4: planner: tensor-parallel size 4 not in the profile (profiled: [1 2])"},
		{name: "block size differs", args: []string{"--mocker-profile", profileFixture, "--block-size", "64"},
			wantErr: "--block-size 64 differs from --mocker-profile " + profileFixture + "'s block_size 16"},
		{name: "no such profile", args: []string{"--mocker-profile", "nope.json"}, wantErr: "--mocker-profile nope.json: planner: profile: open nope.json"},
		{name: "size out of range", args: []string{"--mocker-tensor-parallel-size", "65"}, wantErr: "--mocker-tensor-parallel-size 65: want 1..64"},
		{name: "negative size", args: []string{"--mocker-tensor-parallel-size", "-1"}, wantErr: "--mocker-tensor-parallel-size -1: want 1..64"},
		{name: "profile's cache too small for the context length", args: []string{"--mocker-profile", profileFixture, "--max-model-len", "100000"},
			wantErr: "--num-gpu-blocks 4096 × --block-size 16 = 65536 tokens of KV cache cannot hold one --max-model-len 100000"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for k, v := range tc.env {
				t.Setenv(k, v)
			}
			o, err := parseEngine(t, tc.args...)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if err := o.Validate(); err != nil { // a second validation changes nothing
				t.Fatal(err)
			}
			if o.NumGPUBlocks != tc.blocks || o.BlockSize != tc.blockSize || o.MaxNumSeqs != tc.seqs {
				t.Fatalf("blocks %d, block size %d, seqs %d; want %d, %d, %d", o.NumGPUBlocks, o.BlockSize, o.MaxNumSeqs, tc.blocks, tc.blockSize, tc.seqs)
			}
			card, err := o.Card()
			if err != nil {
				t.Fatal(err)
			}
			if card.TotalKvBlocks != int64(tc.blocks) || card.KvBlockSize != int32(tc.blockSize) || card.MaxNumSeqs != int32(tc.seqs) {
				t.Fatalf("card: %d blocks of %d, %d seqs", card.TotalKvBlocks, card.KvBlockSize, card.MaxNumSeqs)
			}
			args := o.Mocker("/bin/turbine", card).Params.Args()
			hasProfile := slices.Contains(args, "--profile") && slices.Contains(args, profileFixture)
			if hasProfile != (o.MockerProfile != "") {
				t.Fatalf("mock engine args %q: --profile rendered %v, want %v", args, hasProfile, o.MockerProfile != "")
			}
			if o.MockerTensorParallelSize > 0 && !slices.Contains(args, "--tensor-parallel-size") {
				t.Fatalf("mock engine args %q lack --tensor-parallel-size", args)
			}
		})
	}
}
