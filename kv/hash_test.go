package kv

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/zeebo/xxh3"
)

var updateGolden = flag.Bool("update", false, "rewrite golden files under testdata/")

// The golden values in testdata/hash_golden.json were cross-checked against the C xxHash
// library (through Python's xxhash 3.2 bindings) when they were frozen.

// hashCase describes a prompt compactly: tokens start, start+step, ... (count of them).
type hashCase struct {
	Name      string   `json:"name"`
	Start     uint32   `json:"start"`
	Step      uint32   `json:"step"`
	Count     int      `json:"count"`
	BlockSize int      `json:"block_size"`
	Lora      string   `json:"lora"`
	SeqHashes []string `json:"seq_hashes"` // hex, one per full block
}

func (c hashCase) tokens() []uint32 {
	t := make([]uint32, c.Count)
	for i := range t {
		t[i] = c.Start + uint32(i)*c.Step
	}
	return t
}

var hashCases = []hashCase{
	{Name: "one block of 4", Start: 1, Step: 1, Count: 4, BlockSize: 4},
	{Name: "three blocks of 16", Start: 0, Step: 1, Count: 48, BlockSize: 16},
	{Name: "partial trailing block not hashed", Start: 100, Step: 3, Count: 37, BlockSize: 16},
	{Name: "large token ids", Start: 151643, Step: 7919, Count: 128, BlockSize: 64},
	{Name: "lora adapter", Start: 0, Step: 1, Count: 48, BlockSize: 16, Lora: "sql-lora"},
	{Name: "shorter than a block", Start: 5, Step: 1, Count: 15, BlockSize: 16},
	{Name: "block size 1", Start: 9, Step: 2, Count: 5, BlockSize: 1},
}

func TestHashByHand(t *testing.T) {
	// tokens 1,2,3,4 as little-endian uint32 bytes, hashed with seed 1337.
	b0 := []byte{1, 0, 0, 0, 2, 0, 0, 0, 3, 0, 0, 0, 4, 0, 0, 0}
	b1 := []byte{5, 0, 0, 0, 6, 0, 0, 0, 7, 0, 0, 0, 0x08, 0x01, 0, 0} // 5,6,7,264
	l0 := xxh3.HashSeed(b0, 1337)
	l1 := xxh3.HashSeed(b1, 1337)
	var chain [16]byte
	for i := 0; i < 8; i++ {
		chain[i] = byte(l0 >> (8 * i))
		chain[8+i] = byte(l1 >> (8 * i))
	}
	want := []uint64{l0, xxh3.HashSeed(chain[:], 1337)}
	got := SequenceHashes([]uint32{1, 2, 3, 4, 5, 6, 7, 264, 9}, 4, "")
	if !slices.Equal(got, want) {
		t.Fatalf("SequenceHashes = %x, want %x", got, want)
	}
	// LoRA: seed 1337 + xxh3_64("sql-lora") for the local hashes only.
	seed := 1337 + xxh3.Hash([]byte("sql-lora"))
	if LoraSeed("sql-lora") != seed {
		t.Fatalf("LoraSeed = %d, want %d", LoraSeed("sql-lora"), seed)
	}
	if got := SequenceHashes([]uint32{1, 2, 3, 4}, 4, "sql-lora"); got[0] != xxh3.HashSeed(b0, seed) {
		t.Fatalf("LoRA hash %x, want %x", got[0], xxh3.HashSeed(b0, seed))
	}
}

func TestHashGolden(t *testing.T) {
	path := filepath.Join("testdata", "hash_golden.json")
	cases := slices.Clone(hashCases)
	for i := range cases {
		c := &cases[i]
		got := SequenceHashes(c.tokens(), c.BlockSize, c.Lora)
		if naive := naiveSeqHashes(c.tokens(), c.BlockSize, c.Lora, false, 0); !slices.Equal(got, naive) {
			t.Fatalf("%s: SequenceHashes %x, independent computation %x", c.Name, got, naive)
		}
		if n := c.Count / c.BlockSize; len(got) != n {
			t.Fatalf("%s: %d hashes, want %d", c.Name, len(got), n)
		}
		c.SeqHashes = []string{}
		for _, h := range got {
			c.SeqHashes = append(c.SeqHashes, fmt.Sprintf("%016x", h))
		}
		// The append variant extends dst and agrees.
		app := AppendSequenceHashes([]uint64{42}, c.tokens(), c.BlockSize, c.Lora)
		if app[0] != 42 || !slices.Equal(app[1:], got) {
			t.Fatalf("%s: AppendSequenceHashes disagrees", c.Name)
		}
	}
	if *updateGolden {
		b, _ := json.MarshalIndent(cases, "", "  ")
		if err := os.WriteFile(path, append(b, '\n'), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run with -update to create it)", err)
	}
	var golden []hashCase
	if err := json.Unmarshal(b, &golden); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	if len(golden) != len(cases) {
		t.Fatalf("%s has %d cases, test has %d", path, len(golden), len(cases))
	}
	for i, g := range golden {
		if !slices.Equal(g.SeqHashes, cases[i].SeqHashes) || g.Name != cases[i].Name {
			t.Errorf("%s: golden %v, computed %v (hashes that change must bump kv.HashScheme, %d, with the golden file: workers send dumps hashed under it)",
				g.Name, g.SeqHashes, cases[i].SeqHashes, HashScheme)
		}
	}
}

func TestChainedHashesContinue(t *testing.T) {
	toks := make([]uint32, 64)
	for i := range toks {
		toks[i] = uint32(i * 31)
	}
	all := SequenceHashes(toks, 8, "")
	// Hashing blocks 3.. chained onto block 2's hash gives the same tail.
	tail := AppendChainedHashes(nil, toks[24:], 8, LoraSeed(""), true, all[2])
	if !slices.Equal(tail, all[3:]) {
		t.Fatalf("continuation %x, want %x", tail, all[3:])
	}
}
