package kv

import (
	"errors"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

func TestIndexDifferential(t *testing.T) {
	cases := []struct {
		name     string
		seed     uint64
		workers  int
		steps    int
		dumpEach int
	}{
		{"3 workers", 1, 3, 3000, 97},
		{"5 workers", 2, 5, 3000, 61},
		{"single worker", 3, 1, 2000, 41},
		{"130 workers (wide bitsets)", 4, 130, 3000, 499},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(tc.seed, 99))
			runDifferential(t, rng, tc.steps, tc.workers, tc.dumpEach, nil)
		})
	}
}

func FuzzIndexApply(f *testing.F) {
	f.Add([]byte{0, 1, 2, 3, 4, 5, 6, 7, 8, 9})
	f.Add([]byte("stored removed cleared and some more bytes to chew on"))
	rng := rand.New(rand.NewPCG(7, 7))
	for i := 0; i < 4; i++ {
		b := make([]byte, 400)
		for j := range b {
			b[j] = byte(rng.UintN(256))
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		c := &byteChooser{b: data}
		runDifferential(t, c, 200, 3, 17, c.done)
	})
}

// blocksOf builds n blocks of bs tokens whose content is given by ids (block i is
// filled with ids[i]*100+j).
func blocksOf(bs int, ids ...int) []uint32 {
	var t []uint32
	for _, id := range ids {
		for j := 0; j < bs; j++ {
			t = append(t, uint32(id*100+j))
		}
	}
	return t
}

func stored(bs int, parent *uint64, hashes []uint64, ids ...int) Event {
	ev := Event{Kind: BlockStored, EngineHashes: hashes, TokenIDs: blocksOf(bs, ids...), BlockSize: bs}
	if parent != nil {
		ev.HasParent, ev.ParentHash = true, *parent
	}
	return ev
}

func ptr(v uint64) *uint64 { return &v }

func mustApply(t *testing.T, x *Index, w WorkerID, ev Event) {
	t.Helper()
	if err := x.Apply(w, ev); err != nil {
		t.Fatalf("Apply(%d, %+v): %v", w, ev, err)
	}
}

func TestOverlapsChainingTrap(t *testing.T) {
	const bs = 4
	x := NewIndex(bs)
	// worker 0 holds A B C; worker 1 holds X B C (B and C after a different prefix).
	mustApply(t, x, 0, stored(bs, nil, []uint64{1, 2, 3}, 1, 2, 3))
	mustApply(t, x, 1, stored(bs, nil, []uint64{11, 12, 13}, 9, 2, 3))
	// worker 2 holds A, and C after A B — but not B itself (B evicted).
	mustApply(t, x, 2, stored(bs, nil, []uint64{21, 22, 23}, 1, 2, 3))
	mustApply(t, x, 2, Event{Kind: BlockRemoved, EngineHashes: []uint64{22}})

	prompt := SequenceHashes(blocksOf(bs, 1, 2, 3, 4), bs, "")
	got := x.Overlaps(prompt, nil)
	want := []uint32{3, 0, 1}
	if !slices.Equal(got, want) {
		t.Fatalf("overlaps %v, want %v", got, want)
	}
	// A partial trailing block is not hashed, so it never counts.
	partial := SequenceHashes(append(blocksOf(bs, 1, 2), 7, 7), bs, "")
	if len(partial) != 2 {
		t.Fatalf("partial prompt gave %d hashes, want 2", len(partial))
	}
	// The same tokens under a LoRA adapter are different blocks.
	if got := x.Overlaps(SequenceHashes(blocksOf(bs, 1, 2, 3), bs, "sql"), nil); !slices.Equal(got, []uint32{0, 0, 0}) {
		t.Fatalf("LoRA prompt overlaps %v, want zeros", got)
	}
	// Re-storing B under worker 2 (child of A) makes C reachable again.
	mustApply(t, x, 2, stored(bs, ptr(21), []uint64{22}, 2))
	if got := x.Overlaps(prompt, nil); got[2] != 3 {
		t.Fatalf("after re-store, worker 2 overlap %d, want 3", got[2])
	}
}

