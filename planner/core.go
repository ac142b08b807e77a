package planner

import (
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"
	"time"
)

// Config configures a Planner. Start from DefaultConfig (defaults.go) and change fields;
// New fills zero fields from it, checks every field and names the one that is wrong.
type Config struct {
	// Mode: ModeLoad or ModeSLA.
	Mode Mode
	// Interval is the SLA mode's adjustment interval; LoadInterval the load mode's period.
	// Both > 0.
	Interval, LoadInterval time.Duration
	// Targets: TTFT and ITL p90 in ms, finite and > 0.
	TTFTTargetMs, ITLTargetMs float64
	// GPUBudget bounds the GPUs of all pools together (replicas × GPUsPerEngine); it must
	// hold MinWorkers of every pool in use.
	GPUBudget int
	// MinWorkers is the least each pool in use keeps (≥ 1).
	MinWorkers int
	// Disaggregated: the pools are prefill and decode; otherwise the aggregated pool.
	Disaggregated bool
	// GPUsPerEngine is each pool's tensor-parallel size (GPUs per worker, 1..64; a mock
	// worker without a GPU counts 1). A pool missing from the map counts 1.
	GPUsPerEngine map[Pool]int
	// Predictor names the load predictor in Predictors (PredictorNames for the built-in
	// ones); PredictorOptions tunes it (zero fields take their defaults). Requests, mean
	// ISL and mean OSL each get an instance.
	Predictor        string
	PredictorOptions PredictorOptions
	// Predictors is the predictor registry; nil means DefaultPredictors().
	Predictors *Registry
	// Stabilization: a pool's target is the highest size wanted within this window, so it
	// shrinks only once every decision in the window wanted the smaller size. Zero means
	// DefaultStabilizationIntervals of the mode's period; a window shorter than the period
	// (e.g. 1ns) scales down at once.
	Stabilization time.Duration
	// StepTimeout: a pool whose workers have been starting or stopping for this long is no
	// longer held for that step (a stuck start must not pin the pool).
	StepTimeout time.Duration
	// Profile is the engine profile: required in SLA mode (with an entry for every pool's
	// GPUsPerEngine); in load mode it only sharpens the prefill queue threshold.
	Profile *Profile
	// CorrectionMin and CorrectionMax bound the SLA mode's correction factors:
	// 0 < CorrectionMin ≤ 1 ≤ CorrectionMax, finite.
	CorrectionMin, CorrectionMax float64
	// KVUsageTarget (0, 1]: load mode adds a decode or aggregated worker when every ready
	// one's KV usage is at least this.
	KVUsageTarget float64
	// ScaleDownRatio (0, 1): load mode removes a worker only when the pool's whole load
	// spread over one worker fewer stays under this fraction of each threshold; SLA mode
	// shrinks a pool only to a size its load fills to at most this fraction (so a load at
	// a boundary does not flap).
	ScaleDownRatio float64
	// PrefillTokensPerSec: one engine's prefill rate (tokens/s) that load mode assumes
	// without a profile; its queue threshold is this rate × the TTFT target.
	PrefillTokensPerSec float64
}

// PoolsInUse lists the pools the configuration plans: prefill and decode when
// disaggregated, else the aggregated pool.
func (c Config) PoolsInUse() []Pool {
	if c.Disaggregated {
		return []Pool{PoolPrefill, PoolDecode}
	}
	return []Pool{PoolAggregated}
}

// period is the mode's decision period.
func (c Config) period() time.Duration {
	if c.Mode == ModeSLA {
		return c.Interval
	}
	return c.LoadInterval
}

// gpus is the pool's GPUs per engine (1 when unset).
func (c Config) gpus(p Pool) int {
	if g := c.GPUsPerEngine[p]; g > 0 {
		return g
	}
	return 1
}

// withDefaults fills zero fields from DefaultConfig.
func (c Config) withDefaults() Config {
	d := DefaultConfig()
	if c.Mode == 0 {
		c.Mode = d.Mode
	}
	setDur := func(v *time.Duration, def time.Duration) {
		if *v == 0 {
			*v = def
		}
	}
	setF := func(v *float64, def float64) {
		if *v == 0 {
			*v = def
		}
	}
	setDur(&c.Interval, d.Interval)
	setDur(&c.LoadInterval, d.LoadInterval)
	setDur(&c.StepTimeout, d.StepTimeout)
	setF(&c.TTFTTargetMs, d.TTFTTargetMs)
	setF(&c.ITLTargetMs, d.ITLTargetMs)
	setF(&c.CorrectionMin, d.CorrectionMin)
	setF(&c.CorrectionMax, d.CorrectionMax)
	setF(&c.KVUsageTarget, d.KVUsageTarget)
	setF(&c.ScaleDownRatio, d.ScaleDownRatio)
	setF(&c.PrefillTokensPerSec, d.PrefillTokensPerSec)
	if c.GPUBudget == 0 {
		c.GPUBudget = d.GPUBudget
	}
	if c.MinWorkers == 0 {
		c.MinWorkers = d.MinWorkers
	}
	if c.Predictor == "" {
		c.Predictor = d.Predictor
	}
	if c.Predictors == nil {
		c.Predictors = DefaultPredictors()
	}
	gpe := maps.Clone(d.GPUsPerEngine)
	for p, n := range c.GPUsPerEngine {
		gpe[p] = n
	}
	c.GPUsPerEngine = gpe
	if c.Stabilization == 0 {
		c.Stabilization = DefaultStabilizationIntervals * c.period()
	}
	return c
}

func invalidConfig(format string, a ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrInvalidConfig}, a...)...)
}

func checkTarget(name string, v float64) error {
	if !(v > 0) || math.IsInf(v, 0) {
		return invalidConfig("%s %v, want finite and > 0", name, v)
	}
	return nil
}

