package worker

import (
	"fmt"
	"math/rand/v2"
	"reflect"
	"sort"
	"testing"

	"github.com/turbine-llm/turbine/kv"
)

// refBlockList is the plain map-based block list the BlockList must agree with: one
// record per block, an insertion counter ordering the dump.
type refBlockList struct {
	blocks map[uint64]*refBlock
	next   uint64
}

type refBlock struct {
	order                      uint64
	hasParent                  bool
	parent                     uint64
	tokens                     []uint32
	blockSize                  int
	loraName, cacheSalt, media string
}

func newRefBlockList() *refBlockList { return &refBlockList{blocks: map[uint64]*refBlock{}} }

func (l *refBlockList) apply(ev kv.Event) error {
	switch ev.Kind {
	case kv.BlockStored:
		if ev.BlockSize <= 0 || len(ev.TokenIDs) != len(ev.EngineHashes)*ev.BlockSize {
			return fmt.Errorf("bad stored event")
		}
		hasParent, parent, salt := ev.HasParent, ev.ParentHash, ev.CacheSalt
		if hasParent {
			salt = ""
		}
		for i, h := range ev.EngineHashes {
			if old, ok := l.blocks[h]; ok {
				old.media = ev.Medium
			} else {
				l.next++
				l.blocks[h] = &refBlock{order: l.next, hasParent: hasParent, parent: parent,
					tokens:    append([]uint32(nil), ev.TokenIDs[i*ev.BlockSize:(i+1)*ev.BlockSize]...),
					blockSize: ev.BlockSize, loraName: ev.LoraName, cacheSalt: salt, media: ev.Medium}
			}
			hasParent, parent, salt = true, h, ""
		}
	case kv.BlockRemoved:
		for _, h := range ev.EngineHashes {
			delete(l.blocks, h)
		}
	case kv.AllBlocksCleared:
		l.blocks = map[uint64]*refBlock{}
	}
	return nil
}

func (l *refBlockList) dump() []kv.Event {
	hashes := make([]uint64, 0, len(l.blocks))
	for h := range l.blocks {
		hashes = append(hashes, h)
	}
	sort.Slice(hashes, func(i, j int) bool { return l.blocks[hashes[i]].order < l.blocks[hashes[j]].order })
	emitted := map[uint64]bool{}
	out := []kv.Event{}
	for _, h := range hashes {
		b := l.blocks[h]
		if b.hasParent && !emitted[b.parent] {
			continue
		}
		emitted[h] = true
		out = append(out, kv.Event{Kind: kv.BlockStored, EngineHashes: []uint64{h}, HasParent: b.hasParent,
			ParentHash: b.parent, TokenIDs: b.tokens, BlockSize: b.blockSize, LoraName: b.loraName,
			CacheSalt: b.cacheSalt, Medium: b.media})
	}
	return out
}

// blockListOps reads a sequence of block-list events from bytes (any bytes are a valid
// sequence): stored chains over a small hash space (so that blocks are stored again,
// parents are missing or stored later, and removals name unknown blocks), removals,
// the occasional clear, with adapters, salts and media from small sets. wide spreads
// the hashes over more values, so that the table grows and shrinks.
type blockListOps struct {
	data []byte
	wide bool
}

func (o *blockListOps) byte() (byte, bool) {
	if len(o.data) == 0 {
		return 0, false
	}
	b := o.data[0]
	o.data = o.data[1:]
	return b, true
}

func (o *blockListOps) hash() uint64 {
	b, _ := o.byte()
	if o.wide {
		c, _ := o.byte()
		return uint64(b)<<8 | uint64(c)&0x0f // 4,096 values
	}
	return uint64(b % 48)
}

