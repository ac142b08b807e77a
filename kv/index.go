package kv

import (
	"fmt"
)

// WorkerID is a small dense integer naming a worker inside one Index, ActiveSequences or
// Router. The Router core assigns them (lowest free id first) and maps them to the
// workers' string ids; they are reused after a worker is removed.
type WorkerID uint32

// MaxWorkerID bounds worker ids (and so the width of the per-block worker bitsets).
const MaxWorkerID = 1<<16 - 1

// Index is the router's index of which workers hold which KV blocks, keyed by the
// router's own chained sequence hashes (docs/reference.md §2), fed by the engines' KV events.
//
// Layout: a tree of blocks in dense node slots (bitTable: sequence hash, parent, first
// child, worker bitset with one 64-bit word per 64 workers; a hash map only for
// roots and branch points); per slot a child count and a holder count; per worker a
// map from the engine's block hash to the slot. For Dump only, unless the index was
// made without them (NewIndexWithoutDump), per slot the block's token ids and LoRA
// adapter, and each salted first block's cache salt: at block size 16 the token ids
// alone are 64 bytes per block, more than all the rest. Lookups walk
// the prompt's sequence hashes down the tree and AND the bitsets, so a routing lookup
// follows one link per prompt block (a map probe only at branch points), allocates
// nothing, and stops once no worker still matches.
//
// Ownership and invariants (the Index is the sole owner of all of it; it is not safe
// for concurrent use — the Router grain serialises calls):
//   - Authoritative: each worker's engine-hash→slot map, exactly as its events built it.
//     Everything else is derived from it.
//   - Slot s's bit for worker w is set iff at least one of w's engine hashes maps to s;
//     extra[s] counts the engine hashes of w beyond the first that map to s (engines
//     whose hashes cover more than the tokens, e.g. a cache salt, can store the same
//     token prefix twice).
//   - holders(s) is the number of set bits of s. A node stays allocated while
//     holders > 0 or it has child nodes (children > 0): a block evicted before its
//     descendants keeps its tokens so that Dump can still replay the descendants. Such
//     a node has no bits, so lookups never count it.
//   - A node's parent slot is the node of the previous block of the same chain; it is
//     alive at least as long as the node (children counts it).
//   - Only blocks on the GPU tier (Medium "" or "GPU") are indexed; events about other
//     tiers are accepted and ignored.
type Index struct {
	blockSize int
	t         bitTable
	meta      []nodeMeta // per slot
	// dump: the index keeps what Dump needs (tokens, loraOf, salts).
	dump bool
	// tokens holds each slot's blockSize token ids in pages of tokenPageSlots slots, so
	// that growing the index never copies the tokens already stored.
	tokens  [][]uint32
	loraOf  []uint32 // per slot, an index into loras
	workers []*workerBlocks
	loras   []string
	loraIDs map[string]uint32
	// salts holds the cache salt of each live first block of a salted prompt (Dump
	// writes it back into its event); entries go with their slot.
	salts map[uint32]string
	// unknownRemovals counts BlockRemoved hashes the worker was not known to hold.
	unknownRemovals uint64
	// hashBuf is applyStored's scratch: an event's sequence hashes.
	hashBuf []uint64
}

// tokenPageSlots is the number of slots per page of Index.tokens.
const tokenPageSlots = 1024

// slotTokens returns the token ids stored for slot s (blockSize of them).
func (x *Index) slotTokens(s uint32) []uint32 {
	off := int(s%tokenPageSlots) * x.blockSize
	return x.tokens[s/tokenPageSlots][off : off+x.blockSize]
}

type nodeMeta struct {
	children uint32 // live nodes whose parent (bitTable.parent) is this one
	holders  uint32 // workers whose bit is set
}

// workerBlocks is one worker's view: authoritative engine hash → slot.
type workerBlocks struct {
	blocks u64Map
	extra  map[uint32]uint32
}

// NewIndex returns an empty index for KV blocks of blockSize tokens. It panics if
// blockSize is not positive (validate configuration before).
func NewIndex(blockSize int) *Index {
	x := NewIndexWithoutDump(blockSize)
	x.dump = true
	return x
}

