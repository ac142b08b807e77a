package sim

import (
	"fmt"
	"slices"
	"time"

	"github.com/turbine-llm/turbine/bench"
	"github.com/turbine-llm/turbine/engines/mocker"
	"github.com/turbine-llm/turbine/flow"
	"github.com/turbine-llm/turbine/kv"
	"github.com/turbine-llm/turbine/messages"
	"github.com/turbine-llm/turbine/planner"
)

// Autoscaling (Config.Autoscaler; docs/reference.md §27.8). The simulator plays the
// planner's shell, as the Planner grain and the local connector do in the service: every
// Autoscaler.Interval of virtual time it turns what its frontend measured since the last
// decision into a planner.Observation (planner.Window: the TTFT of each first token, the
// gap before each later one, each request's wait until it was routed, the prompt and
// output tokens of each request that ended, all at the virtual time they happened), reads
// the fleet (ready, starting and stopping workers per pool) and each worker's load (its
// engine's KV usage, running and waiting sequences; the router's queued prefill tokens),
// calls the planner and carries out its target:
//
//   - A pool below its target starts workers in its free slots, lowest first: each
//     registers with the router, ready for requests, StartupDelay later, with an empty
//     KV cache (a new engine, a new epoch for the router).
//   - A pool above its target first gives up workers still starting (newest first),
//     then drains ready ones (newest first): a draining worker leaves routing at once,
//     runs its requests to their end and then stops; with a DrainTimeout, the requests
//     still running then end with a migratable engine error, as a real worker's drain
//     grace ends them, and their flows move them elsewhere.
//
// Every worker of a pool has a slot from the start (Autoscaler.MaxWorkers per pool, all
// registered with the router, the unused ones not ready), so names and router indices
// never change. Stats.Autoscale records the pools over time and the GPU-seconds they
// took (a worker holds its GPUs from the moment it is asked for until it has stopped).

// Decider is the planner the simulator consults: *planner.Planner is one.
type Decider interface {
	// Observe takes the measurements of the interval that just ended.
	Observe(o planner.Observation)
	// Decide plans at now for the fleet as it is and the workers' loads.
	Decide(now time.Time, fleet planner.Fleet, loads []planner.WorkerLoad) planner.Decision
}

// Autoscaler makes the simulated fleet's size follow a planner (Config.Autoscaler).
// Config.Workers (and Config.PrefillWorkers) are the workers ready at the start.
type Autoscaler struct {
	// Planner decides (required). The simulation calls it from the goroutine that runs
	// it, on the virtual clock.
	Planner Decider
	// Interval is the virtual time between two decisions (above 0, at most
	// MaxEventDelay): the planner's Interval in SLA mode, its LoadInterval in load mode.
	Interval time.Duration
	// StartupDelay is the virtual time from a worker being asked for to its being ready
	// (0 to MaxEventDelay): a real worker's process start, engine start and registration
	// (the mock engine's, measured: docs/reference.md §27.8).
	StartupDelay time.Duration
	// DrainTimeout bounds a drain (0 to MaxEventDelay; 0: a draining worker runs every
	// request it holds to its end).
	DrainTimeout time.Duration
	// MaxWorkers is the number of worker slots of each pool in use: at least Workers
	// (and PrefillWorkers); the GPU budget over each pool's GPUs per worker is enough.
	MaxWorkers int
	// GPUs is each pool's GPUs per worker, for Stats.Autoscale.GPUSeconds (missing or 0:
	// 1).
	GPUs map[planner.Pool]int
	// Settle keeps deciding for this long after the last request ended (0 to
	// MaxSimulatedTime), so that the run shows the fleet shrinking once the load is gone.
	Settle time.Duration
}

