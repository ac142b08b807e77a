package kv

// u64Map is an open-addressing hash map from uint64 keys to uint32 values: linear
// probing over one array of 12-byte entries (the key as two 32-bit halves, so that no
// padding rounds an entry up to 16 bytes: the index keeps one entry per indexed block
// and worker, and a quarter of that memory was padding), multiplicative
// (Fibonacci) hashing of the key, and backward-shift deletion, so that there are no
// tombstones. The index and the load tracking insert and delete blocks all the time;
// Go's built-in map keeps tombstones under such churn, and lookups of absent keys then
// probe far (measured: several hundred ns per miss at a million entries).
//
// Key 0 is stored apart (0 marks an empty entry). The load factor stays within
// [1/16, 3/4] except for tiny maps. Not safe for concurrent use.
type u64Map struct {
	ents    []u64Ent
	shift   uint // 64 - log2(len(ents))
	n       int  // entries in ents (not counting key 0)
	hasZero bool
	zeroVal uint32
}

// u64Ent is one entry: key lo | hi<<32 (0: empty), and its value.
type u64Ent struct {
	lo, hi, val uint32
}

func (e *u64Ent) key() uint64 { return uint64(e.lo) | uint64(e.hi)<<32 }

func (e *u64Ent) setKey(k uint64) { e.lo, e.hi = uint32(k), uint32(k>>32) }

const (
	u64MapMinSize = 16
	fibMul        = 0x9e3779b97f4a7c15
)

func (m *u64Map) home(k uint64) uint64 { return (k * fibMul) >> m.shift }

// len is the number of keys.
func (m *u64Map) len() int {
	if m.hasZero {
		return m.n + 1
	}
	return m.n
}

// get returns the value of k.
func (m *u64Map) get(k uint64) (uint32, bool) {
	if k == 0 {
		return m.zeroVal, m.hasZero
	}
	if m.ents == nil {
		return 0, false
	}
	mask := uint64(len(m.ents) - 1)
	for i := m.home(k); ; i = (i + 1) & mask {
		e := &m.ents[i]
		switch e.key() {
		case k:
			return e.val, true
		case 0:
			return 0, false
		}
	}
}

// getOrPut returns k's value if present; otherwise it stores v under k and returns
// (v, false).
func (m *u64Map) getOrPut(k uint64, v uint32) (uint32, bool) {
	if k == 0 {
		if m.hasZero {
			return m.zeroVal, true
		}
		m.hasZero, m.zeroVal = true, v
		return v, false
	}
	if (m.n+1)*4 > len(m.ents)*3 {
		m.resize(max(u64MapMinSize, len(m.ents)*2))
	}
	mask := uint64(len(m.ents) - 1)
	for i := m.home(k); ; i = (i + 1) & mask {
		e := &m.ents[i]
		switch e.key() {
		case k:
			return e.val, true
		case 0:
			e.setKey(k)
			e.val = v
			m.n++
			return v, false
		}
	}
}

// put stores v under k, replacing any previous value.
func (m *u64Map) put(k uint64, v uint32) {
	if k == 0 {
		m.hasZero, m.zeroVal = true, v
		return
	}
	if (m.n+1)*4 > len(m.ents)*3 {
		m.resize(max(u64MapMinSize, len(m.ents)*2))
	}
	mask := uint64(len(m.ents) - 1)
	for i := m.home(k); ; i = (i + 1) & mask {
		e := &m.ents[i]
		if ek := e.key(); ek == k || ek == 0 {
			if ek == 0 {
				m.n++
			}
			e.setKey(k)
			e.val = v
			return
		}
	}
}

// del removes k and reports whether it was present.
func (m *u64Map) del(k uint64) bool {
	if k == 0 {
		ok := m.hasZero
		m.hasZero, m.zeroVal = false, 0
		return ok
	}
	if m.ents == nil {
		return false
	}
	mask := uint64(len(m.ents) - 1)
	i := m.home(k)
	for ; ; i = (i + 1) & mask {
		if ek := m.ents[i].key(); ek == k {
			break
		} else if ek == 0 {
			return false
		}
	}
	// Backward-shift deletion (Knuth, TAOCP 6.4, Algorithm R): move later entries of
	// the probe run into the hole unless their home lies cyclically in (hole, j].
	for j := (i + 1) & mask; ; j = (j + 1) & mask {
		e := m.ents[j]
		ek := e.key()
		if ek == 0 {
			break
		}
		h := m.home(ek)
		if (j > i && (h <= i || h > j)) || (j < i && h <= i && h > j) {
			m.ents[i] = e
			i = j
		}
	}
	m.ents[i] = u64Ent{}
	m.n--
	if len(m.ents) > u64MapMinSize && m.n*16 < len(m.ents) {
		m.resize(max(u64MapMinSize, len(m.ents)/4))
	}
	return true
}

func (m *u64Map) resize(size int) {
	old := m.ents
	m.ents = make([]u64Ent, size)
	m.shift = 64
	for s := size; s > 1; s >>= 1 {
		m.shift--
	}
	mask := uint64(size - 1)
	for _, e := range old {
		if e.key() == 0 {
			continue
		}
		i := m.home(e.key())
		for m.ents[i].key() != 0 {
			i = (i + 1) & mask
		}
		m.ents[i] = e
	}
}

// reset removes every key and frees the storage.
func (m *u64Map) reset() { *m = u64Map{} }

// each calls fn for every key and value, in table order. fn must not modify m.
func (m *u64Map) each(fn func(k uint64, v uint32)) {
	if m.hasZero {
		fn(0, m.zeroVal)
	}
	for i := range m.ents {
		if e := &m.ents[i]; e.key() != 0 {
			fn(e.key(), e.val)
		}
	}
}
