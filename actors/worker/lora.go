package worker

import (
	"fmt"
	"path/filepath"
	"sort"

	"github.com/turbine-llm/turbine/messages"
	"github.com/turbine-llm/turbine/model"
	"google.golang.org/protobuf/proto"
)

// The worker's LoRA adapter slots (docs/reference.md §26.2). loraTable is the pure core:
// which adapters the worker holds or is loading, which slot a load takes and which
// adapter it evicts; the actor (loraops.go) does the folder checks and the engine calls
// off its goroutine and feeds their outcomes back in.
//
// Invariants: the entries holding a slot (loading, held, unloading, restoring) are at
// most max; an evicting entry gave its slot to the load that evicts it, so the engine,
// which unloads the victim before it loads the new adapter, never holds more than max.
// A pinned adapter is never evicted. An entry's running count is the requests that use
// it, waiting for its load (or for its eviction to end) or running; one with requests
// is never evicted, and an unload waits for them (bounded: Config.LoraUnloadGrace).
//
// Requests during an eviction: a request naming an adapter being evicted uses it all
// the same; once out of the engine, an adapter that requests wait for is loaded again
// for them (checking, as a known adapter is), keeping its generation, its turn among
// the loads waiting for a slot taken from its first such request (order). An operator's
// unload is no eviction: its adapter takes no request.
//
// Waiting for a slot: a load for requests that finds every slot taken by a pinned
// adapter or one that requests use, and not every slot pinned, waits (waiting: no slot
// taken) until the last request of an unpinned adapter ends (or a slot is freed
// otherwise), the oldest waiting load first (wake). A waiting load no request waits for
// any more is given up; one whose slots all come to hold pinned adapters fails. The
// requests' own bound (Config.LoraWaitTimeout) bounds the wait.
//
// Known adapters: an adapter the engine loaded and no longer holds without an unload
// having been asked (evicted for another, or an unpinned one of an engine that exited)
// stays registered, as vLLM keeps a loaded adapter served while its cache drops the
// weights: its name and folder are kept (known), a request naming it loads it again from
// that folder, and only an unload forgets it. The entries and the known adapters are
// disjoint; the known ones are at most MaxKnownLoras, the least recently used forgotten
// first.

// loraState is where an adapter of the table stands.
type loraState int

const (
	loraChecking  loraState = iota // its folder is being checked; no slot taken yet
	loraLoading                    // the engine is loading it into its slot
	loraHeld                       // the engine holds it: requests use it
	loraUnloading                  // unload asked: no new request; unloaded once none runs
	loraEvicting                   // leaving the engine to free its slot for another load
	loraRestoring                  // pinned, loaded again into a restarted engine
	loraWaiting                    // checked, waiting for a slot to be freed; no slot taken
)

var loraStateNames = [...]string{"checking", "loading", "held", "unloading", "evicting", "restoring", "waiting"}

func (s loraState) String() string { return loraStateNames[s] }

// holdsSlot reports whether an entry in state s counts against max.
func (s loraState) holdsSlot() bool {
	return s == loraLoading || s == loraHeld || s == loraUnloading || s == loraRestoring
}

// loraError is a refused adapter operation: its LoraReply failure and message.
type loraError struct {
	failure messages.LoraFailure
	msg     string
}

func (e *loraError) Error() string { return e.msg }

func loraErrorf(f messages.LoraFailure, format string, args ...any) *loraError {
	return &loraError{failure: f, msg: fmt.Sprintf(format, args...)}
}

// loraEntry is one adapter of the table.
type loraEntry struct {
	adapter *messages.LoraAdapter // name, path (cleaned), parent, base_model, rank, pinned
	state   loraState
	gen     uint64 // unique per entry: an outcome for an older entry of the name is stale
	order   uint64 // when its load began for requests: its turn among the loads waiting for a slot
	used    uint64 // the table's sequence at its last use: the least recently used is evicted
	running int    // requests using it (waiting for its load or its eviction's end, or running)
	once    bool   // an engine has held it: a restoring entry is loaded again, not for the first time
	// known: a known adapter being loaded again; a load that ends without loading it for
	// want of a slot or an engine (not a bad folder) leaves it known.
	known bool
}

// knownLora is a known adapter: registered, not in the engine.
type knownLora struct {
	adapter *messages.LoraAdapter // unpinned
	used    uint64                // the table's sequence at its last use
}

