package kv

import (
	"math"
	"math/bits"
	"time"
)

// DefaultMaxSequenceAge is how long an active sequence may stay without being freed
// before Expire drops it (docs/reference.md §3: 300 s).
const DefaultMaxSequenceAge = 300 * time.Second

// ActiveSequences tracks, per worker, the requests routed to it and not yet finished:
// the router's own, immediate view of each worker's load (docs/reference.md §3), as opposed to
// the engine's periodic load reports, which lag and cause herding.
//
// Load of a worker:
//   - active blocks: the distinct KV blocks (sequence hashes) of the prompts of its
//     active requests. Concurrent requests that share a prompt prefix share those
//     blocks, which count once. Decode growth (the blocks of generated tokens) is not
//     modelled: the router never sees output tokens.
//   - active prefill tokens: for each request whose prefill is not done, the prompt
//     tokens the worker must compute (ISL minus the cached prefix), as given to Add.
//
// Layout (docs/reference.md §3.7): the active prompts form a compressed trie (activeTree)
// whose nodes are runs of consecutive blocks; a request is the path from a root to the
// node holding its last block, and only that tail node is stored with it. Recording a
// request walks the blocks already active by comparing hashes and copies only its new
// suffix, as one node; ending it walks its path's few nodes. A node counts, per worker,
// the requests through it, so a worker's active blocks are the summed lengths of the
// nodes it has a request through.
//
// Ownership and invariants (ActiveSequences owns all of it; not safe for concurrent use):
//   - Authoritative: seqs, the active requests by id, each with its worker, its tail node
//     (noSlot for an empty prompt), its prefill tokens and whether prefill is done.
//   - Derived, kept in step by Add/PrefillDone/Free only: node x's refs is the number of
//     requests (on any worker) whose path contains x and its ends the number whose tail
//     is x; x's bit for w is set iff some request on w goes through x, and then
//     workers[w].extra[x] counts the further ones (absent when none); holders is the
//     number of set bits, so refs == holders means no extra entry exists for x.
//   - workers[w].blocks is the summed length of the nodes whose bit for w is set.
//   - A node lives exactly while refs > 0; every live node has ends > 0 or a number of
//     children other than one (otherwise it is merged with its child), so the trie's
//     shape depends only on the set of active prompts.
//   - Every way a request ends (Free after completion, cancel or error, Expire,
//     RemoveWorker, re-Add of the same id) goes through one release path, so load always
//     returns to zero.
//   - queue holds (id, generation, start) in Add order; entries of requests already
//     freed or re-added are skipped and compacted away.
type ActiveSequences struct {
	maxAge  time.Duration
	tr      activeTree
	workers []activeWorker
	seqs    map[string]*activeSeq
	queue   expiryQueue
	gen     uint64
	// base: the clock's origin for the decode ages below (the first Add's time).
	base    time.Time
	hasBase bool
}

type activeWorker struct {
	blocks        int
	prefillTokens int64
	sequences     int
	extra         u64Map // node → further requests of this worker through it
	// decoding: requests past their first token; doneSum: the sum of their first-token
	// times (seconds since base), so their summed decode age at t is decoding·t − doneSum.
	decoding int
	doneSum  float64
	// busySince: when the prefill at the head of the worker's queue began (seconds since
	// base): the route that found the queue empty, or the latest first token with more
	// queued; busyKnown is false while that is not known (a request left the queue
	// without a first token's time), until the next such event.
	busySince float64
	busyKnown bool
	// adapters: the active requests per LoRA adapter (SetAdapter); nil until one.
	adapters map[string]int
}

type activeSeq struct {
	worker        WorkerID
	tail          uint32 // the node holding the prompt's last block; noSlot: empty prompt
	prefillTokens int64
	prefillDone   bool
	decoding      bool    // counted in its worker's decoding (PrefillDoneAt)
	doneAt        float64 // first token, seconds since base (decoding only)
	start         time.Time
	gen           uint64
	predictedMs   float64 // the TTFT the router predicted for it (Note)
	adapter       string  // its LoRA adapter (SetAdapter); "" none
}

// Load is a worker's load as the router tracks it.
type Load struct {
	// ActiveBlocks is the number of distinct prompt KV blocks of the worker's active
	// requests.
	ActiveBlocks int
	// PrefillTokens is the number of prompt tokens still to prefill (tokens).
	PrefillTokens int64
	// Sequences is the number of active requests.
	Sequences int
	// Decoding is the number of active requests past their first token (PrefillDoneAt).
	Decoding int
}