// AutoscaleStats reports an autoscaled run (Stats.Autoscale).
type AutoscaleStats struct {
	// Samples are the pools' sizes over time: one per pool in use at the start, then one
	// for a pool each time its counts or target changed, in time order.
	Samples []FleetSample
	// Seen are the pools as the planner saw them at each decision (before it), with the
	// decision's target: what a service's GET /admin/planner shows between decisions.
	Seen []FleetSample
	// Decisions are the planner's decisions, in order.
	Decisions []planner.Decision
	// GPUSeconds is the GPU time the workers held, from the first arrival to the end of
	// the simulation (Stats.SimulatedTime): starting, ready and stopping workers count.
	GPUSeconds float64
	// Started counts the workers asked for, Stopped those drained to their end and
	// Cancelled those given up while starting; Unplaced counts the workers a target
	// asked for beyond a pool's MaxWorkers slots.
	Started, Stopped, Cancelled, Unplaced int
	// DrainMigrated counts the requests a drain's timeout ended (their flows moved them).
	DrainMigrated int
}

// FleetSample is one pool's size from At (since the first arrival) on.
type FleetSample struct {
	At                        time.Duration
	Pool                      planner.Pool
	Ready, Starting, Stopping int
	// Target is the latest decision's target for the pool (its initial size before the
	// first decision).
	Target int
}

// slotState is where a worker slot is in its life (autoscaled fleets; a fleet of fixed
// size has every worker slotReady).
type slotState uint8

const (
	slotReady    slotState = iota // registered ready: the router routes to it
	slotOff                       // not running: not ready in the router, no GPU held
	slotStarting                  // asked for: ready at upAt
	slotDraining                  // out of routing, finishing its requests
)

// autoscale is the simulator's autoscaling state.
type autoscale struct {
	cfg   Autoscaler
	pools []planner.Pool
	win   planner.Window
	// winStart is the start of the window being filled (virtual offset).
	winStart time.Duration
	// routed marks the requests whose wait until routing was counted.
	routed []bool
	// target is the latest decision's target per pool.
	target map[planner.Pool]int
	// gpuHeld is the GPUs the workers hold now; gpuSince when that last changed.
	gpuHeld  int
	gpuSince time.Duration
	// endedAt: when the last request ended (set once every request has).
	endedAt time.Duration
	stats   AutoscaleStats
}

// poolOf is the pool a worker of role r is in.
func poolOf(r kv.Role) planner.Pool {
	switch r {
	case kv.RolePrefill:
		return planner.PoolPrefill
	case kv.RoleDecode:
		return planner.PoolDecode
	}
	return planner.PoolAggregated
}

// slots returns the worker slots of the fleet: (decode or aggregated, prefill).
func (c *Config) slots() (workers, prefill int) {
	if a := c.Autoscaler; a != nil {
		workers = a.MaxWorkers
		if c.PrefillWorkers > 0 {
			prefill = a.MaxWorkers
		}
		return workers, prefill
	}
	return c.Workers, c.PrefillWorkers
}

// normalizeAutoscaler checks Autoscaler (when set) after the rest of c is normalized;
// errors name the field.
func (c *Config) normalizeAutoscaler() error {
	a := c.Autoscaler
	if a == nil {
		return nil
	}
	switch {
	case a.Planner == nil:
		return fmt.Errorf("sim: Autoscaler.Planner: required")
	case a.Interval <= 0 || a.Interval > MaxEventDelay:
		return fmt.Errorf("sim: Autoscaler.Interval %v: want above 0, at most %v", a.Interval, MaxEventDelay)
	case a.StartupDelay < 0 || a.StartupDelay > MaxEventDelay:
		return fmt.Errorf("sim: Autoscaler.StartupDelay %v: want 0 to %v", a.StartupDelay, MaxEventDelay)
	case a.DrainTimeout < 0 || a.DrainTimeout > MaxEventDelay:
		return fmt.Errorf("sim: Autoscaler.DrainTimeout %v: want 0 to %v", a.DrainTimeout, MaxEventDelay)
	case a.Settle < 0 || a.Settle > MaxSimulatedTime:
		return fmt.Errorf("sim: Autoscaler.Settle %v: want 0 to %v", a.Settle, MaxSimulatedTime)
	case a.MaxWorkers < c.Workers || a.MaxWorkers < c.PrefillWorkers:
		return fmt.Errorf("sim: Autoscaler.MaxWorkers %d: want at least Workers %d and PrefillWorkers %d (the workers ready at the start)",
			a.MaxWorkers, c.Workers, c.PrefillWorkers)
	case c.Engine.MaxLoras > 0:
		return fmt.Errorf("sim: Autoscaler with Engine.MaxLoras %d: LoRA adapters on an autoscaled fleet are not modelled", c.Engine.MaxLoras)
	}
	for p, g := range a.GPUs {
		if g < 0 || g > 64 {
			return fmt.Errorf("sim: Autoscaler.GPUs[%s] %d: want 0 to 64", p, g)
		}
	}
	w, p := c.slots()
	if w+p > kv.MaxWorkerID+1 {
		return fmt.Errorf("sim: Autoscaler.MaxWorkers %d: %d worker slots, the router takes at most %d", a.MaxWorkers, w+p, kv.MaxWorkerID+1)
	}
	all := *c
	all.Workers, all.PrefillWorkers = w, p
	if est := all.memoryEstimate(); est > c.MemoryLimit {
		return fmt.Errorf("sim: Autoscaler.MaxWorkers %d: %d worker slots of %d KV blocks need about %s once their caches fill, above MemoryLimit %s: fewer slots or KV blocks",
			a.MaxWorkers, w+p, c.Engine.NumGPUBlocks, Bytes(est), Bytes(c.MemoryLimit))
	}
	return nil
}

