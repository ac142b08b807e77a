package worker

import (
	"fmt"
	"sort"

	"github.com/turbine-llm/turbine/kv"
)

// BlockList is the worker's own record of the blocks its engine holds, kept from the KV
// events it relays, so that a Router grain (new, moved, or one that saw a gap) can be sent
// the full list. Keys are the engine's block hashes. Pure data structure.
//
// Invariant: a block is listed at most once; Dump emits parents before children and leaves
// out blocks whose parent is no longer held (no prefix lookup can reach them).
type BlockList struct {
	blocks map[uint64]*listedBlock
	next   uint64 // insertion counter, orders Dump
}

type listedBlock struct {
	order     uint64
	hasParent bool
	parent    uint64
	tokens    []uint32
	blockSize int
	loraName  string
	cacheSalt string // a first block's (no parent) cache salt
	medium    string
}

// NewBlockList returns an empty list.
func NewBlockList() *BlockList { return &BlockList{blocks: map[uint64]*listedBlock{}} }

// Len is the number of blocks held.
func (l *BlockList) Len() int { return len(l.blocks) }

// Apply records one event. Errors: a BlockStored whose token count is not
// len(block_hashes)·block_size.
func (l *BlockList) Apply(ev kv.Event) error {
	switch ev.Kind {
	case kv.BlockStored:
		if ev.BlockSize <= 0 || len(ev.TokenIDs) != len(ev.EngineHashes)*ev.BlockSize {
			return fmt.Errorf("worker: BlockStored with %d hashes, block size %d and %d tokens",
				len(ev.EngineHashes), ev.BlockSize, len(ev.TokenIDs))
		}
		hasParent, parent, salt := ev.HasParent, ev.ParentHash, ev.CacheSalt
		if hasParent {
			salt = ""
		}
		for i, h := range ev.EngineHashes {
			tokens := ev.TokenIDs[i*ev.BlockSize : (i+1)*ev.BlockSize : (i+1)*ev.BlockSize]
			if old, ok := l.blocks[h]; ok {
				old.medium = ev.Medium
			} else {
				l.next++
				l.blocks[h] = &listedBlock{order: l.next, hasParent: hasParent, parent: parent,
					tokens: tokens, blockSize: ev.BlockSize, loraName: ev.LoraName, cacheSalt: salt, medium: ev.Medium}
			}
			hasParent, parent, salt = true, h, ""
		}
	case kv.BlockRemoved:
		for _, h := range ev.EngineHashes {
			delete(l.blocks, h)
		}
	case kv.AllBlocksCleared:
		l.Clear()
	}
	return nil
}

// Clear forgets every block (engine restart).
func (l *BlockList) Clear() { l.blocks = map[uint64]*listedBlock{} }

// Dump returns the list as BlockStored events, one block per event, parents first.
func (l *BlockList) Dump() []kv.Event {
	hashes := make([]uint64, 0, len(l.blocks))
	for h := range l.blocks {
		hashes = append(hashes, h)
	}
	sort.Slice(hashes, func(i, j int) bool { return l.blocks[hashes[i]].order < l.blocks[hashes[j]].order })
	emitted := make(map[uint64]bool, len(hashes))
	out := make([]kv.Event, 0, len(hashes))
	for _, h := range hashes {
		b := l.blocks[h]
		if b.hasParent && !emitted[b.parent] {
			continue // orphan: its prefix is gone
		}
		emitted[h] = true
		out = append(out, kv.Event{Kind: kv.BlockStored, EngineHashes: []uint64{h}, HasParent: b.hasParent,
			ParentHash: b.parent, TokenIDs: b.tokens, BlockSize: b.blockSize, LoraName: b.loraName, CacheSalt: b.cacheSalt,
			Medium: b.medium})
	}
	return out
}
