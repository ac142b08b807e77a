package sim

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/turbine-llm/turbine/engines/mocker"
	"github.com/turbine-llm/turbine/kv"
	"github.com/turbine-llm/turbine/messages"
)

// LoRA adapters (docs/reference.md §26.5). With Engine.MaxLoras > 0 every engine has
// that many adapter slots, and the simulator plays the worker and the frontend around
// them:
//
//   - The frontend lets adapters load on demand, and its registry holds every adapter
//     (LoraPath): each route of a request naming an adapter asks the router with
//     lora_on_demand and the adapter's folder, so any worker may be chosen.
//   - A leg naming an adapter its engine holds enters at once (a hit; a miss when the
//     adapter's load is still in progress). Otherwise the worker loads it first
//     (mocker.Engine.LoadLora), evicting the least recently used adapter that no
//     request in the engine uses (mocker.Engine.IdleLora) when every slot is taken;
//     when every slot's adapter is in use, the leg waits, first come first served,
//     until a request leaves the engine. A load takes Engine.LoraLoadMillis (over the
//     speedup ratio) during which the engine computes nothing: it starts when the step
//     in flight and the loads before it end, and the engine's next step waits for it.
//     A load the route did not ask for (the route gave no folder: the router counted
//     the adapter as held, but the engine had evicted it) is loaded all the same, from
//     the registry, and counted as unplanned.
//   - Each worker registers with the router every Heartbeat and when a load ends: the
//     adapters its engine holds (unpinned), those it evicted (known: it loads them
//     again for a request), its MaxLoras, and its mean load time once it has loaded
//     one.
//
// Without slots (Engine.MaxLoras 0) adapters are the engines' out of band: a request
// naming one enters at once, and only its KV block hashes differ.

// MaxLoras bounds Engine.MaxLoras: the most adapter slots a worker may register (the
// Router grain refuses more).
const MaxLoras = 4096

// DefaultHeartbeat is how often a simulated worker with adapter slots registers with
// the router, the worker's own heartbeat (actors/worker's DefaultHeartbeat).
const DefaultHeartbeat = time.Second

// loraRank is the rank of the simulated adapters: any rank the engine takes will do
// (the timing model does not depend on it).
const loraRank = 1

// LoraStats counts what the engines did with LoRA adapters (Engine.MaxLoras > 0).
type LoraStats struct {
	// Loads counts adapter loads, every engine together; Unplanned those of legs whose
	// route named no folder (the router counted the adapter as held there); Evictions
	// the adapters unloaded to make room for a load.
	Loads, Unplanned, Evictions int64
	// Hits counts legs naming an adapter that found it loaded when they reached their
	// engine; Misses those that entered it after waiting for a load (their own, or one
	// in progress); Waited those of the misses that first waited for a slot (a leg
	// cancelled while it waits counts in none).
	Hits, Misses, Waited int64
}

// LoraPath is the folder the simulated fleet's registry gives adapter name.
func LoraPath(name string) string { return "/adapters/" + name }

// workerLora is a worker's adapter state beyond its engine's.
type workerLora struct {
	// ready holds the adapters the engine holds, each with when its load ends; known
	// those it loaded and evicted since.
	ready map[string]time.Duration
	known map[string]bool
	// free: the engine computes nothing before it (its loads end then).
	free time.Duration
	// wait holds the slots of the legs waiting for an adapter slot, in order.
	wait []int32
	// loads and loadTime: the loads done and their total time, for the mean the
	// worker registers.
	loads    int
	loadTime time.Duration
}

// loraOn reports whether the fleet's engines have adapter slots.
func (s *simulator) loraOn() bool { return s.cfg.Engine.MaxLoras > 0 }

// loraRoute fills in what the frontend adds to the route of a request naming an
// adapter: on-demand loading and the registry's folder.
func (s *simulator) loraRoute(rr *messages.RouteRequest) {
	if s.loraOn() && rr.GetLoraName() != "" {
		rr.LoraOnDemand = true
		if rr.LoraPath == "" {
			rr.LoraPath = LoraPath(rr.GetLoraName())
		}
	}
}

// loraAdmit readies adapter name on w for a leg: admitted when the leg may enter the
// engine now (the adapter is held or being loaded, or a load was started for it: hit
// says whether it was held and loaded already), false when every slot's adapter is in
// use (the leg waits). path is the folder its route gave ("" when the router counted
// the adapter as held).
func (s *simulator) loraAdmit(w *worker, name, path string) (admitted, hit bool) {
	l := &w.lora
	if ready, ok := l.ready[name]; ok {
		return true, ready <= s.now
	}
	if len(l.ready) >= s.cfg.Engine.MaxLoras {
		victim, ok := w.eng.IdleLora()
		if !ok {
			return false, false
		}
		if err := w.eng.UnloadLora(victim.Name); err != nil {
			panic(fmt.Sprintf("sim: %s: unloading adapter %q: %v", w.name, victim.Name, err))
		}
		delete(l.ready, victim.Name)
		if l.known == nil {
			l.known = map[string]bool{}
		}
		l.known[victim.Name] = true
		s.stats.Lora.Evictions++
	}
	_, d, err := w.eng.LoadLora(mocker.Adapter{Name: name, Path: LoraPath(name), Rank: min(loraRank, s.cfg.Engine.MaxLoraRankOrDefault())})
	if err != nil {
		panic(fmt.Sprintf("sim: %s: loading adapter %q: %v", w.name, name, err))
	}
	start := max(s.now, l.free)
	if w.inStep {
		start = max(start, w.stepEnd)
	}
	l.free = start + d
	if l.ready == nil {
		l.ready = map[string]time.Duration{}
	}
	l.ready[name] = l.free
	delete(l.known, name)
	l.loads++
	l.loadTime += d
	s.stats.Lora.Loads++
	if path == "" {
		s.stats.Lora.Unplanned++
	}
	if l.free <= MaxSimulatedTime {
		s.push(l.free, evRegister, w.idx) // the worker reports the adapter once loaded
	}
	return true, false
}

