package worker

import (
	"testing"

	"github.com/turbine-llm/turbine/kv"
)

// TestBlockListKeepsCacheSalt: a salted first block is dumped with its salt, its
// continuation without (it inherits it through its parent).
func TestBlockListKeepsCacheSalt(t *testing.T) {
	l := NewBlockList()
	if err := l.Apply(kv.Event{Kind: kv.BlockStored, EngineHashes: []uint64{1, 2}, TokenIDs: []uint32{1, 2, 3, 4},
		BlockSize: 2, CacheSalt: "tenant-a"}); err != nil {
		t.Fatal(err)
	}
	d := l.Dump()
	if len(d) != 2 || d[0].CacheSalt != "tenant-a" || d[0].HasParent || d[1].CacheSalt != "" || !d[1].HasParent {
		t.Fatalf("dump %+v", d)
	}
}