// NewActiveSequences returns an empty tracker whose Expire drops sequences older than
// maxAge (use DefaultMaxSequenceAge); maxAge <= 0 disables expiry.
func NewActiveSequences(maxAge time.Duration) *ActiveSequences {
	return &ActiveSequences{maxAge: maxAge, tr: newActiveTree(), seqs: make(map[string]*activeSeq)}
}

// Len is the number of active requests.
func (a *ActiveSequences) Len() int { return len(a.seqs) }

// Blocks is the number of distinct blocks active on any worker.
func (a *ActiveSequences) Blocks() int { return a.tr.blocks }

// Load returns worker w's load (zero for a worker without requests).
func (a *ActiveSequences) Load(w WorkerID) Load {
	if int(w) >= len(a.workers) {
		return Load{}
	}
	aw := &a.workers[w]
	return Load{ActiveBlocks: aw.blocks, PrefillTokens: aw.prefillTokens, Sequences: aw.sequences, Decoding: aw.decoding}
}

// DecodeSeconds is the summed time since their first token of worker w's requests that
// are decoding, at now (seconds; 0 when none): the output they have produced grows with it.
func (a *ActiveSequences) DecodeSeconds(w WorkerID, now time.Time) float64 {
	return a.decodeSecondsAt(w, a.since(now))
}

// prefillElapsedAt is how long worker w's head prefill has run at t seconds since the
// clock's origin (s; 0 with nothing queued or while its start is not known).
func (a *ActiveSequences) prefillElapsedAt(w WorkerID, t float64) float64 {
	if int(w) >= len(a.workers) || a.workers[w].prefillTokens <= 0 || !a.workers[w].busyKnown {
		return 0
	}
	return math.Max(0, t-a.workers[w].busySince)
}

// decodeSecondsAt is DecodeSeconds at t seconds since the clock's origin (since).
func (a *ActiveSequences) decodeSecondsAt(w WorkerID, t float64) float64 {
	if int(w) >= len(a.workers) || a.workers[w].decoding == 0 {
		return 0
	}
	aw := &a.workers[w]
	return math.Max(0, float64(aw.decoding)*t-aw.doneSum)
}

func (a *ActiveSequences) since(t time.Time) float64 {
	if !a.hasBase {
		a.base, a.hasBase = t, true
	}
	return t.Sub(a.base).Seconds()
}

// NotePrediction stores the TTFT (ms) the router predicted for active request reqID.
func (a *ActiveSequences) NotePrediction(reqID string, ms float64) {
	if s, ok := a.seqs[reqID]; ok {
		s.predictedMs = ms
	}
}

// DecodeAge is, for an active request past its first token, its worker and its time
// since that token at now (seconds).
func (a *ActiveSequences) DecodeAge(reqID string, now time.Time) (WorkerID, float64, bool) {
	s, ok := a.seqs[reqID]
	if !ok || !s.decoding {
		return 0, 0, false
	}
	return s.worker, math.Max(0, a.since(now)-s.doneAt), true
}

// FirstToken is what PrefillDoneAt learnt: the request's worker, its time from routing to
// first token and the TTFT the router had predicted (0: none).
type FirstToken struct {
	Worker      WorkerID
	TTFT        time.Duration
	PredictedMs float64
}

// PrefillDoneAt is PrefillDone at time now: the request also starts counting as
// decoding. It returns what the router may learn from it; ok is false when reqID is not
// active or its prefill was already done.
func (a *ActiveSequences) PrefillDoneAt(reqID string, now time.Time) (FirstToken, bool) {
	s, ok := a.seqs[reqID]
	if !ok || s.prefillDone {
		return FirstToken{}, false
	}
	a.PrefillDone(reqID)
	t := a.since(now)
	s.doneAt, s.decoding = t, true
	aw := &a.workers[s.worker]
	aw.decoding++
	aw.doneSum += t
	if aw.prefillTokens > 0 {
		aw.busySince, aw.busyKnown = t, true
	}
	return FirstToken{Worker: s.worker, TTFT: now.Sub(s.start), PredictedMs: s.predictedMs}, true
}

