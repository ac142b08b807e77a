package sim

import (
	"cmp"
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/turbine-llm/turbine/bench"
	"github.com/turbine-llm/turbine/engines/mocker"
	"github.com/turbine-llm/turbine/flow"
	"github.com/turbine-llm/turbine/kv"
	"github.com/turbine-llm/turbine/messages"
)

// Error kinds of a simulated bench.Result, besides bench.ErrWorkload, bench.ErrCanceled
// and bench.ErrTimeout (Config.RequestTimeout).
const (
	// ErrInvalidRequest: the request cannot run (prompt plus output tokens longer than
	// the engine's MaxModelLen, or an empty prompt; or an engine refused it); a real
	// gateway answers 400.
	ErrInvalidRequest = "invalid_request"
	// A request the router refused, on its arrival or when a fault moved it, fails with
	// the route's outcome as its kind (messages.RouteOutcome's label: "no_workers",
	// "all_busy", "no_prefill_workers", "bad_request"; a real gateway answers each as
	// gateway.RouteError says). ErrNoWorkers and ErrAllBusy name the two common ones.
	ErrNoWorkers = "no_workers"
	ErrAllBusy   = "all_busy"
	// ErrWorkerFailed: the request's worker failed (killed, see Config.Faults, or silent
	// past the flow's stall timeout) and migration did not mend it (disabled, or its
	// limit reached); a real gateway answers 502, or an error frame once tokens went out.
	ErrWorkerFailed = "worker_failed"
	// ErrStalled: the run ended with the request still in an engine that cannot
	// schedule it (it needs more KV blocks than the engine has) and no stall timeout
	// to move it.
	ErrStalled = "stalled"
)

// DecisionAggregated counts, in Stats.Decisions, routings to one worker from prefill to
// the last token (kv.DisaggAggregated). With prefill workers the other decisions are the
// router's: kv.DisaggRemote, kv.DisaggLocalShortPrefill ...
const DecisionAggregated = kv.DisaggAggregated

// Stats describes a simulation run.
type Stats struct {
	// SimulatedTime is the virtual time from the first arrival to the last event that
	// did something (a timer that was stopped or re-armed before it fired does not count).
	SimulatedTime time.Duration
	// Steps counts the engine steps (all engines) that computed something.
	Steps int64
	// Requests is the number of requests in the workload.
	Requests int
	// Decisions counts routings by the router's serving decision (DecisionAggregated,
	// or kv.DisaggRemote, kv.DisaggLocalShortPrefill ... when the fleet has prefill
	// workers): every route of a request, a migration's and a prefill retry's too, as
	// the frontend's turbine_frontend_disagg_decisions_total counts them.
	Decisions map[kv.DisaggDecision]int
	// Migrations counts requests re-sent to another worker after a fault, by fault (the
	// frontend's turbine_frontend_migrations_total).
	Migrations map[messages.Fault]int
	// PrefillRetries counts failed prefill legs that made the flow route their request
	// again, by fault (the frontend's turbine_frontend_prefill_retries_total; a retry
	// whose route found no worker counts too).
	PrefillRetries map[messages.Fault]int
	// Queued counts requests that waited in the busy queue (Config.QueueDepth), as the
	// gateway's turbine_frontend_queued_requests_total; QueueTimeouts those of them that
	// failed after Config.QueueTimeout, QueueFull those refused by a full queue.
	Queued, QueueTimeouts, QueueFull int
	// Faults reports each of Config.Faults, in its order (nil without faults).
	Faults []FaultReport
	// Lora counts the engines' LoRA adapter loads, evictions and hits (lora.go; zero
	// without adapter slots, Engine.MaxLoras 0).
	Lora LoraStats
	// Autoscale reports the pools' sizes over time and the GPU time they took when
	// Config.Autoscaler was set (autoscale.go); nil otherwise.
	Autoscale *AutoscaleStats
	// Tiers counts the engines' prefix hits by tier (the GPU's, and with Config.Kvbm
	// the block managers' host and disk tiers) and the blocks offloaded and onboarded.
	Tiers TierStats
	// WallTime is the real time Run took.
	WallTime time.Duration
}

// FaultReport is what became of one of Config.Faults.
type FaultReport struct {
	Fault
	// Struck: it happened at its time. A fault due once every request has ended does
	// not (the run ended first: it neither counts nor lengthens SimulatedTime), nor
	// does a kill of a worker already killed.
	Struck bool
}