// validate checks a defaulted configuration.
func (c Config) validate() error {
	if c.Mode != ModeLoad && c.Mode != ModeSLA {
		return invalidConfig("Mode %v, want load or sla", c.Mode)
	}
	for _, f := range []struct {
		name string
		v    time.Duration
	}{{"Interval", c.Interval}, {"LoadInterval", c.LoadInterval}, {"Stabilization", c.Stabilization}, {"StepTimeout", c.StepTimeout}} {
		if f.v < 0 {
			return invalidConfig("%s %v, want > 0", f.name, f.v)
		}
	}
	if err := checkTarget("TTFTTargetMs", c.TTFTTargetMs); err != nil {
		return err
	}
	if err := checkTarget("ITLTargetMs", c.ITLTargetMs); err != nil {
		return err
	}
	if err := checkTarget("PrefillTokensPerSec", c.PrefillTokensPerSec); err != nil {
		return err
	}
	switch {
	case c.MinWorkers < 1:
		return invalidConfig("MinWorkers %d, want ≥ 1", c.MinWorkers)
	case c.GPUBudget < 1:
		return invalidConfig("GPUBudget %d, want ≥ 1", c.GPUBudget)
	case !(c.CorrectionMin > 0 && c.CorrectionMin <= 1):
		return invalidConfig("CorrectionMin %v, want (0, 1]", c.CorrectionMin)
	case !(c.CorrectionMax >= 1) || math.IsInf(c.CorrectionMax, 0):
		return invalidConfig("CorrectionMax %v, want finite and ≥ 1", c.CorrectionMax)
	case !(c.KVUsageTarget > 0 && c.KVUsageTarget <= 1):
		return invalidConfig("KVUsageTarget %v, want (0, 1]", c.KVUsageTarget)
	case !(c.ScaleDownRatio > 0 && c.ScaleDownRatio < 1):
		return invalidConfig("ScaleDownRatio %v, want (0, 1)", c.ScaleDownRatio)
	}
	for p, n := range c.GPUsPerEngine {
		if p < PoolAggregated || p > PoolDecode {
			return invalidConfig("GPUsPerEngine has an unknown pool %v", p)
		}
		if n < 1 || n > 64 {
			return invalidConfig("GPUsPerEngine[%v] %d, want 1..64", p, n)
		}
	}
	if err := c.checkBudget(c.GPUBudget); err != nil {
		return err
	}
	if c.Mode == ModeSLA && c.Profile == nil {
		return invalidConfig("Profile missing: SLA mode needs an engine profile")
	}
	if c.Profile != nil {
		if err := c.Profile.Validate(); err != nil { // c.Profile is New's own copy
			return invalidConfig("Profile: %s", strings.TrimPrefix(err.Error(), "planner: "))
		}
		if c.Mode == ModeSLA {
			for _, p := range c.PoolsInUse() {
				if _, err := c.Profile.ForTP(c.gpus(p)); err != nil {
					return invalidConfig("GPUsPerEngine[%v] %d: the profile has tensor-parallel sizes %v", p, c.gpus(p), c.Profile.TensorParallelSizes())
				}
			}
		}
	}
	return nil
}

// checkBudget: budget must hold MinWorkers of every pool in use.
func (c Config) checkBudget(budget int) error {
	need := 0
	for _, p := range c.PoolsInUse() {
		need += c.MinWorkers * c.gpus(p)
	}
	if budget < need {
		return invalidConfig("GPUBudget %d holds fewer than MinWorkers %d of every pool in use (%d GPUs)", budget, c.MinWorkers, need)
	}
	return nil
}

// Planner is the planner's state for one model: the load predictors, the latest
// observation, the correction factors, each pool's recent wanted sizes (for the
// stabilisation window) and scale steps in progress, the latest decision. It is a pure
// core: time comes in as Decide's now. Not safe for concurrent use.
type Planner struct {
	cfg                Config
	requests, isl, osl Predictor
	obs                Observation
	obsErr             error // why the latest observation was refused; nil when accepted
	fresh              bool  // an observation came since the last decision
	corrP, corrD       float64
	history            map[Pool][]wish
	seeded             map[Pool]bool // the pool's history began with the fleet as found
	stepSince          map[Pool]time.Time
	last               Decision
}

// wish is one decision's wanted size of a pool (after the minimum), for stabilisation.
type wish struct {
	at time.Time
	n  int
}

// New checks cfg (zero fields filled from DefaultConfig) and returns a planner. Errors
// wrap ErrInvalidConfig and name the field, or ErrUnknownPredictor.
func New(cfg Config) (*Planner, error) {
	cfg = cfg.withDefaults()
	if cfg.Profile != nil { // Validate sorts: work on a copy the caller does not share
		cp := *cfg.Profile
		cp.Parallel = slices.Clone(cp.Parallel)
		for i := range cp.Parallel {
			e := &cp.Parallel[i]
			e.Prefill, e.Decode = slices.Clone(e.Prefill), slices.Clone(e.Decode)
		}
		cfg.Profile = &cp
	}
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	p := &Planner{cfg: cfg, corrP: 1, corrD: 1, history: map[Pool][]wish{}, seeded: map[Pool]bool{}, stepSince: map[Pool]time.Time{}}
	for _, pr := range []*Predictor{&p.requests, &p.isl, &p.osl} {
		var err error
		if *pr, err = cfg.Predictors.New(cfg.Predictor, cfg.PredictorOptions); err != nil {
			return nil, err // names the predictor or the option
		}
	}
	return p, nil
}

// Config returns the planner's configuration: defaults filled, targets as last set.
func (p *Planner) Config() Config {
	c := p.cfg
	c.GPUsPerEngine = maps.Clone(c.GPUsPerEngine)
	return c
}

// CheckObservation reports why o cannot be used: a negative count or duration, a
// negative or non-finite mean or percentile. nil when it can.
func CheckObservation(o Observation) error {
	switch {
	case o.Frontends < 0:
		return fmt.Errorf("planner: observation frontends %d, want ≥ 0", o.Frontends)
	case o.Requests < 0:
		return fmt.Errorf("planner: observation requests %d, want ≥ 0", o.Requests)
	case o.Duration < 0:
		return fmt.Errorf("planner: observation duration %v, want ≥ 0", o.Duration)
	}
	for _, f := range []struct {
		name string
		v    float64
	}{{"isl mean", o.ISLMean}, {"osl mean", o.OSLMean}, {"ttft p90", o.TTFTP90Ms}, {"itl p90", o.ITLP90Ms}, {"queue p90", o.QueueP90Ms}} {
		if !(f.v >= 0) || math.IsInf(f.v, 0) {
			return fmt.Errorf("planner: observation %s %v, want finite and ≥ 0", f.name, f.v)
		}
	}
	return nil
}

// Observe records one window of the frontends' measurements. Call it once per
// interval, before Decide. In SLA mode the window feeds the predictors: its requests
// scaled to the interval (requests × Interval / Duration; a zero Duration counts as one
// interval) and, when it had requests, its mean ISL and OSL; the next Decision reads
// its percentiles for the correction factors. A window with Frontends == 0 is missing
// data, and one CheckObservation refuses is too (the decision says why); neither
// feeds the predictors. Load mode keeps the window for the explanation and its mean ISL.
func (p *Planner) Observe(o Observation) {
	p.obs, p.fresh = o, true
	p.obsErr = CheckObservation(o)
	if p.obsErr != nil || o.Frontends == 0 || p.cfg.Mode != ModeSLA {
		return
	}
	scale := 1.0
	if o.Duration > 0 {
		scale = float64(p.cfg.Interval) / float64(o.Duration)
	}
	p.requests.Add(float64(o.Requests) * scale)
	if o.Requests > 0 {
		p.isl.Add(o.ISLMean)
		p.osl.Add(o.OSLMean)
	}
}

