package kv

import "math/bits"

// noSlot marks "no slot" in slot-valued fields.
const noSlot = ^uint32(0)

// bitTable maps 64-bit block hashes to dense slots, and gives each slot a bitset of
// worker ids (WorkerID < 64*words). It is the shared core of Index (which workers hold
// a block) and ActiveSequences (on which workers a block is active).
//
// Ownership and invariants:
//   - slots is authoritative for "hash h is present"; keys[s] is h for every live slot s.
//   - bits[s*words : (s+1)*words] is slot s's bitset; a released slot's bitset is zero.
//   - Slot ids are reused (free list); callers keep parallel per-slot arrays sized with
//     capSlots and must not use a slot id after release.
//   - words only grows (a worker id above the current width relays the bitsets out).
//   - next[s] is a hint, never authoritative: the slot most recently linked after s
//     (the next block of a chain). Walks follow it when keys[next[s]] equals the hash
//     they look for, and fall back to the map otherwise, so a stale hint (slot freed or
//     reused) costs a map probe, never a wrong answer. A released slot's key is 0, and
//     hash 0 always takes the map. Chains are mostly created in order, so their slots
//     are mostly consecutive: a walk along a cached prompt touches adjacent memory
//     instead of one random map probe per block.
type bitTable struct {
	slots u64Map
	keys  []uint64
	bits  []uint64
	next  []uint32
	words int
	free  []uint32
	// scratch is the running bitset of leading(); owned by the table, never escapes.
	scratch []uint64
}

func newBitTable() bitTable {
	return bitTable{words: 1, scratch: make([]uint64, 1)}
}

// len is the number of live slots.
func (t *bitTable) len() int { return t.slots.len() }

// capSlots is one more than the highest slot id ever handed out.
func (t *bitTable) capSlots() int { return len(t.keys) }

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

// lookup returns the slot of h.
func (t *bitTable) lookup(h uint64) (uint32, bool) {
	return t.slots.get(h)
}

// insert returns the slot of h, allocating one (with an empty bitset) when h is absent.
func (t *bitTable) insert(h uint64) (slot uint32, created bool) {
	slot = uint32(len(t.keys))
	if n := len(t.free); n > 0 {
		slot = t.free[n-1]
	}
	if s, found := t.slots.getOrPut(h, slot); found {
		return s, false
	}
	if n := len(t.free); n > 0 {
		t.free = t.free[:n-1]
		t.keys[slot] = h
		t.next[slot] = noSlot
	} else {
		t.keys = append(t.keys, h)
		t.next = append(t.next, noSlot)
		for i := 0; i < t.words; i++ {
			t.bits = append(t.bits, 0)
		}
	}
	return slot, true
}

// find returns the slot of h, which is expected to follow slot prev in a chain
// (prev == noSlot: no expectation), trying prev's hint before the map.
func (t *bitTable) find(prev uint32, h uint64) (uint32, bool) {
	if prev != noSlot && h != 0 {
		if c := t.next[prev]; c != noSlot && t.keys[c] == h {
			return c, true
		}
	}
	return t.slots.get(h)
}

// insertAfter is insert for a hash that follows slot prev in a chain: it tries prev's
// hint first and points the hint at the result.
func (t *bitTable) insertAfter(prev uint32, h uint64) (slot uint32, created bool) {
	if prev == noSlot {
		return t.insert(h)
	}
	if h != 0 {
		if c := t.next[prev]; c != noSlot && t.keys[c] == h {
			return c, false
		}
	}
	slot, created = t.insert(h)
	t.next[prev] = slot
	return slot, created
}

// release frees slot s; its bitset must already be empty.
func (t *bitTable) release(s uint32) {
	t.slots.del(t.keys[s])
	t.keys[s] = 0
	t.free = append(t.free, s)
}

// live reports whether slot s is allocated (not on the free list).
func (t *bitTable) live(s uint32) bool {
	if t.keys[s] != 0 {
		return true
	}
	s0, ok := t.slots.get(0)
	return ok && s0 == s
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
// whose slots have w's bit set: the walk stops for a worker at its first miss (a block
// that is absent, or present without w, ends w's run even if later blocks carry w). It
// stops as soon as no worker is still running. It does not allocate.
func (t *bitTable) leading(hashes []uint64, out []uint32) {
	clear(out)
	if len(hashes) == 0 {
		return
	}
	if t.words == 1 {
		t.leading1(hashes, out)
		return
	}
	s, ok := t.slots.get(hashes[0])
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
		if alive == 0 {
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
	s, ok := t.slots.get(hashes[0])
	if !ok {
		return
	}
	act := t.bits[s]
	for i := 1; i < len(hashes) && act != 0; i++ {
		var b uint64
		if s, ok = t.find(s, hashes[i]); ok {
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
	}
	for act != 0 {
		w := bits.TrailingZeros64(act)
		if w < len(out) {
			out[w] = uint32(len(hashes))
		}
		act &= act - 1
	}
}