// Run simulates reqs (any order; each starts at its Arrival) on the fleet cfg describes
// and returns one bench.Result per request, in the order of reqs, with times measured on
// the virtual clock from the first arrival: Start is the arrival's offset, TTFT, ITL and
// E2E as a client would see them from a zero-latency gateway (plus the host's request
// cost when Config gives one, host.go), CachedTokens the
// prefix-cache hit the finishing chunk reports (CachedKnown). Each request runs through
// flow.Flow, the frontend's own request logic. Outcome.Duration runs from the first
// arrival to the last answer. Requests that cannot run fail with an error kind
// (ErrInvalidRequest, bench.ErrWorkload, ErrNoWorkers, ErrAllBusy, ErrWorkerFailed,
// bench.ErrTimeout ...) instead of stopping the run.
//
// Errors: an invalid cfg (the message names the field; a fleet whose MemoryEstimate is
// above its MemoryLimit is one), a request whose arrival is outside 0 to
// bench.MaxArrival (the message names it), a step or KV transfer that would end beyond
// MaxSimulatedTime, or ctx's error when ctx ends first; after the last two the outcome
// has the requests not finished marked bench.ErrCanceled.
func Run(ctx context.Context, cfg Config, reqs []bench.Request) (bench.Outcome, Stats, error) {
	wallStart := time.Now()
	s, err := newSimulator(cfg, reqs)
	if err != nil {
		return bench.Outcome{}, Stats{}, err
	}
	err = s.run(ctx)
	s.addRequestCosts()
	out, st := s.outcome()
	st.Autoscale = s.finishAutoscale()
	st.WallTime = time.Since(wallStart)
	return out, st, err
}

// simBase is the virtual wall-clock time of offset 0 (the engines, the router and the
// flows take time.Time values; any fixed instant will do).
var simBase = time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)

// simulator owns the whole simulated fleet; one goroutine runs it. It is the shell of
// every request's flow.Flow (shell.go): it carries out their effects on the virtual
// clock.
type simulator struct {
	cfg     Config
	reqs    []bench.Request
	order   []int32 // request indices by arrival (stable)
	results []bench.Result
	state   []reqState
	// legs holds every leg sent, by slot; a leg's request id in its engine is its slot
	// in decimal.
	legs    []leg
	router  *kv.Router
	rng     *rand.Rand
	workers []*worker
	byName  map[string]int32 // worker index by name
	heap    eventHeap
	seq     uint64        // events pushed so far (the heap's tie breaker)
	now     time.Duration // virtual time, offset from simBase
	last    time.Duration // the last event that did something (Stats.SimulatedTime)
	origin  time.Duration // first arrival
	next    int           // next arrival in order
	done    int           // requests ended
	stats   Stats
	// raised holds the events that carrying out flow effects raised, fed in order once
	// those are done; stepping says effects are being carried out (step).
	raised   []raisedEvent
	stepping bool
	// queue holds the requests parked in the busy queue (flow.Park), first in first
	// out; retrying says a QueueRetry wake of its head is on the heap.
	queue    []int32
	retrying bool
	// beats counts the heartbeats on the heap (lora.go).
	beats  int
	chunks []messages.TokenChunk // newChunk's slab
	// applyErrs counts KV event batches the router could not apply (it lost track of a
	// worker's blocks); none are expected, since the simulated stream loses nothing.
	applyErrs int
	// err stops the run: an event that would happen beyond MaxSimulatedTime.
	err error
	// as is the autoscaler's state (Config.Autoscaler; autoscale.go), or nil.
	as *autoscale
}

// worker is one simulated worker: its engine and its KV event stream.
type worker struct {
	idx  int // in simulator.workers, and the router's WorkerID
	name string
	role kv.Role
	eng  *mocker.Engine
	ref  *messages.ActorRef // its address in routes (the flow wants one; nothing is sent to it)
	// blocks is its engine's KV blocks (Engine's, or PrefillEngine's for a prefill
	// worker), as it registers them with the router.
	blocks int
	// dead: a fault killed it; its engine is never stepped again.
	dead bool
	// slot: where the worker is in its life on an autoscaled fleet (always slotReady
	// otherwise); gen counts its changes (a start or drain timeout event of an older
	// generation is stale); fresh: its engine has not run yet; epoch: its engine's, as
	// registered with the router (from 1; a restart takes a new engine and epoch);
	// stale: event batches of an earlier engine whose deliveries are still on the heap
	// (autoscale.go).
	slot  slotState
	gen   uint32
	fresh bool
	epoch uint64
	stale int
	// busy: a step is scheduled or in flight (res holds the in-flight step); inStep: it
	// is in flight, ending at stepEnd.
	busy    bool
	res     mocker.StepResult
	inStep  bool
	stepEnd time.Duration
	// lora: its LoRA adapters beyond its engine's view (lora.go).
	lora workerLora
	// kvbm: its node's KV block manager (Config.Kvbm; kvbm.go), or nil.
	kvbm *nodeKvbm
	// seq numbers the worker's KV event batches (from 1); pending holds the batches on
	// their way to the router (EventDelay > 0), oldest at pendingHead.
	seq         uint64
	pending     [][]kv.Event
	pendingHead int
}

