package kv

import "math/bits"

// noSlot marks "no slot" in slot-valued fields.
const noSlot = ^uint32(0)

// Slot states.
const (
	slotFree   uint8 = iota // on the free list
	slotLinked              // reachable only as next[parent]
	slotHashed              // reachable through the hash map
)

// bitTable is a tree of blocks keyed by chained sequence hashes — a radix tree whose
// edges are KV blocks — where each node (slot) carries a bitset of worker ids
// (WorkerID < 64*words). It is the shared core of Index (which workers hold a block)
// and of the predicted placements (approx.go). (ActiveSequences keeps its own trie,
// whose nodes are runs of blocks: a request's blocks are recorded together.)
//
// A sequence hash identifies its whole prefix, so a node is found either from its
// parent or, for any node, by its hash alone. The hash map only holds the nodes that
// cannot be reached cheaply from their parent: the first blocks of sequences (roots)
// and children other than their parent's first child (branches). A first child is
// reached through next[parent]. Chains are mostly linear, so walking or extending a
// cached prompt follows next links through (mostly consecutive) slots and touches the
// map only at roots and branch points; creating a new tail after a branch costs one
// map insert, not one per block.
//
// Ownership and invariants:
//   - keys[s], parent[s], state[s] describe live slot s; parent[s] is noSlot for roots.
//   - state[s] == slotHashed iff the map holds keys[s] → s; every root is hashed.
//   - state[s] == slotLinked iff next[parent[s]] == s (a parent's first child); a
//     parent has at most one linked child, and next[p] is noSlot or linked.
//   - branches[p] counts p's hashed children, so a lookup below p consults the map
//     only when p has any.
//   - A slot is released only when it has no live children (Index: its child count is
//     zero; predicted placements: a worker holding a descendant holds it too).
//   - bits[s*words : (s+1)*words] is slot s's bitset; a released slot's bitset is zero.
//   - Slot ids are reused (free list); callers keep parallel per-slot arrays sized with
//     capSlots and must not use a slot id after release.
//   - words only grows (a worker id above the current width relays the bitsets out).
type bitTable struct {
	index    u64Map
	keys     []uint64
	parent   []uint32
	next     []uint32
	branches []uint32
	state    []uint8
	bits     []uint64
	words    int
	free     []uint32
	n        int
	// scratch is the running bitset of leading(); owned by the table, never escapes.
	scratch []uint64
}

func newBitTable() bitTable {
	return bitTable{words: 1, scratch: make([]uint64, 1)}
}

// len is the number of live slots.
func (t *bitTable) len() int { return t.n }

// capSlots is one more than the highest slot id ever handed out.
func (t *bitTable) capSlots() int { return len(t.keys) }

// live reports whether slot s is allocated.
func (t *bitTable) live(s uint32) bool { return t.state[s] != slotFree }

// ensureWorker widens the bitsets so that worker id w fits.
func (t *bitTable) ensureWorker(w WorkerID) {
	need := int(w)/64 + 1
	if need <= t.words {
		return
	}
	nb := make([]uint64, len(t.keys)*need)
	for s := range t.keys {
		copy(nb[s*need:s*need+t.words], t.bits[s*t.words:(s+1)*t.words])
	}
	t.bits, t.words = nb, need
	t.scratch = make([]uint64, need)
}

// find returns the slot of the block with sequence hash h whose parent is slot prev
// (prev == noSlot: h starts a sequence).
func (t *bitTable) find(prev uint32, h uint64) (uint32, bool) {
	if prev != noSlot {
		if c := t.next[prev]; c != noSlot && t.keys[c] == h {
			return c, true
		}
		if t.branches[prev] == 0 {
			return noSlot, false
		}
	}
	return t.index.get(h)
}

// insertAfter returns the slot of the block with sequence hash h whose parent is slot
// prev (noSlot for a first block), creating it (with an empty bitset) when absent.
func (t *bitTable) insertAfter(prev uint32, h uint64) (slot uint32, created bool) {
	hashed := true
	if prev != noSlot {
		c := t.next[prev]
		if c != noSlot && t.keys[c] == h {
			return c, false
		}
		if c == noSlot && t.branches[prev] == 0 {
			hashed = false
		}
	}
	slot = uint32(len(t.keys))
	if n := len(t.free); n > 0 {
		slot = t.free[n-1]
	}
	if hashed {
		if s, found := t.index.getOrPut(h, slot); found {
			return s, false
		}
	}
	if n := len(t.free); n > 0 {
		t.free = t.free[:n-1]
	} else {
		t.keys = append(t.keys, 0)
		t.parent = append(t.parent, noSlot)
		t.next = append(t.next, noSlot)
		t.branches = append(t.branches, 0)
		t.state = append(t.state, slotFree)
		for i := 0; i < t.words; i++ {
			t.bits = append(t.bits, 0)
		}
	}
	t.keys[slot], t.parent[slot], t.next[slot], t.branches[slot] = h, prev, noSlot, 0
	switch {
	case !hashed:
		t.state[slot] = slotLinked
		t.next[prev] = slot
	case prev != noSlot:
		t.state[slot] = slotHashed
		t.branches[prev]++
	default:
		t.state[slot] = slotHashed
	}
	t.n++
	return slot, true
}