// loraEnter readies the adapter of the leg in slot before it enters its engine: it
// reports false, the leg parked among the worker's waiting legs, when it must wait for
// a slot. Legs naming no adapter, and fleets without slots, enter at once.
func (s *simulator) loraEnter(slot int32, g *messages.Generate, imported int) bool {
	lg := &s.legs[slot]
	name := g.GetSampling().GetLoraName()
	if !s.loraOn() || name == "" {
		return true
	}
	w := s.workers[lg.worker]
	admitted, hit := s.loraAdmit(w, name, g.GetSampling().GetLoraPath())
	switch {
	case !admitted:
		lg.state, lg.gen, lg.imported = legLoraWait, g, int32(imported)
		w.lora.wait = append(w.lora.wait, slot)
		return false
	case hit:
		s.stats.Lora.Hits++
	default:
		s.stats.Lora.Misses++
	}
	return true
}

// loraRetry lets w's legs waiting for a slot try again, in order: a request left the
// engine, so its adapter may be evicted now.
func (s *simulator) loraRetry(w *worker) {
	if len(w.lora.wait) == 0 || w.dead {
		return
	}
	waiting := w.lora.wait
	w.lora.wait = nil
	var keep []int32
	for _, slot := range waiting {
		lg := &s.legs[slot]
		if lg.state != legLoraWait { // cancelled meanwhile
			continue
		}
		if admitted, _ := s.loraAdmit(w, lg.gen.GetSampling().GetLoraName(), lg.gen.GetSampling().GetLoraPath()); !admitted {
			keep = append(keep, slot)
			continue
		}
		s.stats.Lora.Misses++
		s.stats.Lora.Waited++
		g, imported := lg.gen, int(lg.imported)
		lg.state, lg.gen, lg.imported = legRunning, nil, 0
		s.enter(slot, g, imported)
	}
	// Legs that came meanwhile (a flow stepped above sent them) wait behind.
	w.lora.wait = append(keep, w.lora.wait...)
}

// register registers w with the router: its adapters as its engine holds them now
// (loaded; unpinned) and those it evicted, its slots and its mean load time; LastSeq
// is the last KV event batch the router applied from it, as registrations and event
// batches come in order.
func (s *simulator) register(w *worker) {
	if w.dead {
		return
	}
	if _, err := s.router.Register(s.workerSpec(w)); err != nil {
		panic(fmt.Sprintf("sim: registering %s again: %v", w.name, err))
	}
}

// workerSpec is w's registration with the router.
func (s *simulator) workerSpec(w *worker) kv.WorkerSpec {
	spec := kv.WorkerSpec{ID: w.name, BlockSize: s.cfg.Engine.BlockSize, TotalBlocks: int64(w.blocks),
		MaxNumSeqs: s.cfg.Engine.MaxNumSeqs, Ready: true, Epoch: 1, Role: w.role, LastSeq: w.seq, MaxLoras: s.cfg.Engine.MaxLoras}
	if w.kvbm != nil {
		spec.Node = w.kvbm.node
	}
	for name, ready := range w.lora.ready {
		if ready <= s.now {
			spec.Adapters = append(spec.Adapters, kv.AdapterSpec{Name: name, Path: LoraPath(name)})
		}
	}
	for name := range w.lora.known {
		spec.KnownAdapters = append(spec.KnownAdapters, kv.AdapterSpec{Name: name, Path: LoraPath(name)})
	}
	byName := func(a, b kv.AdapterSpec) int { return strings.Compare(a.Name, b.Name) }
	slices.SortFunc(spec.Adapters, byName)
	slices.SortFunc(spec.KnownAdapters, byName)
	if w.lora.loads > 0 {
		spec.LoraLoadMs = float64(w.lora.loadTime) / float64(w.lora.loads) / float64(time.Millisecond)
	}
	return spec
}

// heartbeat registers w, and comes again after Heartbeat while the run has anything
// else to do (arrivals to come, events other than heartbeats).
func (s *simulator) heartbeat(w *worker) {
	s.beats--
	s.register(w)
	if w.dead || !(s.next < len(s.order) || len(s.heap) > s.beats) || s.cfg.Heartbeat > MaxSimulatedTime-s.now {
		return
	}
	s.pushBeat(s.now+s.cfg.Heartbeat, w.idx)
}

// pushBeat queues a heartbeat of worker wi at at.
func (s *simulator) pushBeat(at time.Duration, wi int) {
	s.beats++
	s.seq++
	s.heap.push(event{at: at, key: uint64(evRegister)<<kindShift | s.seq, w: int32(wi), r: -1, x: 1})
}
