package planner

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func smallProfile(t testing.TB) *Profile {
	t.Helper()
	p, err := LoadProfile(filepath.Join("testdata", "profile-small.json"))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func newPlanner(t testing.TB, cfg Config) *Planner {
	t.Helper()
	p, err := New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return p
}

func fleetOf(ready map[Pool]int) Fleet {
	return Fleet{Ready: ready, Starting: map[Pool]int{}, Stopping: map[Pool]int{}}
}

func TestDefaultConfig(t *testing.T) {
	c := DefaultConfig()
	if c.TTFTTargetMs != 500 || c.ITLTargetMs != 50 || c.GPUBudget != 8 || c.MinWorkers != 1 ||
		c.Interval != 30*time.Second || c.LoadInterval != 5*time.Second || c.Mode != ModeLoad ||
		c.Predictor != PredictorKalman || c.StepTimeout != 10*time.Minute {
		t.Errorf("DefaultConfig = %+v", c)
	}
	p := newPlanner(t, Config{Mode: ModeSLA, Profile: smallProfile(t)})
	got := p.Config()
	if got.Stabilization != 3*DefaultInterval || got.TTFTTargetMs != 500 || got.Predictors == nil || got.GPUsPerEngine[PoolDecode] != 1 {
		t.Errorf("New did not fill the zero fields: %+v", got)
	}
	if l := newPlanner(t, Config{}).Config(); l.Stabilization != 3*DefaultLoadInterval || l.Mode != ModeLoad {
		t.Errorf("load mode's window = %v, want 3 load intervals", l.Stabilization)
	}
	// Config returns a copy: changing its map changes nothing in the planner.
	got.GPUsPerEngine[PoolDecode] = 7
	if p.Config().GPUsPerEngine[PoolDecode] != 1 {
		t.Error("Config shares the GPUsPerEngine map")
	}
}

func TestNewNamesTheBadField(t *testing.T) {
	prof := smallProfile(t)
	for _, tc := range []struct {
		field string
		cfg   Config
	}{
		{"Mode", Config{Mode: 9}},
		{"Interval", Config{Interval: -time.Second}},
		{"LoadInterval", Config{LoadInterval: -time.Second}},
		{"Stabilization", Config{Stabilization: -time.Second}},
		{"StepTimeout", Config{StepTimeout: -time.Second}},
		{"TTFTTargetMs", Config{TTFTTargetMs: math.Inf(1)}},
		{"ITLTargetMs", Config{ITLTargetMs: -1}},
		{"PrefillTokensPerSec", Config{PrefillTokensPerSec: math.NaN()}},
		{"MinWorkers", Config{MinWorkers: -1}},
		{"GPUBudget", Config{GPUBudget: -2}},
		{"GPUBudget", Config{GPUBudget: 3, MinWorkers: 2, Disaggregated: true}},
		{"CorrectionMin", Config{CorrectionMin: 1.5}},
		{"CorrectionMax", Config{CorrectionMax: 0.5}},
		{"KVUsageTarget", Config{KVUsageTarget: 2}},
		{"ScaleDownRatio", Config{ScaleDownRatio: 1.2}},
		{"GPUsPerEngine", Config{GPUsPerEngine: map[Pool]int{PoolDecode: 0}}},
		{"GPUsPerEngine", Config{GPUsPerEngine: map[Pool]int{Pool(7): 1}}},
		{"GPUsPerEngine[prefill]", Config{Mode: ModeSLA, Disaggregated: true, Profile: prof, GPUBudget: 32, GPUsPerEngine: map[Pool]int{PoolPrefill: 8}}},
		{"Profile", Config{Mode: ModeSLA}},
		{"Profile", Config{Profile: &Profile{Version: 2}}},
		{"PredictorOptions.Window", Config{PredictorOptions: PredictorOptions{Window: -3}}},
	} {
		_, err := New(tc.cfg)
		if !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), tc.field) {
			t.Errorf("%s: New = %v, want ErrInvalidConfig naming %s", tc.field, err, tc.field)
		}
	}
	if _, err := New(Config{Predictor: "prophet"}); !errors.Is(err, ErrUnknownPredictor) || !strings.Contains(err.Error(), "Predictor") {
		t.Errorf("unknown predictor: %v", err)
	}
}