// Last is the latest decision (zero before the first).
func (p *Planner) Last() Decision { return p.last }

// SetTargets changes the targets and the GPU budget at run time; a zero argument keeps
// its value. Errors (ErrInvalidConfig, nothing changed): a negative or non-finite value,
// a budget that cannot hold MinWorkers of every pool in use.
func (p *Planner) SetTargets(ttftMs, itlMs float64, gpuBudget int) error {
	if ttftMs != 0 {
		if err := checkTarget("TTFT target", ttftMs); err != nil {
			return err
		}
	}
	if itlMs != 0 {
		if err := checkTarget("ITL target", itlMs); err != nil {
			return err
		}
	}
	if gpuBudget < 0 {
		return invalidConfig("GPU budget %d, want ≥ 1", gpuBudget)
	}
	if gpuBudget > 0 {
		if err := p.cfg.checkBudget(gpuBudget); err != nil {
			return err
		}
	}
	if ttftMs > 0 {
		p.cfg.TTFTTargetMs = ttftMs
	}
	if itlMs > 0 {
		p.cfg.ITLTargetMs = itlMs
	}
	if gpuBudget > 0 {
		p.cfg.GPUBudget = gpuBudget
	}
	return nil
}

// Decide plans at now for the fleet as the connector sees it, with the workers' loads
// (load mode; SLA mode ignores them). Per pool in use (Config.PoolsInUse) the formula
// (SLA, §27.2, with its latency feedback: a missed p90 target wants one more worker) or
// the load rule (load mode) gives Decision.Wanted; then, in this order,
// each said in Decision.Clamps:
//
//  1. missing data holds the pool at its current size (ready + starting);
//  2. a pool with workers starting or stopping is held (until StepTimeout);
//  3. every pool keeps at least MinWorkers (held ones too);
//  4. stabilisation: in SLA mode a pool shrinks only to a size its load fills to at
//     most ScaleDownRatio (hysteresis); a pool not held gets the highest size wanted
//     within the window (at a planner's first decision with data the pool's current
//     size counts as wanted, so a new planner shrinks nothing before a whole window
//     agrees);
//  5. the GPU budget: held pools keep their GPUs (stopping workers' included, they still
//     hold them), the others shrink in proportion to fit the rest, none below MinWorkers;
//     then a pool grows only into GPUs free now, so that the fleet stays within the
//     budget while one pool gives back GPUs another takes.
//
// The budget comes last so that the window's highest sizes of two pools trading GPUs
// cannot add up past it. Decision.Target holds the result for every pool in use.
func (p *Planner) Decide(now time.Time, fleet Fleet, loads []WorkerLoad) Decision {
	d := Decision{
		At: now, Mode: p.cfg.Mode, Observation: p.obs,
		Wanted: map[Pool]int{}, Target: map[Pool]int{},
	}
	var wanted map[Pool]int
	var engines map[Pool]float64
	why, missing := map[Pool]string{}, map[Pool]string{}
	if p.cfg.Mode == ModeSLA {
		var gap string
		wanted, engines, gap = p.sla(&d, fleet)
		if gap != "" {
			for _, pool := range p.cfg.PoolsInUse() {
				missing[pool] = gap
			}
		}
		for pool, x := range engines {
			why[pool] = fmt.Sprintf("the load needs %.3g engines", x)
		}
		if gap == "" {
			p.feedback(&d, fleet, wanted, why)
			p.loadFloor(&d, fleet, loads, wanted, why)
		}
		// Load mode uses no correction factor: its decisions leave them 0.
		d.CorrectionPrefill, d.CorrectionDecode = p.corrP, p.corrD
	} else {
		wanted, why, missing = p.load(&d, fleet, loads)
	}
	p.fresh = false
	p.clamp(&d, now, fleet, wanted, engines, why, missing)
	p.last = d
	return d
}

// poolPlan is one pool's way through the clamps.
type poolPlan struct {
	pool                            Pool
	ready, starting, stopping       int
	current, target, gpus           int
	held                            bool
	missing, inProgress, stabilised bool
	// why the pool gets its target: the rule's reason (rule), or that of the last clamp
	// that changed it; holding: that clamp holds the pool (missing data, a step in
	// progress, stabilisation).
	why, rule string
	holding   bool
}

