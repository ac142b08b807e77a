package worker

import (
	"cmp"
	"fmt"
	"math/bits"
	"slices"

	"github.com/turbine-llm/turbine/kv"
)

// BlockList is the worker's own record of the blocks its engine holds, kept from the KV
// events it relays, so that a Router grain (new, moved, or one that saw a gap) can be sent
// the full list. Keys are the engine's block hashes. Pure data structure.
//
// Per block it keeps its parent (or none), its token ids, block size, LoRA adapter,
// medium (the latest stored event's), for a first block (no parent) its cache salt, and
// the router's sequence hash of it (kv.HashScheme: chained onto its parent's, or its
// salt's), with which its children's are computed when events are relayed hashed
// (ApplyHashed).
// Storing a block already listed only updates its medium (and, on the GPU with other
// content, forgets its sequence hash); removing a block not listed is a no-op.
//
// Invariant: a block is listed at most once; Dump emits blocks in the order they were
// first stored (parents before children when the engine stored them so) and leaves out
// blocks whose parent is not emitted before them (no prefix lookup can reach them).
//
// Layout (no allocation per block once the list has reached its size): the blocks are
// fixed-size records in one slice, a removed one's record and token ids reused by the
// next block stored; the token ids live in one arena, each record owning a run of its
// block size; an open-addressing table (linear probing, deletion by backward shift, at
// most half full) maps an engine hash to its record; adapters, salts and media are
// interned strings. When three quarters of the records are free the list is compacted,
// so its memory follows the blocks held.
type BlockList struct {
	table   []tableSlot // len a power of two; pos 0 marks an empty slot
	shift   uint8       // 64 - log2(len(table))
	blocks  []listedBlock
	free    []uint32 // indices of dead records, reused last freed first
	live    int
	next    uint64   // insertion counter, orders Dump
	tokens  []uint32 // arena of every record's token ids
	strs    []string // interned strings; strs[0] is ""
	strIDs  map[string]uint32
	lastStr uint32   // strs index of the last string interned, a one-entry cache
	hashBuf []uint64 // eventHashes' buffer for Apply

	minCompact int // records below which the list is never compacted
}

// tableSlot maps an engine hash to its record: blocks[pos-1].
type tableSlot struct {
	hash uint64
	pos  uint32
}

type listedBlock struct {
	hash      uint64
	parent    uint64 // as the event gave it, even without hasParent
	order     uint64 // insertion counter at the block's store
	tokOff    int    // the record's token ids are tokens[tokOff : tokOff+tokLen]
	tokLen    int32  // the run's length: the block size of the block stored in it
	lora      uint32 // strs index
	salt      uint32 // strs index; a first block's (no parent) cache salt
	medium    uint32 // strs index
	seq       uint64 // the router's sequence hash, when hashed
	hasParent bool
	live      bool
	hashed    bool // seq is known: stored with no parent or onto a hashed block, and never again with other content
}

const (
	blockListMinTable   = 64   // table slots of an empty list
	blockListMinCompact = 1024 // records below which the list is never compacted
)

// NewBlockList returns an empty list.
func NewBlockList() *BlockList { return newBlockList(blockListMinCompact) }

// newBlockList returns an empty list that may compact once it has minCompact records
// (tests use small values to exercise compaction).
func newBlockList(minCompact int) *BlockList {
	l := &BlockList{minCompact: max(minCompact, 1)}
	l.Clear()
	return l
}

// Len is the number of blocks held.
func (l *BlockList) Len() int { return l.live }

// Holds reports whether the block with engine hash h is listed.
func (l *BlockList) Holds(h uint64) bool {
	if len(l.table) == 0 {
		return false
	}
	_, found := l.find(h)
	return found
}

// Apply records one event. Errors: a BlockStored whose token count is not
// len(block_hashes)·block_size (nothing is recorded).
func (l *BlockList) Apply(ev kv.Event) error {
	_, err := l.apply(ev, false)
	return err
}

// ApplyHashed is Apply that also returns, for a BlockStored whose parent is listed (or
// that has none), the router's sequence hash of each of its blocks (kv.HashScheme, as
// the router's index computes them from the event: chained onto the parent's, or onto
// the cache salt's for a first block), in a new slice; nil for other events, and for a
// stored event onto a block not listed (an orphan, whose hashes cannot be known).
func (l *BlockList) ApplyHashed(ev kv.Event) ([]uint64, error) { return l.apply(ev, true) }