func TestApplyErrors(t *testing.T) {
	const bs = 4
	x := NewIndex(bs)
	mustApply(t, x, 0, stored(bs, nil, []uint64{1}, 1))
	cases := []struct {
		name string
		ev   Event
		is   error
		msg  string
	}{
		{"unknown parent", stored(bs, ptr(99), []uint64{2}, 2), ErrUnknownParent, "parent engine hash 0x63"},
		{"block size", Event{Kind: BlockStored, EngineHashes: []uint64{2}, TokenIDs: blocksOf(8, 2), BlockSize: 8}, ErrBlockSizeMismatch, "block_size 8 differs from the KV block size 4"},
		{"token count", Event{Kind: BlockStored, EngineHashes: []uint64{2, 3}, TokenIDs: blocksOf(bs, 2), BlockSize: bs}, ErrInvalidEvent, "4 token ids for 2 blocks of 4 tokens (want 8)"},
		{"kind", Event{Kind: 42}, ErrInvalidEvent, "unknown event kind 42"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := x.Apply(0, tc.ev)
			if !errors.Is(err, tc.is) || !strings.Contains(err.Error(), tc.msg) || !strings.HasPrefix(err.Error(), "kv: ") {
				t.Fatalf("error %v; want %v containing %q", err, tc.is, tc.msg)
			}
			if x.Blocks(0) != 1 || x.Nodes() != 1 {
				t.Fatalf("failed event changed the index: %d blocks, %d nodes", x.Blocks(0), x.Nodes())
			}
		})
	}
	// A worker the index has never seen has no parents at all.
	if err := x.Apply(5, stored(bs, ptr(1), []uint64{2}, 2)); !errors.Is(err, ErrUnknownParent) {
		t.Fatalf("unknown worker with parent: %v", err)
	}
}

func TestEngineHashReuseAndDuplicates(t *testing.T) {
	const bs = 2
	x := NewIndex(bs)
	p := SequenceHashes(blocksOf(bs, 1, 2), bs, "")
	// Same content under two engine hashes (e.g. a cache salt the router cannot see).
	mustApply(t, x, 0, stored(bs, nil, []uint64{1}, 1))
	mustApply(t, x, 0, stored(bs, nil, []uint64{2}, 1))
	mustApply(t, x, 0, Event{Kind: BlockRemoved, EngineHashes: []uint64{1}})
	if got := x.Overlaps(p, nil)[0]; got != 1 {
		t.Fatalf("block still stored under hash 2, overlap %d want 1", got)
	}
	// Storing the same engine hash again is idempotent.
	mustApply(t, x, 0, stored(bs, nil, []uint64{2}, 1))
	if x.Blocks(0) != 1 {
		t.Fatalf("blocks %d want 1", x.Blocks(0))
	}
	// An engine hash reused for other content replaces the block.
	mustApply(t, x, 0, stored(bs, nil, []uint64{2}, 5))
	if got := x.Overlaps(p, nil)[0]; got != 0 {
		t.Fatalf("replaced block still counted: overlap %d", got)
	}
	if x.Nodes() != 1 {
		t.Fatalf("nodes %d want 1", x.Nodes())
	}
	// Other tiers are ignored.
	mustApply(t, x, 0, Event{Kind: BlockStored, EngineHashes: []uint64{9}, TokenIDs: blocksOf(bs, 1), BlockSize: bs, Medium: "CPU_PINNED"})
	mustApply(t, x, 0, Event{Kind: BlockRemoved, EngineHashes: []uint64{2}, Medium: "DISK"})
	if x.Blocks(0) != 1 {
		t.Fatalf("other tiers changed the GPU index: %d blocks", x.Blocks(0))
	}
}