// New works on its own copy of the profile: Validate sorts decode points, and the
// caller's (possibly shared) profile must not change.
func TestNewLeavesTheProfileAlone(t *testing.T) {
	prof := smallProfile(t)
	e := &prof.Parallel[0]
	e.Decode[0], e.Decode[len(e.Decode)-1] = e.Decode[len(e.Decode)-1], e.Decode[0]
	first := e.Decode[0]
	newPlanner(t, Config{Mode: ModeSLA, Profile: prof})
	if e.Decode[0] != first {
		t.Error("New sorted the caller's profile in place")
	}
}

func TestCheckObservation(t *testing.T) {
	ok := Observation{Frontends: 1, Requests: 3, ISLMean: 10, OSLMean: 5, TTFTP90Ms: 40, ITLP90Ms: 9, Duration: time.Second}
	if err := CheckObservation(ok); err != nil {
		t.Fatal(err)
	}
	for name, mut := range map[string]func(*Observation){
		"frontends": func(o *Observation) { o.Frontends = -1 },
		"requests":  func(o *Observation) { o.Requests = -1 },
		"duration":  func(o *Observation) { o.Duration = -time.Second },
		"isl mean":  func(o *Observation) { o.ISLMean = math.NaN() },
		"osl mean":  func(o *Observation) { o.OSLMean = -2 },
		"ttft p90":  func(o *Observation) { o.TTFTP90Ms = math.Inf(1) },
		"itl p90":   func(o *Observation) { o.ITLP90Ms = math.NaN() },
		"queue p90": func(o *Observation) { o.QueueP90Ms = -1 },
	} {
		o := ok
		mut(&o)
		if err := CheckObservation(o); err == nil || !strings.Contains(err.Error(), name) {
			t.Errorf("%s: %v, want an error naming it", name, err)
		}
	}
}

func TestFitBudget(t *testing.T) {
	plan := func(targets, gpus []int) []*poolPlan {
		var out []*poolPlan
		for i := range targets {
			out = append(out, &poolPlan{target: targets[i], gpus: gpus[i]})
		}
		return out
	}
	for _, tc := range []struct {
		targets, gpus []int
		avail, min    int
		want          []int
	}{
		{[]int{7, 7}, []int{1, 1}, 8, 1, []int{4, 4}},
		{[]int{3, 10}, []int{1, 1}, 8, 1, []int{2, 6}},   // 8/13: 1 + 6, the spare to prefill (1/3 < 6/10)
		{[]int{7, 3}, []int{1, 2}, 8, 1, []int{4, 2}},    // 8/13: 4 + 1 (6 GPUs); 2 left: decode
		{[]int{10, 1}, []int{1, 1}, 4, 1, []int{3, 1}},   // the minimum first
		{[]int{5, 5}, []int{2, 2}, 2, 1, []int{1, 1}},    // even the minimum does not fit: min each
		{[]int{9}, []int{2}, 8, 1, []int{4}},             // one pool: what fits
		{[]int{6, 6}, []int{1, 1}, 0, 2, []int{2, 2}},    // nothing left: the minimum
		{[]int{2, 100}, []int{1, 1}, 10, 1, []int{1, 9}}, // proportion: 0.2 → the minimum
	} {
		got := fitBudget(plan(tc.targets, tc.gpus), tc.avail, tc.min)
		for i := range got {
			if got[i] != tc.want[i] {
				t.Errorf("fitBudget(%v × %v GPUs, %d, min %d) = %v, want %v", tc.targets, tc.gpus, tc.avail, tc.min, got, tc.want)
				break
			}
		}
	}
}

