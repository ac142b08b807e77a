package kv

import (
	"errors"
	"fmt"
	"time"
)

// LoRA adapters in routing (docs/reference.md §26.4). A worker holds at most MaxLoras
// adapters in its engine and knows more: those it loaded before and evicted since, which
// it loads again for a request. An adapter request goes to a worker that holds its
// adapter, or that knows it, or with RouteInput.LoraOnDemand to any worker, as long as it
// has a slot to load it in (a free slot, or an unpinned adapter to evict), at the cost of
// the load. The router's view of a worker's adapters is its last registration plus the
// loads it has sent there since (counted as held for LoraPlacedTTL without the worker
// reporting them), in least recently routed order, the order in which the worker evicts
// unpinned adapters.

// Defaults of adapter routing.
const (
	// DefaultLoraLoadMs is the load time assumed for a worker that has not measured one
	// (ms).
	DefaultLoraLoadMs = 200.0
	// LoraPlacedTTL: how long an adapter the router sent a worker to load on demand counts
	// as held there while the worker's registrations do not list it (the load and the
	// next heartbeat).
	LoraPlacedTTL = 10 * time.Second
)

// ErrNoAdapter: the request names a LoRA adapter that no ready worker holds and, when it
// may be loaded on demand, none has a slot for (or no worker reports it: its folder is
// unknown).
var ErrNoAdapter = errors.New("kv: no worker holds the LoRA adapter")

// AdapterSpec is one LoRA adapter a worker reports holding (WorkerSpec.Adapters).
type AdapterSpec struct {
	// Name is the adapter's served name; Path its folder on the worker's host.
	Name, Path string
	// Pinned: placed by an operator; a load on demand never evicts it.
	Pinned bool
}

// heldAdapter is one adapter in the router's view of a worker.
type heldAdapter struct {
	path     string
	pinned   bool
	resident bool      // held in the engine, as the worker's last registration says
	known    bool      // evicted from the engine and still registered there (last registration)
	placedAt time.Time // sent to be loaded and not reported held since (zero: not)
	used     time.Time // last routed to the worker with this adapter
}

// workerLoras is the router's view of a worker's adapters.
type workerLoras struct {
	max    int
	loadMs float64
	held   map[string]*heldAdapter
}

// register folds a registration's adapters in: the held (resident) ones with their
// pinning, the known ones; a placement not yet reported held stays held until
// LoraPlacedTTL after it was sent; anything else the worker no longer has.
func (l *workerLoras) register(max int, loadMs float64, resident, known []AdapterSpec, now time.Time) {
	l.max = max
	if loadMs > 0 && loadMs < 1e9 {
		l.loadMs = loadMs
	}
	if len(resident) == 0 && len(known) == 0 && len(l.held) == 0 {
		return
	}
	if l.held == nil {
		l.held = make(map[string]*heldAdapter, len(resident)+len(known))
	}
	for _, h := range l.held {
		h.resident, h.known = false, false
	}
	for i, list := range [2][]AdapterSpec{resident, known} {
		for _, a := range list {
			if a.Name == "" {
				continue
			}
			h := l.held[a.Name]
			if h == nil {
				h = &heldAdapter{}
				l.held[a.Name] = h
			}
			h.path, h.pinned = a.Path, a.Pinned
			if i == 0 {
				h.resident, h.placedAt = true, time.Time{}
			} else {
				h.known = true
			}
		}
	}
	for name, h := range l.held {
		if !h.resident && !h.known && !l.placedLive(h, now) {
			delete(l.held, name)
		}
	}
}

// placedLive reports whether h is a placement young enough to count as held.
func (l *workerLoras) placedLive(h *heldAdapter, now time.Time) bool {
	return !h.placedAt.IsZero() && now.Sub(h.placedAt) < LoraPlacedTTL
}

// holds reports whether the worker holds adapter name in its engine (reported, or placed
// within LoraPlacedTTL of now).
func (l *workerLoras) holds(name string, now time.Time) bool {
	h := l.held[name]
	return h != nil && l.isHeld(h, now)
}