// Worker returns the worker a request is active on.
func (a *ActiveSequences) Worker(reqID string) (WorkerID, bool) {
	if s, ok := a.seqs[reqID]; ok {
		return s.worker, true
	}
	return 0, false
}

// Add records that request reqID, whose prompt has the given sequence hashes, now runs
// on worker w, with prefillTokens prompt tokens (>= 0) to compute there (ISL minus the
// prefix already cached on w). If reqID is already active (a request re-routed, e.g.
// after a migration), its old placement is freed first. seqHashes is not retained.
func (a *ActiveSequences) Add(reqID string, w WorkerID, seqHashes []uint64, prefillTokens int64, now time.Time) {
	if _, ok := a.seqs[reqID]; ok {
		a.Free(reqID)
	}
	if prefillTokens < 0 {
		prefillTokens = 0
	}
	for int(w) >= len(a.workers) {
		a.workers = append(a.workers, activeWorker{})
	}
	a.tr.ensureWorker(w)
	aw := &a.workers[w]
	tail := a.insert(seqHashes)
	for x := tail; x != noSlot; {
		n := &a.tr.nodes[x]
		n.refs++
		if a.tr.has(x, w) {
			c, _ := aw.extra.get(uint64(x))
			aw.extra.put(uint64(x), c+1)
		} else {
			a.tr.set(x, w)
			n.holders++
			aw.blocks += len(n.hashes)
		}
		x = n.parent
	}
	if tail != noSlot {
		a.tr.nodes[tail].ends++
	}
	if aw.prefillTokens == 0 && prefillTokens > 0 {
		aw.busySince, aw.busyKnown = a.since(now), true
	}
	aw.prefillTokens += prefillTokens
	aw.sequences++
	a.gen++
	a.seqs[reqID] = &activeSeq{worker: w, tail: tail, prefillTokens: prefillTokens, start: now, gen: a.gen}
	a.queue.push(reqID, a.gen, now)
	a.compact()
}

// PrefillDone records that request reqID produced its first token: its prompt tokens no
// longer count as prefill load (its blocks stay active). It reports whether reqID was
// active; calling it twice is harmless.
func (a *ActiveSequences) PrefillDone(reqID string) bool {
	s, ok := a.seqs[reqID]
	if !ok {
		return false
	}
	if !s.prefillDone {
		s.prefillDone = true
		aw := &a.workers[s.worker]
		aw.prefillTokens -= s.prefillTokens
		// When the next head began is not known (PrefillDoneAt, which knows, sets it
		// again after this).
		aw.busyKnown = false
	}
	return true
}

// Free ends request reqID (finished, cancelled or failed) and returns its load to its
// worker. It reports whether reqID was active; freeing an unknown or already freed id is
// harmless.
func (a *ActiveSequences) Free(reqID string) bool {
	s, ok := a.seqs[reqID]
	if !ok {
		return false
	}
	delete(a.seqs, reqID)
	w := s.worker
	aw := &a.workers[w]
	t := &a.tr
	x := s.tail
	if x != noSlot {
		t.nodes[x].ends--
	}
	// Tail first (children before parents): refs only grow towards the root, so the
	// nodes released form the path's lower end and the first survivor is the only node
	// whose shape changed.
	survivor := noSlot
	for x != noSlot {
		n := &t.nodes[x]
		p := n.parent
		shared := n.refs > n.holders
		n.refs--
		last := true // w's last request through x
		if shared {
			if c, _ := aw.extra.get(uint64(x)); c > 0 {
				if c == 1 {
					aw.extra.del(uint64(x))
				} else {
					aw.extra.put(uint64(x), c-1)
				}
				last = false
			}
		}
		if last {
			t.clear(x, w)
			n.holders--
			aw.blocks -= len(n.hashes)
		}
		if n.refs == 0 {
			t.release(x)
		} else if survivor == noSlot {
			survivor = x
		}
		x = p
	}
	if survivor != noSlot {
		a.mergeChild(survivor)
	}
	if !s.prefillDone {
		// Gone before its first token: whatever now heads the queue began at a time not
		// known here.
		aw.prefillTokens -= s.prefillTokens
		aw.busyKnown = false
	}
	if s.decoding {
		aw.decoding--
		aw.doneSum -= s.doneAt
		if aw.decoding == 0 {
			aw.doneSum = 0 // no drift left behind
		}
	}
	if s.adapter != "" {
		if aw.adapters[s.adapter]--; aw.adapters[s.adapter] <= 0 {
			delete(aw.adapters, s.adapter)
		}
	}
	aw.sequences--
	return true
}