// The decode operating point is the least fixed point of batch = rate × ITL(usage):
// from an idle engine it converges, and it saturates at what the engine holds.
func TestDecodeOperatingPoint(t *testing.T) {
	e, _ := smallProfile(t).ForTP(1)
	batch, usage := decodeOperatingPoint(e, 16, 400, 2100)
	if itl := e.ITL(usage, 2100); math.Abs(batch-400*itl/1000) > 1e-3 {
		t.Errorf("batch %.3f is not 400 tokens/s × ITL %.3f ms", batch, itl)
	}
	if math.Abs(usage-batch*2100/64000) > 1e-9 {
		t.Errorf("usage %.4f, want batch × context / capacity", usage)
	}
	batch, usage = decodeOperatingPoint(e, 16, 1e6, 2100)
	if usage != 1 || math.Abs(batch-64000.0/2100) > 1e-9 {
		t.Errorf("overloaded: batch %.2f usage %.2f, want the cache full", batch, usage)
	}
	if b, u := decodeOperatingPoint(e, 16, 0, 2100); b != 0 || u != 0 {
		t.Errorf("no load: batch %v usage %v", b, u)
	}
}

// Observe scales a window to the interval, ignores refused windows and feeds ISL and
// OSL only from windows with requests.
func TestObserveFeedsThePredictors(t *testing.T) {
	p := newPlanner(t, Config{Mode: ModeSLA, Profile: smallProfile(t), Predictor: PredictorConstant})
	p.Observe(Observation{Frontends: 2, Requests: 50, Duration: 15 * time.Second, ISLMean: 1000, OSLMean: 100})
	p.Observe(Observation{Frontends: 1, Requests: -1})                       // refused
	p.Observe(Observation{Frontends: 0, Requests: 999})                      // missing
	p.Observe(Observation{Frontends: 1, Requests: 0, Duration: time.Minute}) // idle: counts, no ISL
	if r := p.requests.Predict(); r != 0 {
		t.Errorf("requests forecast %v, want 0 (the idle window)", r)
	}
	if isl, osl := p.isl.Predict(), p.osl.Predict(); isl != 1000 || osl != 100 {
		t.Errorf("ISL/OSL forecast %v/%v, want 1000/100 (the window with requests)", isl, osl)
	}
	q := newPlanner(t, Config{Mode: ModeSLA, Profile: smallProfile(t), Predictor: PredictorConstant})
	q.Observe(Observation{Frontends: 1, Requests: 50, Duration: 15 * time.Second})
	if r := q.requests.Predict(); r != 100 {
		t.Errorf("50 requests in 15 s = %v per 30 s interval, want 100", r)
	}
}

// toyFleet applies a planner's targets: workers start and stop after delay.
type toyFleet struct {
	ready, starting, stopping map[Pool]int
	doneAt                    map[Pool]time.Time
	delay                     time.Duration
}

func newToyFleet(ready map[Pool]int, delay time.Duration) *toyFleet {
	return &toyFleet{ready: ready, starting: map[Pool]int{}, stopping: map[Pool]int{}, doneAt: map[Pool]time.Time{}, delay: delay}
}

func (f *toyFleet) at(now time.Time) Fleet {
	for pool, at := range f.doneAt {
		if !now.Before(at) {
			f.ready[pool] += f.starting[pool]
			f.starting[pool], f.stopping[pool] = 0, 0
			delete(f.doneAt, pool)
		}
	}
	return Fleet{Ready: f.ready, Starting: f.starting, Stopping: f.stopping}
}

func (f *toyFleet) apply(now time.Time, target map[Pool]int) {
	for pool, n := range target {
		cur := f.ready[pool] + f.starting[pool]
		if n == cur {
			continue
		}
		if n > cur {
			f.starting[pool] += n - cur
		} else {
			drop := cur - n
			f.ready[pool] -= drop
			f.stopping[pool] += drop
		}
		f.doneAt[pool] = now.Add(f.delay)
	}
}

// usedGPUs is what the fleet holds, stopping workers included.
func (f *toyFleet) usedGPUs(cfg Config) int {
	n := 0
	for _, pool := range Pools {
		n += (f.ready[pool] + f.starting[pool] + f.stopping[pool]) * cfg.gpus(pool)
	}
	return n
}