// initAutoscale takes the slots beyond the initial workers out of routing and schedules
// the first decision; the workers were registered ready in slot order (so their router
// indices are their slots).
func (s *simulator) initAutoscale() error {
	a := s.cfg.Autoscaler
	if a == nil {
		return nil
	}
	s.as = &autoscale{cfg: *a, routed: make([]bool, len(s.reqs)), target: map[planner.Pool]int{}}
	s.as.pools = []planner.Pool{planner.PoolAggregated}
	if s.cfg.PrefillWorkers > 0 {
		s.as.pools = []planner.Pool{planner.PoolPrefill, planner.PoolDecode}
	}
	nw, _ := s.cfg.slots()
	for _, w := range s.workers {
		w.fresh = true // no engine has run yet
		first := s.cfg.Workers
		k := w.idx
		if w.role == kv.RolePrefill {
			first, k = s.cfg.PrefillWorkers, w.idx-nw
		}
		if k < first {
			continue
		}
		w.slot = slotOff
		if err := s.registerSlot(w, false); err != nil {
			return err
		}
	}
	for _, p := range s.as.pools {
		s.as.target[p] = s.poolCounts(p)[0]
	}
	s.as.gpuHeld = s.gpusHeld()
	s.as.gpuSince = s.origin
	if len(s.reqs) > 0 {
		s.as.winStart = s.origin
		s.sample(true)
		s.pushPlan(s.origin + a.Interval)
	}
	return nil
}

// registerSlot registers w with the router, ready or not, with its engine's epoch.
func (s *simulator) registerSlot(w *worker, ready bool) error {
	spec := s.workerSpec(w)
	spec.Ready, spec.Epoch = ready, w.epoch
	if _, err := s.router.Register(spec); err != nil {
		return fmt.Errorf("sim: registering %s: %w", w.name, err)
	}
	return nil
}

// pushPlan schedules a decision at at.
func (s *simulator) pushPlan(at time.Duration) {
	if at <= MaxSimulatedTime {
		s.push(at, evPlan, 0)
	}
}

// poolCounts returns the pool's ready, starting and stopping workers (dead ones are in
// none).
func (s *simulator) poolCounts(p planner.Pool) (c [3]int) {
	for _, w := range s.workers {
		if w.dead || poolOf(w.role) != p {
			continue
		}
		switch w.slot {
		case slotReady:
			c[0]++
		case slotStarting:
			c[1]++
		case slotDraining:
			c[2]++
		}
	}
	return c
}

// gpusHeld is the GPUs the workers that are not off hold.
func (s *simulator) gpusHeld() int {
	n := 0
	for _, w := range s.workers {
		if !w.dead && w.slot != slotOff {
			n += s.gpusOf(poolOf(w.role))
		}
	}
	return n
}

