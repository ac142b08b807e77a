package kv

import (
	"math"
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
// Ownership and invariants (ActiveSequences owns all of it; not safe for concurrent use):
//   - Authoritative: seqs, the active requests by id, each with its worker, its prompt
//     blocks (as slots of t), its prefill tokens and whether prefill is done.
//   - Derived, kept in step by Add/PrefillDone/Free only: slot s's bit for w is set iff
//     some active request on w has block s; extra counts the further requests on w
//     sharing s; holders[s] is the number of set bits; refs[s] the number of requests
//     (on any worker) with block s, so refs[s] == holders[s] means no worker has a
//     second request on s and extra need not be consulted.
//   - A slot lives exactly while refs > 0. A request holds whole prefixes, so a block
//     whose refs reach 0 has no live descendants; Free releases a request's blocks
//     tail first.
//   - Every way a request ends (Free after completion, cancel or error, Expire,
//     RemoveWorker, re-Add of the same id) goes through one release path, so load always
//     returns to zero.
//   - queue holds (id, generation, start) in Add order; entries of requests already
//     freed or re-added are skipped and compacted away.
type ActiveSequences struct {
	maxAge  time.Duration
	t       bitTable
	holders []uint32 // per slot
	refs    []uint32 // per slot
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
	extra         u64Map // slot → further requests sharing it
	// decoding: requests past their first token; doneSum: the sum of their first-token
	// times (seconds since base), so their summed decode age at t is decoding·t − doneSum.
	decoding int
	doneSum  float64
}

type activeSeq struct {
	worker        WorkerID
	slots         []uint32
	prefillTokens int64
	prefillDone   bool
	decoding      bool    // counted in its worker's decoding (PrefillDoneAt)
	doneAt        float64 // first token, seconds since base (decoding only)
	start         time.Time
	gen           uint64
	predictedMs   float64 // the TTFT the router predicted for it (Note)
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
	return &ActiveSequences{maxAge: maxAge, t: newBitTable(), seqs: make(map[string]*activeSeq)}
}

// Len is the number of active requests.
func (a *ActiveSequences) Len() int { return len(a.seqs) }

// Blocks is the number of distinct blocks active on any worker.
func (a *ActiveSequences) Blocks() int { return a.t.len() }

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
	if int(w) >= len(a.workers) || a.workers[w].decoding == 0 {
		return 0
	}
	aw := &a.workers[w]
	return math.Max(0, float64(aw.decoding)*a.since(now)-aw.doneSum)
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
	a.t.ensureWorker(w)
	aw := &a.workers[w]
	slots := make([]uint32, len(seqHashes))
	prev := noSlot
	for i, h := range seqHashes {
		s, created := a.t.insertAfter(prev, h)
		prev = s
		if created && int(s) >= len(a.holders) {
			a.holders = append(a.holders, 0)
			a.refs = append(a.refs, 0)
		}
		a.refs[s]++
		if a.t.has(s, w) {
			c, _ := aw.extra.getOrPut(uint64(s), 0)
			aw.extra.put(uint64(s), c+1)
		} else {
			a.t.set(s, w)
			a.holders[s]++
			aw.blocks++
		}
		slots[i] = s
	}
	aw.prefillTokens += prefillTokens
	aw.sequences++
	a.gen++
	a.seqs[reqID] = &activeSeq{worker: w, slots: slots, prefillTokens: prefillTokens, start: now, gen: a.gen}
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
		a.workers[s.worker].prefillTokens -= s.prefillTokens
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
	aw := &a.workers[s.worker]
	w := s.worker
	for i := len(s.slots) - 1; i >= 0; i-- { // tail first: children before parents
		slot := s.slots[i]
		shared := a.refs[slot] > a.holders[slot]
		a.refs[slot]--
		if shared {
			if c, _ := aw.extra.get(uint64(slot)); c > 0 {
				if c == 1 {
					aw.extra.del(uint64(slot))
				} else {
					aw.extra.put(uint64(slot), c-1)
				}
				continue
			}
		}
		a.t.clear(slot, w)
		aw.blocks--
		a.holders[slot]--
		if a.refs[slot] == 0 {
			a.t.release(slot)
		}
	}
	if !s.prefillDone {
		aw.prefillTokens -= s.prefillTokens
	}
	if s.decoding {
		aw.decoding--
		aw.doneSum -= s.doneAt
		if aw.decoding == 0 {
			aw.doneSum = 0 // no drift left behind
		}
	}
	aw.sequences--
	return true
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
	a.t.leading(seqHashes, out)
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