// SetAdapter records that active request reqID runs with LoRA adapter name on its
// worker, which therefore cannot evict the adapter until the request is freed. Unknown
// ids, and a second call, are ignored.
func (a *ActiveSequences) SetAdapter(reqID, name string) {
	s, ok := a.seqs[reqID]
	if !ok || name == "" || s.adapter != "" {
		return
	}
	s.adapter = name
	aw := &a.workers[s.worker]
	if aw.adapters == nil {
		aw.adapters = make(map[string]int)
	}
	aw.adapters[name]++
}

// AdapterInUse reports whether an active request on w runs with LoRA adapter name.
func (a *ActiveSequences) AdapterInUse(w WorkerID, name string) bool {
	return int(w) < len(a.workers) && a.workers[w].adapters[name] > 0
}

// Expire frees every request added more than maxAge before now (requests whose end the
// router never heard of) and returns how many it freed. now should not go backwards;
// if it does, expiry is only delayed.
func (a *ActiveSequences) Expire(now time.Time) int {
	if a.maxAge <= 0 {
		return 0
	}
	n := 0
	a.queue.expire(now, a.maxAge, func(id string, gen uint64) {
		if a.live(id, gen) {
			a.Free(id)
			n++
		}
	})
	a.compact()
	return n
}

// live reports whether request id is active under generation gen (its queue entry is
// not dead).
func (a *ActiveSequences) live(id string, gen uint64) bool {
	s, ok := a.seqs[id]
	return ok && s.gen == gen
}

// compact drops consumed and dead queue entries once they dominate the queue.
func (a *ActiveSequences) compact() { a.queue.compact(len(a.seqs), a.live) }

// ActivePrefix sets out[w], for every worker id w < len(out), to the number of leading
// blocks of a prompt (its sequence hashes) that are active on w. Because sequence hashes
// chain, the prompt blocks active on w always form such a leading run, so
// len(seqHashes) - out[w] is the number of prompt blocks not already active on w. It
// does not allocate.
func (a *ActiveSequences) ActivePrefix(seqHashes []uint64, out []uint32) {
	clear(out)
	t := &a.tr
	if len(seqHashes) == 0 {
		return
	}
	x, ok := t.lookup(noSlot, seqHashes[0])
	if !ok {
		return
	}
	act := t.scratch
	copy(act, t.row(x))
	i := 0 // seqHashes[i] is x's first block
	for {
		nh := t.nodes[x].hashes
		j := 1 + commonPrefix(nh[1:], seqHashes[i+1:])
		i += j
		if j < len(nh) || i == len(seqHashes) {
			break
		}
		y, ok := t.lookup(x, seqHashes[i])
		if !ok {
			break
		}
		row := t.row(y)
		var alive uint64
		for k := range act {
			setRun(out, k, act[k]&^row[k], uint32(i))
			act[k] &= row[k]
			alive |= act[k]
		}
		if alive == 0 {
			return
		}
		x = y
	}
	for k := range act {
		setRun(out, k, act[k], uint32(i))
	}
}

// setRun sets out[w] = n for every worker w = 64k + b whose bit b is set in word.
func setRun(out []uint32, k int, word uint64, n uint32) {
	for word != 0 {
		if w := k*64 + bits.TrailingZeros64(word); w < len(out) {
			out[w] = n
		}
		word &= word - 1
	}
}

// insert returns the node holding the last of seqHashes' blocks (noSlot when there are
// none), after splitting the node where the prompt leaves or ends inside one and adding
// its new blocks as one node. It changes no counts (the caller adds the request).
func (a *ActiveSequences) insert(seqHashes []uint64) uint32 {
	t := &a.tr
	cur := noSlot
	i := 0
	for i < len(seqHashes) {
		x, ok := t.lookup(cur, seqHashes[i])
		if !ok {
			break
		}
		nh := t.nodes[x].hashes
		j := 1 + commonPrefix(nh[1:], seqHashes[i+1:])
		i += j
		if j < len(nh) {
			cur = a.split(x, j)
			break
		}
		cur = x
	}
	if i < len(seqHashes) {
		cur = t.addNode(cur, seqHashes[i:])
	}
	return cur
}

