package bench

import (
	"math"
	"os"
	"path/filepath"
	"testing"
)

func TestCeiling(t *testing.T) {
	const B = 4
	for _, tc := range []struct {
		name   string
		reqs   []Request
		tokens float64 // Ceiling
		blocks float64 // CeilingBlocks
	}{
		{"empty", nil, 0, 0},
		{"one request", []Request{{InputLength: 8, HashIDs: []int64{1, 2}}}, 0, 0},
		{"shared first block",
			[]Request{{InputLength: 8, HashIDs: []int64{1, 2}}, {InputLength: 8, HashIDs: []int64{1, 3}}},
			4.0 / 16, 1.0 / 4},
		{"a full repeat keeps one token to compute",
			[]Request{{InputLength: 8, HashIDs: []int64{1, 2}}, {InputLength: 8, HashIDs: []int64{1, 2}}},
			7.0 / 16, 2.0 / 4},
		{"a short last block: the hit is cut to the prompt",
			[]Request{{InputLength: 6, HashIDs: []int64{1, 2}}, {InputLength: 10, HashIDs: []int64{1, 2, 3}}},
			8.0 / 16, 2.0 / 5},
		{"only the leading run counts",
			[]Request{{InputLength: 8, HashIDs: []int64{1, 2}}, {InputLength: 12, HashIDs: []int64{9, 2, 1}}},
			0, 0},
		{"a shared prefix ending inside a block counts in full",
			[]Request{{InputLength: 8, HashIDs: []int64{1, 2}, PrefixTokens: 6, PrefixID: 9}, {InputLength: 8, HashIDs: []int64{1, 3}, PrefixTokens: 6, PrefixID: 9}},
			6.0 / 16, 1.0 / 4},
		{"another prefix's remainder does not",
			[]Request{{InputLength: 8, HashIDs: []int64{1, 2}, PrefixTokens: 6, PrefixID: 9}, {InputLength: 8, HashIDs: []int64{1, 3}, PrefixTokens: 6, PrefixID: 10}},
			4.0 / 16, 1.0 / 4},
		{"later requests see every earlier one",
			[]Request{{InputLength: 4, HashIDs: []int64{1}}, {InputLength: 8, HashIDs: []int64{5, 6}}, {InputLength: 12, HashIDs: []int64{5, 6, 7}}},
			8.0 / 24, 2.0 / 6},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Ceiling(tc.reqs, B); math.Abs(got-tc.tokens) > 1e-12 {
				t.Errorf("Ceiling = %v, want %v", got, tc.tokens)
			}
			if got := CeilingBlocks(tc.reqs); math.Abs(got-tc.blocks) > 1e-12 {
				t.Errorf("CeilingBlocks = %v, want %v", got, tc.blocks)
			}
		})
	}
}

// TestCeilingMooncake checks the Mooncake conversation trace against docs/reference.md §12: an
// infinite cache serves 36.6 % of its prompt blocks.
func TestCeilingMooncake(t *testing.T) {
	path := filepath.Join(repoRoot(t), "..", "shared", "data", "mooncake_fast25_conversation_trace.jsonl")
	f, err := os.Open(path)
	if err != nil {
		t.Skipf("trace not available: %v", err)
	}
	defer f.Close()
	reqs, err := ReadMooncake(f, path, DefaultBlockTokens, 0)
	if err != nil {
		t.Fatal(err)
	}
	blocks, tokens := CeilingBlocks(reqs), Ceiling(reqs, DefaultBlockTokens)
	t.Logf("%d requests: ceiling %.2f%% of blocks, %.2f%% of tokens", len(reqs), 100*blocks, 100*tokens)
	if math.Abs(blocks-0.366) > 0.0005 {
		t.Fatalf("block ceiling %.4f, want 0.366", blocks)
	}
	if tokens <= 0 || tokens > blocks+0.05 {
		t.Fatalf("token ceiling %.4f, want near the block ceiling %.4f", tokens, blocks)
	}
}

// repoRoot walks up from the package directory to the directory holding go.mod.
func repoRoot(t *testing.T) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("no go.mod above the test directory")
		}
		dir = parent
	}
}