// apply is Apply, returning the event's sequence hashes when hashes is true (ApplyHashed).
func (l *BlockList) apply(ev kv.Event, hashes bool) ([]uint64, error) {
	switch ev.Kind {
	case kv.BlockStored:
		bs := ev.BlockSize
		if bs <= 0 || len(ev.TokenIDs) != len(ev.EngineHashes)*bs {
			return nil, fmt.Errorf("worker: BlockStored with %d hashes, block size %d and %d tokens",
				len(ev.EngineHashes), ev.BlockSize, len(ev.TokenIDs))
		}
		var seqs []uint64
		if len(ev.EngineHashes) > 0 {
			seqs = l.eventHashes(&ev, hashes)
		}
		l.reserve(len(ev.EngineHashes))
		medium, lora := l.intern(ev.Medium), l.intern(ev.LoraName)
		hasParent, parent, salt := ev.HasParent, ev.ParentHash, uint32(0)
		if !hasParent {
			salt = l.intern(ev.CacheSalt)
		}
		// A block's seq is kept only while it is the hash of its recorded content chained
		// onto its recorded parent's, what a dump gives the router (consistent: so far in
		// the event, the event's content is the recorded one).
		consistent := seqs != nil
		for i, h := range ev.EngineHashes {
			slot, found := l.find(h)
			if found {
				b := &l.blocks[l.table[slot].pos-1]
				b.medium = medium
				same := consistent && b.hashed && b.seq == seqs[i]
				if !same && kv.OnGPU(ev.Medium) {
					// Stored again with other content (or at another block size): the
					// router's index now holds the new content, a dump would give it the
					// first (kept here), so the hash of neither is this block's for sure.
					// Its descendants go with their token ids, which the router chains
					// onto whatever it holds.
					b.hashed = false
				}
				consistent = same // the event's next blocks chain onto its content, not the record's
			} else {
				p := l.record(bs)
				b := &l.blocks[p]
				l.next++
				b.hash, b.parent, b.order, b.lora, b.salt, b.medium, b.hasParent, b.live =
					h, parent, l.next, lora, salt, medium, hasParent, true
				b.seq, b.hashed = 0, consistent
				if consistent {
					b.seq = seqs[i]
				}
				copy(l.tokens[b.tokOff:b.tokOff+bs], ev.TokenIDs[i*bs:(i+1)*bs])
				l.table[slot] = tableSlot{hash: h, pos: uint32(p + 1)}
				l.live++
			}
			hasParent, parent, salt = true, h, 0
		}
		if hashes {
			return seqs, nil
		}
	case kv.BlockRemoved:
		for _, h := range ev.EngineHashes {
			if slot, found := l.find(h); found {
				p := l.table[slot].pos - 1
				l.blocks[p].live = false
				l.free = append(l.free, p)
				l.live--
				l.deleteSlot(slot)
			}
		}
		if len(l.blocks) >= l.minCompact && 4*l.live < len(l.blocks) {
			l.compact()
		}
	case kv.AllBlocksCleared:
		l.Clear()
	}
	return nil, nil
}

// eventHashes returns the sequence hashes of stored event ev's blocks (kv.HashScheme),
// chained as the router's index chains them; in a new slice when fresh is true, else in
// the list's buffer, valid until the next call. nil when ev's parent is not listed, or
// is listed without its hash (stored onto a block that was not).
func (l *BlockList) eventHashes(ev *kv.Event, fresh bool) []uint64 {
	chained, prev := false, uint64(0)
	switch {
	case ev.HasParent:
		slot, found := l.find(ev.ParentHash)
		if !found {
			return nil
		}
		p := &l.blocks[l.table[slot].pos-1]
		if !p.hashed {
			return nil
		}
		chained, prev = true, p.seq
	case ev.CacheSalt != "":
		chained, prev = true, kv.SaltHash(ev.CacheSalt)
	}
	dst := l.hashBuf[:0]
	if fresh {
		dst = make([]uint64, 0, len(ev.EngineHashes))
	}
	out := kv.AppendChainedHashes(dst, ev.TokenIDs, ev.BlockSize, kv.LoraSeed(ev.LoraName), chained, prev)
	if !fresh {
		l.hashBuf = out
	}
	return out
}

// Clear forgets every block (engine restart).
func (l *BlockList) Clear() {
	*l = BlockList{table: make([]tableSlot, blockListMinTable), shift: uint8(65 - bits.Len(blockListMinTable)),
		strs: []string{""}, strIDs: map[string]uint32{"": 0}, minCompact: l.minCompact}
}