func newSimulator(cfg Config, reqs []bench.Request) (*simulator, error) {
	cfg, err := cfg.normalize()
	if err != nil {
		return nil, err
	}
	router, err := kv.NewRouter(cfg.Router)
	if err != nil {
		return nil, fmt.Errorf("sim: Router: %w", err)
	}
	s := &simulator{
		cfg:     cfg,
		reqs:    reqs,
		results: make([]bench.Result, len(reqs)),
		state:   make([]reqState, len(reqs)),
		router:  router,
		rng:     rand.New(rand.NewPCG(cfg.Seed, 0x73696d2d726f7574)), // "sim-rout"
		byName:  map[string]int32{},
		stats: Stats{Requests: len(reqs), Decisions: map[kv.DisaggDecision]int{},
			Migrations: map[messages.Fault]int{}, PrefillRetries: map[messages.Fault]int{}},
	}
	vocab := simVocab()
	var fleet *kvbmFleet // the block managers serving each other (Kvbm.Remote)
	if cfg.Kvbm != nil && cfg.Kvbm.Remote {
		fleet = &kvbmFleet{}
	}
	add := func(name string, role kv.Role) error {
		ec, field := cfg.Engine, "Engine"
		if role == kv.RolePrefill {
			ec, field = cfg.PrefillEngine, "PrefillEngine"
		}
		var nk *nodeKvbm
		if cfg.Kvbm != nil {
			nk = newNodeKvbm(nodeName(name), cfg.Kvbm, ec.BlockBytes())
			if fleet != nil {
				fleet.join(nk)
			}
			ec.Tiers = nk
		}
		eng, err := mocker.New(ec, vocab)
		if err != nil {
			return fmt.Errorf("sim: %s: %w", field, err)
		}
		w := &worker{idx: len(s.workers), name: name, role: role, eng: eng, blocks: ec.NumGPUBlocks, epoch: 1,
			ref: &messages.ActorRef{Address: "sim", Id: "worker/" + name}, kvbm: nk}
		if _, err := router.Register(s.workerSpec(w)); err != nil {
			return fmt.Errorf("sim: registering %s: %w", w.name, err)
		}
		s.byName[name] = int32(w.idx)
		s.workers = append(s.workers, w)
		return nil
	}
	slots, prefillSlots := cfg.slots() // the fleet's size, or an autoscaled fleet's slots
	for i, name := range WorkerNames(slots, prefillSlots) {
		role := kv.RoleAggregated
		switch {
		case i >= slots:
			role = kv.RolePrefill
		case cfg.PrefillWorkers > 0:
			role = kv.RoleDecode
		}
		if err := add(name, role); err != nil {
			return nil, err
		}
	}
	for i, f := range cfg.Faults {
		if _, ok := s.byName[f.Worker]; !ok {
			return nil, fmt.Errorf("sim: Faults[%d]: worker %q: no such worker (the fleet's are %s)", i, f.Worker,
				DescribeWorkers(slots, prefillSlots))
		}
		s.stats.Faults = append(s.stats.Faults, FaultReport{Fault: f})
	}
	for i := range reqs {
		if at := reqs[i].Arrival; at < 0 || at > bench.MaxArrival {
			return nil, fmt.Errorf("sim: request %d: arrival %v: want 0 to %v (bench.MaxArrival)", i, at, bench.MaxArrival)
		}
	}
	s.order = make([]int32, len(reqs))
	for i := range s.order {
		s.order[i] = int32(i)
	}
	slices.SortStableFunc(s.order, func(a, b int32) int { return cmp.Compare(reqs[a].Arrival, reqs[b].Arrival) })
	if len(reqs) > 0 {
		s.origin = reqs[s.order[0]].Arrival
		s.now, s.last = s.origin, s.origin
		for i, f := range cfg.Faults {
			s.pushReq(s.origin+f.At, evFault, int(s.byName[f.Worker]), i)
		}
		if s.loraOn() {
			for _, w := range s.workers {
				s.pushBeat(s.origin+cfg.Heartbeat, w.idx)
			}
		}
	}
	if err := s.initAutoscale(); err != nil {
		return nil, err
	}
	return s, nil
}

