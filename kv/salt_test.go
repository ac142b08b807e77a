package kv

import (
	"slices"
	"testing"

	"github.com/zeebo/xxh3"
)

// TestSaltedHashes: a cache salt changes the first block's hash, and through the chain
// every later one; the same salt gives the same hashes, no salt the unsalted ones.
func TestSaltedHashes(t *testing.T) {
	const bs = 4
	toks := blocksOf(bs, 1, 2, 3)
	plain := SequenceHashes(toks, bs, "")
	a := AppendSaltedSequenceHashes(nil, toks, bs, "", "tenant-a")
	a2 := AppendSaltedSequenceHashes(nil, toks, bs, "", "tenant-a")
	b := AppendSaltedSequenceHashes(nil, toks, bs, "", "tenant-b")
	if !slices.Equal(AppendSaltedSequenceHashes(nil, toks, bs, "", ""), plain) {
		t.Fatal("the empty salt changed the hashes")
	}
	if !slices.Equal(a, a2) {
		t.Fatal("one salt, two hashings: different hashes")
	}
	for i := range plain {
		if slices.Contains(plain, a[i]) || slices.Contains(plain, b[i]) || slices.Contains(b, a[i]) {
			t.Fatalf("salted block %d shares a hash with another salt or none", i)
		}
	}
	// By hand: seq[0] = ChainHash(xxh3(salt, seed 1337^"salt"), local[0]).
	local0 := LocalBlockHash(toks[:bs], HashSeed)
	if want := ChainHash(xxh3.HashStringSeed("tenant-a", HashSeed^0x73616c74), local0); a[0] != want || FirstBlockHash(local0, "tenant-a") != want {
		t.Fatalf("salted first block %#x, want %#x", a[0], want)
	}
	if FirstBlockHash(local0, "") != plain[0] {
		t.Fatal("FirstBlockHash without a salt is not the local hash")
	}
	// A LoRA adapter and a salt of the same name are different blocks (vLLM's flat
	// extra keys confuse them; Turbine's do not).
	if l := SequenceHashes(toks, bs, "x"); slices.Equal(l, AppendSaltedSequenceHashes(nil, toks, bs, "", "x")) {
		t.Fatal("LoRA x and salt x hash alike")
	}
}

// TestIndexSaltedBlocks: blocks stored with a salt match prompts with that salt only,
// and a dump replays the salt.
func TestIndexSaltedBlocks(t *testing.T) {
	const bs = 4
	x := NewIndex(bs)
	ev := stored(bs, nil, []uint64{1, 2}, 1, 2)
	ev.CacheSalt = "tenant-a"
	mustApply(t, x, 0, ev)
	mustApply(t, x, 0, stored(bs, ptr(2), []uint64{3}, 3)) // a continuation inherits the salt
	mustApply(t, x, 1, stored(bs, nil, []uint64{11, 12, 13}, 1, 2, 3))
	toks := blocksOf(bs, 1, 2, 3, 4)
	for _, tc := range []struct {
		salt string
		want []uint32
	}{
		{"tenant-a", []uint32{3, 0}},
		{"tenant-b", []uint32{0, 0}},
		{"", []uint32{0, 3}},
	} {
		got := x.Overlaps(AppendSaltedSequenceHashes(nil, toks, bs, "", tc.salt), nil)
		if !slices.Equal(got, tc.want) {
			t.Errorf("salt %q: overlaps %v, want %v", tc.salt, got, tc.want)
		}
	}
	dump := x.Dump(0)
	if len(dump) == 0 || dump[0].CacheSalt != "tenant-a" {
		t.Fatalf("dump %+v: the first event lost its salt", dump)
	}
	y := NewIndex(bs)
	for _, ev := range dump {
		mustApply(t, y, 0, ev)
	}
	if got := y.Overlaps(AppendSaltedSequenceHashes(nil, toks, bs, "", "tenant-a"), nil); got[0] != 3 {
		t.Fatalf("replayed dump: salted overlap %d, want 3", got[0])
	}
	// The salt goes with its block.
	mustApply(t, x, 0, Event{Kind: BlockRemoved, EngineHashes: []uint64{1, 2, 3}})
	if len(x.salts) != 0 {
		t.Fatalf("%d salts kept after their blocks went", len(x.salts))
	}
}