// The reference planners never scaled down (Dynamo #6985, #4420): here a fleet grown
// for a peak returns to the minimum once the load stops, in both modes.
func TestScaleDownAfterLoadStops(t *testing.T) {
	t.Run("sla", func(t *testing.T) {
		p := newPlanner(t, Config{Mode: ModeSLA, Disaggregated: true, Profile: smallProfile(t)})
		f := newToyFleet(map[Pool]int{PoolPrefill: 1, PoolDecode: 1}, 10*time.Second)
		now := scriptStart
		for i := range 40 {
			reqs := 300
			if i >= 10 {
				reqs = 0
			}
			p.Observe(Observation{Frontends: 1, Requests: reqs, Duration: 30 * time.Second, ISLMean: 3000, OSLMean: 300, TTFTP90Ms: 80})
			d := p.Decide(now, f.at(now), nil)
			f.apply(now, d.Target)
			if i == 9 && d.Target[PoolDecode] < 3 {
				t.Fatalf("at the peak decode target %d, want it grown", d.Target[PoolDecode])
			}
			now = now.Add(30 * time.Second)
		}
		if fl := f.at(now); fl.Ready[PoolPrefill] != 1 || fl.Ready[PoolDecode] != 1 {
			t.Errorf("after the load stopped: %v, want 1 prefill and 1 decode", fl.Ready)
		}
	})
	t.Run("load", func(t *testing.T) {
		p := newPlanner(t, Config{Mode: ModeLoad})
		f := newToyFleet(map[Pool]int{PoolAggregated: 6}, 3*time.Second)
		now := scriptStart
		for range 200 {
			fl := f.at(now)
			var loads []WorkerLoad
			for i := range fl.Ready[PoolAggregated] {
				loads = append(loads, WorkerLoad{WorkerID: string(rune('a' + i)), Pool: PoolAggregated, Ready: true, KVUsage: 0.01})
			}
			f.apply(now, p.Decide(now, fl, loads).Target)
			now = now.Add(5 * time.Second)
		}
		if n := f.at(now).Ready[PoolAggregated]; n != 1 {
			t.Errorf("idle aggregated pool at %d workers, want 1", n)
		}
	})
}

// Missing metrics hold the current size, never less and never under the minimum
// (Dynamo #14575), however long they stay missing.
func TestMissingDataHoldsTheSize(t *testing.T) {
	for _, mode := range []Mode{ModeSLA, ModeLoad} {
		p := newPlanner(t, Config{Mode: mode, Disaggregated: true, Profile: smallProfile(t), MinWorkers: 2})
		now := scriptStart
		for i := range 50 {
			fleet := fleetOf(map[Pool]int{PoolPrefill: i % 4, PoolDecode: 3})
			if i%3 == 0 {
				p.Observe(Observation{Frontends: 0})
			}
			d := p.Decide(now, fleet, nil)
			for _, pool := range []Pool{PoolPrefill, PoolDecode} {
				want := max(fleet.Ready[pool], 2)
				if d.Target[pool] != want {
					t.Fatalf("%v mode, decision %d: %v target %d with %d ready, want %d (clamps %q)",
						mode, i, pool, d.Target[pool], fleet.Ready[pool], want, d.Clamps)
				}
			}
			if !d.Held && fleet.Ready[PoolPrefill] >= 2 {
				t.Fatalf("decision %d: not marked held: %q", i, d.Reason)
			}
			now = now.Add(30 * time.Second)
		}
	}
}