// split cuts node x after its first j blocks (0 < j < len) and returns the new node
// holding them, now x's parent; x keeps its id (requests' tails and x's children stay
// valid) and its requests, which all go through the new node too.
func (a *ActiveSequences) split(x uint32, j int) uint32 {
	t := &a.tr
	top := t.splitNode(x, j)
	if n := &t.nodes[x]; n.refs > n.holders {
		for k, word := range t.row(x) {
			for word != 0 {
				w := k*64 + bits.TrailingZeros64(word)
				if c, ok := a.workers[w].extra.get(uint64(x)); ok {
					a.workers[w].extra.put(uint64(top), c)
				}
				word &= word - 1
			}
		}
	}
	return top
}

// mergeChild merges node x into its only child when no request ends at x, restoring
// the trie's invariant after a request through x ended.
func (a *ActiveSequences) mergeChild(x uint32) {
	t := &a.tr
	n := &t.nodes[x]
	if n.ends != 0 || n.children != 1 {
		return
	}
	if n.refs > n.holders {
		for k, word := range t.row(x) {
			for word != 0 {
				a.workers[k*64+bits.TrailingZeros64(word)].extra.del(uint64(x))
				word &= word - 1
			}
		}
	}
	t.mergeIntoChild(x)
}

// RemoveWorker frees every request active on w and returns how many.
func (a *ActiveSequences) RemoveWorker(w WorkerID) int {
	var ids []string
	for id, s := range a.seqs {
		if s.worker == w {
			ids = append(ids, id)
		}
	}
	for _, id := range ids {
		a.Free(id)
	}
	if int(w) < len(a.workers) {
		a.workers[w] = activeWorker{}
	}
	return len(ids)
}

// activeTree is ActiveSequences' compressed trie of active prompts: each node is a run of
// consecutive blocks (their sequence hashes, in order) with, per worker, a bit saying
// whether a request on that worker goes through it. The counts are ActiveSequences'.
//
// Ownership and invariants:
//   - nodes[x] is live iff hashes is non-empty; free lists the other ids, which are
//     reused. bits[x*words : (x+1)*words] is x's worker bitset, zero while x is free.
//   - parent is noSlot for a root. A node's children are linked through first, next
//     and prev; children counts them.
//   - index maps childKey(parent, hashes[0]) to x for every live x whose indexed is
//     set: a node is found from its parent and its first block, with one probe.
//     Honest sequence hashes never leave a node unindexed; a key already taken (hashes
//     crafted to collide) does, and the node is then found by no lookup.
//   - A node's hashes lie in the buffer of runs[run], whose users counts the live nodes
//     in it: a node added gets a buffer of its own; split nodes share theirs, so that
//     merging them back does not copy. A buffer without users goes back to pool (at
//     most pooledMax words, or as many as are active), from which buffers are taken
//     before allocating.
//   - blocks is the summed length of the live nodes, live their number.
type activeTree struct {
	nodes    []activeNode
	bits     []uint64
	words    int
	free     []uint32
	index    u64Map
	blocks   int
	live     int
	scratch  []uint64 // ActivePrefix's running bitset; never escapes
	runs     []hashRun
	freeRuns []uint32
	pool     [poolClasses][][]uint64 // unused buffers by size class (cap 1<<class words)
	pooled   int                     // words in pool
}

// hashRun is one buffer of sequence hashes and the number of live nodes using it.
type hashRun struct {
	buf   []uint64
	users uint32
}

const (
	poolClasses = 40
	// pooledMax bounds the pool: at most this many words, or as many as are active.
	pooledMax = 1 << 16
)

// newRun returns a run with one user and a buffer of at least n words.
func (t *activeTree) newRun(n int) uint32 {
	class := bits.Len(uint(max(n, 8) - 1))
	var buf []uint64
	if k := len(t.pool[class]); k > 0 {
		buf = t.pool[class][k-1]
		t.pool[class][k-1] = nil
		t.pool[class] = t.pool[class][:k-1]
		t.pooled -= cap(buf)
	} else {
		buf = make([]uint64, 1<<class)
	}
	var r uint32
	if k := len(t.freeRuns); k > 0 {
		r = t.freeRuns[k-1]
		t.freeRuns = t.freeRuns[:k-1]
	} else {
		t.runs = append(t.runs, hashRun{})
		r = uint32(len(t.runs) - 1)
	}
	t.runs[r] = hashRun{buf: buf, users: 1}
	return r
}

