package kvbm

import (
	"sort"

	"github.com/turbine-llm/turbine/kv"
)

// The store's pure core (docs/reference.md §9.1): both tiers' inventories, their byte
// accounting and eviction order, and the spill policy. It does no I/O and takes no locks:
// a call mutates the ledger and lists in an effects value the disk I/O the caller must
// carry out (files to write, files to remove), and the caller reports each write's and
// read's outcome back (written, readDone). The Store holds its mutex around every call
// and does the I/O outside it.
//
// Invariants:
//   - An item is in its tier's index (items and order) exactly when it is readable from
//     that tier; used is the sum of the sizes of the indexed items.
//   - When both tiers index a key they hold the same version of it (a put replaces both
//     or removes the disk copy; a promotion copies or moves).
//   - A disk item being written (stateWriting) or pinned (pins > 0) is never evicted; one
//     that leaves the index in that state is doomed, and its file is removed by whoever
//     releases it last (written or readDone).

// itemState is a disk item's state.
type itemState uint8

const (
	stateReady   itemState = iota // host item, or disk item whose file is complete
	stateWriting                  // disk item whose file is being written; bytes held in memory
)

// fileHeaderSize is the fixed part of a block's footprint (the disk file's header).
const fileHeaderSize = 56

// footprint is the bytes a block counts against a tier's cap: its disk file's size (the
// header, key, meta and data), in both tiers.
func footprint(key string, meta, data []byte) int64 {
	return int64(fileHeaderSize + len(key) + len(meta) + len(data))
}

// item is one block in one tier.
type item struct {
	key    string
	tier   kv.Tier
	size   int64 // footprint
	prio   int
	gen    uint64 // disk: the file's generation (unique per written file)
	state  itemState
	pins   int  // disk: readers of the file now
	doomed bool // disk: out of the index; the file goes once unpinned and written
	reused bool // host: read or put again while in host memory (PolicyReuse)
	// meta and data: the block's bytes (host items; disk items while being written).
	meta, data []byte
	// through: a disk item written by a write-through put: that put's host item, removed
	// too if the write fails (the put fails as a whole).
	through    *item
	prev, next *item
}

// lruOrder orders a tier's items for eviction: lowest priority first, least recently used
// first among equal priorities. One circular list per priority, MRU at the tail.
type lruOrder struct {
	lists map[int]*item // sentinel per priority
	prios []int         // ascending; the priorities with a non-empty list
}

func (o *lruOrder) push(it *item) {
	s := o.lists[it.prio]
	if s == nil {
		if o.lists == nil {
			o.lists = map[int]*item{}
		}
		s = &item{}
		s.prev, s.next = s, s
		o.lists[it.prio] = s
		i := sort.SearchInts(o.prios, it.prio)
		o.prios = append(o.prios, 0)
		copy(o.prios[i+1:], o.prios[i:])
		o.prios[i] = it.prio
	}
	it.prev, it.next = s.prev, s
	s.prev.next = it
	s.prev = it
}

func (o *lruOrder) remove(it *item) {
	it.prev.next = it.next
	it.next.prev = it.prev
	it.prev, it.next = nil, nil
	if s := o.lists[it.prio]; s.next == s {
		delete(o.lists, it.prio)
		i := sort.SearchInts(o.prios, it.prio)
		o.prios = append(o.prios[:i], o.prios[i+1:]...)
	}
}

// each calls fn on every item in eviction order until fn returns false. fn must not
// change the order.
func (o *lruOrder) each(fn func(*item) bool) {
	for _, p := range o.prios {
		s := o.lists[p]
		for it := s.next; it != s; it = it.next {
			if !fn(it) {
				return
			}
		}
	}
}

// tier is one tier's index and figures.
type tier struct {
	id    kv.Tier
	cap   int64
	used  int64
	items map[string]*item
	order lruOrder
	st    TierStats // counters only; the gauges are filled in by stats
}

func newTier(id kv.Tier, capBytes int64) *tier {
	return &tier{id: id, cap: capBytes, items: map[string]*item{}}
}

