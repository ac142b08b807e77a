package kv

import (
	"math"
	"time"
)

// Predicted placements (docs/reference.md §3.3, §3.4). A routed prompt's blocks will
// be in its worker's KV cache once the engine has computed them, but the engine's KV
// events say so only later. The Router predicts
// them, and a candidate's prefix hit is the longest of its run in the index and its
// predicted runs, so that requests sharing a prefix that arrive before the first one's
// events (a fan-out, an agent's parallel tool calls) meet on one worker:
//
//   - Workers with KV events (IndexEvents), with Config.PredictActive: the blocks of the
//     requests routed to the worker and still tracked (ActiveSequences; the prefill leg
//     of a remote decision on its prefill worker) count as cached there. The engine
//     computes a request's prompt before it ends and publishes the blocks as it does,
//     so this bridges exactly the time until the events arrive, at no cost: the load
//     tracking walks the prompt anyway (ActivePrefix). (A record per placement with a
//     time-to-live, as for the workers below, made BenchmarkRoute's decisions about
//     40 % slower.)
//   - Workers without KV events (IndexApproximate): after each decision the Router
//     records the prompt's blocks as predicted on the worker(s) chosen, for
//     Config.ApproxTTL after the last request that used them, at most the worker's KV
//     capacity in blocks (oldest out first): its whole index, as in Dynamo's and
//     llm-d's approximate modes. They are dropped with a new engine epoch and with the
//     worker, and when its first event batch makes it exact again (their blocks were
//     never confirmed).
//
// Predictions are kept apart from the index: dumps, Stats.IndexNodes and
// WorkerStats.IndexedBlocks never count them (WorkerStats.PredictedBlocks does).

// IndexMode says what a worker's prefix hits are read from.
type IndexMode uint8

const (
	// IndexEvents: the worker's engine publishes KV events; the index holds its blocks,
	// and its tracked requests (Config.PredictActive) bridge the time until they arrive.
	IndexEvents IndexMode = iota
	// IndexApproximate: no KV events from the worker (its registration said so, or
	// none came, see Config.ApproxAfterRequests); predictions (Config.ApproxTTL) are
	// its whole index.
	IndexApproximate
)

// String is the mode's label: "events" or "approximate" (the metric's mode label).
func (m IndexMode) String() string {
	if m == IndexApproximate {
		return "approximate"
	}
	return "events"
}

// predTipSlots is the size of predictions.tips (a power of two).
const predTipSlots = 256

// predRefreshDivisor: a chain predicted on a worker again within ttl/predRefreshDivisor
// of its previous prediction is not pushed again, so that a hot prompt costs one
// lookup per route, not one per block. Its blocks then expire between
// (1-1/predRefreshDivisor)·ttl and ttl after its last routing.
const predRefreshDivisor = 4

// predictions holds the predicted placements of every worker: a tree of blocks keyed
// by chained sequence hashes, like the index (bitTable), whose bitsets mark the workers
// a block is predicted on, and per worker the order in which its blocks were predicted.
// Pure: time is an argument. Not safe for concurrent use.
//
// Ownership and invariants (predictions owns all of it):
//   - Authoritative, per worker w: live maps each slot predicted on w to the ring index
//     of its newest entry; ring holds (slot, push time) entries in push order, ring[:head]
//     consumed. An entry is live iff live[slot] is its index; older entries of a slot
//     pushed again are dead and skipped.
//   - Slot s's bit for w is set iff s is in w's live map; holders[s] counts the set bits;
//     a slot lives exactly while holders[s] > 0.
//   - Whole prefixes only: a chain is pushed with all its ancestors, tail first, so for
//     every worker the live entry of a block comes after those of its descendants.
//     Entries leave from the head (expiry, the capacity bound, clearing), so a block
//     leaves w no earlier than its descendants, and a slot is released only once no
//     worker holds a descendant (the bitTable's rule that parents outlive children).
//   - tips is a lossy cache from a chain's last sequence hash to its slot, checked
//     against the table before use (the slot's key and the worker's bit).
type predictions struct {
	t       bitTable
	holders []uint32 // per slot
	workers []predWorker
	path    []uint32 // scratch: the slots of the chain being recorded
	tips    [predTipSlots]predTip
	// base is the first time given (add or expire); entries keep their push time as
	// nanoseconds since base, now.Sub(base), which follows the monotonic clock when the
	// times carry it (time.Now's do): a step of the wall clock moves no entry's age.
	base    time.Time
	hasBase bool
}