func (p *Planner) clamp(d *Decision, now time.Time, fleet Fleet, wanted map[Pool]int, engines map[Pool]float64, why, missing map[Pool]string) {
	cfg := &p.cfg
	var plans []*poolPlan
	for _, pool := range cfg.PoolsInUse() {
		pp := &poolPlan{pool: pool, ready: max(0, fleet.Ready[pool]), starting: max(0, fleet.Starting[pool]),
			stopping: max(0, fleet.Stopping[pool]), gpus: cfg.gpus(pool)}
		pp.current = pp.ready + pp.starting
		plans = append(plans, pp)
	}
	clampf := func(format string, a ...any) { d.Clamps = append(d.Clamps, fmt.Sprintf(format, a...)) }

	// 1. Missing data.
	for _, pp := range plans {
		if gap, ok := missing[pp.pool]; ok {
			pp.missing, pp.held, pp.holding, pp.target = true, true, true, pp.current
			pp.why = fmt.Sprintf("missing data (%s)", gap)
			d.Wanted[pp.pool] = pp.current
			clampf("%v: held at %d: missing data (%s)", pp.pool, pp.current, gap)
			continue
		}
		pp.target, pp.why, pp.rule = wanted[pp.pool], why[pp.pool], why[pp.pool]
		d.Wanted[pp.pool] = pp.target
	}
	// 2. A step in progress.
	for _, pp := range plans {
		if pp.starting+pp.stopping == 0 {
			delete(p.stepSince, pp.pool)
			continue
		}
		since, ok := p.stepSince[pp.pool]
		if !ok || now.Before(since) {
			since = now
			p.stepSince[pp.pool] = now
		}
		if age := now.Sub(since); age >= cfg.StepTimeout {
			clampf("%v: step unfinished for %v (%d starting, %d stopping): no longer held", pp.pool, age, pp.starting, pp.stopping)
			continue
		}
		pp.inProgress = true
		if !pp.held {
			clampf("%v: held at %d (wanted %d): a step in progress (%d starting, %d stopping)", pp.pool, pp.current, pp.target, pp.starting, pp.stopping)
			pp.why = fmt.Sprintf("a step in progress (%d starting, %d stopping)", pp.starting, pp.stopping)
		}
		pp.held, pp.holding, pp.target = true, true, pp.current
	}
	// 3. The minimum per pool.
	for _, pp := range plans {
		if pp.target < cfg.MinWorkers {
			clampf("%v: %d → %d: minimum %d per pool", pp.pool, pp.target, cfg.MinWorkers, cfg.MinWorkers)
			pp.target, pp.holding = cfg.MinWorkers, false
			pp.why = fmt.Sprintf("minimum %d per pool", cfg.MinWorkers)
			if pp.rule != "" {
				pp.why += " (" + pp.rule + ")"
			}
		}
	}
	// 4. Stabilisation (every pool with data records its wish, held or not). In SLA mode
	// a pool first shrinks only as far as its load fills the smaller size to at most
	// ScaleDownRatio (hysteresis: a load hovering at a boundary keeps the larger size).
	for _, pp := range plans {
		if pp.missing {
			continue
		}
		if x, ok := engines[pp.pool]; ok && !pp.held && pp.target < pp.current {
			if floor := min(pp.current, ceilReplicas(x/cfg.ScaleDownRatio)); floor > pp.target {
				clampf("%v: %d → %d: shrinks only to a size its load (%.3g engines) fills to at most %g",
					pp.pool, pp.target, floor, x, cfg.ScaleDownRatio)
				pp.target = floor
				pp.stabilised, pp.holding = true, true
				pp.why = fmt.Sprintf("stabilisation: shrinks only to a size its load (%.3g engines) fills to at most %g", x, cfg.ScaleDownRatio)
			}
		}
		var pw int
		if pp.inProgress {
			pw = max(d.Wanted[pp.pool], cfg.MinWorkers)
		} else {
			pw = pp.target
		}
		h := p.history[pp.pool]
		if !p.seeded[pp.pool] {
			// The fleet as the planner first finds it counts as wanted then, so that a
			// new planner (or one moved to another member) shrinks nothing before a
			// whole window of its own decisions agrees.
			p.seeded[pp.pool] = true
			h = append(h, wish{at: now, n: pp.current})
		}
		h = append(h, wish{at: now, n: pw})
		cut := now.Add(-cfg.Stabilization)
		h = slices.DeleteFunc(h, func(w wish) bool { return !w.at.After(cut) || w.at.After(now) })
		p.history[pp.pool] = h
		if pp.held {
			continue
		}
		high := pp.target
		for _, w := range h {
			high = max(high, w.n)
		}
		if high > pp.target {
			pp.stabilised, pp.holding = true, true
			clampf("%v: %d → %d: stabilisation: %d wanted within the last %v", pp.pool, pp.target, high, high, cfg.Stabilization)
			pp.why = fmt.Sprintf("stabilisation: %d wanted within the last %v (now %d", high, cfg.Stabilization, pp.target)
			if pp.rule != "" {
				pp.why += ": " + pp.rule
			}
			pp.why += ")"
			pp.target = high
		}
	}
	// 5. The GPU budget: the pools' sizes, then the way there.
	p.budget(fleet, plans, clampf)
	p.growIntoFree(fleet, plans, clampf)

	var parts, holds []string
	changed := false
	for _, pp := range plans {
		d.Target[pp.pool] = pp.target
		switch {
		case pp.target != pp.current:
			changed = true
			parts = append(parts, fmt.Sprintf("%v %d → %d: %s", pp.pool, pp.current, pp.target, pp.why))
		case pp.holding:
			holds = append(holds, pp.pool.String())
			parts = append(parts, fmt.Sprintf("%v: %s", pp.pool, pp.why))
		default:
			parts = append(parts, fmt.Sprintf("%v stays at %d: %s", pp.pool, pp.target, pp.why))
		}
	}
	d.Reason = strings.Join(parts, "; ")
	if !changed && len(holds) > 0 {
		d.Held, d.Reason = true, "held: "+d.Reason
	}
}

// budget fits the pools not held into the GPUs the held ones leave.
func (p *Planner) budget(fleet Fleet, plans []*poolPlan, clampf func(string, ...any)) {
	cfg := &p.cfg
	used := 0
	inUse := map[Pool]bool{}
	for _, pp := range plans {
		inUse[pp.pool] = true
		if pp.held {
			used += (pp.target + pp.stopping) * pp.gpus
		} else {
			used += pp.stopping * pp.gpus // none: a pool stopping workers is held, unless stuck
		}
	}
	for _, pool := range Pools { // workers of pools not planned still hold their GPUs
		if !inUse[pool] {
			if n := max(0, fleet.Ready[pool]) + max(0, fleet.Starting[pool]) + max(0, fleet.Stopping[pool]); n > 0 {
				used += n * cfg.gpus(pool)
				clampf("%v (not planned): %d workers hold %d GPUs of the budget", pool, n, n*cfg.gpus(pool))
			}
		}
	}
	free := []*poolPlan{}
	want := 0
	for _, pp := range plans {
		if !pp.held {
			free = append(free, pp)
			want += pp.target * pp.gpus
		}
	}
	avail := cfg.GPUBudget - used
	if used+want <= cfg.GPUBudget {
		return
	}
	if len(free) == 0 {
		clampf("GPU budget %d: held pools use %d GPUs; they shrink once no longer held", cfg.GPUBudget, used)
		return
	}
	shares := fitBudget(free, avail, cfg.MinWorkers)
	for i, pp := range free {
		if shares[i] != pp.target {
			clampf("%v: %d → %d: GPU budget %d (%d GPUs wanted, %d held elsewhere; shrunk in proportion)",
				pp.pool, pp.target, shares[i], cfg.GPUBudget, want, used)
			pp.target = shares[i]
			if pp.holding { // held by stabilisation above the rule's size: the budget trims it
				pp.why += fmt.Sprintf(", then %d for the GPU budget %d", pp.target, cfg.GPUBudget)
			} else {
				pp.why = fmt.Sprintf("GPU budget %d (%d GPUs wanted, %d held elsewhere; shrunk in proportion)", cfg.GPUBudget, want, used)
			}
		}
	}
	if total := used + sumGPUs(free); total > cfg.GPUBudget {
		clampf("GPU budget %d: %d GPUs even at the minimum per pool (held pools use %d); they shrink once no longer held", cfg.GPUBudget, total, used)
	}
}