// No 2 ↔ 1 oscillation (Dynamo #9294): an aggregated pool under noise around one
// engine's worth of load, decided in a closed loop for 100 intervals, changes size at
// most a couple of times. The window alone still lets it flap whenever three noisy
// intervals in a row fall under the boundary (about one in eight); the hysteresis stops
// that; without either it flaps all the time.
func TestNoOscillationAtTheBoundary(t *testing.T) {
	changes := func(stab time.Duration, downRatio float64) int {
		p := newPlanner(t, Config{Mode: ModeSLA, Profile: smallProfile(t), Stabilization: stab, ScaleDownRatio: downRatio, Predictor: PredictorConstant})
		f := newToyFleet(map[Pool]int{PoolAggregated: 1}, 5*time.Second)
		r := rand.New(rand.NewPCG(9, 9))
		now, n, last := scriptStart, 0, 1
		for range 100 {
			reqs := int(87 + 10*r.NormFloat64()) // the boundary of one engine: ~87 per 30 s
			p.Observe(Observation{Frontends: 1, Requests: reqs, Duration: 30 * time.Second, ISLMean: 2000, OSLMean: 200, TTFTP90Ms: 50})
			d := p.Decide(now, f.at(now), nil)
			if d.Target[PoolAggregated] != last {
				n++
				last = d.Target[PoolAggregated]
			}
			f.apply(now, d.Target)
			now = now.Add(30 * time.Second)
		}
		return n
	}
	defaults := changes(0, 0)
	if defaults > 2 {
		t.Errorf("with the defaults the pool changed size %d times in 100 intervals", defaults)
	}
	windowOnly, neither := changes(0, 0.999), changes(time.Nanosecond, 0.999)
	t.Logf("size changes in 100 intervals: %d with the defaults, %d with the window alone, %d with neither", defaults, windowOnly, neither)
	if neither < 10 {
		t.Errorf("without window and hysteresis the pool changed size only %d times: the test does not see flapping", neither)
	}
}

// Load mode under a constant load (the same queued prefill tokens and KV usage in total,
// spread evenly over the ready workers) never flaps: it grows until no worker is over a
// threshold and then keeps that size, since removing a worker is projected on the load
// the others would carry. A per-worker rule removes the worker it has just added
// whenever the halved load looks idle. A load that then stops still shrinks the pool to
// its minimum.
func TestLoadModeConstantLoadDoesNotFlap(t *testing.T) {
	for _, tc := range []struct {
		name          string
		tokens, kv    float64 // the whole pool's load
		minSize, want int     // the size it must reach, and keep
	}{
		{"prefill just over one worker", 24000, 0.2, 2, 2},
		{"prefill over two workers", 45000, 0.2, 3, 3},
		{"prefill at the scale-down bound of two", 35000, 0.1, 2, 2},
		{"kv over one worker", 0, 0.9, 2, 2},
		{"kv over two workers", 0, 1.7, 3, 3},
		{"both", 30000, 1.2, 2, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := newPlanner(t, Config{Mode: ModeLoad})
			f := newToyFleet(map[Pool]int{PoolAggregated: 1}, 3*time.Second)
			now := scriptStart
			sizes := []int{1}
			loadsOf := func(fl Fleet, tokens, kv float64) []WorkerLoad {
				n := fl.Ready[PoolAggregated]
				var loads []WorkerLoad
				for i := range n {
					loads = append(loads, WorkerLoad{WorkerID: fmt.Sprint("w", i), Pool: PoolAggregated, Ready: true,
						KVUsage: kv / float64(n), ActivePrefillTokens: int(tokens / float64(n))})
				}
				return loads
			}
			for range 100 {
				fl := f.at(now)
				d := p.Decide(now, fl, loadsOf(fl, tc.tokens, tc.kv))
				if tgt := d.Target[PoolAggregated]; tgt != sizes[len(sizes)-1] {
					sizes = append(sizes, tgt)
				}
				f.apply(now, d.Target)
				now = now.Add(5 * time.Second)
			}
			for i := 1; i < len(sizes); i++ {
				if sizes[i] < sizes[i-1] {
					t.Fatalf("constant load: sizes %v: it shrank after growing", sizes)
				}
			}
			if last := sizes[len(sizes)-1]; last != tc.want {
				t.Fatalf("constant load: sizes %v, want it to settle at %d", sizes, tc.want)
			}
			for range 40 { // the load stops
				fl := f.at(now)
				f.apply(now, p.Decide(now, fl, loadsOf(fl, 0, 0)).Target)
				now = now.Add(5 * time.Second)
			}
			if n := f.at(now).Ready[PoolAggregated]; n != 1 {
				t.Errorf("after the load stopped: %d workers, want the minimum 1", n)
			}
		})
	}
}