func (l *workerLoras) isHeld(h *heldAdapter, now time.Time) bool {
	return h.resident || l.placedLive(h, now)
}

// knows reports whether the worker has adapter name registered without holding it: it
// loads it again for a request, from the folder it knows.
func (l *workerLoras) knows(name string) bool {
	h := l.held[name]
	return h != nil && h.known
}

// count is the number of adapters held at now, and how many of them are pinned.
func (l *workerLoras) count(now time.Time) (held, pinned int) {
	for _, h := range l.held {
		if l.isHeld(h, now) {
			held++
			if h.pinned {
				pinned++
			}
		}
	}
	return held, pinned
}

// victim is the adapter a load would evict on worker w at now: none when a slot is free
// (ok true, name ""), else the least recently routed unpinned one that no request active
// on w uses (active nil: none in use). When every unpinned one is in use, name is the
// least recently routed of them and wait is true: the load waits for one to be freed. ok
// is false when every slot holds a pinned adapter (or the worker serves no adapters).
func (l *workerLoras) victim(now time.Time, active *ActiveSequences, w WorkerID) (name string, ok, wait bool) {
	if l.max <= 0 {
		return "", false, false
	}
	held, pinned := l.count(now)
	if held < l.max {
		return "", true, false
	}
	if pinned >= l.max {
		return "", false, false
	}
	var best *heldAdapter
	bestBusy := false
	for n, h := range l.held {
		if h.pinned || !l.isHeld(h, now) {
			continue
		}
		busy := active != nil && active.AdapterInUse(w, n)
		better := best == nil || (bestBusy && !busy) ||
			(busy == bestBusy && (h.used.Before(best.used) || (h.used.Equal(best.used) && n < name)))
		if better {
			best, name, bestBusy = h, n, busy
		}
	}
	return name, best != nil, best != nil && bestBusy
}

// loadMsOr is the worker's measured load time, or def.
func (l *workerLoras) loadMsOr(def float64) float64 {
	if l.loadMs > 0 {
		return l.loadMs
	}
	return def
}

// loraRoute is what the Route in progress asks of adapters.
type loraRoute struct {
	name     string // "" for the base model
	onDemand bool   // RouteInput.LoraOnDemand or Config.IgnoreAdapters
	path     string // a folder some worker reports the adapter at ("" unknown)
	misfit   int    // workers gather passed over for the adapter alone
	// noSlot: of those, the workers that know the adapter (or may load it on demand) but
	// whose slots all hold pinned adapters.
	noSlot int
	// loadMs: the load time assumed for a worker that has measured none: the mean of
	// those that have, else Config.LoraLoadMs.
	loadMs float64
}

// startLora prepares r.lora for in: the adapter's folder when it may be loaded on demand.
// A fleet where no worker registers adapter slots (MaxLoras) manages no adapters: the
// engines were given theirs out of band (e.g. vLLM's --lora-modules among the engine
// arguments), so any worker may serve any adapter and the name only salts the hashes.
func (r *Router) startLora(in *RouteInput) {
	r.lora = loraRoute{}
	if in.LoraName == "" {
		return
	}
	managed, sum, n := false, 0.0, 0
	for _, rw := range r.workers {
		if rw == nil {
			continue
		}
		managed = managed || rw.lora.max > 0
		if rw.lora.loadMs > 0 {
			sum, n = sum+rw.lora.loadMs, n+1
		}
	}
	if !managed {
		return
	}
	r.lora = loraRoute{name: in.LoraName, onDemand: in.LoraOnDemand || r.cfg.IgnoreAdapters, path: in.LoraPath,
		loadMs: r.cfg.LoraLoadMs}
	if n > 0 {
		r.lora.loadMs = sum / float64(n)
	}
	if !r.lora.onDemand || r.lora.path != "" {
		return
	}
	for _, rw := range r.workers {
		if rw == nil {
			continue
		}
		if h := rw.lora.held[r.lora.name]; h != nil && (h.resident || h.known) && h.path != "" {
			r.lora.path = h.path
			return
		}
	}
}