// Vocabulary of the simulated engines: output token ids vocabFirst.. (within the range
// bench.Tokens draws prompts from) and one EOS id, never generated since requests
// ignore EOS. Output tokens only need to differ between positions; a small vocabulary
// stays in the processor's cache (the engine picks one entry at random per token).
const (
	vocabFirst = 1000
	vocabSize  = 1024
	vocabEOS   = 2
)

var simVocab = sync.OnceValue(func() mocker.Vocab {
	v := mocker.Vocab{Ordinary: make([]uint32, vocabSize), EOS: []uint32{vocabEOS}}
	for i := range v.Ordinary {
		v.Ordinary[i] = uint32(vocabFirst + i)
	}
	return v
})

// maxTokens is a request's max_tokens, as the bench runner sends it.
func maxTokens(r *bench.Request) int { return max(r.OutputLength, 1) }

// invalid says why r cannot run on an engine of cfg, or "".
func invalid(r *bench.Request, cfg *mocker.Config) string {
	switch {
	case r.InputLength < 1:
		return fmt.Sprintf("input length %d tokens: want at least 1", r.InputLength)
	case maxTokens(r) > cfg.MaxModelLen-r.InputLength:
		return fmt.Sprintf("%d prompt tokens plus max_tokens %d exceed the context length %d",
			r.InputLength, maxTokens(r), cfg.MaxModelLen)
	}
	return ""
}

// ctxCheckEvery is how many events run between two looks at ctx.
const ctxCheckEvery = 1024

// run processes events until none is left, ctx ends or an event would happen beyond
// MaxSimulatedTime (s.err).
func (s *simulator) run(ctx context.Context) error {
	prompts, stop := startPrompts(s.reqs, s.order, s.cfg)
	defer stop()
	for n := 0; ; n++ {
		if n%ctxCheckEvery == 0 && ctx.Err() != nil {
			s.cancel("the simulation was stopped")
			return ctx.Err()
		}
		if s.err != nil {
			s.cancel("the simulation failed")
			return s.err
		}
		arrival := s.next < len(s.order)
		if !arrival && len(s.heap) == 0 {
			break
		}
		if arrival {
			at := s.reqs[s.order[s.next]].Arrival
			if len(s.heap) == 0 || at < s.heap[0].at || (at == s.heap[0].at && evArrival < s.heap[0].kind()) {
				s.now, s.last = at, at
				s.arrive(int(s.order[s.next]), <-prompts)
				s.next++
				continue
			}
		}
		ev := s.heap.pop()
		s.now = ev.at

		switch ev.kind() {
		case evFault:
			if s.done < len(s.reqs) { // else the run ended first
				s.last = s.now
				s.fault(int(ev.r))
			}
		case evDeliver:
			s.last = s.now
			s.deliver(s.workers[ev.w])
		case evRegister:
			if ev.x == 1 {
				s.heartbeat(s.workers[ev.w])
			} else {
				s.register(s.workers[ev.w])
			}
		case evScale:
			s.scaleEvent(s.workers[ev.w], ev.x)
		case evPlan:
			s.plan()
		case evStepEnd:
			s.last = s.now
			s.stepEnd(s.workers[ev.w])
		case evTransfer:
			s.last = s.now
			s.transferred(int(ev.r))
		case evLoaded:
			s.last = s.now
			s.wake(int(ev.w))
		case evTimer:
			s.timerDue(int(ev.r), int(ev.w), ev.x)
		case evDeadline:
			s.deadline(int(ev.r))
		case evQueueRetry:
			s.queueRetry()
		case evStepStart:
			s.last = s.now
			s.stepStart(s.workers[ev.w])
		}
	}
	s.cancelKind(ErrStalled, "the run ended with the request still waiting in its engine")
	return nil
}

func (s *simulator) push(at time.Duration, k evKind, w int) { s.pushReq(at, k, w, -1) }