// next returns the next event, whether to compare dumps after it, and false at the end.
func (o *blockListOps) next() (kv.Event, bool, bool) {
	op, ok := o.byte()
	if !ok {
		return kv.Event{}, false, false
	}
	pick := func(set ...string) string { b, _ := o.byte(); return set[int(b)%len(set)] }
	switch {
	case op < 160: // stored
		n, _ := o.byte()
		bs := 1 + int(op%3)
		ev := kv.Event{Kind: kv.BlockStored, BlockSize: bs, Medium: pick("", "GPU", "CPU"),
			LoraName: pick("", "", "lora-a"), CacheSalt: pick("", "", "salt-1", "salt-2")}
		if o.wide && ev.CacheSalt != "" { // many salts: the interned strings are rebuilt
			b, _ := o.byte()
			ev.CacheSalt = fmt.Sprint("salt-", b%160)
		}
		if op%2 == 0 {
			ev.HasParent, ev.ParentHash = true, o.hash()
		} else if op%5 == 0 {
			ev.ParentHash = o.hash() // a parent hash given without has_parent is kept as given
		}
		for range 1 + int(n%12) {
			h := o.hash()
			ev.EngineHashes = append(ev.EngineHashes, h)
			for j := range bs {
				ev.TokenIDs = append(ev.TokenIDs, uint32(h)*7+uint32(j)+uint32(op))
			}
		}
		if op%41 == 0 && len(ev.TokenIDs) > 0 { // malformed: one token short
			ev.TokenIDs = ev.TokenIDs[:len(ev.TokenIDs)-1]
		}
		return ev, op%7 == 0, true
	case op < 250: // removed
		n, _ := o.byte()
		ev := kv.Event{Kind: kv.BlockRemoved, Medium: pick("", "GPU")}
		for range 1 + int(n%16) {
			ev.EngineHashes = append(ev.EngineHashes, o.hash())
		}
		return ev, op%5 == 0, true
	case op < 254:
		return kv.Event{Kind: kv.AllBlocksCleared}, false, true
	default:
		return kv.Event{Kind: kv.BlockStored}, true, true // no blocks (and block size 0: refused)
	}
}

// checkBlockListAgainstRef applies ops to a BlockList compacting at minCompact and to
// the reference, comparing errors and lengths after every event and dumps after some
// and at the end.
func checkBlockListAgainstRef(t *testing.T, ops blockListOps, minCompact int) {
	t.Helper()
	l, ref := newBlockList(minCompact), newRefBlockList()
	for step := 0; ; step++ {
		ev, compare, ok := ops.next()
		if !ok {
			break
		}
		errGot, errWant := l.Apply(ev), ref.apply(ev)
		if (errGot == nil) != (errWant == nil) {
			t.Fatalf("step %d %+v: error %v, reference %v", step, ev, errGot, errWant)
		}
		if l.Len() != len(ref.blocks) {
			t.Fatalf("step %d %+v: Len %d, reference %d", step, ev, l.Len(), len(ref.blocks))
		}
		if compare {
			compareDumps(t, step, l.Dump(), ref.dump())
			compareHashedDump(t, step, l)
		}
	}
	compareDumps(t, -1, l.Dump(), ref.dump())
	compareHashedDump(t, -1, l)
}

// compareHashedDump checks that DumpHashed lists the blocks Dump does, in its order, in
// chained runs, and that a router's index (at each block size the ops use) built from it
// holds exactly the blocks, under the same sequence hashes, as one that hashed Dump's
// token ids itself.
func compareHashedDump(t *testing.T, step int, l *BlockList) {
	t.Helper()
	plain, hashed := l.Dump(), l.DumpHashed()
	var flat []uint64
	for i, ev := range hashed {
		if len(ev.EngineHashes) == 0 || len(ev.SequenceHashes) != len(ev.EngineHashes) || ev.TokenIDs != nil || ev.CacheSalt != "" {
			t.Fatalf("step %d: hashed run %d is %+v", step, i, ev)
		}
		flat = append(flat, ev.EngineHashes...)
	}
	if len(flat) != len(plain) {
		t.Fatalf("step %d: hashed dump has %d blocks, the dump %d", step, len(flat), len(plain))
	}
	for i, ev := range plain {
		if flat[i] != ev.EngineHashes[0] {
			t.Fatalf("step %d: hashed dump's block %d is %d, the dump's %d", step, i, flat[i], ev.EngineHashes[0])
		}
	}
	for bs := 1; bs <= 3; bs++ {
		fromTokens, fromHashes := kv.NewIndexWithoutDump(bs), kv.NewIndexWithoutDump(bs)
		for _, ev := range plain {
			_ = fromTokens.Apply(0, ev)
		}
		for _, ev := range hashed {
			_ = fromHashes.Apply(0, ev)
		}
		want, got := map[uint64]uint64{}, map[uint64]uint64{}
		fromTokens.WorkerBlocks(0, func(e, s uint64) { want[e] = s })
		fromHashes.WorkerBlocks(0, func(e, s uint64) { got[e] = s })
		if !reflect.DeepEqual(got, want) || fromHashes.Nodes() != fromTokens.Nodes() {
			t.Fatalf("step %d, block size %d: index from the hashed dump holds %v (%d nodes), from the dump %v (%d nodes)",
				step, bs, got, fromHashes.Nodes(), want, fromTokens.Nodes())
		}
	}
}