// dropRun removes one user of run r, pooling its buffer when it was the last.
func (t *activeTree) dropRun(r uint32) {
	run := &t.runs[r]
	if run.users--; run.users > 0 {
		return
	}
	if buf := run.buf; t.pooled+cap(buf) <= max(pooledMax, t.blocks) {
		class := bits.Len(uint(cap(buf) - 1))
		t.pool[class] = append(t.pool[class], buf[:cap(buf)])
		t.pooled += cap(buf)
	}
	*run = hashRun{}
	t.freeRuns = append(t.freeRuns, r)
}

type activeNode struct {
	hashes                    []uint64
	parent, first, next, prev uint32
	children                  uint32
	ends, refs, holders       uint32 // see ActiveSequences
	run                       uint32 // the hashRun holding hashes
	indexed                   bool
}

func newActiveTree() activeTree {
	return activeTree{words: 1, scratch: make([]uint64, 1)}
}

// childKey is the index key of the child of p (noSlot: a root) whose first block has
// sequence hash h.
func childKey(p uint32, h uint64) uint64 {
	return h ^ (uint64(p)+1)*0xd6e8feb86659fd93
}

// lookup returns the child of p (noSlot: the root) whose first block is h.
func (t *activeTree) lookup(p uint32, h uint64) (uint32, bool) {
	x, ok := t.index.get(childKey(p, h))
	if !ok {
		return noSlot, false
	}
	if n := &t.nodes[x]; n.parent != p || n.hashes[0] != h {
		return noSlot, false
	}
	return x, true
}

func (t *activeTree) link(x uint32) {
	n := &t.nodes[x]
	got, found := t.index.getOrPut(childKey(n.parent, n.hashes[0]), x)
	n.indexed = !found || got == x
}

func (t *activeTree) unlink(x uint32) {
	if n := &t.nodes[x]; n.indexed {
		t.index.del(childKey(n.parent, n.hashes[0]))
		n.indexed = false
	}
}

// ensureWorker widens the bitsets so that worker id w fits.
func (t *activeTree) ensureWorker(w WorkerID) {
	need := int(w)/64 + 1
	if need <= t.words {
		return
	}
	nb := make([]uint64, len(t.nodes)*need)
	for x := range t.nodes {
		copy(nb[x*need:x*need+t.words], t.bits[x*t.words:(x+1)*t.words])
	}
	t.bits, t.words = nb, need
	t.scratch = make([]uint64, need)
}

func (t *activeTree) row(x uint32) []uint64 {
	return t.bits[int(x)*t.words : (int(x)+1)*t.words]
}

func (t *activeTree) has(x uint32, w WorkerID) bool {
	if int(w)/64 >= t.words {
		return false
	}
	return t.bits[int(x)*t.words+int(w)/64]&(1<<(w%64)) != 0
}

// set sets w's bit of x; the caller has called ensureWorker(w).
func (t *activeTree) set(x uint32, w WorkerID) {
	t.bits[int(x)*t.words+int(w)/64] |= 1 << (w % 64)
}

func (t *activeTree) clear(x uint32, w WorkerID) {
	t.bits[int(x)*t.words+int(w)/64] &^= 1 << (w % 64)
}

// alloc returns a free node id (its fields are the caller's to set; its bitset is zero).
func (t *activeTree) alloc() uint32 {
	if n := len(t.free); n > 0 {
		x := t.free[n-1]
		t.free = t.free[:n-1]
		return x
	}
	t.nodes = append(t.nodes, activeNode{})
	for i := 0; i < t.words; i++ {
		t.bits = append(t.bits, 0)
	}
	return uint32(len(t.nodes) - 1)
}

// addNode adds a child of p (noSlot: a root) holding a copy of hashes (non-empty), with
// no requests yet, and returns it.
func (t *activeTree) addNode(p uint32, hashes []uint64) uint32 {
	x := t.alloc()
	r := t.newRun(len(hashes))
	buf := t.runs[r].buf[:len(hashes)]
	copy(buf, hashes)
	t.nodes[x] = activeNode{hashes: buf, parent: p, first: noSlot, run: r}
	t.attach(p, x)
	t.link(x)
	t.blocks += len(hashes)
	t.live++
	return x
}