// Load mode removes no worker while the frontends measure a TTFT p90 above its target,
// however idle the workers look; a window without requests has no TTFT to hold it.
func TestLoadModeHoldsWhileTTFTAboveTarget(t *testing.T) {
	p := newPlanner(t, Config{Mode: ModeLoad})
	fleet := fleetOf(map[Pool]int{PoolAggregated: 3})
	idle := []WorkerLoad{{WorkerID: "a", Pool: PoolAggregated, Ready: true}, {WorkerID: "b", Pool: PoolAggregated, Ready: true},
		{WorkerID: "c", Pool: PoolAggregated, Ready: true}}
	now := scriptStart
	for i := range 10 {
		p.Observe(Observation{Frontends: 1, Requests: 50, Duration: 5 * time.Second, ISLMean: 4096, TTFTP90Ms: 501})
		d := p.Decide(now, fleet, idle)
		if d.Target[PoolAggregated] != 3 || d.Wanted[PoolAggregated] != 3 || !strings.Contains(d.Reason, "TTFT p90 501 ms is above the 500 ms target") {
			t.Fatalf("decision %d: wanted %v, target %v, reason %q: want 3 held for the TTFT", i, d.Wanted, d.Target, d.Reason)
		}
		if d.CorrectionPrefill != 0 || d.CorrectionDecode != 0 {
			t.Fatalf("load mode reports correction factors %v, %v: it uses none", d.CorrectionPrefill, d.CorrectionDecode)
		}
		now = now.Add(5 * time.Second)
	}
	p.Observe(Observation{Frontends: 1, Duration: 5 * time.Second}) // no request: no TTFT
	if d := p.Decide(now, fleet, idle); d.Wanted[PoolAggregated] != 2 {
		t.Fatalf("a window without requests: wanted %v, want 2 (%q)", d.Wanted, d.Reason)
	}
}