func compareDumps(t *testing.T, step int, got, want []kv.Event) {
	t.Helper()
	if len(got) == 0 && len(want) == 0 {
		return
	}
	if !reflect.DeepEqual(got, want) {
		for i := range min(len(got), len(want)) {
			if !reflect.DeepEqual(got[i], want[i]) {
				t.Fatalf("step %d: dump has %d events, reference %d; event %d is %+v, reference %+v",
					step, len(got), len(want), i, got[i], want[i])
			}
		}
		t.Fatalf("step %d: dump has %d events, reference %d", step, len(got), len(want))
	}
}

// TestBlockListMatchesReference: under random sequences of stored, removed and cleared
// events the BlockList keeps exactly what the map-based reference keeps (errors, Len,
// Dump), with compaction at every threshold from always to never.
func TestBlockListMatchesReference(t *testing.T) {
	for seed := uint64(1); seed <= 24; seed++ {
		for _, wide := range []bool{false, true} {
			for _, minCompact := range []int{1, 16, 1 << 30} {
				rng := rand.New(rand.NewPCG(seed, 21))
				data := make([]byte, 4000+rng.IntN(4000))
				for i := range data {
					data[i] = byte(rng.Uint32())
					if data[i] >= 250 && rng.IntN(8) != 0 { // clears are rare
						data[i] = byte(rng.IntN(250))
					}
				}
				t.Run(fmt.Sprintf("seed=%d/wide=%v/compact=%d", seed, wide, minCompact), func(t *testing.T) {
					checkBlockListAgainstRef(t, blockListOps{data: data, wide: wide}, minCompact)
				})
			}
		}
	}
}

// TestBlockListGrowsAndShrinks: tens of thousands of blocks stored then removed leave an
// empty list whose table and records shrank, and a dump equal to the reference's along
// the way.
func TestBlockListGrowsAndShrinks(t *testing.T) {
	l, ref := NewBlockList(), newRefBlockList()
	var parent uint64
	for c := uint64(0); c < 500; c++ {
		ev := kv.Event{Kind: kv.BlockStored, BlockSize: 2, HasParent: c%10 != 0, ParentHash: parent}
		for i := uint64(0); i < 100; i++ {
			h := c<<32 | i
			ev.EngineHashes = append(ev.EngineHashes, h)
			ev.TokenIDs = append(ev.TokenIDs, uint32(h), uint32(i))
		}
		parent = ev.EngineHashes[99]
		if err := l.Apply(ev); err != nil {
			t.Fatal(err)
		}
		_ = ref.apply(ev)
	}
	compareDumps(t, 0, l.Dump(), ref.dump())
	grown := len(l.table)
	for c := uint64(0); c < 500; c += 2 { // every other chain: the odd ones become orphans
		ev := kv.Event{Kind: kv.BlockRemoved}
		for i := uint64(0); i < 100; i++ {
			ev.EngineHashes = append(ev.EngineHashes, c<<32|i)
		}
		_, _ = l.Apply(ev), ref.apply(ev)
	}
	compareDumps(t, 1, l.Dump(), ref.dump())
	for c := uint64(1); c < 500; c += 2 {
		ev := kv.Event{Kind: kv.BlockRemoved}
		for i := uint64(0); i < 100; i++ {
			ev.EngineHashes = append(ev.EngineHashes, c<<32|i)
		}
		_, _ = l.Apply(ev), ref.apply(ev)
	}
	if l.Len() != 0 || len(l.Dump()) != 0 {
		t.Fatalf("Len %d, dump %d after removing everything", l.Len(), len(l.Dump()))
	}
	if len(l.table) >= grown || len(l.blocks) > blockListMinCompact || len(l.tokens) > 2*blockListMinCompact {
		t.Fatalf("table %d slots (grown to %d), %d records, %d token ids: not shrunk",
			len(l.table), grown, len(l.blocks), len(l.tokens))
	}
}

// TestBlockListDumpIsACopy: a dump's token ids stay as they were when the list reuses
// or compacts its arena afterwards.
func TestBlockListDumpIsACopy(t *testing.T) {
	l := newBlockList(1)
	if err := l.Apply(stored(nil, []uint64{1, 2, 3}, 2)); err != nil {
		t.Fatal(err)
	}
	d := l.Dump()
	_ = l.Apply(kv.Event{Kind: kv.BlockRemoved, EngineHashes: []uint64{1, 2}}) // compacts
	_ = l.Apply(stored(nil, []uint64{7, 8}, 2))
	l.Clear()
	_ = l.Apply(stored(nil, []uint64{9}, 2))
	if len(d) != 3 || d[0].TokenIDs[0] != 100 || d[1].TokenIDs[1] != 201 || d[2].TokenIDs[0] != 300 {
		t.Fatalf("dump changed under the list: %+v", d)
	}
}