// NewIndexWithoutDump returns an empty index that keeps no token ids, adapters or salts:
// Dump returns nil. It routes exactly as NewIndex's, in about half the memory at block
// size 16 (BENCHMARKS.md). A Router grain does not need Dump: a moved grain rebuilds
// its index from the workers' own block lists. It panics if blockSize is not positive.
func NewIndexWithoutDump(blockSize int) *Index {
	if blockSize <= 0 {
		panic(fmt.Sprintf("kv: NewIndex: block size %d must be positive", blockSize))
	}
	return &Index{
		blockSize: blockSize,
		t:         newBitTable(),
		loras:     []string{""},
		loraIDs:   map[string]uint32{"": 0},
		salts:     map[uint32]string{},
	}
}

// BlockSize is the index's KV block size in tokens.
func (x *Index) BlockSize() int { return x.blockSize }

// Nodes is the number of distinct blocks (sequence hashes) allocated, including blocks
// kept only because a descendant is still held.
func (x *Index) Nodes() int { return x.t.len() }

// Blocks is the number of blocks (engine hashes) indexed for worker w.
func (x *Index) Blocks(w WorkerID) int {
	if wb := x.worker(w); wb != nil {
		return wb.blocks.len()
	}
	return 0
}

// WorkerBlocks calls fn with the engine hash and the router's sequence hash of every
// block indexed for worker w, in no particular order: what a consistency check compares
// with the worker's own list.
func (x *Index) WorkerBlocks(w WorkerID, fn func(engine, sequence uint64)) {
	if wb := x.worker(w); wb != nil {
		wb.blocks.each(func(e uint64, s uint32) { fn(e, x.t.keys[s]) })
	}
}

// UnknownRemovals counts BlockRemoved hashes that named blocks the worker was not known
// to hold (harmless; a sign of missed events when it grows).
func (x *Index) UnknownRemovals() uint64 { return x.unknownRemovals }

// WorkerSlots is one more than the highest worker id the index has seen: the length
// Overlaps fills.
func (x *Index) WorkerSlots() int { return len(x.workers) }

func (x *Index) worker(w WorkerID) *workerBlocks {
	if int(w) < len(x.workers) {
		return x.workers[w]
	}
	return nil
}

func (x *Index) ensureWorker(w WorkerID) *workerBlocks {
	for int(w) >= len(x.workers) {
		x.workers = append(x.workers, nil)
	}
	wb := x.workers[w]
	if wb == nil {
		wb = &workerBlocks{}
		x.workers[w] = wb
		x.t.ensureWorker(w)
	}
	return wb
}

// OnGPU reports whether a KV event's medium is the GPU tier ("" or "GPU"), the only one
// the index keeps.
func OnGPU(medium string) bool { return medium == "" || medium == "GPU" }

// Apply applies one KV event from worker w.
//
// BlockStored: the router computes the blocks' sequence hashes from TokenIDs (chained
// onto the parent's sequence hash when HasParent) and records that w holds them, under
// the engine's hashes. Errors (nothing applied): ErrInvalidEvent when BlockSize differs
// from the index's, len(TokenIDs) != len(EngineHashes)*BlockSize, or w exceeds
// MaxWorkerID; ErrUnknownParent when HasParent and w holds no block with ParentHash — the
// index has missed events for w, and the caller should fetch a full dump. Storing an
// engine hash w already holds is a no-op when the content matches and replaces the old
// block otherwise.
//
// BlockRemoved: forgets w's blocks with these engine hashes; unknown hashes are ignored
// (counted by UnknownRemovals). AllBlocksCleared: ClearWorker(w).
//
// Events whose Medium is not the GPU tier ("" or "GPU") are ignored.
func (x *Index) Apply(w WorkerID, ev Event) error {
	if w > MaxWorkerID {
		return fmt.Errorf("%w: worker id %d above %d", ErrInvalidEvent, w, MaxWorkerID)
	}
	switch ev.Kind {
	case BlockStored:
		return x.applyStored(w, &ev)
	case BlockRemoved:
		if !OnGPU(ev.Medium) {
			return nil
		}
		wb := x.worker(w)
		for _, e := range ev.EngineHashes {
			if wb == nil {
				x.unknownRemovals++
				continue
			}
			s, ok := wb.blocks.get(e)
			if !ok {
				x.unknownRemovals++
				continue
			}
			wb.blocks.del(e)
			x.unref(wb, w, s)
		}
		return nil
	case AllBlocksCleared:
		x.ClearWorker(w)
		return nil
	default:
		return fmt.Errorf("%w: unknown event kind %d", ErrInvalidEvent, uint8(ev.Kind))
	}
}