// growIntoFree keeps the fleet within the budget while it changes: a pool that shrinks
// holds its GPUs until its workers have stopped, while one that grows takes new GPUs at
// once, so growth may only use the GPUs free now (budget − every worker's GPUs, stopping
// ones included). Growth up to MinWorkers is never cut; the rest of each pool's growth
// gets the same share of what is free. The GPUs a shrinking pool gives back go to the
// others at a later decision, once they are free.
func (p *Planner) growIntoFree(fleet Fleet, plans []*poolPlan, clampf func(string, ...any)) {
	cfg := &p.cfg
	held := 0 // GPUs every worker holds now
	inUse := map[Pool]bool{}
	for _, pp := range plans {
		inUse[pp.pool] = true
		held += (pp.current + pp.stopping) * pp.gpus
	}
	for _, pool := range Pools {
		if !inUse[pool] {
			held += (max(0, fleet.Ready[pool]) + max(0, fleet.Starting[pool]) + max(0, fleet.Stopping[pool])) * cfg.gpus(pool)
		}
	}
	free := cfg.GPUBudget - held
	var optional []*poolPlan
	var growers []*poolPlan
	need := 0
	for _, pp := range plans {
		if pp.target <= pp.current {
			continue
		}
		must := max(0, min(pp.target, cfg.MinWorkers)-pp.current)
		free -= must * pp.gpus
		need += (pp.target - pp.current - must) * pp.gpus
		if pp.target-pp.current-must > 0 {
			optional = append(optional, &poolPlan{pool: pp.pool, target: pp.target - pp.current - must, gpus: pp.gpus})
			growers = append(growers, pp)
		}
	}
	if need <= max(free, 0) {
		return
	}
	shares := fitBudget(optional, max(free, 0), 0)
	for i, pp := range growers {
		to := pp.target - optional[i].target + shares[i]
		clampf("%v: %d → %d: GPU budget %d: grows only into the GPUs free now (%d); those being given back follow once free",
			pp.pool, pp.target, to, cfg.GPUBudget, max(free, 0))
		pp.target, pp.holding = to, false
		pp.why = fmt.Sprintf("GPU budget %d: grows only into the GPUs free now (%d)", cfg.GPUBudget, max(free, 0))
	}
}

func sumGPUs(pp []*poolPlan) int {
	s := 0
	for _, x := range pp {
		s += x.target * x.gpus
	}
	return s
}

// fitBudget shares avail GPUs among pools wanting target replicas of gpus GPUs each:
// every pool gets the same fraction of what it wanted (rounded down), at least min and at
// most what it wanted; GPUs left by the rounding go, one replica at a time, to the pool
// furthest below its share. When even min each does not fit, each gets min.
func fitBudget(pools []*poolPlan, avail, minN int) []int {
	want := 0
	for _, pp := range pools {
		want += pp.target * pp.gpus
	}
	f := float64(max(avail, 0)) / float64(want)
	out := make([]int, len(pools))
	used := 0
	for i, pp := range pools {
		out[i] = min(pp.target, max(minN, int(math.Floor(float64(pp.target)*f))))
		used += out[i] * pp.gpus
	}
	for used > avail { // the minimum pushed past: take from the pool furthest above its share
		best := -1
		for i, pp := range pools {
			if out[i] > minN && (best < 0 || float64(out[i])/float64(pp.target) > float64(out[best])/float64(pools[best].target)) {
				best = i
			}
		}
		if best < 0 {
			break
		}
		out[best]--
		used -= pools[best].gpus
	}
	for {
		best := -1
		for i, pp := range pools {
			if out[i] < pp.target && used+pp.gpus <= avail &&
				(best < 0 || float64(out[i])/float64(pp.target) < float64(out[best])/float64(pools[best].target)) {
				best = i
			}
		}
		if best < 0 {
			return out
		}
		out[best]++
		used += pools[best].gpus
	}
}

// ceilReplicas is ⌈x⌉ forgiving float noise just above an integer.
func ceilReplicas(x float64) int {
	if !(x > 0) {
		return 0
	}
	return int(math.Ceil(x - 1e-9))
}

func (d *Decision) term(name string, v float64, unit string) {
	d.Terms = append(d.Terms, Term{Name: name, Value: v, Unit: unit})
}

// bound keeps a correction factor within the configured bounds.
func (p *Planner) bound(v float64) float64 {
	return math.Max(p.cfg.CorrectionMin, math.Min(p.cfg.CorrectionMax, v))
}

// engineOf is the profile of the pool's engines (validated by New in SLA mode).
func (p *Planner) engineOf(pool Pool) *EngineProfile {
	e, err := p.cfg.Profile.ForTP(p.cfg.gpus(pool))
	if err != nil {
		panic(err) // New checked every pool in use
	}
	return e
}