type predWorker struct {
	ring []predEntry
	head int
	live u64Map // slot → ring index of its newest entry
}

type predEntry struct {
	slot uint32
	at   int64 // push time, nanoseconds since predictions.base
}

type predTip struct {
	hash uint64
	slot uint32
}

func newPredictions() *predictions { return &predictions{t: newBitTable()} }

// since is now in nanoseconds since base (set by the first call).
func (p *predictions) since(now time.Time) int64 {
	if !p.hasBase {
		p.base, p.hasBase = now, true
	}
	return int64(now.Sub(p.base))
}

// nodes is the number of distinct predicted blocks (on any worker).
func (p *predictions) nodes() int { return p.t.len() }

// blocks is the number of blocks predicted on worker w.
func (p *predictions) blocks(w WorkerID) int {
	if int(w) < len(p.workers) {
		return p.workers[w].live.len()
	}
	return 0
}

func (p *predictions) worker(w WorkerID) *predWorker {
	for int(w) >= len(p.workers) {
		p.workers = append(p.workers, predWorker{})
	}
	p.t.ensureWorker(w)
	return &p.workers[w]
}

// overlaps sets out[w], for every worker id w < len(out), to the number of leading
// blocks of a prompt (its sequence hashes) predicted on w. It does not allocate.
func (p *predictions) overlaps(seqHashes []uint64, out []uint32) {
	if p.t.len() == 0 {
		clear(out)
		return
	}
	p.t.leading(seqHashes, out)
}

// add predicts the blocks of a prompt (its sequence hashes) on worker w at now, then
// drops w's oldest predictions while more than capacity blocks (> 0) are predicted on
// it. A prompt longer than capacity blocks is predicted up to its first capacity
// blocks. A prompt whose whole chain was predicted on w within ttl/predRefreshDivisor
// is left as it is. It allocates only while the tables grow.
func (p *predictions) add(w WorkerID, seqHashes []uint64, now time.Time, ttl time.Duration, capacity int) {
	if len(seqHashes) == 0 || capacity <= 0 {
		return
	}
	if len(seqHashes) > capacity {
		seqHashes = seqHashes[:capacity]
	}
	pw := p.worker(w)
	at := p.since(now)
	tipHash := seqHashes[len(seqHashes)-1]
	tip := &p.tips[tipHash&(predTipSlots-1)]
	if tip.hash == tipHash && int(tip.slot) < p.t.capSlots() && p.t.live(tip.slot) &&
		p.t.keys[tip.slot] == tipHash && p.t.has(tip.slot, w) {
		if i, ok := pw.live.get(uint64(tip.slot)); ok && at-pw.ring[i].at < int64(ttl/predRefreshDivisor) {
			return
		}
	}
	path := p.path[:0]
	prev := noSlot
	for _, h := range seqHashes {
		s, created := p.t.insertAfter(prev, h)
		if created && int(s) >= len(p.holders) {
			p.holders = append(p.holders, 0)
		}
		path = append(path, s)
		prev = s
	}
	p.path = path
	for i := len(path) - 1; i >= 0; i-- { // tail first: descendants leave before ancestors
		s := path[i]
		idx := uint32(len(pw.ring))
		if _, found := pw.live.getOrPut(uint64(s), idx); found {
			pw.live.put(uint64(s), idx)
		} else {
			p.t.set(s, w)
			p.holders[s]++
		}
		pw.ring = append(pw.ring, predEntry{slot: s, at: at})
	}
	*tip = predTip{hash: tipHash, slot: path[len(path)-1]}
	for pw.live.len() > capacity {
		p.pop(w, pw)
	}
	p.compact(pw)
}