func (s *simulator) gpusOf(p planner.Pool) int {
	if g := s.as.cfg.GPUs[p]; g > 0 {
		return g
	}
	return 1
}

// changed brings the GPU-seconds up to now and records the pools' samples; call it
// after every change of a slot's state.
func (s *simulator) changed() {
	as := s.as
	as.stats.GPUSeconds += float64(as.gpuHeld) * (s.now - as.gpuSince).Seconds()
	as.gpuHeld, as.gpuSince = s.gpusHeld(), s.now
	s.sample(false)
}

// sample records each pool whose counts or target differ from its last sample (every
// pool when all is set).
func (s *simulator) sample(all bool) {
	as := s.as
	for _, p := range as.pools {
		c := s.poolCounts(p)
		fs := FleetSample{At: s.now - s.origin, Pool: p, Ready: c[0], Starting: c[1], Stopping: c[2], Target: as.target[p]}
		last := -1
		for k := len(as.stats.Samples) - 1; k >= 0; k-- {
			if as.stats.Samples[k].Pool == p {
				last = k
				break
			}
		}
		if last >= 0 {
			prev := as.stats.Samples[last]
			switch {
			case prev.At == fs.At: // several changes at one instant: the last one stands
				as.stats.Samples[last] = fs
				continue
			case !all && prev.Ready == fs.Ready && prev.Starting == fs.Starting && prev.Stopping == fs.Stopping && prev.Target == fs.Target:
				continue
			}
		}
		as.stats.Samples = append(as.stats.Samples, fs)
	}
}

// plan is one decision: observe the window that ends now, decide, carry out the target,
// and schedule the next decision while requests remain or the settle time lasts.
func (s *simulator) plan() {
	as := s.as
	s.last = s.now
	now := simBase.Add(s.now)
	as.cfg.Planner.Observe(as.win.Observation(simBase.Add(as.winStart), s.now-as.winStart, 1))
	as.win, as.winStart = planner.Window{}, s.now
	fleet := planner.Fleet{Ready: map[planner.Pool]int{}, Starting: map[planner.Pool]int{}, Stopping: map[planner.Pool]int{}}
	for _, p := range as.pools {
		c := s.poolCounts(p)
		fleet.Ready[p], fleet.Starting[p], fleet.Stopping[p] = c[0], c[1], c[2]
	}
	d := as.cfg.Planner.Decide(now, fleet, s.loads())
	as.stats.Decisions = append(as.stats.Decisions, d)
	for _, p := range as.pools {
		as.stats.Seen = append(as.stats.Seen, FleetSample{At: s.now - s.origin, Pool: p, Ready: fleet.Ready[p],
			Starting: fleet.Starting[p], Stopping: fleet.Stopping[p], Target: d.Target[p]})
	}
	for _, p := range as.pools {
		if t, ok := d.Target[p]; ok && t >= 0 {
			as.target[p] = t
			s.scaleTo(p, t)
		}
	}
	for _, w := range s.workers {
		s.drainCheck(w)
	}
	s.changed()
	// Decisions go on while requests remain (and something else can still happen: a run
	// whose last requests are stuck ends, as without autoscaling), then for Settle.
	working := s.done < len(s.reqs) && (s.next < len(s.order) || len(s.heap) > 0)
	settling := s.done == len(s.reqs) && s.now+as.cfg.Interval <= as.endedAt+as.cfg.Settle
	if working || settling {
		s.pushPlan(s.now + as.cfg.Interval)
	}
}

// loads is every ready or draining worker's load, in slot order.
func (s *simulator) loads() []planner.WorkerLoad {
	rs := s.router.Stats()
	prefill := make(map[string]int64, len(rs.Workers))
	for _, ws := range rs.Workers {
		prefill[ws.ID] = ws.ActivePrefillTokens
	}
	var out []planner.WorkerLoad
	for _, w := range s.workers {
		if w.dead || (w.slot != slotReady && w.slot != slotDraining) {
			continue
		}
		st := w.eng.Stats()
		out = append(out, planner.WorkerLoad{WorkerID: w.name, Pool: poolOf(w.role), Ready: w.slot == slotReady,
			KVUsage: st.KVUsage, ActivePrefillTokens: int(prefill[w.name]), Running: st.Running, Waiting: st.Waiting})
	}
	return out
}

