package kv

// u64Map is an open-addressing hash map from uint64 keys to uint32 values: linear
// probing over one array of 16-byte entries (one cache line holds four), multiplicative
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

type u64Ent struct {
	key uint64
	val uint32
}

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
		if e.key == k {
			return e.val, true
		}
		if e.key == 0 {
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
		if e.key == k {
			return e.val, true
		}
		if e.key == 0 {
			e.key, e.val = k, v
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
		if e.key == k || e.key == 0 {
			if e.key == 0 {
				m.n++
			}
			e.key, e.val = k, v
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
		if m.ents[i].key == k {
			break
		}
		if m.ents[i].key == 0 {
			return false
		}
	}
	// Backward-shift deletion (Knuth, TAOCP 6.4, Algorithm R): move later entries of
	// the probe run into the hole unless their home lies cyclically in (hole, j].
	for j := (i + 1) & mask; ; j = (j + 1) & mask {
		e := m.ents[j]
		if e.key == 0 {
			break
		}
		h := m.home(e.key)
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
		if e.key == 0 {
			continue
		}
		i := m.home(e.key)
		for m.ents[i].key != 0 {
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
	for _, e := range m.ents {
		if e.key != 0 {
			fn(e.key, e.val)
		}
	}
}