// sla is the SLA mode's formula (docs/reference.md §27.2). It returns the wanted
// replicas per pool and the engines' worth of load they were rounded up from, or why the
// data is missing.
func (p *Planner) sla(d *Decision, fleet Fleet) (map[Pool]int, map[Pool]float64, string) {
	cfg := &p.cfg
	o := p.obs
	switch {
	case !p.fresh:
		return nil, nil, "no observation since the last decision"
	case p.obsErr != nil:
		return nil, nil, p.obsErr.Error()
	case o.Frontends == 0:
		return nil, nil, "no frontend reported"
	}
	prefillPool, decodePool := PoolAggregated, PoolAggregated
	if cfg.Disaggregated {
		prefillPool, decodePool = PoolPrefill, PoolDecode
	}
	pre, dec := p.engineOf(prefillPool), p.engineOf(decodePool)
	blockSize := cfg.Profile.BlockSize
	windowS := cfg.Interval.Seconds()
	if o.Duration > 0 {
		windowS = o.Duration.Seconds()
	}

	// Correction factors, from the window's own figures.
	if o.Requests > 0 && o.TTFTP90Ms > 0 && o.ISLMean > 0 {
		exp := pre.TTFT(o.ISLMean)
		raw := o.TTFTP90Ms / exp
		p.corrP = p.bound(raw)
		d.term("expected_ttft_ms", exp, "ms")
		d.term("correction_prefill_observed", raw, "ratio")
	}
	if o.Requests > 0 && o.ITLP90Ms > 0 {
		ctx := math.Max(1, o.ISLMean+o.OSLMean/2)
		engines := max(1, fleet.Ready[decodePool])
		rate := float64(o.Requests) / windowS
		batch, usage := decodeOperatingPoint(dec, blockSize, rate*o.OSLMean/float64(engines), ctx)
		exp := dec.ITL(usage, ctx)
		raw := o.ITLP90Ms / exp
		p.corrD = p.bound(raw)
		d.term("observed_decode_batch", batch, "sequences/engine")
		d.term("observed_decode_kv_usage", usage, "fraction")
		d.term("expected_itl_ms", exp, "ms")
		d.term("correction_decode_observed", raw, "ratio")
	}

	reqs, isl, osl := p.requests.Predict(), p.isl.Predict(), p.osl.Predict()
	d.PredictedRequests, d.PredictedISL, d.PredictedOSL = reqs, isl, osl
	interval := cfg.Interval.Seconds()
	rate := reqs / interval
	d.term("request_rate", rate, "requests/s")

	// Prefill: the tokens to prefill, at the profile's throughput, with utilisation room
	// for the TTFT target.
	work := math.Min(1, p.corrP)
	prefillTokens := rate * isl * work
	prefillTput := pre.PrefillThroughput(isl)
	prefillGPUs := cfg.gpus(prefillPool)
	prefillLoad := prefillTokens / prefillTput / float64(prefillGPUs)
	ttft := pre.TTFT(isl) * work
	util := 1 - ttft/cfg.TTFTTargetMs
	if util < DefaultMinPrefillUtilisation {
		d.Clamps = append(d.Clamps, fmt.Sprintf("%v: TTFT target %g ms out of reach (a prompt of %.0f tokens takes %.4g ms alone): sized at utilisation %g",
			prefillPool, cfg.TTFTTargetMs, isl, ttft, DefaultMinPrefillUtilisation))
	}
	util = math.Max(DefaultMinPrefillUtilisation, math.Min(DefaultMaxPrefillUtilisation, util))
	prefillEngines := prefillLoad / util
	d.term("prefill_tokens_per_s", prefillTokens, "tokens/s")
	d.term("prefill_throughput_per_gpu", prefillTput, "tokens/s/GPU")
	d.term("prefill_load", prefillLoad, "engines")
	d.term("prefill_ttft_ms", ttft, "ms")
	d.term("prefill_utilisation_max", util, "fraction")
	d.term("prefill_engines", prefillEngines, "engines")

	// Decode: the tokens to generate, at the throughput an engine keeps within the ITL
	// target corrected by d.
	decodeTokens := rate * osl
	itlTarget := cfg.ITLTargetMs / p.corrD
	ctx := math.Max(1, isl+osl/2)
	decodeTput, ok := dec.DecodeThroughput(blockSize, itlTarget, ctx)
	if !ok {
		d.Clamps = append(d.Clamps, fmt.Sprintf("%v: ITL target %.4g ms out of reach at context %.0f (one sequence alone): sized at one sequence per engine",
			decodePool, itlTarget, ctx))
	}
	decodeGPUs := cfg.gpus(decodePool)
	decodeLoad := decodeTokens / decodeTput / float64(decodeGPUs)
	d.term("decode_tokens_per_s", decodeTokens, "tokens/s")
	d.term("decode_itl_target_ms", itlTarget, "ms")
	d.term("decode_context", ctx, "tokens")
	d.term("decode_throughput_per_gpu", decodeTput, "tokens/s/GPU")
	d.term("decode_load", decodeLoad, "engines")

	engines := map[Pool]float64{PoolPrefill: prefillEngines, PoolDecode: decodeLoad}
	if !cfg.Disaggregated {
		d.term("aggregated_engines", prefillEngines+decodeLoad, "engines")
		engines = map[Pool]float64{PoolAggregated: prefillEngines + decodeLoad}
	}
	wanted := map[Pool]int{}
	for pool, x := range engines {
		wanted[pool] = ceilReplicas(x)
	}
	return wanted, engines, ""
}

// feedback is the SLA mode's latency feedback (docs/reference.md §27.2): the formula
// cannot see every cause of a slow pool (the prefill correction counts at most 1), so
// when the latest window's observed TTFT p90 (ITL p90) is over its target, the pool that
// owns it (prefill for TTFT, decode for ITL, aggregated for either) wants at least one
// worker more than it has (ready + starting), and no pool wants fewer than it has while
// a target is missed. It edits wanted and why in place and says each change in
// d.Clamps; the later clamps (a step in progress, the GPU budget) still bound it.
func (p *Planner) feedback(d *Decision, fleet Fleet, wanted map[Pool]int, why map[Pool]string) {
	cfg, o := &p.cfg, p.obs
	if o.Requests == 0 {
		return
	}
	prefillPool, decodePool := PoolAggregated, PoolAggregated
	if cfg.Disaggregated {
		prefillPool, decodePool = PoolPrefill, PoolDecode
	}
	missed := map[Pool][]string{}
	if o.TTFTP90Ms > cfg.TTFTTargetMs {
		missed[prefillPool] = append(missed[prefillPool], fmt.Sprintf("ttft p90 %.0f ms > target %g ms", o.TTFTP90Ms, cfg.TTFTTargetMs))
	}
	if o.ITLP90Ms > cfg.ITLTargetMs {
		missed[decodePool] = append(missed[decodePool], fmt.Sprintf("itl p90 %.0f ms > target %g ms", o.ITLP90Ms, cfg.ITLTargetMs))
	}
	if len(missed) == 0 {
		return
	}
	var all []string
	for _, pool := range cfg.PoolsInUse() {
		all = append(all, missed[pool]...)
	}
	for _, pool := range cfg.PoolsInUse() {
		current := max(0, fleet.Ready[pool]) + max(0, fleet.Starting[pool])
		if miss, ok := missed[pool]; ok && wanted[pool] <= current {
			what := strings.Join(miss, ", ")
			d.Clamps = append(d.Clamps, fmt.Sprintf("%v: %d → %d: %s: one more", pool, wanted[pool], current+1, what))
			why[pool] = fmt.Sprintf("%s: one more (%s)", what, why[pool])
			wanted[pool] = current + 1
		} else if wanted[pool] < current {
			d.Clamps = append(d.Clamps, fmt.Sprintf("%v: %d → %d: no scale-down while a latency target is missed (%s)",
				pool, wanted[pool], current, strings.Join(all, ", ")))
			why[pool] = fmt.Sprintf("no scale-down while a latency target is missed (%s)", why[pool])
			wanted[pool] = current
		}
	}
}

