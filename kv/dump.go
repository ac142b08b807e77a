package kv

import (
	"slices"
)

// Dump returns KV events that rebuild worker w's blocks exactly — the same blocks under
// the same engine hashes — when applied in order, as worker w, to an index in which w
// holds nothing: a snapshot that replays. It is how an index hands its state to a new
// replica or a moved Router grain, and how tests check it.
//
// Shape: BlockStored events in depth-first order (parents before children, runs of a
// chain merged into one event, siblings ordered by sequence hash, so the output is
// deterministic), then, only when w holds a block whose ancestor it no longer holds,
// one BlockRemoved of the placeholder engine hashes under which those missing ancestors
// were re-stored to carry the chain. Token slices share one fresh buffer. nil when w
// holds nothing, or when the index keeps no token ids (NewIndexWithoutDump).
func (x *Index) Dump(w WorkerID) []Event {
	wb := x.worker(w)
	if wb == nil || wb.blocks.len() == 0 || !x.dump {
		return nil
	}
	// primary engine hash per held slot (the smallest, for determinism); the others are
	// extra mappings of the same block, emitted after the tree.
	primary := make(map[uint32]uint64, wb.blocks.len())
	type extraBlock struct {
		slot uint32
		e    uint64
	}
	var extras []extraBlock
	wb.blocks.each(func(e uint64, s uint32) {
		if p, ok := primary[s]; ok {
			if e < p {
				primary[s] = e
				e = p
			}
			extras = append(extras, extraBlock{s, e})
			return
		}
		primary[s] = e
	})
	// Ancestors w no longer holds get placeholder engine hashes.
	var placeholders []uint64
	nextPlaceholder := ^uint64(0)
	used := func(e uint64) bool {
		_, ok := wb.blocks.get(e)
		return ok
	}
	held := make([]uint32, 0, len(primary))
	for s := range primary {
		held = append(held, s)
	}
	byHash := func(a, b uint32) int {
		ka, kb := x.t.keys[a], x.t.keys[b]
		switch {
		case ka < kb:
			return -1
		case ka > kb:
			return 1
		}
		return 0
	}
	slices.SortFunc(held, byHash) // placeholders are numbered in a deterministic order
	for _, s := range held {
		for p := x.t.parent[s]; p != noSlot; p = x.t.parent[p] {
			if _, ok := primary[p]; ok {
				break
			}
			for used(nextPlaceholder) {
				nextPlaceholder--
			}
			primary[p] = nextPlaceholder
			placeholders = append(placeholders, nextPlaceholder)
			nextPlaceholder--
		}
	}
	// Children lists and roots over the emitted nodes.
	children := make(map[uint32][]uint32, len(primary))
	var roots []uint32
	for s := range primary {
		if p := x.t.parent[s]; p != noSlot {
			children[p] = append(children[p], s)
		} else {
			roots = append(roots, s)
		}
	}
	slices.SortFunc(roots, byHash)
	for _, c := range children {
		slices.SortFunc(c, byHash)
	}
	bs := x.blockSize
	toks := make([]uint32, 0, (len(primary)+len(extras))*bs)
	var events []Event
	last := noSlot // last block of events[len(events)-1]
	emit := func(s uint32) {
		parent := x.t.parent[s]
		start := len(toks)
		toks = append(toks, x.slotTokens(s)...)
		if n := len(events); n > 0 && parent != noSlot && parent == last && x.loras[x.loraOf[s]] == events[n-1].LoraName {
			ev := &events[n-1]
			ev.EngineHashes = append(ev.EngineHashes, primary[s])
			ev.TokenIDs = toks[len(toks)-len(ev.EngineHashes)*bs:]
			last = s
			return
		}
		ev := Event{
			Kind:         BlockStored,
			EngineHashes: []uint64{primary[s]},
			TokenIDs:     toks[start:len(toks):len(toks)],
			BlockSize:    bs,
			LoraName:     x.loras[x.loraOf[s]],
		}
		if parent != noSlot {
			ev.HasParent, ev.ParentHash = true, primary[parent]
		} else {
			ev.CacheSalt = x.salts[s]
		}
		events = append(events, ev)
		last = s
	}
	stack := make([]uint32, 0, 64)
	for i := len(roots) - 1; i >= 0; i-- {
		stack = append(stack, roots[i])
	}
	for len(stack) > 0 {
		s := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		emit(s)
		c := children[s]
		for i := len(c) - 1; i >= 0; i-- {
			stack = append(stack, c[i])
		}
	}
	// Token slices of merged events must not be extended by later appends into the
	// shared buffer: cap each at its length.
	for i := range events {
		t := events[i].TokenIDs
		events[i].TokenIDs = t[:len(t):len(t)]
	}
	slices.SortFunc(extras, func(a, b extraBlock) int {
		if a.e < b.e {
			return -1
		}
		if a.e > b.e {
			return 1
		}
		return 0
	})
	for _, xb := range extras {
		start := len(toks)
		toks = append(toks, x.slotTokens(xb.slot)...)
		ev := Event{
			Kind:         BlockStored,
			EngineHashes: []uint64{xb.e},
			TokenIDs:     toks[start:len(toks):len(toks)],
			BlockSize:    bs,
			LoraName:     x.loras[x.loraOf[xb.slot]],
		}
		if p := x.t.parent[xb.slot]; p != noSlot {
			ev.HasParent, ev.ParentHash = true, primary[p]
		} else {
			ev.CacheSalt = x.salts[xb.slot]
		}
		events = append(events, ev)
	}
	if len(placeholders) > 0 {
		slices.Sort(placeholders)
		events = append(events, Event{Kind: BlockRemoved, EngineHashes: placeholders})
	}
	return events
}