func (t *tier) insert(it *item) {
	it.tier = t.id
	t.items[it.key] = it
	t.order.push(it)
	t.used += it.size
}

func (t *tier) remove(it *item) {
	delete(t.items, it.key)
	t.order.remove(it)
	t.used -= it.size
}

func (t *tier) touch(it *item) {
	t.order.remove(it)
	t.order.push(it)
}

// victims returns the items to evict, in order, so that size more bytes fit, skipping
// except (about to be replaced, so counted as free), pinned items and items being
// written; ok is false when they cannot.
func (t *tier) victims(size int64, except *item) (vs []*item, ok bool) {
	free := t.cap - t.used
	if except != nil {
		free += except.size
	}
	if free >= size {
		return nil, true
	}
	t.order.each(func(it *item) bool {
		if it == except || it.pins > 0 || it.state == stateWriting {
			return true
		}
		vs = append(vs, it)
		free += it.size
		return free < size
	})
	return vs, free >= size
}

// effects is the disk I/O a ledger call asks of its caller.
type effects struct {
	writes  []*item // disk items (stateWriting) whose file to write from their bytes
	removes []*item // disk items out of the index whose file to remove
	own     *item   // the write whose outcome is the call's (a write-through put)
}

// ledger is the pure core: see the comment at the top of this file.
type ledger struct {
	policy     Policy
	host       *tier
	disk       *tier // nil: no disk tier
	gen        uint64
	pinned     int64
	changes    []Change
	maxChanges int
	overflow   bool
}

func newLedger(policy Policy, hostBytes, diskBytes int64, hasDisk bool, maxChanges int) *ledger {
	l := &ledger{policy: policy, host: newTier(kv.TierHost, hostBytes), maxChanges: maxChanges}
	if hasDisk {
		l.disk = newTier(kv.TierDisk, diskBytes)
	}
	return l
}

func (l *ledger) change(key string, t kv.Tier, removed bool) {
	if l.overflow {
		return
	}
	if len(l.changes) >= l.maxChanges {
		l.overflow = true
		l.changes = l.changes[:0]
		return
	}
	l.changes = append(l.changes, Change{Key: key, Tier: t, Removed: removed})
}

// drain appends the undrained changes to dst and forgets them.
func (l *ledger) drain(dst []Change) ([]Change, bool) {
	dst = append(dst, l.changes...)
	over := l.overflow
	l.changes = l.changes[:0]
	l.overflow = false
	return dst, over
}

// put stores a block in host memory (and on disk under write-through), evicting as
// needed. Errors: ErrValueTooLarge (over a tier's cap), ErrFull (write-through and the
// disk tier is full of pinned blocks or blocks being written); on error nothing changed.
func (l *ledger) put(key string, meta, data []byte, prio int, eff *effects) error {
	size := footprint(key, meta, data)
	if size > l.host.cap {
		return ErrValueTooLarge
	}
	through := l.policy == PolicyWriteThrough && l.disk != nil
	var oldDisk *item
	var diskVictims []*item
	if l.disk != nil {
		oldDisk = l.disk.items[key]
	}
	if through {
		if size > l.disk.cap {
			return ErrValueTooLarge
		}
		var ok bool
		if diskVictims, ok = l.disk.victims(size, oldDisk); !ok {
			return ErrFull
		}
	}
	oldHost := l.host.items[key]
	if oldHost != nil {
		l.host.remove(oldHost)
	}
	if oldDisk != nil {
		l.disk.remove(oldDisk)
		if !through {
			l.change(key, kv.TierDisk, true)
		}
		l.release(oldDisk, eff)
	}
	h := &item{key: key, size: size, prio: prio, reused: oldHost != nil, meta: meta, data: data}
	if through {
		for _, v := range diskVictims {
			l.evictDisk(v, eff)
		}
		d := l.newDiskItem(h)
		d.through = h
		l.disk.insert(d)
		l.disk.st.Stored++
		l.disk.st.BytesIn += uint64(len(data))
		if oldDisk == nil {
			l.change(key, kv.TierDisk, false)
		}
		eff.writes = append(eff.writes, d)
		eff.own = d
	}
	l.admitHost(h, eff)
	if oldHost == nil {
		l.change(key, kv.TierHost, false)
	}
	return nil
}

