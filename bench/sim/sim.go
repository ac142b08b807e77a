package sim

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/turbine-llm/turbine/bench"
	"github.com/turbine-llm/turbine/engines/mocker"
	"github.com/turbine-llm/turbine/kv"
)

// Error kinds of a simulated bench.Result, besides bench.ErrWorkload and
// bench.ErrCanceled.
const (
	// ErrInvalidRequest: the request cannot run (prompt plus output tokens longer than
	// the engine's MaxModelLen, or an empty prompt); a real gateway answers 400.
	ErrInvalidRequest = "invalid_request"
	// ErrNoWorkers and ErrAllBusy: the router refused the request (kv.ErrNoWorkers,
	// kv.ErrAllBusy); a real gateway answers 503. ErrRoute: any other routing error.
	ErrNoWorkers = "no_workers"
	ErrAllBusy   = "all_busy"
	ErrRoute     = "route"
	// ErrStalled: the run ended with the request still in an engine that cannot
	// schedule it (it needs more KV blocks than the engine has).
	ErrStalled = "stalled"
)

// DecisionAggregated counts, in Stats.Decisions, requests served by one worker from
// prefill to the last token (kv.DisaggAggregated). With prefill workers the other
// decisions are the router's: kv.DisaggRemote, kv.DisaggLocalShortPrefill ...
const DecisionAggregated = kv.DisaggAggregated

// Stats describes a simulation run.
type Stats struct {
	// SimulatedTime is the virtual time from the first arrival to the last event.
	SimulatedTime time.Duration
	// Steps counts the engine steps (all engines) that computed something.
	Steps int64
	// Requests is the number of requests in the workload.
	Requests int
	// Decisions counts routed requests by the router's serving decision
	// (DecisionAggregated, or kv.DisaggRemote, kv.DisaggLocalShortPrefill ... when the
	// fleet has prefill workers).
	Decisions map[string]int
	// WallTime is the real time Run took.
	WallTime time.Duration
}

// Run simulates reqs (any order; each starts at its Arrival) on the fleet cfg describes
// and returns one bench.Result per request, in the order of reqs, with times measured on
// the virtual clock from the first arrival: Start is the arrival's offset, TTFT, ITL and
// E2E as a client would see them from a zero-latency gateway, CachedTokens the engine's
// prefix-cache hit (CachedKnown). Outcome.Duration runs from the first arrival to the
// last answer. Requests that cannot run fail with an error kind (ErrInvalidRequest,
// bench.ErrWorkload, ErrNoWorkers, ErrAllBusy) instead of stopping the run.
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
	out, st := s.outcome()
	st.WallTime = time.Since(wallStart)
	return out, st, err
}

// simBase is the virtual wall-clock time of offset 0 (the engines and the router take
// time.Time values; any fixed instant will do).
var simBase = time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)

// simulator owns the whole simulated fleet; one goroutine runs it.
type simulator struct {
	cfg     Config
	reqs    []bench.Request
	order   []int32 // request indices by arrival (stable)
	results []bench.Result
	state   []reqState
	router  *kv.Router
	rng     *rand.Rand
	workers []*worker
	heap    eventHeap
	seq     uint64        // events pushed so far (the heap's tie breaker)
	now     time.Duration // virtual time, offset from simBase
	origin  time.Duration // first arrival
	next    int           // next arrival in order
	done    int           // requests ended
	stats   Stats
	// applyErrs counts KV event batches the router could not apply (it lost track of a
	// worker's blocks); none are expected, since the simulated stream loses nothing.
	applyErrs int
	// err stops the run: an event that would happen beyond MaxSimulatedTime.
	err error
}

// reqState is the simulation's bookkeeping of one request.
type reqState struct {
	id        string        // request id in the router and the engines (its index)
	last      time.Duration // time of its last token
	maxTokens int32
	active    bool // routed and not ended
	// A remote (disaggregated) request: its prefill worker (-1: none), the decode leg's
	// worker, and the prompt, kept until the decode leg enters its engine.
	prefillW int32
	decodeW  int32
	prompt   []uint32
	// preCached: prompt tokens the prefill leg found in its engine's prefix cache. They
	// are a remote request's cached tokens, as the frontend reports them: the prompt was
	// computed there, and the decode engine's own hit describes KV it loaded anyway.
	preCached int
}