// Random fleets, loads, budgets, missing data and steps in progress: the planner never
// goes below the minimum, never moves a pool held for missing data or a step in
// progress, says why a target differs from the formula, asks for more GPUs than the
// budget only with every pool it may shrink at the minimum, and grows a pool past the
// minimum only when the fleet stays within the budget on the way (workers stopping
// still hold their GPUs).
func TestDecisionInvariants(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	prof := smallProfile(t)
	for iter := range 300 {
		cfg := Config{
			Mode: []Mode{ModeSLA, ModeLoad}[r.IntN(2)], Disaggregated: r.IntN(2) == 0, Profile: prof,
			GPUBudget: 2 + r.IntN(14), MinWorkers: 1 + r.IntN(2), Predictor: PredictorNames()[r.IntN(5)],
			GPUsPerEngine: map[Pool]int{PoolAggregated: 1 + r.IntN(2), PoolPrefill: 1 + r.IntN(2), PoolDecode: 1 + r.IntN(2)},
			StepTimeout:   time.Hour,
		}
		need := 0
		for _, pool := range cfg.PoolsInUse() {
			need += cfg.MinWorkers * cfg.gpus(pool)
		}
		cfg.GPUBudget = max(cfg.GPUBudget, need)
		p := newPlanner(t, cfg)
		now := scriptStart
		for step := range 30 {
			fleet := Fleet{Ready: map[Pool]int{}, Starting: map[Pool]int{}, Stopping: map[Pool]int{}}
			var loads []WorkerLoad
			for _, pool := range Pools {
				fleet.Ready[pool] = r.IntN(5)
				if r.IntN(4) == 0 {
					fleet.Starting[pool] = r.IntN(2)
				}
				if r.IntN(4) == 0 {
					fleet.Stopping[pool] = r.IntN(2)
				}
				for w := range fleet.Ready[pool] {
					loads = append(loads, WorkerLoad{WorkerID: pool.String() + string(rune('0'+w)), Pool: pool, Ready: r.IntN(8) > 0,
						KVUsage: r.Float64(), ActivePrefillTokens: r.IntN(40000)})
				}
			}
			if r.IntN(5) > 0 {
				p.Observe(Observation{Frontends: r.IntN(3), Requests: r.IntN(2000), Duration: 30 * time.Second,
					ISLMean: 100 + r.Float64()*9000, OSLMean: 10 + r.Float64()*900, TTFTP90Ms: r.Float64() * 2000, ITLP90Ms: r.Float64() * 200})
			}
			if r.IntN(10) == 0 {
				if err := p.SetTargets(0, 0, max(need, 1+r.IntN(16))); err != nil {
					t.Fatal(err)
				}
			}
			d := p.Decide(now, fleet, loads)
			c := p.Config()
			clamps := strings.Join(d.Clamps, "\n")
			for _, pool := range c.PoolsInUse() { // every decision says what it does with each pool, and why
				if !strings.Contains(d.Reason, pool.String()+" ") && !strings.Contains(d.Reason, pool.String()+":") {
					t.Fatalf("iter %d step %d: the reason %q does not speak of %v", iter, step, d.Reason, pool)
				}
			}
			used, peak, grows, allMin := 0, 0, false, true
			for _, pool := range Pools {
				g := c.gpus(pool)
				cur := fleet.Ready[pool] + fleet.Starting[pool]
				tgt, planned := d.Target[pool]
				if !planned {
					used += (cur + fleet.Stopping[pool]) * g
					peak += (cur + fleet.Stopping[pool]) * g
					continue
				}
				if tgt < c.MinWorkers {
					t.Fatalf("iter %d step %d: %v target %d under the minimum %d", iter, step, pool, tgt, c.MinWorkers)
				}
				inProgress := fleet.Starting[pool]+fleet.Stopping[pool] > 0
				missing := strings.Contains(clamps, pool.String()+": held at") && strings.Contains(clamps, "missing data")
				if (inProgress || missing) && tgt != max(cur, c.MinWorkers) {
					t.Fatalf("iter %d step %d: %v held (%+v) but target %d: %q", iter, step, pool, fleet, tgt, d.Clamps)
				}
				if tgt != d.Wanted[pool] && len(d.Clamps) == 0 {
					t.Fatalf("iter %d step %d: %v wanted %d, target %d, no clamp said why", iter, step, pool, d.Wanted[pool], tgt)
				}
				used += (tgt + fleet.Stopping[pool]) * g
				peak += (max(tgt, cur) + fleet.Stopping[pool]) * g
				grows = grows || tgt > max(cur, c.MinWorkers)
				if !inProgress && !missing && tgt != c.MinWorkers {
					allMin = false
				}
			}
			if used > c.GPUBudget && !allMin {
				t.Fatalf("iter %d step %d: %d GPUs asked, budget %d, a shrinkable pool above its minimum: %v %q", iter, step, used, c.GPUBudget, d.Target, d.Clamps)
			}
			if grows && peak > c.GPUBudget {
				t.Fatalf("iter %d step %d: a pool grows while the fleet would hold %d GPUs, budget %d: %v %+v %q", iter, step, peak, c.GPUBudget, d.Target, fleet, d.Clamps)
			}
			now = now.Add(time.Duration(1+r.IntN(30)) * time.Second)
		}
	}
}