// ValidateStored checks a BlockStored event's shape against a KV block size (tokens per
// block), without applying it.
func ValidateStored(ev *Event, blockSize int) error {
	if ev.BlockSize != blockSize {
		return blockSizeError{got: ev.BlockSize, want: blockSize}
	}
	if ev.SequenceHashes != nil {
		if len(ev.SequenceHashes) != len(ev.EngineHashes) || len(ev.TokenIDs) != 0 || ev.CacheSalt != "" {
			return fmt.Errorf("%w: hashed BlockStored has %d sequence hashes for %d blocks, %d token ids and cache salt %q (want as many hashes as blocks, no tokens, no salt)",
				ErrInvalidEvent, len(ev.SequenceHashes), len(ev.EngineHashes), len(ev.TokenIDs), ev.CacheSalt)
		}
		return nil
	}
	if len(ev.TokenIDs) != len(ev.EngineHashes)*blockSize {
		return fmt.Errorf("%w: BlockStored has %d token ids for %d blocks of %d tokens (want %d)",
			ErrInvalidEvent, len(ev.TokenIDs), len(ev.EngineHashes), blockSize, len(ev.EngineHashes)*blockSize)
	}
	return nil
}

// blockSizeError is both ErrInvalidEvent and ErrBlockSizeMismatch.
type blockSizeError struct{ got, want int }

func (e blockSizeError) Error() string {
	return fmt.Sprintf("kv: invalid event: BlockStored block_size %d differs from the KV block size %d", e.got, e.want)
}

func (e blockSizeError) Is(target error) bool {
	return target == ErrInvalidEvent || target == ErrBlockSizeMismatch
}

func (x *Index) applyStored(w WorkerID, ev *Event) error {
	if err := ValidateStored(ev, x.blockSize); err != nil {
		return err
	}
	if !OnGPU(ev.Medium) || len(ev.EngineHashes) == 0 {
		return nil
	}
	prev := noSlot
	var prevHash uint64
	chained := false // the next block chains onto prevHash
	if ev.HasParent {
		wb := x.worker(w)
		s, ok := uint32(0), false
		if wb != nil {
			s, ok = wb.blocks.get(ev.ParentHash)
		}
		if !ok {
			return fmt.Errorf("%w: worker %d, BlockStored parent engine hash %#x", ErrUnknownParent, w, ev.ParentHash)
		}
		prev, prevHash, chained = s, x.t.keys[s], true
	} else if ev.CacheSalt != "" {
		prevHash, chained = SaltHash(ev.CacheSalt), true // the first block of a salted prompt
	}
	wb := x.ensureWorker(w)
	lora := x.loraID(ev.LoraName)
	bs := x.blockSize
	hashes := ev.SequenceHashes
	if hashes == nil {
		x.hashBuf = AppendChainedHashes(x.hashBuf[:0], ev.TokenIDs, bs, LoraSeed(ev.LoraName), chained, prevHash)
		hashes = x.hashBuf
	} else if x.dump {
		return fmt.Errorf("%w: a hashed BlockStored carries no token ids, which this index keeps", ErrInvalidEvent)
	}
	for i, e := range ev.EngineHashes {
		var toks []uint32
		if ev.TokenIDs != nil {
			toks = ev.TokenIDs[i*bs : (i+1)*bs]
		}
		h := hashes[i]
		s := x.node(h, prev, lora, toks)
		if prev == noSlot && ev.CacheSalt != "" && x.dump {
			x.salts[s] = ev.CacheSalt // for Dump; the hash already holds it
		}
		x.mapBlock(wb, w, e, s)
		prev = s
	}
	return nil
}