// record returns the index of a free record with a token run of bs ids: the last one
// freed, its run reused when it has that length, else a new one.
func (l *BlockList) record(bs int) int {
	if n := len(l.free); n > 0 {
		p := l.free[n-1]
		l.free = l.free[:n-1]
		if b := &l.blocks[p]; int(b.tokLen) != bs { // another block size: a new run
			b.tokOff, b.tokLen = len(l.tokens), int32(bs)
			l.tokens = append(l.tokens, make([]uint32, bs)...)
		}
		return int(p)
	}
	l.blocks = append(l.blocks, listedBlock{tokOff: len(l.tokens), tokLen: int32(bs)})
	l.tokens = append(l.tokens, make([]uint32, bs)...)
	return len(l.blocks) - 1
}

// Dump returns the list as BlockStored events, one block per event, in the order the
// blocks were first stored, leaving out orphans. The events' slices are the caller's.
func (l *BlockList) Dump() []kv.Event {
	order, ntok := l.dumpOrder()
	out := make([]kv.Event, 0, len(order))
	hashes := make([]uint64, len(order))
	toks := make([]uint32, 0, ntok)
	for _, d := range order {
		b := &l.blocks[d.pos]
		i, t := len(out), len(toks)
		hashes[i] = b.hash
		toks = append(toks, l.tokens[b.tokOff:b.tokOff+int(b.tokLen)]...)
		out = append(out, kv.Event{Kind: kv.BlockStored, EngineHashes: hashes[i : i+1 : i+1], HasParent: b.hasParent,
			ParentHash: b.parent, TokenIDs: toks[t:len(toks):len(toks)], BlockSize: int(b.tokLen),
			LoraName: l.strs[b.lora], CacheSalt: l.strs[b.salt], Medium: l.strs[b.medium]})
	}
	return out
}

// DumpHashed returns what Dump does with the router's sequence hash of every block
// computed here (kv.Event.SequenceHashes, under kv.HashScheme) in place of its token
// ids and cache salt, and the blocks grouped into runs: one event per run of blocks in
// Dump's order each chained onto the one before it, with one adapter, medium and block
// size. A Router grain that offers the scheme takes these (docs/reference.md §10, "The
// Router grain moves"): 16 bytes a block instead of its tokens, nothing to hash.
func (l *BlockList) DumpHashed() []kv.Event {
	order, _ := l.dumpOrder()
	var out []kv.Event
	engine, seqs := make([]uint64, len(order)), make([]uint64, len(order))
	seqOf := make([]uint64, len(l.blocks)) // by record; set for every block emitted
	seeds := map[uint32]uint64{}
	var buf [1]uint64
	start := 0 // of the run being built, in engine and seqs
	for i, d := range order {
		b := &l.blocks[d.pos]
		seed, ok := seeds[b.lora]
		if !ok {
			seed = kv.LoraSeed(l.strs[b.lora])
			seeds[b.lora] = seed
		}
		chained, prev := b.hasParent, uint64(0)
		switch {
		case b.hasParent:
			prev = seqOf[d.parent]
		case b.salt != 0:
			chained, prev = true, kv.SaltHash(l.strs[b.salt])
		}
		h := kv.AppendChainedHashes(buf[:0], l.tokens[b.tokOff:b.tokOff+int(b.tokLen)], int(b.tokLen), seed, chained, prev)[0]
		seqOf[d.pos], engine[i], seqs[i] = h, b.hash, h
		if i > start {
			last := &out[len(out)-1]
			if b.hasParent && b.parent == engine[i-1] && l.strs[b.lora] == last.LoraName &&
				l.strs[b.medium] == last.Medium && int(b.tokLen) == last.BlockSize {
				last.EngineHashes, last.SequenceHashes = engine[start:i+1:i+1], seqs[start:i+1:i+1]
				continue
			}
		}
		start = i
		out = append(out, kv.Event{Kind: kv.BlockStored, EngineHashes: engine[i : i+1 : i+1], SequenceHashes: seqs[i : i+1 : i+1],
			HasParent: b.hasParent, ParentHash: b.parent, BlockSize: int(b.tokLen), LoraName: l.strs[b.lora], Medium: l.strs[b.medium]})
	}
	return out
}

// dumped is a block Dump emits: its record, and its parent's record when it has one.
type dumped struct{ pos, parent uint32 }

