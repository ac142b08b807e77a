package frontend

import (
	"cmp"
	"slices"

	"github.com/turbine-llm/turbine/messages"
)

// Placement of a LoRA adapter an operator loads (POST /v1/load_lora_adapter;
// docs/reference.md §26.3): which workers of the base model get LoadLora. Pure: the
// shell (lora.go) reads the workers from the model's Router grain (Stats) and carries the
// placement out.

// loraWorker is one worker of the model as placement sees it.
type loraWorker struct {
	ID    string
	Role  messages.Role // aggregated, decode and prefill workers form two pools
	Ready bool
	// MaxLoras is how many adapters it may hold at once (0: its engine serves none);
	// Held how many it holds, Pinned how many of those are pinned.
	MaxLoras int
	Held     int
	Pinned   int
	// Known is how many adapters it knows (registered, evicted from its engine): among
	// workers holding as many, the one knowing fewer takes the next, so that a fleet whose
	// slots are full spreads the adapters it registers.
	Known int
	// Load is the router's count of its active KV blocks, Requests its active requests.
	Load     int64
	Requests int32
	// Has is the adapter being placed, when the worker holds an adapter of that name or
	// knows it (Path, Pinned and Known say from where and how).
	Has *loraHeld
}

// loraHeld is how a worker has the adapter being placed.
type loraHeld struct {
	Path   string
	Pinned bool
	// Known: registered on the worker without being in its engine (evicted since it
	// was loaded; WorkerStats.known_adapters): the worker loads it again for a request.
	Known bool
}

// holds reports whether h is the adapter held in the worker's engine (not only known).
func (h *loraHeld) holds() bool { return h != nil && !h.Known }

// loraPlacement is where a load goes.
type loraPlacement struct {
	// Send are the workers to send LoadLora to, best first.
	Send []string
	// Held are the ready workers that hold it pinned already (an unpinned load: that
	// hold or know it): they count as placed and are sent nothing.
	Held []string
	// NoSlot are ready workers a placement wanted and, as far as the router's stats
	// know, cannot use: every one of their slots holds a pinned adapter (an operator's
	// load never evicts one), or their engine serves no adapters. Only as many as the
	// placement is short of. The shell asks them all the same (their own answer is
	// authoritative: LORA_NO_SLOT, or LORA_INVALID for a bad folder, which they check
	// first).
	NoSlot []string
	// Conflict names a worker that holds or knows an adapter of that name loaded from
	// another path (ConflictPath): the load is refused, nothing else is set.
	Conflict     string
	ConflictPath string
}

// placeLora places adapter name (folder path) on n workers of each pool of the model —
// the aggregated and decode workers, and the prefill workers (a disaggregated request's
// prefill leg runs with the adapter too) — or on every ready worker of each pool when n
// is 0 (each pool capped at its ready workers). Not-ready workers are left out.
//
// In a pool, the ready workers holding it pinned count first. The others that may take
// it are those holding it unpinned (loaded on demand: pinning it costs no slot), then
// those with a slot not taken by a pinned adapter (a slot held by an unpinned one is
// freed by the worker, which evicts its least recently used unpinned adapter, keeping it
// known); among them, holders first, then the fewest adapters held, then the lowest load
// (active KV blocks, then active requests), then the worker id. A worker that only knows
// the adapter is one of the others: it must load it into a slot all the same. A pool
// with too few such workers reports as many of the others (by id) in NoSlot as it is
// short of.
//
// An unpinned load (unpinned) registers the adapter: the ready workers that hold it,
// pinned or not, or know it count first and are sent nothing; the others are placed as
// above.
func placeLora(workers []loraWorker, path string, n int, unpinned bool) loraPlacement {
	var p loraPlacement
	for _, w := range workers {
		if w.Has != nil && w.Has.Path != path {
			return loraPlacement{Conflict: w.ID, ConflictPath: w.Has.Path}
		}
	}
	var main, prefill []loraWorker
	for _, w := range workers {
		switch {
		case !w.Ready:
		case w.Role == messages.Role_ROLE_PREFILL:
			prefill = append(prefill, w)
		default:
			main = append(main, w)
		}
	}
	for _, pool := range [][]loraWorker{main, prefill} {
		placePool(&p, pool, n, unpinned)
	}
	return p
}

// placePool adds the placement of one pool's ready workers to p (see placeLora).
func placePool(p *loraPlacement, pool []loraWorker, n int, unpinned bool) {
	want := len(pool)
	if n > 0 {
		want = min(n, want)
	}
	var candidates, full []loraWorker
	for _, w := range pool {
		switch {
		case w.Has.holds() && w.Has.Pinned, unpinned && w.Has != nil:
			p.Held = append(p.Held, w.ID)
			want--
		case w.MaxLoras > 0 && (w.Has.holds() || w.Pinned < w.MaxLoras):
			candidates = append(candidates, w)
		default:
			full = append(full, w)
		}
	}
	if want <= 0 {
		return
	}
	slices.SortFunc(candidates, func(a, b loraWorker) int {
		return cmp.Or(
			-cmp.Compare(b2i(a.Has.holds()), b2i(b.Has.holds())),
			cmp.Compare(a.Held, b.Held),
			cmp.Compare(a.Known, b.Known),
			cmp.Compare(a.Load, b.Load),
			cmp.Compare(a.Requests, b.Requests),
			cmp.Compare(a.ID, b.ID))
	})
	take := min(want, len(candidates))
	for _, w := range candidates[:take] {
		p.Send = append(p.Send, w.ID)
	}
	slices.SortFunc(full, func(a, b loraWorker) int { return cmp.Compare(a.ID, b.ID) })
	for _, w := range full[:min(want-take, len(full))] {
		p.NoSlot = append(p.NoSlot, w.ID)
	}
}

// loraWorkers is what placement needs of the workers of a model's Router grain stats,
// for adapter name (held, or known: WorkerStats.known_adapters).
func loraWorkers(st *messages.RouterStats, name string) []loraWorker {
	out := make([]loraWorker, 0, len(st.GetWorkers()))
	for _, ws := range st.GetWorkers() {
		w := loraWorker{ID: ws.WorkerId, Role: ws.Role, Ready: ws.Ready, MaxLoras: int(ws.MaxLoras), Held: len(ws.Adapters),
			Known: len(ws.KnownAdapters), Load: ws.ActiveBlocks, Requests: ws.ActiveRequests}
		for _, a := range ws.Adapters {
			if a.GetPinned() {
				w.Pinned++
			}
			if a.GetName() == name {
				w.Has = &loraHeld{Path: a.GetPath(), Pinned: a.GetPinned()}
			}
		}
		for _, a := range ws.KnownAdapters {
			if a.GetName() == name && w.Has == nil {
				w.Has = &loraHeld{Path: a.GetPath(), Known: true}
			}
		}
		out = append(out, w)
	}
	return out
}