func (s *simulator) pushReq(at time.Duration, k evKind, w, r int) {
	s.seq++
	s.heap.push(event{at: at, key: uint64(k)<<kindShift | s.seq, w: int32(w), r: int32(r)})
}

// arrive starts request i's flow.
func (s *simulator) arrive(i int, p prompt) {
	r := &s.reqs[i]
	res := &s.results[i]
	res.Index, res.Start, res.InputLength, res.Lora = i, r.Arrival-s.origin, r.InputLength, r.Lora
	if why := invalid(r, &s.cfg.Engine); why != "" {
		s.fail(i, ErrInvalidRequest, why)
		return
	}
	if p.err != nil {
		s.fail(i, bench.ErrWorkload, p.err.Error())
		return
	}
	st := &s.state[i]
	st.maxTokens = int32(maxTokens(r))
	st.flow = flow.New(flow.Request{ID: strconv.Itoa(i), Tokens: p.tokens,
		Sampling: &messages.SamplingParams{MaxTokens: st.maxTokens, IgnoreEos: true, LoraName: r.Lora}}, s.cfg.Flow)
	if t := s.cfg.RequestTimeout; t > 0 {
		// The client gives up at t. The host's cost (host.go) delays every answer on
		// its way back: what the engine has not sent by t less that cost reaches the
		// client after it gave up.
		if d := max(t-s.cfg.requestCost(r.InputLength), 0); d <= MaxSimulatedTime-s.now {
			s.pushReq(s.now+d, evDeadline, 0, i)
		}
	}
	// Others waiting in the busy queue: it joins its end without routing, as at the
	// gateway.
	s.step(i, flow.Start{Behind: len(s.queue) > 0})
}

// workerIndex returns the index of the worker the router named, which is its WorkerID.
func (s *simulator) workerIndex(id kv.WorkerID, name string) int {
	wi := int(id)
	if wi < 0 || wi >= len(s.workers) || s.workers[wi].name != name {
		panic(fmt.Sprintf("sim: the router chose worker %d %q, which is not worker %d", id, name, wi))
	}
	return wi
}

// wake schedules a step of an idle worker now (after this instant's arrivals).
func (s *simulator) wake(wi int) {
	w := s.workers[wi]
	if !w.busy && !w.dead {
		w.busy = true
		s.push(s.now, evStepStart, wi)
	}
}

// stepStart runs one step of w's engine; its results show at its end. An engine loading
// a LoRA adapter steps once the load ends.
func (s *simulator) stepStart(w *worker) {
	if w.dead {
		w.busy = false
		return
	}
	if w.lora.free > s.now {
		s.push(w.lora.free, evStepStart, w.idx)
		return
	}
	res := w.eng.Step(simBase.Add(s.now))
	if res.Idle {
		// Nothing fits (only a request larger than the KV cache does that), or only
		// lower-tier loads are in flight: the first load's end (as the server's timer
		// sees it) or the next Add wakes the engine again, whichever comes first.
		w.busy = false
		if len(res.Events) > 0 {
			s.emit(w, res.Events)
		}
		if !res.WakeAt.IsZero() {
			s.push(s.now+TimerWait(res.WakeAt.Sub(simBase.Add(s.now)), s.cfg.TimerResolution), evLoaded, w.idx)
		}
		return
	}
	// A duration past time.Duration's range comes out negative (or saturated) from the
	// timing model: stop the run rather than go back in time.
	if res.Duration < 0 || res.Duration > MaxSimulatedTime || s.now+s.cfg.stepWall(res.Duration) > MaxSimulatedTime {
		s.err = fmt.Errorf("sim: %s: a step of %v (the timing model divided by speedup ratio %g) at %v would end beyond %v (MaxSimulatedTime)",
			w.name, res.Duration, s.cfg.Engine.SpeedupRatio, s.now, MaxSimulatedTime)
		return
	}
	s.stats.Steps++
	w.res = res
	w.inStep, w.stepEnd = true, s.now+s.cfg.stepWall(res.Duration)
	s.push(w.stepEnd, evStepEnd, w.idx)
}