// dumpOrder returns the blocks to dump, in the order they were first stored, without
// orphans (a block whose parent is not emitted before it), and their token ids' count.
func (l *BlockList) dumpOrder() ([]dumped, int) {
	order := make([]uint32, 0, l.live)
	for p := range l.blocks {
		if l.blocks[p].live {
			order = append(order, uint32(p))
		}
	}
	slices.SortFunc(order, func(a, b uint32) int { return cmp.Compare(l.blocks[a].order, l.blocks[b].order) })
	emitted := make([]bool, len(l.blocks))
	out := make([]dumped, 0, len(order))
	ntok := 0
	for _, p := range order {
		b := &l.blocks[p]
		d := dumped{pos: p}
		if b.hasParent {
			slot, found := l.find(b.parent)
			if !found || !emitted[l.table[slot].pos-1] {
				continue // orphan: its prefix is gone (or was stored after it)
			}
			d.parent = l.table[slot].pos - 1
		}
		emitted[p] = true
		out = append(out, d)
		ntok += int(b.tokLen)
	}
	return out, ntok
}

// home is h's preferred table slot (Fibonacci hashing: engine hashes may be small
// integers).
func (l *BlockList) home(h uint64) int { return int((h * 0x9E3779B97F4A7C15) >> l.shift) }

// find returns h's table slot and true, or the empty slot where h would go and false.
func (l *BlockList) find(h uint64) (int, bool) {
	mask := len(l.table) - 1
	for i := l.home(h); ; i = (i + 1) & mask {
		s := &l.table[i]
		if s.pos == 0 {
			return i, false
		}
		if s.hash == h {
			return i, true
		}
	}
}

// deleteSlot empties table slot i, shifting back the entries after it that probed past
// it, so that no lookup needs a tombstone.
func (l *BlockList) deleteSlot(i int) {
	mask := len(l.table) - 1
	for j := i; ; {
		l.table[i] = tableSlot{}
		for {
			j = (j + 1) & mask
			if l.table[j].pos == 0 {
				return
			}
			k := l.home(l.table[j].hash)
			// The entry at j may move to i unless its home lies cyclically in (i, j].
			if (i <= j && (k <= i || k > j)) || (i > j && k <= i && k > j) {
				break
			}
		}
		l.table[i] = l.table[j]
		i = j
	}
}

// reserve grows the table so that n more blocks keep it at most half full.
func (l *BlockList) reserve(n int) {
	if 2*(l.live+n) <= len(l.table) {
		return
	}
	size := len(l.table)
	for 2*(l.live+n) > size {
		size *= 2
	}
	l.rehash(size)
}

// rehash rebuilds the table with size slots (a power of two) from the live records.
func (l *BlockList) rehash(size int) {
	if size == len(l.table) {
		clear(l.table)
	} else {
		l.table = make([]tableSlot, size)
	}
	l.shift = uint8(65 - bits.Len(uint(size))) // 64 - log2(size)
	for p := range l.blocks {
		if b := &l.blocks[p]; b.live {
			slot, _ := l.find(b.hash)
			l.table[slot] = tableSlot{hash: b.hash, pos: uint32(p + 1)}
		}
	}
}

// compact moves the live records into new slices of their size (keeping their order
// counters), drops the free ones and their token runs, rebuilds the table at a size fit
// for them and, when strings have accumulated, the interned strings.
func (l *BlockList) compact() {
	blocks := make([]listedBlock, 0, l.live)
	tokens := make([]uint32, 0, len(l.tokens)*l.live/max(len(l.blocks), 1))
	for p := range l.blocks {
		b := l.blocks[p]
		if !b.live {
			continue
		}
		off := len(tokens)
		tokens = append(tokens, l.tokens[b.tokOff:b.tokOff+int(b.tokLen)]...)
		b.tokOff = off
		blocks = append(blocks, b)
	}
	l.blocks, l.tokens, l.free = blocks, tokens, nil
	if len(l.strs) > 64 && len(l.strs) > 2*l.live {
		l.reintern()
	}
	size := len(l.table)
	for size > blockListMinTable && 8*l.live < size {
		size /= 2
	}
	l.rehash(size)
}

// reintern rebuilds the interned strings from those the live records use.
func (l *BlockList) reintern() {
	old := l.strs
	l.strs, l.strIDs, l.lastStr = []string{""}, map[string]uint32{"": 0}, 0
	for p := range l.blocks {
		b := &l.blocks[p]
		b.lora, b.salt, b.medium = l.intern(old[b.lora]), l.intern(old[b.salt]), l.intern(old[b.medium])
	}
}

// intern returns s's index in strs, adding it when new.
func (l *BlockList) intern(s string) uint32 {
	if s == "" {
		return 0
	}
	if l.strs[l.lastStr] == s {
		return l.lastStr
	}
	id, ok := l.strIDs[s]
	if !ok {
		id = uint32(len(l.strs))
		l.strs = append(l.strs, s)
		l.strIDs[s] = id
	}
	l.lastStr = id
	return id
}