// loraTable is the worker's adapters. Not safe for concurrent use (the actor owns it).
type loraTable struct {
	max      int
	maxKnown int    // the known adapters kept at most (MaxKnownLoras)
	seq      uint64 // use sequence and generations
	entries  map[string]*loraEntry
	known    map[string]*knownLora
}

func newLoraTable(max int) *loraTable {
	return &loraTable{max: max, maxKnown: MaxKnownLoras, entries: map[string]*loraEntry{}, known: map[string]*knownLora{}}
}

func (t *loraTable) next() uint64 { t.seq++; return t.seq }

// loraBegin is what a load asked for must do next.
type loraBegin int

const (
	loraBeginCheck loraBegin = iota // a new entry: check its folder (checked)
	loraBeginHeld                   // already held with that path: nothing to load
	loraBeginJoin                   // already being checked or loaded with that path: wait for that load
)

// begin starts a load of a (name and path; pinned: an operator's). An adapter of that
// name with another path is LORA_INVALID; one leaving the engine LORA_ENGINE (try again
// once it is gone). A pinned load of an adapter held or being loaded unpinned pins it;
// an unpinned load never unpins one. A known adapter is loaded again (from its folder).
// gen is the entry's generation.
func (t *loraTable) begin(a *messages.LoraAdapter) (next loraBegin, gen uint64, err *loraError) {
	path := filepath.Clean(a.GetPath())
	if k := t.known[a.GetName()]; k != nil {
		if k.adapter.GetPath() != path {
			return 0, 0, loraErrorf(messages.LoraFailure_LORA_INVALID,
				"adapter %q is already registered from %s, not %s (unload it first, or choose another name)", a.GetName(), k.adapter.GetPath(), path)
		}
		delete(t.known, a.GetName())
		ad := proto.Clone(k.adapter).(*messages.LoraAdapter)
		ad.Pinned = a.GetPinned()
		e := &loraEntry{adapter: ad, state: loraChecking, gen: t.next(), known: true}
		e.used, e.order = e.gen, e.gen
		t.entries[ad.Name] = e
		return loraBeginCheck, e.gen, nil
	}
	if e := t.entries[a.GetName()]; e != nil {
		switch {
		case e.adapter.GetPath() != path:
			return 0, 0, loraErrorf(messages.LoraFailure_LORA_INVALID,
				"adapter %q is already loaded from %s, not %s (unload it first, or choose another name)", a.GetName(), e.adapter.GetPath(), path)
		case e.state == loraUnloading || e.state == loraEvicting:
			return 0, 0, loraErrorf(messages.LoraFailure_LORA_ENGINE, "adapter %q is being unloaded; load it again once it is gone", a.GetName())
		case e.state == loraRestoring:
			return 0, 0, loraErrorf(messages.LoraFailure_LORA_ENGINE, "adapter %q is being loaded into the restarted engine", a.GetName())
		}
		e.adapter.Pinned = e.adapter.Pinned || a.GetPinned()
		if e.state == loraHeld {
			return loraBeginHeld, e.gen, nil
		}
		return loraBeginJoin, e.gen, nil
	}
	ad := proto.Clone(a).(*messages.LoraAdapter)
	ad.Path = path
	e := &loraEntry{adapter: ad, state: loraChecking, gen: t.next()}
	e.used, e.order = e.gen, e.gen
	t.entries[ad.Name] = e
	return loraBeginCheck, e.gen, nil
}

// entry returns the entry of name when it is of generation gen.
func (t *loraTable) entry(name string, gen uint64) *loraEntry {
	if e := t.entries[name]; e != nil && e.gen == gen {
		return e
	}
	return nil
}

// drop removes entry name of generation gen: its load ended without loading it (no
// engine to load it into). A known adapter being loaded again stays known.
func (t *loraTable) drop(name string, gen uint64) {
	if e := t.entry(name, gen); e != nil {
		t.remove(e)
	}
}

// reject removes entry name of generation gen and forgets it: the adapter itself is bad
// (its folder's check failed, or the engine refused it), known or not.
func (t *loraTable) reject(name string, gen uint64) {
	if t.entry(name, gen) != nil {
		delete(t.entries, name)
	}
}

// remove takes e out of the entries; a known adapter being loaded again goes back to
// the known ones.
func (t *loraTable) remove(e *loraEntry) {
	delete(t.entries, e.adapter.Name)
	if e.known {
		t.remember(e)
	}
}