// release frees slot s; its bitset must be empty and it must have no live children.
func (t *bitTable) release(s uint32) {
	p := t.parent[s]
	if t.state[s] == slotHashed {
		t.index.del(t.keys[s])
		if p != noSlot {
			t.branches[p]--
		}
	} else {
		t.next[p] = noSlot
	}
	t.keys[s], t.parent[s], t.state[s] = 0, noSlot, slotFree
	t.free = append(t.free, s)
	t.n--
}

func (t *bitTable) has(s uint32, w WorkerID) bool {
	if int(w)/64 >= t.words {
		return false
	}
	return t.bits[int(s)*t.words+int(w)/64]&(1<<(w%64)) != 0
}

// set sets w's bit in slot s; the caller has called ensureWorker(w).
func (t *bitTable) set(s uint32, w WorkerID) {
	t.bits[int(s)*t.words+int(w)/64] |= 1 << (w % 64)
}

func (t *bitTable) clear(s uint32, w WorkerID) {
	t.bits[int(s)*t.words+int(w)/64] &^= 1 << (w % 64)
}

// row returns slot s's bitset (aliases the table).
func (t *bitTable) row(s uint32) []uint64 {
	return t.bits[int(s)*t.words : (int(s)+1)*t.words]
}

// leading sets out[w], for every worker w < len(out), to the number of leading hashes
// (a prompt's chained sequence hashes) whose blocks have w's bit set: the walk stops
// for a worker at its first miss (a block that is absent, or present without w, ends
// w's run even if later blocks carry w). It stops as soon as no worker is still
// running. It does not allocate.
func (t *bitTable) leading(hashes []uint64, out []uint32) {
	clear(out)
	if len(hashes) == 0 {
		return
	}
	if t.words == 1 {
		t.leading1(hashes, out)
		return
	}
	s, ok := t.index.get(hashes[0])
	if !ok {
		return
	}
	act := t.scratch
	copy(act, t.row(s))
	for i := 1; i < len(hashes); i++ {
		var row []uint64
		s, ok = t.find(s, hashes[i])
		if ok {
			row = t.row(s)
		}
		var alive uint64
		for k := range act {
			var b uint64
			if ok {
				b = row[k]
			}
			d := act[k] &^ b
			for d != 0 {
				w := k*64 + bits.TrailingZeros64(d)
				if w < len(out) {
					out[w] = uint32(i)
				}
				d &= d - 1
			}
			act[k] &= b
			alive |= act[k]
		}
		if alive == 0 || !ok {
			return
		}
	}
	for k, a := range act {
		for a != 0 {
			w := k*64 + bits.TrailingZeros64(a)
			if w < len(out) {
				out[w] = uint32(len(hashes))
			}
			a &= a - 1
		}
	}
}

// leading1 is leading for tables of at most 64 workers.
func (t *bitTable) leading1(hashes []uint64, out []uint32) {
	s, ok := t.index.get(hashes[0])
	if !ok {
		return
	}
	act := t.bits[s]
	for i := 1; i < len(hashes) && act != 0; i++ {
		var b uint64
		// find's common case (the parent's linked child) inlined: this loop is most of
		// a route's index walk.
		if c := t.next[s]; c != noSlot && t.keys[c] == hashes[i] {
			s = c
		} else {
			s, ok = t.find(s, hashes[i])
		}
		if ok {
			b = t.bits[s]
		}
		d := act &^ b
		for d != 0 {
			w := bits.TrailingZeros64(d)
			if w < len(out) {
				out[w] = uint32(i)
			}
			d &= d - 1
		}
		act &= b
		if !ok {
			return
		}
	}
	for act != 0 {
		w := bits.TrailingZeros64(act)
		if w < len(out) {
			out[w] = uint32(len(hashes))
		}
		act &= act - 1
	}
}