// scaleTo moves pool p towards target workers (ready and starting).
func (s *simulator) scaleTo(p planner.Pool, target int) {
	c := s.poolCounts(p)
	have := c[0] + c[1]
	var mine []*worker
	for _, w := range s.workers {
		if !w.dead && poolOf(w.role) == p {
			mine = append(mine, w)
		}
	}
	for _, w := range mine { // grow: free slots, lowest first
		if have >= target {
			break
		}
		if w.slot == slotOff {
			s.start(w)
			have++
		}
	}
	if have < target {
		s.as.stats.Unplaced += target - have
	}
	for _, state := range []slotState{slotStarting, slotReady} { // shrink: starting first, newest first
		for _, w := range slices.Backward(mine) {
			if have <= target {
				return
			}
			if w.slot != state {
				continue
			}
			if state == slotStarting {
				w.slot, w.gen = slotOff, w.gen+1 // its start event finds another generation
				s.as.stats.Cancelled++
			} else {
				s.drain(w)
			}
			have--
		}
	}
}

// start asks for worker w: it becomes ready StartupDelay later.
func (s *simulator) start(w *worker) {
	w.slot, w.gen = slotStarting, w.gen+1
	s.as.stats.Started++
	if at := s.now + s.as.cfg.StartupDelay; at <= MaxSimulatedTime {
		s.seq++
		s.heap.push(event{at: at, key: uint64(evScale)<<kindShift | s.seq, w: int32(w.idx), r: -1, x: w.gen})
	}
}

// scaleEvent is worker w's start ending, or its drain's timeout (gen: the start's or
// drain's generation; a later change of the slot makes the event stale).
func (s *simulator) scaleEvent(w *worker, gen uint32) {
	if w.dead || w.gen != gen {
		return
	}
	switch w.slot {
	case slotStarting:
		s.last = s.now
		s.up(w)
	case slotDraining:
		s.last = s.now
		s.drainExpired(w)
	}
}

// up makes a started worker ready: a slot that ran an engine before gets a new one and
// a new epoch for the router, which drops what it knew of the old engine's cache.
func (s *simulator) up(w *worker) {
	if !w.fresh {
		ec := s.cfg.Engine
		if w.role == kv.RolePrefill {
			ec = s.cfg.PrefillEngine
		}
		if w.kvbm != nil {
			ec.Tiers = w.kvbm // the node's block manager outlives the engine
		}
		s.stats.Tiers.addEngine(w.eng.Stats())
		eng, err := mocker.New(ec, simVocab())
		if err != nil { // the same configuration built the first engine
			panic(fmt.Sprintf("sim: %s: a new engine: %v", w.name, err))
		}
		w.eng, w.epoch, w.seq = eng, w.epoch+1, 0
		// Batches of the old engine still on their way are dropped: the router starts the
		// new epoch empty. Their deliveries, already on the heap, come first (FIFO).
		w.stale += len(w.pending) - w.pendingHead
		w.pending, w.pendingHead = nil, 0
	}
	w.fresh = true
	w.slot = slotReady
	if err := s.registerSlot(w, true); err != nil {
		panic(err.Error())
	}
	s.changed()
	s.wakeHead() // requests waiting in the busy queue may route now
}

// drain takes w out of routing; it stops once its requests have ended.
func (s *simulator) drain(w *worker) {
	w.slot, w.gen = slotDraining, w.gen+1
	if err := s.registerSlot(w, false); err != nil {
		panic(err.Error())
	}
	if t := s.as.cfg.DrainTimeout; t > 0 && s.now+t <= MaxSimulatedTime {
		s.seq++
		s.heap.push(event{at: s.now + t, key: uint64(evScale)<<kindShift | s.seq, w: int32(w.idx), r: -1, x: w.gen})
	}
	s.drainCheck(w)
}