// loraFit says whether rw may take the Route in progress as far as adapters go, and its
// candidate facts: held (no load), or the load (ms), whether it evicts an adapter, and
// the wait for a slot (ms) when every unpinned adapter there is in use: about one of the
// worker's decodes (its mean decode time, else DecodeMs at an empty cache for
// defaultDecodeTokens tokens).
func (r *Router) loraFit(rw *routerWorker) (ok bool, loadMs float64, evicts bool, waitMs float64) {
	if r.lora.name == "" {
		return true, 0, false, 0
	}
	if rw.lora.holds(r.lora.name, r.now) {
		return true, 0, false, 0
	}
	if !rw.lora.knows(r.lora.name) && (!r.lora.onDemand || r.lora.path == "") {
		return false, 0, false, 0
	}
	victim, ok, wait := rw.lora.victim(r.now, r.active, rw.id)
	if !ok {
		r.lora.noSlot++
		return false, 0, false, 0
	}
	if wait {
		waitMs = rw.decodeSecs * 1000
		if !(waitMs > 0) {
			waitMs = defaultDecodeTokens * r.cfg.Profile.DecodeMs(0)
		}
	}
	return true, rw.lora.loadMsOr(r.lora.loadMs), victim != "", waitMs
}

// noEligible is the error of a Route that found no eligible worker: ErrAllBusy when the
// workers passed over for the adapter could all serve it but for slots that hold pinned
// adapters (an unload frees one: retry), ErrNoAdapter when some were passed over for the
// adapter otherwise, else ErrNoWorkers with detail.
func (r *Router) noEligible(detail string) error {
	if r.lora.misfit > 0 && r.lora.noSlot == r.lora.misfit {
		return fmt.Errorf("%w: LoRA adapter %q: the workers that could load it (%d) have every slot holding a pinned adapter",
			ErrAllBusy, r.lora.name, r.lora.noSlot)
	}
	if r.lora.misfit > 0 {
		how := "holds it"
		if r.lora.onDemand {
			how = "holds it or has a slot to load it in"
			if r.lora.path == "" {
				how = "holds it (none reports its folder, so it cannot be loaded on demand)"
			}
		}
		return fmt.Errorf("%w: %q: none of %d ready workers %s", ErrNoAdapter, r.lora.name, r.lora.misfit, how)
	}
	return fmt.Errorf("%w: %s", ErrNoWorkers, detail)
}

// placeLora records a routed adapter request on its workers: the adapter was used there
// now and is in use until the request (or its prefill leg) is freed, and a worker that
// did not hold it loads it (evicting its least recently routed unpinned adapter, one not
// in use if it can, when full). It returns the folder to load from when one must.
func (r *Router) placeLora(reqID string, d *Decision, now time.Time) string {
	if r.lora.name == "" {
		return ""
	}
	r.active.SetAdapter(reqID, r.lora.name)
	if d.Prefill != nil {
		r.active.SetAdapter(d.Prefill.RequestID, r.lora.name)
	}
	path := ""
	for _, w := range [2]WorkerID{d.Worker, prefillWorker(d)} {
		if w == noWorker || int(w) >= len(r.workers) || r.workers[w] == nil {
			continue
		}
		l := &r.workers[w].lora
		if !l.holds(r.lora.name, now) {
			from := r.lora.path
			if h := l.held[r.lora.name]; h != nil && h.known {
				from = h.path // the worker loads it again from its own record
			}
			if from == "" {
				continue // a pinned route: the worker's own report will say
			}
			if victim, ok, _ := l.victim(now, r.active, w); ok && victim != "" {
				v := l.held[victim]
				v.resident, v.placedAt, v.known = false, time.Time{}, true
			}
			if l.held == nil {
				l.held = map[string]*heldAdapter{}
			}
			h := l.held[r.lora.name]
			if h == nil {
				h = &heldAdapter{path: from}
				l.held[r.lora.name] = h
			}
			h.placedAt = now
			if path == "" {
				path = from
			}
		}
		l.held[r.lora.name].used = now
	}
	return path
}

// prefillWorker is d's prefill leg's worker, or noWorker.
func prefillWorker(d *Decision) WorkerID {
	if d.Prefill == nil {
		return noWorker
	}
	return d.Prefill.Worker
}