// loadFloor bounds SLA mode's sizes from below by load mode's growth (docs/reference.md
// §27.2): a pool whose ready workers are all over a load threshold wants at least the
// size load mode would grow it to, when that is more than the formula and its feedback
// want. The formula sizes for the predicted load at the profile's speed; when the
// engines are fuller than it expects (a climb the predictor has not caught up with,
// a profile faster than the fleet), their own load says by how much.
func (p *Planner) loadFloor(d *Decision, fleet Fleet, loads []WorkerLoad, wanted map[Pool]int, why map[Pool]string) {
	if len(loads) == 0 {
		return
	}
	var scratch Decision // load mode's terms stay out of the SLA decision
	grow, growWhy, _ := p.load(&scratch, fleet, loads)
	for _, pool := range p.cfg.PoolsInUse() {
		current := max(0, fleet.Ready[pool]) + max(0, fleet.Starting[pool])
		n, ok := grow[pool]
		if !ok || n <= current || n <= wanted[pool] {
			continue
		}
		d.term(pool.String()+"_load_floor", float64(n), "workers")
		d.Clamps = append(d.Clamps, fmt.Sprintf("%v: %d → %d: load floor: %s", pool, wanted[pool], n, growWhy[pool]))
		why[pool] = fmt.Sprintf("load floor: %s (%s)", growWhy[pool], why[pool])
		wanted[pool] = n
	}
}

// decodeOperatingPoint is the batch (sequences per engine) and KV usage at which an
// engine of profile e runs when it is given tokensPerSec output tokens per second of
// sequences of ctx tokens: by Little's law the batch is tokensPerSec × ITL(usage), and
// the usage is batch × ctx over the KV capacity — solved by iterating from an empty
// engine (the batch grows monotonically to the least fixed point), capped at what the
// engine holds.
func decodeOperatingPoint(e *EngineProfile, blockSize int, tokensPerSec, ctx float64) (batch, usage float64) {
	capacity := float64(e.KVBlocks) * float64(blockSize)
	most := math.Max(1, math.Min(float64(e.MaxNumSeqs), capacity/ctx))
	for range 32 {
		next := math.Min(most, tokensPerSec*e.ITL(usage, ctx)/1000)
		if math.Abs(next-batch) < 1e-6 {
			break
		}
		batch = next
		usage = math.Min(1, batch*ctx/capacity)
	}
	return batch, usage
}

// load is the load mode's rule (docs/reference.md §27.2), per pool from its ready
// workers' loads: one more worker when every one is at or over a threshold; one fewer
// when none is, the pool's whole load spread over one worker fewer stays under
// ScaleDownRatio of every threshold that applies (KV usage, queued prefill tokens and,
// when the latest window had requests, the prefill utilisation their prompt tokens per
// second would give: queues grow much faster than their load, so the queues alone
// underrate what one worker fewer would face), and the observed TTFT p90 (when the
// latest window had requests) is within its target; else the current size. It returns
// the wanted sizes, why each pool wants its size, and why data is missing for the pools
// without a ready worker's load.
func (p *Planner) load(d *Decision, fleet Fleet, loads []WorkerLoad) (wanted map[Pool]int, why, missing map[Pool]string) {
	cfg := &p.cfg
	wanted, why, missing = map[Pool]int{}, map[Pool]string{}, map[Pool]string{}
	d.term("kv_usage_target", cfg.KVUsageTarget, "fraction")
	ttft, haveTTFT := p.observedTTFT()
	if haveTTFT {
		d.term("observed_ttft_p90_ms", ttft, "ms")
		d.term("ttft_target_ms", cfg.TTFTTargetMs, "ms")
	}
	arriving, haveRate := p.observedPrefillRate()
	if haveRate {
		d.term("observed_prefill_tokens_per_s", arriving, "tokens/s")
	}
	for _, pool := range cfg.PoolsInUse() {
		usesKV, usesPrefill := pool != PoolPrefill, pool != PoolDecode
		rate := p.prefillRate(pool)
		limit := rate * cfg.TTFTTargetMs / 1000
		var n, over, overKV, overPrefill int
		maxKV, sumKV, maxTokens, sumTokens := 0.0, 0.0, 0, 0.0
		demandKV := 0.0 // Σ KV usage with the sequences waiting counted at the running ones' mean
		for _, w := range loads {
			if !w.Ready || w.Pool != pool {
				continue
			}
			n++
			kv := w.KVUsage
			if !isFinite(kv) || kv < 0 {
				kv = 0
			}
			tokens := max(0, w.ActivePrefillTokens)
			maxKV, maxTokens = math.Max(maxKV, kv), max(maxTokens, tokens)
			sumKV += kv
			demandKV += kvDemand(kv, w.Running, w.Waiting)
			sumTokens += float64(tokens)
			kvOver := usesKV && kv >= cfg.KVUsageTarget
			prefillOver := usesPrefill && float64(tokens) >= limit
			if kvOver || prefillOver {
				over++
			}
			if kvOver {
				overKV++
			}
			if prefillOver {
				overPrefill++
			}
		}
		// The load the workers left would carry after one is removed (a single worker's
		// own load: the minimum keeps it anyway).
		rest := max(1, n-1)
		projKV, projTokens := sumKV/float64(rest), sumTokens/float64(rest)
		downKV, downTokens := cfg.ScaleDownRatio*cfg.KVUsageTarget, cfg.ScaleDownRatio*limit
		name := pool.String()
		d.term(name+"_ready_loads", float64(n), "workers")
		if usesKV {
			d.term(name+"_kv_usage_max", maxKV, "fraction")
			d.term(name+"_kv_usage_projected", projKV, "fraction")
			if demandKV > sumKV {
				d.term(name+"_kv_demand", demandKV, "fraction")
			}
		}
		if usesPrefill {
			d.term(name+"_prefill_queue_limit", limit, "tokens")
			d.term(name+"_prefill_tokens_max", float64(maxTokens), "tokens")
			d.term(name+"_prefill_tokens_projected", projTokens, "tokens")
		}
		// The prefill utilisation one worker fewer would run at, against the most that
		// keeps the TTFT target (as in SLA mode: 1 − a prompt's prefill time / target).
		var projUtil, maxUtil float64
		if usesPrefill && haveRate {
			maxUtil = prefillUtilisationMax(p.obs.ISLMean/rate*1000, cfg.TTFTTargetMs)
			projUtil = arriving / (float64(rest) * rate)
			d.term(name+"_prefill_utilisation_projected", projUtil, "fraction")
			d.term(name+"_prefill_utilisation_max", maxUtil, "fraction")
		}
		d.term(name+"_over", float64(over), "workers")
		if n == 0 {
			missing[pool] = "no ready worker's load"
			continue
		}
		cur := max(0, fleet.Ready[pool]) + max(0, fleet.Starting[pool])
		var under []string // the projected figures under their scale-down bounds
		var full []string  // those that are not
		if usesKV {
			s := fmt.Sprintf("KV usage %.2f", projKV)
			if projKV < downKV {
				under = append(under, fmt.Sprintf("%s < %.2f", s, downKV))
			} else {
				full = append(full, fmt.Sprintf("%s ≥ %.2f", s, downKV))
			}
		}
		if usesPrefill {
			s := fmt.Sprintf("queued prefill %.0f", projTokens)
			if projTokens < downTokens {
				under = append(under, fmt.Sprintf("%s < %.0f tokens", s, downTokens))
			} else {
				full = append(full, fmt.Sprintf("%s ≥ %.0f tokens", s, downTokens))
			}
			if haveRate {
				s := fmt.Sprintf("prefill utilisation %.2f", projUtil)
				if bound := cfg.ScaleDownRatio * maxUtil; projUtil < bound {
					under = append(under, fmt.Sprintf("%s < %.2f", s, bound))
				} else {
					full = append(full, fmt.Sprintf("%s ≥ %.2f", s, bound))
				}
			}
		}
		spread := fmt.Sprintf("the load over %d workers", rest)
		switch {
		case n == 1:
			spread = "the load of its one worker"
		case rest == 1:
			spread = "the load over 1 worker"
		}
		switch {
		case over == n:
			switch {
			case overKV == n:
				why[pool] = fmt.Sprintf("every worker at or over the KV-usage threshold (%g)", cfg.KVUsageTarget)
			case overPrefill == n:
				why[pool] = fmt.Sprintf("every worker at or over its queued-prefill threshold (%.0f tokens)", limit)
			default:
				why[pool] = fmt.Sprintf("every worker at or over a threshold (KV usage %g, queued prefill %.0f tokens)", cfg.KVUsageTarget, limit)
			}
			// One more worker at least; as many as the whole load needs to come back
			// under every threshold when that is more (a steep climb is met in one step
			// rather than one worker per decision).
			need, needWhy := 0, ""
			grow := func(engines float64, what string) {
				if k := ceilReplicas(engines); k > need {
					need, needWhy = k, what
				}
			}
			if usesKV {
				what := fmt.Sprintf("KV usage %.2f / %g", sumKV, cfg.KVUsageTarget)
				if demandKV > sumKV {
					what = fmt.Sprintf("KV usage %.2f with the waiting sequences / %g", demandKV, cfg.KVUsageTarget)
				}
				grow(demandKV/cfg.KVUsageTarget, what)
			}
			if usesPrefill {
				grow(sumTokens/limit, fmt.Sprintf("queued prefill %.0f / %.0f tokens", sumTokens, limit))
				if haveRate && maxUtil > 0 {
					grow(arriving/(rate*maxUtil), fmt.Sprintf("prefill utilisation %.2f / %.2f", arriving/rate, maxUtil))
				}
			}
			d.term(name+"_load_engines", float64(need), "workers")
			wanted[pool] = cur + 1
			if need > cur+1 {
				wanted[pool] = need
				why[pool] += fmt.Sprintf("; the load needs %d workers: %s", need, needWhy)
			}
		case over > 0:
			wanted[pool] = cur
			why[pool] = fmt.Sprintf("%d of %d workers at or over a threshold", over, n)
		case len(full) > 0:
			wanted[pool] = cur
			why[pool] = fmt.Sprintf("%s would reach %g of its thresholds: %s", spread, cfg.ScaleDownRatio, strings.Join(full, ", "))
		case haveTTFT && ttft > cfg.TTFTTargetMs:
			wanted[pool] = cur
			why[pool] = fmt.Sprintf("%s would stay under %g of its thresholds, but the observed TTFT p90 %.0f ms is above the %g ms target", spread, cfg.ScaleDownRatio, ttft, cfg.TTFTTargetMs)
		default:
			wanted[pool] = max(0, cur-1)
			why[pool] = fmt.Sprintf("%s stays under %g of its thresholds: %s", spread, cfg.ScaleDownRatio, strings.Join(under, ", "))
		}
	}
	return wanted, why, missing
}