// drainCheck stops the draining worker w once it holds nothing: no step in flight, no
// request in its engine, no KV blocks pinned for a transfer, no leg on its way to it.
func (s *simulator) drainCheck(w *worker) {
	if w.slot != slotDraining || w.dead || w.busy || w.eng.HasWork() || w.eng.Stats().PinnedRequests > 0 {
		return
	}
	for k := range s.legs {
		if lg := &s.legs[k]; int(lg.worker) == w.idx && lg.state != legEnded {
			return
		}
	}
	w.slot, w.fresh, w.gen = slotOff, false, w.gen+1
	s.as.stats.Stopped++
	s.changed()
}

// drainExpired ends the requests w still holds as a real worker's drain grace does: each
// leg in its engine gets a migratable engine error (its flow moves it to another worker),
// blocks it pinned for a transfer are released (the transfer then fails and its request
// prefills again), a leg on its way to it is cancelled likewise.
func (s *simulator) drainExpired(w *worker) {
	for slot, n := int32(0), int32(len(s.legs)); slot < n; slot++ {
		lg := &s.legs[slot]
		switch {
		case int(lg.worker) == w.idx && lg.state != legEnded:
			if lg.state == legRunning {
				w.eng.Abort(lg.engID)
			}
			if lg.state == legTransfer {
				s.releasePinned(lg.src)
			}
			lg.state, lg.gen = legEnded, nil
			s.as.stats.DrainMigrated++
			if lg.watched {
				s.step(int(lg.req), flow.Chunk{Leg: lg.id, Chunk: &messages.TokenChunk{RequestId: lg.rid, Index: lg.next,
					FinishReason: "error", WorkerId: w.name, Fault: messages.Fault_FAULT_ENGINE_ERROR,
					Error: "engine: the worker is draining and its grace is over"}})
			}
		case int(lg.worker) == w.idx && lg.pinned:
			s.releasePinned(slot)
		}
	}
	s.drainCheck(w)
}

// observeRouted counts request i's wait from its arrival until its first leg was sent
// (routed), as the gateway's queue measurement.
func (s *simulator) observeRouted(i int) {
	if as := s.as; as != nil && !as.routed[i] {
		as.routed[i] = true
		as.win.AddQueue(s.now - s.reqs[i].Arrival)
	}
}

// observeTokens counts a chunk of n tokens of request i reaching its client: the first
// one's TTFT (with the host's request cost), or n gaps sharing the time since the last.
func (s *simulator) observeTokens(i, n int, first bool, since time.Duration) {
	as := s.as
	if as == nil || n < 1 {
		return
	}
	if first {
		as.win.AddTTFT(s.now - s.reqs[i].Arrival + s.cfg.requestCost(s.reqs[i].InputLength))
		n--
		if n == 0 {
			return
		}
	}
	as.win.AddITL(since/time.Duration(n), n)
}

// observeEnd counts request i, which ended: its tokens when it succeeded. Once every
// request has ended, the settle time starts.
func (s *simulator) observeEnd(i int) {
	as := s.as
	if as == nil {
		return
	}
	if r := &s.results[i]; r.Error == "" {
		as.win.AddRequest(r.InputLength, r.OutputTokens)
	}
	if s.done == len(s.reqs) {
		as.endedAt = s.now
	}
}

// finishAutoscale closes the GPU accounting at the end of the run and hands the stats
// over.
func (s *simulator) finishAutoscale() *AutoscaleStats {
	as := s.as
	if as == nil {
		return nil
	}
	end := max(s.last, as.gpuSince)
	as.stats.GPUSeconds += float64(as.gpuHeld) * (end - as.gpuSince).Seconds()
	as.gpuSince = end
	st := as.stats
	return &st
}

// FleetPoints converts samples (Samples or Seen) to the bench package's fleet series
// (times in seconds).
func FleetPoints(samples []FleetSample) []bench.FleetPoint {
	out := make([]bench.FleetPoint, len(samples))
	for i, fs := range samples {
		out[i] = bench.FleetPoint{AtS: fs.At.Seconds(), Pool: fs.Pool.String(), Ready: fs.Ready, Starting: fs.Starting,
			Stopping: fs.Stopping, Target: fs.Target}
	}
	return out
}