// stepEnd publishes w's step: KV events first (as an engine publishes them before it
// hands out the outputs), then each output as its leg's chunk; w steps again at once if
// it has work.
func (s *simulator) stepEnd(w *worker) {
	w.inStep = false
	if w.dead { // killed during the step: its outputs are lost
		w.busy, w.res = false, mocker.StepResult{}
		return
	}
	res := &w.res
	if len(res.Events) > 0 {
		s.emit(w, res.Events)
	}
	s.publishKvbm(w)
	for k := range res.Outputs {
		s.output(w, &res.Outputs[k])
		if w.dead {
			break
		}
	}
	w.res = mocker.StepResult{}
	s.loraRetry(w) // requests left the engine: their adapters may make room
	switch {
	case w.dead || !w.eng.HasWork():
		w.busy = false
		if w.slot == slotDraining {
			s.drainCheck(w)
		}
	case s.next < len(s.order) && s.reqs[s.order[s.next]].Arrival == s.now,
		len(s.heap) > 0 && s.heap[0].at == s.now:
		// Requests arriving (or transferred) at this instant join the next step: start it
		// after them.
		s.push(s.now, evStepStart, w.idx)
	default:
		s.stepStart(w)
	}
}

// emit sends one batch of w's KV events to the router, now or EventDelay later.
func (s *simulator) emit(w *worker, events []kv.Event) {
	if s.cfg.EventDelay == 0 {
		w.seq++
		s.apply(w, w.seq, events)
		return
	}
	w.pending = append(w.pending, events)
	s.push(s.now+s.cfg.EventDelay, evDeliver, w.idx)
}

// deliver hands w's oldest pending batch to the router (none once w was killed).
func (s *simulator) deliver(w *worker) {
	if w.stale > 0 { // a batch of an engine the worker no longer runs (autoscale.go)
		w.stale--
		return
	}
	if w.pendingHead == len(w.pending) {
		return
	}
	events := w.pending[w.pendingHead]
	w.pending[w.pendingHead] = nil
	w.pendingHead++
	if w.pendingHead == len(w.pending) {
		w.pending, w.pendingHead = w.pending[:0], 0
	}
	w.seq++
	s.apply(w, w.seq, events)
}

func (s *simulator) apply(w *worker, seq uint64, events []kv.Event) {
	if needDump, err := s.router.ApplyBatch(w.name, w.epoch, seq, events); needDump || err != nil {
		s.applyErrs++
	}
}

// parseIndex reads a leg's engine request id (its slot in decimal).
func parseIndex(id string) int {
	n := 0
	for i := 0; i < len(id); i++ {
		n = n*10 + int(id[i]-'0')
	}
	return n
}

// fail ends request i with an error; the tokens it streamed before stay counted.
func (s *simulator) fail(i int, kind, detail string) {
	s.results[i].Error, s.results[i].Detail = kind, detail
	s.results[i].OutputTokens = s.state[i].tokens
	s.ended(i)
}

func (s *simulator) ended(i int) {
	s.state[i].ended = true
	s.done++
	s.observeEnd(i)
	if s.cfg.Progress != nil {
		s.cfg.Progress(s.done, len(s.reqs))
	}
}

// cancel marks every request not ended, arrived or not, bench.ErrCanceled.
func (s *simulator) cancel(detail string) {
	for ; s.next < len(s.order); s.next++ {
		i := int(s.order[s.next])
		s.results[i] = bench.Result{Index: i, Start: s.reqs[i].Arrival - s.origin, InputLength: s.reqs[i].InputLength, Lora: s.reqs[i].Lora}
		s.fail(i, bench.ErrCanceled, "not sent: "+detail)
	}
	s.cancelKind(bench.ErrCanceled, detail)
}

// cancelKind ends the requests that have not ended with kind: their clients leave
// (flow.ClientGone), so their flows cancel their legs and free them in the router.
func (s *simulator) cancelKind(kind, detail string) {
	for i := range s.state {
		st := &s.state[i]
		if st.ended || st.flow == nil {
			continue
		}
		if st.tokens > 0 {
			s.results[i].E2E = st.last - s.reqs[i].Arrival
		}
		s.fail(i, kind, detail)
		s.step(i, flow.ClientGone{})
	}
}

// outcome builds the run's outcome and statistics.
func (s *simulator) outcome() (bench.Outcome, Stats) {
	var end time.Duration
	for i := range s.results {
		end = max(end, s.results[i].Start+s.results[i].E2E)
	}
	st := s.stats
	st.SimulatedTime = s.last - s.origin
	for _, w := range s.workers {
		st.Tiers.addEngine(w.eng.Stats())
	}
	st.Tiers.RoutedBlocks = s.router.Stats().TierHitBlocks
	return bench.Outcome{Results: s.results, Duration: end}, st
}