// admitHost makes room for h in host memory, evicting (and demoting) others, and
// inserts it. h fits: h.size <= host.cap, and host items are never pinned.
func (l *ledger) admitHost(h *item, eff *effects) {
	vs, _ := l.host.victims(h.size, nil)
	for _, v := range vs {
		l.evictHost(v, eff)
	}
	l.host.insert(h)
	l.host.st.Stored++
	l.host.st.BytesIn += uint64(len(h.data))
}

func (l *ledger) newDiskItem(h *item) *item {
	l.gen++
	return &item{key: h.key, size: h.size, prio: h.prio, gen: l.gen, state: stateWriting, meta: h.meta, data: h.data}
}

// evictHost evicts v from host memory and demotes it to disk unless the disk already
// holds it, the policy drops it (PolicyReuse and v not reused), or the disk has no room.
func (l *ledger) evictHost(v *item, eff *effects) {
	l.host.remove(v)
	l.host.st.Evicted++
	l.change(v.key, kv.TierHost, true)
	if l.disk == nil || l.disk.items[v.key] != nil || (l.policy == PolicyReuse && !v.reused) || v.size > l.disk.cap {
		return
	}
	vs, ok := l.disk.victims(v.size, nil)
	if !ok {
		return
	}
	for _, dv := range vs {
		l.evictDisk(dv, eff)
	}
	d := l.newDiskItem(v)
	l.disk.insert(d) // a demotion is no read: the host tier's BytesOut counts readers' bytes
	l.disk.st.Stored++
	l.disk.st.BytesIn += uint64(len(v.data))
	l.change(v.key, kv.TierDisk, false)
	eff.writes = append(eff.writes, d)
}

func (l *ledger) evictDisk(v *item, eff *effects) {
	l.disk.remove(v)
	l.disk.st.Evicted++
	l.change(v.key, kv.TierDisk, true)
	l.release(v, eff)
}

// release disposes of a disk item that left the index: its file is removed now if no
// one uses it, else once the last user lets go.
func (l *ledger) release(d *item, eff *effects) {
	d.doomed = true
	if d.pins == 0 && d.state == stateReady {
		eff.removes = append(eff.removes, d)
	}
}

// written reports the outcome of writing d's file. On failure d leaves the disk tier (and,
// for a write-through put, the put's host item leaves host memory).
func (l *ledger) written(d *item, err error, eff *effects) {
	d.state = stateReady
	d.meta, d.data = nil, nil
	if err != nil {
		if !d.doomed {
			l.disk.remove(d)
			d.doomed = true
			l.change(d.key, kv.TierDisk, true)
			if h := d.through; h != nil && l.host.items[d.key] == h {
				l.host.remove(h)
				l.change(d.key, kv.TierHost, true)
			}
		}
		d.through = nil
		return // the writer removed its temporary file: nothing on disk
	}
	d.through = nil
	if d.doomed && d.pins == 0 {
		eff.removes = append(eff.removes, d)
	}
}

// get looks key up: a host hit or a disk block still being written returns its entry; a
// disk block returns its item, pinned, whose file the caller reads and reports with
// readDone. ok is false on a miss.
func (l *ledger) get(key string) (e Entry, read *item, ok bool) {
	if h := l.host.items[key]; h != nil {
		l.host.touch(h)
		if l.disk != nil {
			if d := l.disk.items[key]; d != nil {
				l.disk.touch(d) // write-through: the disk copy is as recently used
			}
		}
		h.reused = true
		l.host.st.Hits++
		l.host.st.BytesOut += uint64(len(h.data))
		return Entry{Meta: h.meta, Data: h.data, Tier: kv.TierHost}, nil, true
	}
	l.host.st.Misses++
	if l.disk == nil {
		return Entry{}, nil, false
	}
	d := l.disk.items[key]
	if d == nil {
		l.disk.st.Misses++
		return Entry{}, nil, false
	}
	l.disk.touch(d)
	if d.state == stateWriting {
		l.disk.st.Hits++
		l.disk.st.BytesOut += uint64(len(d.data))
		return Entry{Meta: d.meta, Data: d.data, Tier: kv.TierDisk}, nil, true
	}
	if d.pins == 0 {
		l.pinned++
	}
	d.pins++
	return Entry{}, d, true
}