// worker is one simulated worker: its engine and its KV event stream.
type worker struct {
	idx  int // in simulator.workers, and the router's WorkerID
	name string
	role kv.Role
	eng  *mocker.Engine
	// busy: a step is scheduled or in flight (res holds the in-flight step).
	busy bool
	res  mocker.StepResult
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
		stats:   Stats{Requests: len(reqs), Decisions: map[string]int{}},
	}
	vocab := simVocab()
	add := func(name string, role kv.Role) error {
		eng, err := mocker.New(cfg.Engine, vocab)
		if err != nil {
			return fmt.Errorf("sim: Engine: %w", err)
		}
		w := &worker{idx: len(s.workers), name: name, role: role, eng: eng}
		if _, err := router.Register(kv.WorkerSpec{ID: w.name, BlockSize: cfg.Engine.BlockSize,
			TotalBlocks: int64(cfg.Engine.NumGPUBlocks), Ready: true, Epoch: 1, Role: role}); err != nil {
			return fmt.Errorf("sim: registering %s: %w", w.name, err)
		}
		s.workers = append(s.workers, w)
		return nil
	}
	name, role := "worker-", kv.RoleAggregated
	if cfg.PrefillWorkers > 0 {
		name, role = "decode-", kv.RoleDecode
	}
	for i := range cfg.Workers {
		if err := add(name+strconv.Itoa(i), role); err != nil {
			return nil, err
		}
	}
	for i := range cfg.PrefillWorkers {
		if err := add("prefill-"+strconv.Itoa(i), kv.RolePrefill); err != nil {
			return nil, err
		}
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
		s.now = s.origin
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
				s.now = at
				s.arrive(int(s.order[s.next]), <-prompts)
				s.next++
				continue
			}
		}
		ev := s.heap.pop()
		s.now = ev.at
		w := s.workers[ev.w]
		switch ev.kind() {
		case evDeliver:
			s.deliver(w)
		case evStepEnd:
			s.stepEnd(w)
		case evTransfer:
			s.transferred(int(ev.r))
		case evStepStart:
			s.stepStart(w)
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

// arrive routes request i and adds it to its worker's engine.
func (s *simulator) arrive(i int, p prompt) {
	r := &s.reqs[i]
	res := &s.results[i]
	res.Index, res.Start, res.InputLength = i, r.Arrival-s.origin, r.InputLength
	if why := invalid(r, &s.cfg.Engine); why != "" {
		s.fail(i, ErrInvalidRequest, why)
		return
	}
	if p.err != nil {
		s.fail(i, bench.ErrWorkload, p.err.Error())
		return
	}
	st := &s.state[i]
	st.id = strconv.Itoa(i)
	st.maxTokens = int32(maxTokens(r))
	st.prefillW = -1
	d, err := s.router.Route(kv.RouteInput{RequestID: st.id, Tokens: p.tokens}, simBase.Add(s.now), s.rng)
	if err != nil {
		s.fail(i, routeKind(err), err.Error())
		return
	}
	wi := s.workerIndex(d.Worker, d.WorkerID)
	st.decodeW = int32(wi)
	req := mocker.Request{ID: st.id, Prompt: p.tokens, MaxTokens: int(st.maxTokens), IgnoreEOS: true}
	if d.Prefill != nil {
		// Remote: the prefill leg computes the prompt and one token, and keeps its blocks
		// for the decode worker to read; the decode leg enters its engine once they are
		// transferred (transferred).
		wi = s.workerIndex(d.Prefill.Worker, d.Prefill.WorkerID)
		st.prefillW, st.prompt = int32(wi), p.tokens
		req.MaxTokens, req.HoldBlocks = 1, true
	}
	if err := s.workers[wi].eng.Add(req); err != nil {
		s.router.Free(st.id)
		s.fail(i, ErrInvalidRequest, err.Error())
		return
	}
	st.active = true
	s.stats.Decisions[d.Disagg]++
	s.wake(wi)
}

// workerIndex returns the index of the worker the router named, which is its WorkerID.
func (s *simulator) workerIndex(id kv.WorkerID, name string) int {
	wi := int(id)
	if wi < 0 || wi >= len(s.workers) || s.workers[wi].name != name {
		panic(fmt.Sprintf("sim: the router chose worker %d %q, which is not worker %d", id, name, wi))
	}
	return wi
}

// prefilled ends the prefill leg of remote request i: the router stops tracking the leg,
// and the prompt's full blocks travel to the decode worker, at TransferBandwidth (as the
// mock engine's KV transfer port sends them: full blocks of BlockSize tokens of
// KVBytesPerToken bytes each, paced at the bandwidth times the speedup ratio).
func (s *simulator) prefilled(i int) {
	st := &s.state[i]
	s.router.Free(kv.PrefillRequestID(st.id))
	bs := s.cfg.Engine.BlockSize
	bytes := float64(len(st.prompt)/bs*bs) * float64(s.cfg.KVBytesPerToken)
	secs := bytes / (s.cfg.TransferBandwidth * s.cfg.Engine.SpeedupRatio)
	if !(secs <= (MaxSimulatedTime - s.now).Seconds()) {
		s.err = fmt.Errorf("sim: request %d: a KV transfer of %.4g bytes at %g bytes/s × speedup ratio %g takes %.4g s: at %v it would end beyond %v (MaxSimulatedTime)",
			i, bytes, s.cfg.TransferBandwidth, s.cfg.Engine.SpeedupRatio, secs, s.now, MaxSimulatedTime)
		return
	}
	d := time.Duration(secs * float64(time.Second))
	s.pushReq(s.now+d, evTransfer, int(st.decodeW), i)
}

// transferred runs when request i's KV blocks have reached its decode worker: the
// prefill engine releases them and the decode leg enters the decode engine with the
// prompt's full blocks imported (no prefill time for them).
func (s *simulator) transferred(i int) {
	st := &s.state[i]
	s.workers[st.prefillW].eng.Release(st.id)
	bs := s.cfg.Engine.BlockSize
	prompt := st.prompt
	st.prompt = nil
	err := s.workers[st.decodeW].eng.Add(mocker.Request{ID: st.id, Prompt: prompt, MaxTokens: int(st.maxTokens),
		IgnoreEOS: true, ImportedTokens: len(prompt) / bs * bs})
	if err != nil {
		st.active = false
		s.router.Free(st.id)
		s.fail(i, ErrInvalidRequest, err.Error())
		return
	}
	s.wake(int(st.decodeW))
}

func routeKind(err error) string {
	switch {
	case errors.Is(err, kv.ErrAllBusy):
		return ErrAllBusy
	case errors.Is(err, kv.ErrNoWorkers):
		return ErrNoWorkers
	}
	return ErrRoute
}

// wake schedules a step of an idle worker now (after this instant's arrivals).
func (s *simulator) wake(wi int) {
	w := s.workers[wi]
	if !w.busy {
		w.busy = true
		s.push(s.now, evStepStart, wi)
	}
}

// stepStart runs one step of w's engine; its results show at its end.
func (s *simulator) stepStart(w *worker) {
	res := w.eng.Step(simBase.Add(s.now))
	if res.Idle {
		// Nothing fits (only a request larger than the KV cache does that); the next
		// Add wakes the engine again.
		w.busy = false
		if len(res.Events) > 0 {
			s.emit(w, res.Events)
		}
		return
	}
	// A duration past time.Duration's range comes out negative (or saturated) from the
	// timing model: stop the run rather than go back in time.
	if res.Duration < 0 || res.Duration > MaxSimulatedTime || s.now+res.Duration+s.cfg.StepOverhead > MaxSimulatedTime {
		s.err = fmt.Errorf("sim: %s: a step of %v (the timing model divided by speedup ratio %g) at %v would end beyond %v (MaxSimulatedTime)",
			w.name, res.Duration, s.cfg.Engine.SpeedupRatio, s.now, MaxSimulatedTime)
		return
	}
	s.stats.Steps++
	w.res = res
	s.push(s.now+res.Duration+s.cfg.StepOverhead, evStepEnd, w.idx)
}

// stepEnd publishes w's step: KV events first (as an engine publishes them before it
// hands out the outputs), then the tokens; w steps again at once if it has work.
func (s *simulator) stepEnd(w *worker) {
	res := &w.res
	if len(res.Events) > 0 {
		s.emit(w, res.Events)
	}
	for k := range res.Outputs {
		o := &res.Outputs[k]
		if i := parseIndex(o.RequestID); s.state[i].prefillW == int32(w.idx) {
			s.state[i].preCached = o.CachedTokens
			s.prefilled(i) // a prefill leg's only token: no client sees it
		} else {
			s.output(o, i)
		}
	}
	w.res = mocker.StepResult{}
	switch {
	case !w.eng.HasWork():
		w.busy = false
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

// deliver hands w's oldest pending batch to the router.
func (s *simulator) deliver(w *worker) {
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
	if needDump, err := s.router.ApplyBatch(w.name, 1, seq, events); needDump || err != nil {
		s.applyErrs++
	}
}

// output records one step output of request i.
func (s *simulator) output(o *mocker.Output, i int) {
	st := &s.state[i]
	res := &s.results[i]
	if res.OutputTokens == 0 {
		res.TTFT = s.now - s.reqs[i].Arrival
		res.PromptTokens, res.CachedTokens, res.CachedKnown = o.PromptTokens, o.CachedTokens, true
		if st.prefillW >= 0 {
			res.CachedTokens = st.preCached
		}
		res.ITL = make([]time.Duration, 0, st.maxTokens-1)
		s.router.PrefillDone(st.id)
	} else {
		res.ITL = append(res.ITL, s.now-st.last)
	}
	st.last = s.now
	res.OutputTokens += len(o.TokenIDs)
	if o.Finished {
		res.E2E = s.now - s.reqs[i].Arrival
		s.router.Free(st.id)
		st.active = false
		s.ended()
	}
}

// parseIndex reads a request id (the request's index in decimal).
func parseIndex(id string) int {
	n := 0
	for i := 0; i < len(id); i++ {
		n = n*10 + int(id[i]-'0')
	}
	return n
}

// fail ends request i with an error.
func (s *simulator) fail(i int, kind, detail string) {
	s.results[i].Error, s.results[i].Detail = kind, detail
	s.ended()
}

func (s *simulator) ended() {
	s.done++
	if s.cfg.Progress != nil {
		s.cfg.Progress(s.done, len(s.reqs))
	}
}

// cancel marks every request not ended, arrived or not, bench.ErrCanceled.
func (s *simulator) cancel(detail string) {
	for ; s.next < len(s.order); s.next++ {
		i := int(s.order[s.next])
		s.results[i] = bench.Result{Index: i, Start: s.reqs[i].Arrival - s.origin, InputLength: s.reqs[i].InputLength}
		s.fail(i, bench.ErrCanceled, "not sent: "+detail)
	}
	s.cancelKind(bench.ErrCanceled, detail)
}

// cancelKind ends the requests still in engines with kind; the router frees them (both
// legs of a remote request).
func (s *simulator) cancelKind(kind, detail string) {
	for i := range s.state {
		if st := &s.state[i]; st.active {
			st.active, st.prompt = false, nil
			s.router.Free(st.id)
			if s.results[i].OutputTokens > 0 {
				s.results[i].E2E = st.last - s.reqs[i].Arrival
			}
			s.fail(i, kind, detail)
		}
	}
}

// outcome builds the run's outcome and statistics.
func (s *simulator) outcome() (bench.Outcome, Stats) {
	var end time.Duration
	for i := range s.results {
		end = max(end, s.results[i].Start+s.results[i].E2E)
	}
	st := s.stats
	st.SimulatedTime = s.now - s.origin
	return bench.Outcome{Results: s.results, Duration: end}, st
}