// kvDemand is one worker's KV usage counting the sequences its engine holds waiting
// (for memory, mostly, once its usage is high) at the running ones' mean usage each:
// usage × (running + waiting) / running. A usage saturates at 1 while the queue behind it
// grows; this is what the worker would use if it could hold them all. With nothing
// running it is the usage itself.
func kvDemand(kv float64, running, waiting int) float64 {
	if running <= 0 || waiting <= 0 {
		return kv
	}
	return kv * float64(running+waiting) / float64(running)
}

// observedTTFT is the TTFT p90 of the window observed since the last decision, when it
// had requests (and was accepted).
func (p *Planner) observedTTFT() (float64, bool) {
	o := p.obs
	if !p.fresh || p.obsErr != nil || o.Frontends == 0 || o.Requests == 0 || !(o.TTFTP90Ms > 0) {
		return 0, false
	}
	return o.TTFTP90Ms, true
}

// observedPrefillRate is the prompt tokens per second of the window observed since the
// last decision (requests × mean ISL / duration), when it had requests with prompts and
// a duration (and was accepted).
func (p *Planner) observedPrefillRate() (float64, bool) {
	o := p.obs
	if !p.fresh || p.obsErr != nil || o.Frontends == 0 || o.Requests == 0 || !(o.ISLMean > 0) || o.Duration <= 0 {
		return 0, false
	}
	return float64(o.Requests) * o.ISLMean / o.Duration.Seconds(), true
}

// prefillUtilisationMax is the most prefill utilisation that keeps a TTFT p90 target
// with prompts of ownMs prefill time each: 1 − ownMs / target (§27.2's M/D/1 bound),
// within [DefaultMinPrefillUtilisation, DefaultMaxPrefillUtilisation].
func prefillUtilisationMax(ownMs, targetMs float64) float64 {
	return math.Max(DefaultMinPrefillUtilisation, math.Min(DefaultMaxPrefillUtilisation, 1-ownMs/targetMs))
}

// prefillRate is the prefill tokens per second of one worker of pool, which load mode's
// queue limit (the queued prefill tokens a worker may hold before a new prompt would
// wait past the TTFT target: this rate × the target) and projected utilisation read: the
// profile's throughput at the observed mean ISL (the profile's longest prompt when none
// was observed) × the pool's GPUs, or PrefillTokensPerSec without a profile.
func (p *Planner) prefillRate(pool Pool) float64 {
	cfg := &p.cfg
	rate := cfg.PrefillTokensPerSec
	if cfg.Profile != nil {
		if e, err := cfg.Profile.ForTP(cfg.gpus(pool)); err == nil {
			isl := p.obs.ISLMean
			if !(isl > 0) || !isFinite(isl) {
				isl = float64(e.Prefill[len(e.Prefill)-1].ISL)
			}
			rate = e.PrefillThroughput(isl) * float64(cfg.gpus(pool))
		}
	}
	return rate
}