// node returns the slot of sequence hash h, creating it as a child of parent.
func (x *Index) node(h uint64, parent, lora uint32, toks []uint32) uint32 {
	s, created := x.t.insertAfter(parent, h)
	if !created {
		return s
	}
	if int(s) >= len(x.meta) {
		x.meta = append(x.meta, nodeMeta{})
	}
	x.meta[s] = nodeMeta{}
	if x.dump {
		if int(s/tokenPageSlots) >= len(x.tokens) {
			x.tokens = append(x.tokens, make([]uint32, tokenPageSlots*x.blockSize))
		}
		copy(x.slotTokens(s), toks)
		if int(s) >= len(x.loraOf) {
			x.loraOf = append(x.loraOf, 0)
		}
		x.loraOf[s] = lora
	}
	if parent != noSlot {
		x.meta[parent].children++
	}
	return s
}

// mapBlock records that w's engine hash e is block s.
func (x *Index) mapBlock(wb *workerBlocks, w WorkerID, e uint64, s uint32) {
	if old, found := wb.blocks.getOrPut(e, s); found {
		if old == s {
			return
		}
		wb.blocks.put(e, s)
		x.ref(wb, w, s)
		x.unref(wb, w, old)
		return
	}
	x.ref(wb, w, s)
}

func (x *Index) ref(wb *workerBlocks, w WorkerID, s uint32) {
	if x.t.has(s, w) {
		if wb.extra == nil {
			wb.extra = make(map[uint32]uint32)
		}
		wb.extra[s]++
		return
	}
	x.t.set(s, w)
	x.meta[s].holders++
}

func (x *Index) unref(wb *workerBlocks, w WorkerID, s uint32) {
	if c := wb.extra[s]; c > 0 {
		if c == 1 {
			delete(wb.extra, s)
		} else {
			wb.extra[s] = c - 1
		}
		return
	}
	x.t.clear(s, w)
	x.meta[s].holders--
	x.maybeFree(s)
}

// maybeFree releases s, and then its ancestors, while they are neither held nor needed
// by a child.
func (x *Index) maybeFree(s uint32) {
	for s != noSlot {
		m := &x.meta[s]
		if m.holders != 0 || m.children != 0 {
			return
		}
		p := x.t.parent[s]
		*m = nodeMeta{}
		delete(x.salts, s)
		x.t.release(s)
		if p != noSlot {
			x.meta[p].children--
		}
		s = p
	}
}

func (x *Index) loraID(name string) uint32 {
	if id, ok := x.loraIDs[name]; ok {
		return id
	}
	id := uint32(len(x.loras))
	x.loras = append(x.loras, name)
	x.loraIDs[name] = id
	return id
}

// ClearWorker forgets every block of worker w (AllBlocksCleared, engine restart, start
// of a full dump). w stays known to the index.
func (x *Index) ClearWorker(w WorkerID) {
	wb := x.worker(w)
	if wb == nil {
		return
	}
	wb.blocks.each(func(_ uint64, s uint32) { x.unref(wb, w, s) })
	wb.blocks.reset()
	wb.extra = nil
}

// RemoveWorker forgets worker w and all its blocks; its id may then be reused.
func (x *Index) RemoveWorker(w WorkerID) {
	if x.worker(w) == nil {
		return
	}
	x.ClearWorker(w)
	x.workers[w] = nil
	for len(x.workers) > 0 && x.workers[len(x.workers)-1] == nil {
		x.workers = x.workers[:len(x.workers)-1]
	}
}

// Overlaps computes, for every worker id w < WorkerSlots(), the number of leading blocks
// of a prompt (given by its sequence hashes, see SequenceHashes) that w holds, and
// returns them in out[:WorkerSlots()] (out is reused when its capacity suffices).
// A worker's run ends at its first missing block: a block held after a gap is not a
// prefix hit. It does not allocate when cap(out) >= WorkerSlots().
func (x *Index) Overlaps(seqHashes []uint64, out []uint32) []uint32 {
	n := len(x.workers)
	if cap(out) < n {
		out = make([]uint32, n)
	}
	out = out[:n]
	x.t.leading(seqHashes, out)
	return out
}

// newRouterIndex is the index of a Router with configuration cfg (Config.NoDump).
func newRouterIndex(cfg Config) *Index {
	if cfg.NoDump {
		return NewIndexWithoutDump(cfg.BlockSize)
	}
	return NewIndex(cfg.BlockSize)
}