// pop consumes w's oldest entry, dropping its block if the entry is live.
func (p *predictions) pop(w WorkerID, pw *predWorker) {
	i := pw.head
	e := pw.ring[i]
	pw.head++
	if v, ok := pw.live.get(uint64(e.slot)); !ok || int(v) != i {
		return
	}
	pw.live.del(uint64(e.slot))
	p.t.clear(e.slot, w)
	p.holders[e.slot]--
	if p.holders[e.slot] == 0 {
		p.t.release(e.slot)
	}
}

// expire drops w's predictions pushed more than ttl before now.
func (p *predictions) expire(w WorkerID, now time.Time, ttl time.Duration) {
	if int(w) >= len(p.workers) {
		return
	}
	pw := &p.workers[w]
	if pw.head == len(pw.ring) {
		return
	}
	cutoff := p.since(now) - int64(ttl)
	for pw.head < len(pw.ring) && pw.ring[pw.head].at < cutoff {
		p.pop(w, pw)
	}
	p.compact(pw)
}

// compact drops consumed entries, and dead ones once they dominate w's ring,
// renumbering the live entries; amortized O(1) per push.
func (p *predictions) compact(pw *predWorker) {
	n := len(pw.ring)
	if pw.head == n {
		pw.ring, pw.head = pw.ring[:0], 0
		return
	}
	live := pw.live.len()
	if n-pw.head < 2*live+1024 && (pw.head < 1024 || pw.head < n/2) {
		return
	}
	kept := pw.ring[:0]
	for i := pw.head; i < n; i++ {
		e := pw.ring[i]
		if v, ok := pw.live.get(uint64(e.slot)); ok && int(v) == i {
			pw.live.put(uint64(e.slot), uint32(len(kept)))
			kept = append(kept, e)
		}
	}
	pw.ring, pw.head = kept, 0
}

// clearWorker drops every prediction of worker w (a new engine epoch, a mode change
// that makes them meaningless, the worker's removal).
func (p *predictions) clearWorker(w WorkerID) {
	if int(w) >= len(p.workers) {
		return
	}
	pw := &p.workers[w]
	for pw.head < len(pw.ring) {
		p.pop(w, pw)
	}
	pw.ring, pw.head = pw.ring[:0], 0
}

// removeWorker drops worker w's predictions and frees its storage.
func (p *predictions) removeWorker(w WorkerID) {
	if int(w) >= len(p.workers) {
		return
	}
	p.clearWorker(w)
	p.workers[w] = predWorker{}
}

// noWorker marks "no worker" in WorkerID-valued fields.
const noWorker = ^WorkerID(0)

// predictCapacity bounds the blocks predicted on rw: its KV capacity, else
// Config.PredictBlocks.
func (r *Router) predictCapacity(rw *routerWorker) int {
	if rw.totalBlocks > 0 {
		return int(min(rw.totalBlocks, math.MaxInt32))
	}
	return int(r.cfg.PredictBlocks)
}

// indexMode is rw's IndexMode.
func (rw *routerWorker) indexMode() IndexMode {
	if rw.approx {
		return IndexApproximate
	}
	return IndexEvents
}

