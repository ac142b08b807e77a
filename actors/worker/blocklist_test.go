package worker

import (
	"testing"

	"github.com/turbine-llm/turbine/kv"
)

func stored(parent *uint64, hashes []uint64, bs int) kv.Event {
	ev := kv.Event{Kind: kv.BlockStored, EngineHashes: hashes, BlockSize: bs}
	if parent != nil {
		ev.HasParent, ev.ParentHash = true, *parent
	}
	for i := range hashes {
		for j := 0; j < bs; j++ {
			ev.TokenIDs = append(ev.TokenIDs, uint32(hashes[i]*100+uint64(j)))
		}
	}
	return ev
}

func TestBlockListDumpOrderAndOrphans(t *testing.T) {
	l := NewBlockList()
	p := uint64(2)
	for _, ev := range []kv.Event{
		stored(nil, []uint64{1, 2}, 2),
		stored(&p, []uint64{3}, 2),
		stored(nil, []uint64{10}, 2),
		{Kind: kv.BlockRemoved, EngineHashes: []uint64{2}}, // 3 becomes an orphan
	} {
		if err := l.Apply(ev); err != nil {
			t.Fatal(err)
		}
	}
	if l.Len() != 3 {
		t.Fatalf("len = %d, want 3", l.Len())
	}
	dump := l.Dump()
	var got []uint64
	for _, ev := range dump {
		got = append(got, ev.EngineHashes[0])
	}
	if len(got) != 2 || got[0] != 1 || got[1] != 10 {
		t.Fatalf("dump hashes = %v, want [1 10] (3 is an orphan)", got)
	}
	if dump[0].HasParent || len(dump[0].TokenIDs) != 2 || dump[0].TokenIDs[0] != 100 {
		t.Fatalf("first dumped block = %+v", dump[0])
	}
	// Replaying the dump into a fresh list gives the same dump.
	again := NewBlockList()
	for _, ev := range dump {
		if err := again.Apply(ev); err != nil {
			t.Fatal(err)
		}
	}
	if len(again.Dump()) != 2 {
		t.Fatalf("replayed dump has %d blocks, want 2", len(again.Dump()))
	}
	if err := l.Apply(kv.Event{Kind: kv.AllBlocksCleared}); err != nil || l.Len() != 0 {
		t.Fatalf("after clear len = %d err = %v", l.Len(), err)
	}
}

func TestBlockListRejectsBadStored(t *testing.T) {
	l := NewBlockList()
	err := l.Apply(kv.Event{Kind: kv.BlockStored, EngineHashes: []uint64{1}, BlockSize: 4, TokenIDs: []uint32{1}})
	if err == nil {
		t.Fatal("want an error for 1 token in a 4-token block")
	}
}