// attach adds x to p's children (nothing for a root).
func (t *activeTree) attach(p, x uint32) {
	n := &t.nodes[x]
	n.prev, n.next = noSlot, noSlot
	if p == noSlot {
		return
	}
	pn := &t.nodes[p]
	if pn.first != noSlot {
		t.nodes[pn.first].prev = x
		n.next = pn.first
	}
	pn.first = x
	pn.children++
}

// detach removes x from its parent's children.
func (t *activeTree) detach(x uint32) {
	n := &t.nodes[x]
	if n.parent == noSlot {
		return
	}
	if n.prev != noSlot {
		t.nodes[n.prev].next = n.next
	} else {
		t.nodes[n.parent].first = n.next
	}
	if n.next != noSlot {
		t.nodes[n.next].prev = n.prev
	}
	t.nodes[n.parent].children--
	n.prev, n.next = noSlot, noSlot
}

// replace puts y in x's place among x's parent's children (y is in no list).
func (t *activeTree) replace(x, y uint32) {
	n, m := &t.nodes[x], &t.nodes[y]
	m.prev, m.next = n.prev, n.next
	if n.parent != noSlot && n.prev == noSlot {
		t.nodes[n.parent].first = y
	}
	if n.prev != noSlot {
		t.nodes[n.prev].next = y
	}
	if n.next != noSlot {
		t.nodes[n.next].prev = y
	}
	n.prev, n.next = noSlot, noSlot
}

// release frees node x, which has no requests (a zero bitset) and no children.
func (t *activeTree) release(x uint32) {
	t.unlink(x)
	t.detach(x)
	t.blocks -= len(t.nodes[x].hashes)
	t.live--
	t.dropRun(t.nodes[x].run)
	t.nodes[x] = activeNode{}
	t.free = append(t.free, x)
}

// splitNode cuts x after its first j blocks (0 < j < len) into a new node, returned,
// which takes x's place and becomes x's parent with x's counts and bitset.
func (t *activeTree) splitNode(x uint32, j int) uint32 {
	top := t.alloc()
	n, tn := &t.nodes[x], &t.nodes[top]
	t.unlink(x)
	*tn = activeNode{hashes: n.hashes[:j], parent: n.parent, first: x, children: 1,
		refs: n.refs, holders: n.holders, run: n.run}
	t.runs[n.run].users++
	t.replace(x, top)
	n.hashes = n.hashes[j:]
	n.parent = top
	copy(t.row(top), t.row(x))
	t.link(top)
	t.link(x)
	t.live++
	return top
}

// mergeIntoChild merges x, which has exactly one child and no request ending at it,
// into that child (which keeps its id: requests' tails stay valid) and frees x. x's and
// the child's counts are equal (every request through x goes on into the child), so
// only x's are dropped; per-worker counts kept elsewhere are the caller's.
func (t *activeTree) mergeIntoChild(x uint32) {
	n := &t.nodes[x]
	c := n.first
	cn := &t.nodes[c]
	t.unlink(c)
	t.unlink(x)
	xs, cs := n.hashes, cn.hashes
	if cap(xs) > len(xs) && &xs[:len(xs)+1][len(xs)] == &cs[0] {
		cn.hashes = xs[:len(xs)+len(cs)] // cut from one run by splitNode: no copy
		t.dropRun(n.run)
	} else {
		r := t.newRun(len(xs) + len(cs))
		hs := t.runs[r].buf[:len(xs)+len(cs)]
		copy(hs[copy(hs, xs):], cs)
		t.dropRun(n.run)
		t.dropRun(cn.run)
		cn.hashes, cn.run = hs, r
	}
	cn.parent = n.parent
	t.replace(x, c)
	t.link(c)
	clear(t.row(x))
	t.live--
	t.nodes[x] = activeNode{}
	t.free = append(t.free, x)
}

// commonPrefix is the length of the longest common prefix of a and b.
func commonPrefix(a, b []uint64) int {
	n := min(len(a), len(b))
	a, b = a[:n], b[:n]
	for i := range a {
		if a[i] != b[i] {
			return i
		}
	}
	return n
}