func TestDumpOrphanReplays(t *testing.T) {
	const bs = 2
	x := NewIndex(bs)
	mustApply(t, x, 3, stored(bs, nil, []uint64{1, 2, 3, 4}, 1, 2, 3, 4))
	mustApply(t, x, 3, stored(bs, ptr(2), []uint64{5}, 7))
	// Evict the middle: C and D stay, but no longer follow a held block.
	mustApply(t, x, 3, Event{Kind: BlockRemoved, EngineHashes: []uint64{2, 3}})
	dump := x.Dump(3)
	y := NewIndex(bs)
	for _, ev := range dump {
		mustApply(t, y, 3, ev)
	}
	if y.Nodes() != x.Nodes() || y.Blocks(3) != x.Blocks(3) {
		t.Fatalf("replay: %d nodes %d blocks, original %d nodes %d blocks", y.Nodes(), y.Blocks(3), x.Nodes(), x.Blocks(3))
	}
	last := dump[len(dump)-1]
	if last.Kind != BlockRemoved || len(last.EngineHashes) != 2 {
		t.Fatalf("dump should end with the removal of 2 placeholders, got %+v", last)
	}
	// Re-storing B and C on both makes D reachable in both.
	for _, ix := range []*Index{x, y} {
		mustApply(t, ix, 3, stored(bs, ptr(1), []uint64{2, 3}, 2, 3))
		if got := ix.Overlaps(SequenceHashes(blocksOf(bs, 1, 2, 3, 4), bs, ""), nil)[3]; got != 4 {
			t.Fatalf("overlap %d want 4", got)
		}
	}
	// Dump is deterministic.
	if a, b := x.Dump(3), x.Dump(3); !eventsEqual(a, b) {
		t.Fatal("two dumps differ")
	}
}

func eventsEqual(a, b []Event) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		x, y := a[i], b[i]
		if x.Kind != y.Kind || x.HasParent != y.HasParent || x.ParentHash != y.ParentHash ||
			x.BlockSize != y.BlockSize || x.LoraName != y.LoraName || x.Medium != y.Medium ||
			!slices.Equal(x.EngineHashes, y.EngineHashes) || !slices.Equal(x.TokenIDs, y.TokenIDs) {
			return false
		}
	}
	return true
}

func TestRemoveWorkerFreesEverything(t *testing.T) {
	const bs = 2
	x := NewIndex(bs)
	for w := WorkerID(0); w < 70; w++ {
		mustApply(t, x, w, stored(bs, nil, []uint64{1, 2}, 1, int(w)))
	}
	if x.Nodes() != 71 {
		t.Fatalf("nodes %d want 71", x.Nodes())
	}
	got := x.Overlaps(SequenceHashes(blocksOf(bs, 1, 69), bs, ""), nil)
	if len(got) != 70 || got[69] != 2 || got[68] != 1 || got[0] != 1 {
		t.Fatalf("wide overlaps wrong: len %d, [0]=%d [68]=%d [69]=%d", len(got), got[0], got[68], got[69])
	}
	for w := WorkerID(0); w < 70; w++ {
		x.RemoveWorker(w)
	}
	if x.Nodes() != 0 || x.WorkerSlots() != 0 {
		t.Fatalf("after removing all workers: %d nodes, %d worker slots", x.Nodes(), x.WorkerSlots())
	}
	if err := checkIndexInvariants(x); err != nil {
		t.Fatal(err)
	}
}

func TestOverlapsDoesNotAllocate(t *testing.T) {
	const bs = 16
	x := NewIndex(bs)
	toks := make([]uint32, 512*bs)
	for i := range toks {
		toks[i] = uint32(i)
	}
	hashes := make([]uint64, 512)
	for i := range hashes {
		hashes[i] = uint64(i)
	}
	for w := WorkerID(0); w < 64; w++ {
		mustApply(t, x, w, Event{Kind: BlockStored, EngineHashes: hashes[:int(w)*8+1], TokenIDs: toks[:(int(w)*8+1)*bs], BlockSize: bs})
	}
	prompt := SequenceHashes(toks, bs, "")
	out := make([]uint32, 64)
	buf := make([]uint64, 0, 512)
	allocs := testing.AllocsPerRun(50, func() {
		buf = AppendSequenceHashes(buf[:0], toks, bs, "")
		out = x.Overlaps(prompt, out)
	})
	if allocs != 0 {
		t.Fatalf("hashing + Overlaps allocate %.1f times per call", allocs)
	}
	if out[63] != 63*8+1 {
		t.Fatalf("worker 63 overlap %d", out[63])
	}
}
