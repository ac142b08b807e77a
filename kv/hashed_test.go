package kv

import (
	"errors"
	"testing"
)

// FuzzIndexHashedRuns: hashed BlockStored events (a peer's block-list dump, whose
// sequence hashes the index trusts) drawn from a tiny hash space, so that they collide,
// name their own blocks as parents and contradict earlier runs, mixed with plain events
// and removals, never panic, return only documented errors, keep Blocks equal to what
// WorkerBlocks lists, and leave no node behind once every worker is cleared.
func FuzzIndexHashedRuns(f *testing.F) {
	f.Add([]byte{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12})
	f.Add([]byte("hashed runs that collide and chain onto themselves"))
	f.Fuzz(func(t *testing.T, data []byte) {
		const bs = 2
		c := &byteChooser{b: data}
		x := NewIndexWithoutDump(bs)
		for !c.done() {
			w := WorkerID(c.IntN(3))
			var ev Event
			switch op := c.IntN(8); {
			case op < 5:
				n := 1 + c.IntN(4)
				ev = Event{Kind: BlockStored, BlockSize: bs, HasParent: c.IntN(2) == 0, ParentHash: uint64(c.IntN(8))}
				for range n {
					ev.EngineHashes = append(ev.EngineHashes, uint64(c.IntN(8)))
					if op < 4 {
						ev.SequenceHashes = append(ev.SequenceHashes, uint64(c.IntN(6)))
					} else {
						v := uint32(c.IntN(4))
						ev.TokenIDs = append(ev.TokenIDs, v, v+1)
					}
				}
				if op == 0 {
					ev.SequenceHashes = ev.SequenceHashes[1:] // malformed: a hash short
				}
				if c.IntN(4) == 0 {
					ev.Medium = "CPU_PINNED"
				}
			case op < 7:
				ev = Event{Kind: BlockRemoved, EngineHashes: []uint64{uint64(c.IntN(8)), uint64(c.IntN(8))}}
			default:
				ev = Event{Kind: AllBlocksCleared}
			}
			if err := x.Apply(w, ev); err != nil && !errors.Is(err, ErrInvalidEvent) && !errors.Is(err, ErrUnknownParent) {
				t.Fatalf("%+v: undocumented error %v", ev, err)
			}
			listed := 0
			x.WorkerBlocks(w, func(uint64, uint64) { listed++ })
			if listed != x.Blocks(w) {
				t.Fatalf("worker %d: Blocks %d, WorkerBlocks lists %d", w, x.Blocks(w), listed)
			}
		}
		for w := WorkerID(0); w < 3; w++ {
			x.ClearWorker(w)
		}
		if x.Nodes() != 0 {
			t.Fatalf("%d nodes left with every worker cleared", x.Nodes())
		}
	})
}