// While two pools trade GPUs in a closed loop (the load's mix swings between
// prefill-heavy and decode-heavy), the GPUs the fleet holds — stopping workers included —
// never exceed the budget.
func TestBudgetHoldsWhileRebalancing(t *testing.T) {
	cfg := Config{Mode: ModeSLA, Disaggregated: true, Profile: smallProfile(t), GPUBudget: 8, Predictor: PredictorConstant}
	p := newPlanner(t, cfg)
	f := newToyFleet(map[Pool]int{PoolPrefill: 1, PoolDecode: 1}, 40*time.Second)
	now := scriptStart
	moved := 0
	for i := range 60 {
		o := Observation{Frontends: 1, Requests: 600, Duration: 30 * time.Second, ISLMean: 8000, OSLMean: 20, TTFTP90Ms: 200}
		if (i/8)%2 == 1 {
			o = Observation{Frontends: 1, Requests: 210, Duration: 30 * time.Second, ISLMean: 1000, OSLMean: 1000, TTFTP90Ms: 40}
		}
		p.Observe(o)
		d := p.Decide(now, f.at(now), nil)
		before := f.ready[PoolPrefill]
		f.apply(now, d.Target)
		if f.ready[PoolPrefill] != before {
			moved++
		}
		if used := f.usedGPUs(p.Config()); used > cfg.GPUBudget {
			t.Fatalf("decision %d: the fleet holds %d GPUs, budget %d (%+v; %q)", i, used, cfg.GPUBudget, d.Target, d.Clamps)
		}
		now = now.Add(30 * time.Second)
	}
	if moved < 3 {
		t.Errorf("the pools traded GPUs only %d times: the test does not rebalance", moved)
	}
}

// A pool with an unfinished step is not scaled again until the step ends (or times
// out), however the load moves meanwhile.
func TestStepInProgressIsNotScaledAgain(t *testing.T) {
	p := newPlanner(t, Config{Mode: ModeSLA, Disaggregated: true, Profile: smallProfile(t), Predictor: PredictorConstant})
	fleet := Fleet{Ready: map[Pool]int{PoolPrefill: 1, PoolDecode: 2}, Starting: map[Pool]int{PoolDecode: 1}, Stopping: map[Pool]int{}}
	now := scriptStart
	for i, reqs := range []int{900, 30, 1500, 0, 600} {
		p.Observe(Observation{Frontends: 1, Requests: reqs, Duration: 30 * time.Second, ISLMean: 3000, OSLMean: 300})
		d := p.Decide(now, fleet, nil)
		if d.Target[PoolDecode] != 3 {
			t.Fatalf("decision %d (%d requests): decode target %d, want held at 3", i, reqs, d.Target[PoolDecode])
		}
		now = now.Add(30 * time.Second)
	}
	// Past the step timeout the hold ends.
	p.Observe(Observation{Frontends: 1, Requests: 0, Duration: 30 * time.Second})
	if d := p.Decide(scriptStart.Add(DefaultStepTimeout), fleet, nil); d.Target[PoolDecode] == 3 && !strings.Contains(strings.Join(d.Clamps, ";"), "no longer held") {
		t.Errorf("after the step timeout: %+v %q", d.Target, d.Clamps)
	}
}

// SLA-mode decisions list the formula's figures with units, and the held ones a reason.
func TestDecisionExplains(t *testing.T) {
	p := newPlanner(t, Config{Mode: ModeSLA, Disaggregated: true, Profile: smallProfile(t)})
	p.Observe(Observation{Frontends: 1, Requests: 300, Duration: 30 * time.Second, ISLMean: 2000, OSLMean: 200, TTFTP90Ms: 60, ITLP90Ms: 20})
	d := p.Decide(scriptStart, fleetOf(map[Pool]int{PoolPrefill: 1, PoolDecode: 1}), nil)
	names := map[string]bool{}
	for _, tm := range d.Terms {
		if tm.Unit == "" || !isFinite(tm.Value) {
			t.Errorf("term %+v: no unit or not finite", tm)
		}
		names[tm.Name] = true
	}
	for _, n := range []string{"request_rate", "prefill_throughput_per_gpu", "prefill_load", "prefill_utilisation_max",
		"decode_throughput_per_gpu", "decode_itl_target_ms", "decode_context", "decode_load", "expected_ttft_ms", "expected_itl_ms"} {
		if !names[n] {
			t.Errorf("term %s missing", n)
		}
	}
	if d.PredictedRequests != 300 || d.CorrectionPrefill <= 0 || d.CorrectionDecode <= 0 || d.Mode != ModeSLA || !d.At.Equal(scriptStart) {
		t.Errorf("decision figures: %+v", d)
	}
	if p.Last().At != d.At || len(p.Last().Terms) != len(d.Terms) {
		t.Error("Last is not the latest decision")
	}
}