// remember makes e's adapter known (unpinned), as recently used as e was; past maxKnown
// the least recently used known adapter is forgotten.
func (t *loraTable) remember(e *loraEntry) {
	ad := proto.Clone(e.adapter).(*messages.LoraAdapter)
	ad.Pinned = false
	t.known[ad.Name] = &knownLora{adapter: ad, used: e.used}
	for len(t.known) > max(t.maxKnown, 0) {
		var oldest string
		var used uint64
		for n, k := range t.known {
			if oldest == "" || k.used < used || (k.used == used && n < oldest) {
				oldest, used = n, k.used
			}
		}
		delete(t.known, oldest)
	}
}

// forget forgets known adapter name (an unload); false when it is not known.
func (t *loraTable) forget(name string) bool {
	if t.known[name] == nil {
		return false
	}
	delete(t.known, name)
	return true
}

// knownPath is the folder of known adapter name; false when it is not known.
func (t *loraTable) knownPath(name string) (string, bool) {
	if k := t.known[name]; k != nil {
		return k.adapter.GetPath(), true
	}
	return "", false
}

// knownList lists the known adapters, by name: what the worker registers besides the
// held ones (copies).
func (t *loraTable) knownList() []*messages.LoraAdapter {
	if len(t.known) == 0 {
		return nil
	}
	out := make([]*messages.LoraAdapter, 0, len(t.known))
	for _, k := range t.known {
		out = append(out, proto.Clone(k.adapter).(*messages.LoraAdapter))
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// reserve gives checked entry name (generation gen) its slot, with the figures its
// folder gave (a: base model and rank): a free slot, else the slot of the least recently
// used unpinned held adapter that no request uses, which is then evicting (victim; the
// engine must unload it before it loads name; it is known once unloaded). With neither,
// or with older loads waiting (they come first), a load that requests use waits for a
// slot (wait: waiting; wake gives it one) unless every slot holds a pinned adapter that
// no unload is freeing (LORA_NO_SLOT: no request will ever free one); a load no request
// uses (an operator's) is LORA_NO_SLOT. On LORA_NO_SLOT the entry is dropped (drop). A
// stale gen is LORA_ENGINE (the engine restarted meanwhile).
func (t *loraTable) reserve(name string, gen uint64, a model.Adapter) (victim string, wait bool, err *loraError) {
	e := t.entry(name, gen)
	if e == nil || e.state != loraChecking {
		return "", false, loraErrorf(messages.LoraFailure_LORA_ENGINE, "adapter %q: the engine restarted during the load", name)
	}
	e.adapter.BaseModel, e.adapter.Rank = a.BaseModel, int32(a.Rank)
	free, lru, pinned := t.room()
	if !t.hasWaiting() && (free || lru != nil) {
		return t.take(e, lru, free), false, nil
	}
	switch {
	case t.max == 0:
		t.remove(e)
		return "", false, loraErrorf(messages.LoraFailure_LORA_NO_SLOT, "no slot for adapter %q: the worker holds no adapters", name)
	case pinned >= t.max:
		t.remove(e)
		return "", false, t.pinnedFull(name)
	case e.running == 0:
		t.remove(e)
		return "", false, loraErrorf(messages.LoraFailure_LORA_NO_SLOT,
			"no slot for adapter %q: all %d slots hold pinned adapters or adapters that running requests use", name, t.max)
	}
	e.state = loraWaiting
	return "", true, nil
}

// pinnedFull is the LORA_NO_SLOT of a load of name when every slot holds a pinned
// adapter.
func (t *loraTable) pinnedFull(name string) *loraError {
	return loraErrorf(messages.LoraFailure_LORA_NO_SLOT, "no slot for adapter %q: all %d slots hold pinned adapters", name, t.max)
}

// room is what a load may take now: a free slot (fewer than max entries hold one), else
// lru, the least recently used unpinned held adapter that no request uses (nil: none).
// pinned counts the slots that no request will ever free: those of pinned adapters not
// being unloaded.
func (t *loraTable) room() (free bool, lru *loraEntry, pinned int) {
	used := 0
	for _, o := range t.entries {
		if !o.state.holdsSlot() {
			continue
		}
		used++
		if o.adapter.Pinned && o.state != loraUnloading {
			pinned++
		}
		if o.state == loraHeld && !o.adapter.Pinned && o.running == 0 && (lru == nil || o.used < lru.used) {
			lru = o
		}
	}
	return used < t.max, lru, pinned
}

// take gives e a slot, free or lru's (lru then evicting; its name returned).
func (t *loraTable) take(e, lru *loraEntry, free bool) (victim string) {
	e.state = loraLoading
	if free {
		return ""
	}
	lru.state = loraEvicting
	return lru.adapter.Name
}

// hasWaiting reports whether a load waits for a slot.
func (t *loraTable) hasWaiting() bool {
	for _, e := range t.entries {
		if e.state == loraWaiting {
			return true
		}
	}
	return false
}

// loraWake is what became of a waiting load (wake): its slot (victim: the adapter it
// evicts, "" none; path: the folder the engine loads it from), or err, the entry dropped.
type loraWake struct {
	name, path string
	gen        uint64
	victim     string
	err        *loraError
}

// wake settles the loads waiting for a slot, after anything that may have freed one
// or ended a wait: a waiting load that no request uses any more is given up
// (LORA_NO_SLOT); then, oldest first (order), each takes a free slot or evicts as
// reserve does, while there is one; when every slot comes to hold a pinned adapter that
// no unload is freeing, those left fail (LORA_NO_SLOT). Entries that fail are dropped (drop). The
// outcomes are in that order; none when nothing changed.
func (t *loraTable) wake() []loraWake {
	var out []loraWake
	var waiting []*loraEntry
	for _, e := range t.entries {
		if e.state == loraWaiting {
			waiting = append(waiting, e)
		}
	}
	sort.Slice(waiting, func(i, j int) bool { return waiting[i].order < waiting[j].order })
	fail := func(e *loraEntry, err *loraError) {
		t.remove(e)
		out = append(out, loraWake{name: e.adapter.Name, path: e.adapter.Path, gen: e.gen, err: err})
	}
	left := waiting[:0]
	for _, e := range waiting {
		if e.running == 0 {
			fail(e, loraErrorf(messages.LoraFailure_LORA_NO_SLOT,
				"no slot for adapter %q: the requests that waited for one ended first", e.adapter.Name))
			continue
		}
		left = append(left, e)
	}
	for i, e := range left {
		free, lru, pinned := t.room()
		switch {
		case free || lru != nil:
			victim := t.take(e, lru, free)
			out = append(out, loraWake{name: e.adapter.Name, path: e.adapter.Path, gen: e.gen, victim: victim})
			continue
		case pinned >= t.max:
			for _, o := range left[i:] {
				fail(o, t.pinnedFull(o.adapter.Name))
			}
		}
		break
	}
	return out
}

// cancelWaiting forgets waiting entry name (an unload of it: the engine never had it,
// and it is not known afterwards); false when name is not waiting. gen is its
// generation.
func (t *loraTable) cancelWaiting(name string) (gen uint64, ok bool) {
	e := t.entries[name]
	if e == nil || e.state != loraWaiting {
		return 0, false
	}
	delete(t.entries, name)
	return e.gen, true
}

// loaded records the end of entry name's load: held when ok, else dropped (drop; the
// engine's refusal of the adapter is reject's). A stale outcome is ignored.
func (t *loraTable) loaded(name string, gen uint64, ok bool) {
	e := t.entry(name, gen)
	switch {
	case e == nil || e.state != loraLoading:
	case ok:
		e.state, e.once, e.known = loraHeld, true, false
	default:
		t.remove(e)
	}
}

// evicted records the end of victim's eviction: out of the engine and known when ok,
// else held again (the engine still holds it: the requests that came meanwhile use it).
// Out of the engine with requests waiting for it (use), it is loaded again for them
// instead (back): checking, a known adapter's load, of the same generation. gen is
// victim's generation (0: not evicting).
func (t *loraTable) evicted(victim string, ok bool) (gen uint64, back bool) {
	e := t.entries[victim]
	switch {
	case e == nil || e.state != loraEvicting:
		return 0, false
	case ok && e.running > 0:
		e.state, e.known = loraChecking, true
		return e.gen, true
	case ok:
		delete(t.entries, victim)
		t.remember(e)
	default:
		e.state = loraHeld
	}
	return e.gen, false
}

// use counts a request of adapter name that starts now (or waits for the adapter's
// load, or, evicting, for its eviction to end and its load again: evicted) and makes it
// the most recently used. ok is false when no entry of that name takes requests
// (absent, being unloaded, restoring).
func (t *loraTable) use(name string) (gen uint64, state loraState, ok bool) {
	e := t.entries[name]
	if e == nil || e.state == loraUnloading || e.state == loraRestoring {
		return 0, 0, false
	}
	e.used = t.next()
	if e.state == loraEvicting && e.running == 0 {
		e.order = e.used // its load again begins with this request
	}
	e.running++
	return e.gen, e.state, true
}

// release ends a request use counted. unload is true when it was the last request of an
// adapter waiting to be unloaded: the engine may unload it now.
func (t *loraTable) release(name string, gen uint64) (unload bool) {
	e := t.entry(name, gen)
	if e == nil || e.running == 0 {
		return false
	}
	e.running--
	return e.state == loraUnloading && e.running == 0
}

// beginUnload marks held adapter name unloading: it takes no new request, and the
// engine unloads it once running is 0. Not held: LORA_NOT_FOUND (a known adapter is
// forgotten with forget, a waiting one with cancelWaiting); still loading: LORA_ENGINE
// (try again once it is loaded), as is one being evicted (try again once it is known).
func (t *loraTable) beginUnload(name string) (gen uint64, running int, err *loraError) {
	e := t.entries[name]
	switch {
	case e == nil:
		return 0, 0, loraErrorf(messages.LoraFailure_LORA_NOT_FOUND, "adapter %q is not loaded", name)
	case e.state == loraEvicting:
		return 0, 0, loraErrorf(messages.LoraFailure_LORA_ENGINE, "adapter %q is being evicted; unload it again once it is", name)
	case e.state == loraChecking || e.state == loraLoading || e.state == loraRestoring || e.state == loraWaiting:
		return 0, 0, loraErrorf(messages.LoraFailure_LORA_ENGINE, "adapter %q is still loading; unload it once it is loaded", name)
	}
	e.state = loraUnloading
	return e.gen, e.running, nil
}

// unloaded records the end of entry name's unload: gone when ok, else held again.
func (t *loraTable) unloaded(name string, gen uint64, ok bool) {
	e := t.entry(name, gen)
	switch {
	case e == nil || e.state != loraUnloading:
	case ok:
		delete(t.entries, name)
	default:
		e.state = loraHeld
	}
}

// engineLost forgets what a dead engine held: pinned adapters it held (or was loading
// again) are restoring, to be loaded into the next engine before the worker is ready;
// the unpinned ones it held or was evicting, and known adapters being loaded again,
// are known; every other entry is dropped (loads under way, unloads: their pending
// outcomes are then stale).
func (t *loraTable) engineLost() {
	for name, e := range t.entries {
		switch {
		case e.adapter.Pinned && (e.state == loraHeld || e.state == loraRestoring):
			e.state, e.running = loraRestoring, 0
		case e.state == loraHeld || e.state == loraEvicting:
			delete(t.entries, name)
			t.remember(e)
		default:
			t.remove(e)
		}
	}
}

// pin adds a pinned adapter that a started engine must load before the worker is ready
// (Config.Loras); it is restoring until then.
func (t *loraTable) pin(a *messages.LoraAdapter) {
	ad := proto.Clone(a).(*messages.LoraAdapter)
	ad.Path, ad.Pinned = filepath.Clean(ad.Path), true
	e := &loraEntry{adapter: ad, state: loraRestoring, gen: t.next()}
	e.used = e.gen
	t.entries[ad.Name] = e
}

// restoring lists the adapters a started engine must load, by name.
func (t *loraTable) restoring() []*messages.LoraAdapter { return t.list(loraRestoring) }

// restored records the outcome of a restoring adapter's load: held when ok, else
// dropped.
func (t *loraTable) restored(name string, ok bool) {
	e := t.entries[name]
	switch {
	case e == nil || e.state != loraRestoring:
	case ok:
		e.state, e.once = loraHeld, true
	default:
		delete(t.entries, name)
	}
}

// reloaded reports whether restoring adapter name was held by an earlier engine (else
// this is its first load: an adapter of the worker's configuration).
func (t *loraTable) reloaded(name string) bool {
	e := t.entries[name]
	return e != nil && e.once
}

// held lists the adapters the engine holds and that take requests, by name: what the
// worker registers (copies).
func (t *loraTable) held() []*messages.LoraAdapter { return t.list(loraHeld) }

func (t *loraTable) list(s loraState) []*messages.LoraAdapter {
	var out []*messages.LoraAdapter
	for _, e := range t.entries {
		if e.state == s {
			out = append(out, proto.Clone(e.adapter).(*messages.LoraAdapter))
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}