// lookupPredicted prepares what candidate adds to the index's facts for the prompt
// being routed (its sequence hashes): it expires the approximate workers' predictions,
// fills r.pdBuf with the predicted overlaps and sets r.sessionWorker.
func (r *Router) lookupPredicted(in *RouteInput, hashes []uint64, now time.Time) {
	r.routeHashes = hashes
	for _, rw := range r.workers {
		if rw != nil && rw.approx {
			r.pred.expire(rw.id, now, r.cfg.ApproxTTL)
		}
	}
	n := len(r.workers)
	if cap(r.pdBuf) < n {
		r.pdBuf = make([]uint32, n)
	}
	r.pdBuf = r.pdBuf[:n]
	r.pred.overlaps(hashes, r.pdBuf)
	r.sessionWorker = noWorker
	r.sessions.expire(now)
	if in.SessionID != "" {
		if name, ok := r.sessions.get(in.SessionID, now); ok {
			if rw := r.byName[name]; rw != nil {
				r.sessionWorker = rw.id
			}
		}
	}
}

// predictedFacts completes candidate c of worker rw (r.apBuf and r.pdBuf filled): its
// prefix hit is the longest of the index's, its tracked requests' (Config.PredictActive)
// and its recorded predictions', an approximate worker's cache is its predicted blocks,
// and the session mark.
func (r *Router) predictedFacts(rw *routerWorker, c *Candidate) {
	// Only an aggregated worker computes the prompts it is routed: a decode worker's
	// tracked prompts reach its cache by a transfer that may not have happened yet.
	if r.cfg.PredictActive && rw.role == RoleAggregated && c.ActivePrefixBlocks > c.OverlapBlocks {
		c.OverlapBlocks = c.ActivePrefixBlocks
	}
	if int(rw.id) < len(r.pdBuf) && int(r.pdBuf[rw.id]) > c.OverlapBlocks {
		c.OverlapBlocks = int(r.pdBuf[rw.id])
	}
	if rw.approx {
		c.IndexedBlocks = r.pred.blocks(rw.id)
	}
	c.SessionWorker = rw.id == r.sessionWorker
}

// recordPlacement records a routed request (decision d) in the predictions of the
// workers that will hold its prompt's blocks (the worker, and the prefill worker of a
// remote decision), in the silence count of the one that computes them, and in its
// session.
func (r *Router) recordPlacement(in *RouteInput, d *Decision, now time.Time) {
	hashes := r.routeHashes
	r.routeHashes = nil
	computes := d.Worker
	if d.Prefill != nil {
		computes = d.Prefill.Worker
		r.predict(d.Prefill.Worker, hashes, true, now)
	}
	r.predict(d.Worker, hashes, computes == d.Worker, now)
	if in.SessionID != "" {
		r.sessions.put(in.SessionID, d.WorkerID, now)
	}
}

// predict records that worker w will hold the blocks of a prompt (its sequence hashes)
// routed at now: in its predictions when it is approximate. computes: w computes the
// blocks it lacks, so its engine's KV events should follow; a worker with events routed
// Config.ApproxAfterRequests such requests, over Config.ApproxAfterSilence or more,
// without a batch in between switches to approximate mode.
func (r *Router) predict(w WorkerID, hashes []uint64, computes bool, now time.Time) {
	if int(w) >= len(r.workers) || r.workers[w] == nil || len(hashes) == 0 {
		return
	}
	rw := r.workers[w]
	if !rw.approx {
		if !computes || int(w) < len(r.ovBuf) && int(r.ovBuf[w]) >= len(hashes) {
			return // nothing new to store: no event to wait for
		}
		if rw.silentRoutes == 0 {
			rw.silentSince = now
		}
		rw.silentRoutes++
		n := r.cfg.ApproxAfterRequests
		if n <= 0 || rw.silentRoutes < n || now.Sub(rw.silentSince) < r.cfg.ApproxAfterSilence {
			return
		}
		rw.approx = true
	}
	r.pred.add(w, hashes, now, r.cfg.ApproxTTL, r.predictCapacity(rw))
}

// eventsArrived records an event batch of rw's current engine: its engine publishes KV
// events, so it is in events mode; what was predicted in approximate mode goes, never
// confirmed by an event.
func (r *Router) eventsArrived(rw *routerWorker) {
	if rw.approx {
		r.pred.clearWorker(rw.id)
	}
	rw.approx, rw.silentRoutes = false, 0
}