// readDone reports the outcome of reading d's file (err: missing, torn or corrupt: the
// block leaves the disk tier and its file is removed) and unpins it. A good block is
// promoted to host memory unless host memory holds the key already or d left the index
// meanwhile: copied under PolicyWriteThrough, moved (its file removed) otherwise.
func (l *ledger) readDone(d *item, meta, data []byte, err error, eff *effects) {
	d.pins--
	if d.pins == 0 {
		l.pinned--
	}
	if err != nil {
		l.disk.st.Misses++
		if !d.doomed {
			l.disk.remove(d)
			l.change(d.key, kv.TierDisk, true)
		}
		l.release(d, eff)
		return
	}
	l.disk.st.Hits++
	l.disk.st.BytesOut += uint64(len(data))
	if !d.doomed && l.host.items[d.key] == nil {
		h := &item{key: d.key, size: d.size, prio: d.prio, reused: true, meta: meta, data: data}
		if l.policy != PolicyWriteThrough {
			l.disk.remove(d)
			l.change(d.key, kv.TierDisk, true)
			d.doomed = true
		}
		l.admitHost(h, eff)
		l.change(d.key, kv.TierHost, false)
	}
	if d.doomed && d.pins == 0 && d.state == stateReady {
		eff.removes = append(eff.removes, d)
	}
}

// del removes key from every tier; false when none held it.
func (l *ledger) del(key string, eff *effects) bool {
	found := false
	if h := l.host.items[key]; h != nil {
		l.host.remove(h)
		l.change(key, kv.TierHost, true)
		found = true
	}
	if l.disk != nil {
		if d := l.disk.items[key]; d != nil {
			l.disk.remove(d)
			l.change(key, kv.TierDisk, true)
			l.release(d, eff)
			found = true
		}
	}
	return found
}

// exists reports whether any tier holds key.
func (l *ledger) exists(key string) bool {
	if l.host.items[key] != nil {
		return true
	}
	return l.disk != nil && l.disk.items[key] != nil
}

// touch makes key the most recently used in every tier holding it, at priority prio.
func (l *ledger) touch(key string, prio int) bool {
	found := false
	for _, t := range []*tier{l.host, l.disk} {
		if t == nil {
			continue
		}
		if it := t.items[key]; it != nil {
			t.order.remove(it)
			it.prio = prio
			t.order.push(it)
			found = true
		}
	}
	return found
}

// restore adds a block found on disk at Open, as the most recently used so far.
func (l *ledger) restore(key string, gen uint64, prio int, size int64) {
	if gen > l.gen {
		l.gen = gen
	}
	l.disk.insert(&item{key: key, size: size, prio: prio, gen: gen})
}

// enforceDisk evicts disk blocks until the tier is within its cap (after restore).
func (l *ledger) enforceDisk(eff *effects) {
	vs, _ := l.disk.victims(0, nil)
	for _, v := range vs {
		l.evictDisk(v, eff)
	}
}

// each calls fn for every (block, tier) pair, host then disk, each in eviction order.
func (l *ledger) each(fn func(it *item)) {
	for _, t := range []*tier{l.host, l.disk} {
		if t == nil {
			continue
		}
		t.order.each(func(it *item) bool { fn(it); return true })
	}
}

// stats fills in the tiers' figures.
func (l *ledger) stats(st *Stats) {
	for _, t := range []*tier{l.host, l.disk} {
		if t == nil {
			continue
		}
		ts := t.st
		ts.CapacityBytes = t.cap
		ts.UsedBytes = t.used
		ts.Blocks = int64(len(t.items))
		if t.id == kv.TierDisk {
			ts.Pinned = l.pinned
		}
		st.Tiers[t.id] = ts
	}
}