// FuzzBlockList: any event sequence read from the input keeps the BlockList in
// agreement with the map-based reference.
func FuzzBlockList(f *testing.F) {
	f.Add([]byte{0, 5, 1, 1, 0, 3, 160, 3, 0, 1, 2, 7, 14, 2, 1, 1, 1, 1, 200, 1, 0, 0})
	f.Add([]byte{3, 11, 0, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 250, 2, 4, 11, 2, 2, 0, 0, 9})
	f.Add([]byte{41, 2, 0, 0, 0, 1, 2, 255, 1, 0, 1, 1, 1, 0, 0, 0, 5, 160, 0, 1, 14})
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) == 0 {
			return
		}
		wide, minCompact := data[0]&1 == 1, 1+int(data[0]>>1)%8
		checkBlockListAgainstRef(t, blockListOps{data: data[1:], wide: wide}, minCompact)
	})
}

// TestBlockListForgetsUnusedStrings: salts of removed blocks are dropped from the
// interned strings at compaction, and the blocks kept still dump their own salts,
// adapters and media.
func TestBlockListForgetsUnusedStrings(t *testing.T) {
	l := newBlockList(1)
	for i := uint64(0); i < 200; i++ {
		ev := stored(nil, []uint64{i}, 1)
		ev.CacheSalt, ev.LoraName, ev.Medium = fmt.Sprint("salt-", i), fmt.Sprint("lora-", i%3), "GPU"
		if err := l.Apply(ev); err != nil {
			t.Fatal(err)
		}
	}
	rm := kv.Event{Kind: kv.BlockRemoved}
	for i := uint64(0); i < 200; i++ {
		if i%50 != 7 {
			rm.EngineHashes = append(rm.EngineHashes, i)
		}
	}
	_ = l.Apply(rm)
	if len(l.strs) > 16 {
		t.Fatalf("%d interned strings kept for %d blocks", len(l.strs), l.Len())
	}
	d := l.Dump()
	if len(d) != 4 {
		t.Fatalf("dump has %d blocks, want 4", len(d))
	}
	for _, ev := range d {
		h := ev.EngineHashes[0]
		if ev.CacheSalt != fmt.Sprint("salt-", h) || ev.LoraName != fmt.Sprint("lora-", h%3) || ev.Medium != "GPU" {
			t.Fatalf("block %d dumped as %+v", h, ev)
		}
	}
}

// TestBlockListSteadyStateAllocatesNothing: once the list has held its size, storing
// new blocks in place of removed ones reuses their records and token runs.
func TestBlockListSteadyStateAllocatesNothing(t *testing.T) {
	l := NewBlockList()
	const chain = 64
	events := func(c uint64) (kv.Event, kv.Event) {
		st := kv.Event{Kind: kv.BlockStored, BlockSize: 16, Medium: "GPU"}
		rm := kv.Event{Kind: kv.BlockRemoved, Medium: "GPU"}
		for i := uint64(0); i < chain; i++ {
			st.EngineHashes = append(st.EngineHashes, c<<32|i)
			rm.EngineHashes = append(rm.EngineHashes, (c-8)<<32|i) // the chain stored 8 cycles before
			for j := range 16 {
				st.TokenIDs = append(st.TokenIDs, uint32(i)*16+uint32(j))
			}
		}
		return st, rm
	}
	const cycles = 64
	var st, rm [cycles]kv.Event
	for c := range st {
		st[c], rm[c] = events(uint64(c) + 8)
	}
	for c := range 8 { // fill: 8 chains held
		s, _ := events(uint64(c))
		_ = l.Apply(s)
	}
	cycle := func(c int) {
		_ = l.Apply(st[c])
		_ = l.Apply(rm[c])
	}
	cycle(0) // the list grows by one chain: stores come before removals
	c, records, arena := 1, len(l.blocks), cap(l.tokens)
	allocs := testing.AllocsPerRun(cycles-2, func() { cycle(c); c++ })
	if allocs != 0 || l.Len() != 8*chain || len(l.blocks) != records || cap(l.tokens) != arena {
		t.Fatalf("%.1f allocations per %d blocks stored and removed (Len %d); records %d → %d, arena %d → %d",
			allocs, chain, l.Len(), records, len(l.blocks), arena, cap(l.tokens))
	}
}
