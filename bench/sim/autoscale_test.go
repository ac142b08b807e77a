package sim

import (
	"context"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/turbine-llm/turbine/bench"
	"github.com/turbine-llm/turbine/kv"
	"github.com/turbine-llm/turbine/messages"
	"github.com/turbine-llm/turbine/planner"
)

// scripted is a Decider that asks for a scripted target per decision (the last one
// repeated) and records what it was shown.
type scripted struct {
	targets []map[planner.Pool]int
	obs     []planner.Observation
	fleets  []planner.Fleet
	loads   [][]planner.WorkerLoad
	at      []time.Time
}

func (d *scripted) Observe(o planner.Observation) { d.obs = append(d.obs, o) }

func (d *scripted) Decide(now time.Time, f planner.Fleet, loads []planner.WorkerLoad) planner.Decision {
	d.at, d.fleets, d.loads = append(d.at, now), append(d.fleets, f), append(d.loads, loads)
	t := d.targets[min(len(d.fleets), len(d.targets))-1]
	return planner.Decision{At: now, Target: t}
}

func agg(ns ...int) []map[planner.Pool]int {
	out := make([]map[planner.Pool]int, len(ns))
	for i, n := range ns {
		out[i] = map[planner.Pool]int{planner.PoolAggregated: n}
	}
	return out
}

// steady is n requests of 100 prompt tokens (distinct) and osl output tokens, one every
// gap.
func steady(n, osl int, gap time.Duration) []bench.Request {
	reqs := make([]bench.Request, n)
	for i := range reqs {
		reqs[i] = bench.Request{Arrival: time.Duration(i) * gap, InputLength: 100, OutputLength: osl, HashIDs: []int64{int64(i + 1)}}
	}
	return reqs
}

// counts reads the fleet's samples as (ready, starting, stopping) of pool p in force at t.
func counts(st *AutoscaleStats, p planner.Pool, t time.Duration) [3]int {
	var c [3]int
	for _, s := range st.Samples {
		if s.Pool == p && s.At <= t {
			c = [3]int{s.Ready, s.Starting, s.Stopping}
		}
	}
	return c
}

// TestAutoscaleStartsAndDrains: a pool asked for 3 workers starts two that are ready
// StartupDelay later and get requests from then on; asked for 1 again, the two newest
// drain (out of routing at once, finishing their requests) and stop; the GPU time is the
// workers' time from being asked for to having stopped.
func TestAutoscaleStartsAndDrains(t *testing.T) {
	d := &scripted{targets: agg(3, 3, 3, 1)}
	cfg := Config{Workers: 1, Engine: smallEngine(), Router: roundRobin(16),
		Autoscaler: &Autoscaler{Planner: d, Interval: time.Second, StartupDelay: 300 * time.Millisecond, MaxWorkers: 4}}
	// 10 s of requests, each streaming about 0.3 s.
	s := runSim(t, cfg, steady(200, 60, 50*time.Millisecond))
	checkDrained(t, s)
	st := s.finishAutoscale()
	for i, r := range s.results {
		if r.Error != "" {
			t.Fatalf("request %d failed: %s %s", i, r.Error, r.Detail)
		}
	}
	for _, tc := range []struct {
		at   time.Duration
		want [3]int
	}{
		{0, [3]int{1, 0, 0}},
		{time.Second, [3]int{1, 2, 0}},             // asked for at the first decision
		{1300 * time.Millisecond, [3]int{3, 0, 0}}, // ready StartupDelay later
		{3999 * time.Millisecond, [3]int{3, 0, 0}},
		{4 * time.Second, [3]int{1, 0, 2}}, // the fourth decision drains two
		{5 * time.Second, [3]int{1, 0, 0}}, // ... whose requests end within 0.5 s
	} {
		if got := counts(st, planner.PoolAggregated, tc.at); got != tc.want {
			t.Errorf("at %v: (ready, starting, stopping) = %v, want %v", tc.at, got, tc.want)
		}
	}
	// The planner saw the fleet as the samples say; Seen records it with each target.
	if f := d.fleets[1]; f.Ready[planner.PoolAggregated] != 3 || f.Starting[planner.PoolAggregated] != 0 {
		t.Errorf("second decision's fleet %+v: want 3 ready", f)
	}
	if len(st.Seen) != len(d.fleets) {
		t.Fatalf("%d decisions seen, %d made", len(st.Seen), len(d.fleets))
	}
	for k, f := range d.fleets {
		p := planner.PoolAggregated
		want := FleetSample{At: d.at[k].Sub(simBase), Pool: p, Ready: f.Ready[p], Starting: f.Starting[p], Stopping: f.Stopping[p],
			Target: d.targets[min(k, len(d.targets)-1)][p]}
		if st.Seen[k] != want {
			t.Errorf("decision %d seen as %+v, want %+v", k, st.Seen[k], want)
		}
	}
	// Each worker's legs: worker-1 and worker-2 get requests only while ready.
	for k := range s.legs {
		lg := &s.legs[k]
		arrival := s.reqs[lg.req].Arrival
		if w := lg.worker; w > 0 && (arrival < 1300*time.Millisecond || arrival > 4*time.Second) {
			t.Errorf("request %d (arrival %v) went to %s, not ready then", lg.req, arrival, s.workers[w].name)
		}
	}
	if st.Started != 2 || st.Stopped != 2 || st.Cancelled != 0 || st.Unplaced != 0 {
		t.Errorf("started %d, stopped %d, cancelled %d, unplaced %d: want 2, 2, 0, 0", st.Started, st.Stopped, st.Cancelled, st.Unplaced)
	}
	// GPU time: every worker asked for, ready or stopping, from sample to sample.
	end := s.last - s.origin
	var want float64
	for k, smp := range st.Samples {
		next := end
		if k+1 < len(st.Samples) {
			next = st.Samples[k+1].At
		}
		want += float64(smp.Ready+smp.Starting+smp.Stopping) * (next - smp.At).Seconds()
	}
	if want < end.Seconds()+2*3 { // worker-0 throughout, two more from 1 s to past 4 s
		t.Errorf("GPU-seconds from the samples %v: too few", want)
	}
	if diff := st.GPUSeconds - want; diff < -1e-9 || diff > 1e-9 {
		t.Errorf("GPU-seconds %v, want %v from the samples", st.GPUSeconds, want)
	}
}

// TestAutoscaleObservation: each decision observes the interval since the last one:
// every successful request once, with its prompt and output tokens, and TTFT and ITL
// samples that match the results.
func TestAutoscaleObservation(t *testing.T) {
	d := &scripted{targets: agg(1)}
	cfg := Config{Workers: 1, Engine: smallEngine(), RequestOverhead: 7 * time.Millisecond,
		Autoscaler: &Autoscaler{Planner: d, Interval: 500 * time.Millisecond, MaxWorkers: 1, Settle: 2 * time.Second}}
	reqs := steady(40, 20, 100*time.Millisecond)
	s := runSim(t, cfg, reqs)
	var n int
	var isl, osl float64
	for k, o := range d.obs {
		if want := time.Duration(k) * 500 * time.Millisecond; o.Start.Sub(simBase) != want || o.Duration != 500*time.Millisecond || o.Frontends != 1 {
			t.Errorf("observation %d: start %v, duration %v, %d frontends: want %v, 500ms, 1", k, o.Start.Sub(simBase), o.Duration, o.Frontends, want)
		}
		n += o.Requests
		isl += o.ISLMean * float64(o.Requests)
		osl += o.OSLMean * float64(o.Requests)
		if o.Requests > 0 && (o.TTFTP90Ms <= 7 || o.ITLP90Ms <= 0) {
			t.Errorf("observation %d: TTFT p90 %v ms (the 7 ms host cost included), ITL p90 %v ms", k, o.TTFTP90Ms, o.ITLP90Ms)
		}
	}
	if n != len(reqs) || isl != 100*float64(n) || osl != 20*float64(n) {
		t.Errorf("observed %d requests, ISL sum %v, OSL sum %v: want %d, %d, %d", n, isl, osl, len(reqs), 100*len(reqs), 20*len(reqs))
	}
	// The settle time: decisions go on 2 s past the last answer.
	last := time.Duration(0)
	for _, r := range s.results {
		last = max(last, r.Start+r.E2E)
	}
	if got := d.at[len(d.at)-1].Sub(simBase); got < last+1500*time.Millisecond || got > last+2*time.Second {
		t.Errorf("last decision at %v, the last answer at %v: want within the 2 s settle time", got, last)
	}
	// The TTFT p90 of one interval matches the requests whose first token fell in it.
	var in []float64
	for _, r := range s.results {
		if ft := r.Start + r.TTFT; ft >= time.Second && ft < 1500*time.Millisecond {
			in = append(in, float64(r.TTFT+7*time.Millisecond)/float64(time.Millisecond))
		}
	}
	want := bench.Describe(in).P90
	if got := d.obs[2].TTFTP90Ms; got < want*0.95 || got > want*1.06 { // the histogram's 5 % buckets
		t.Errorf("interval [1 s, 1.5 s): TTFT p90 %v ms, want about %v", got, want)
	}
}

// TestAutoscaleDrainTimeout: a worker drained with requests longer than the drain's
// grace ends them as migratable; their flows move them to the remaining worker, where
// they finish.
func TestAutoscaleDrainTimeout(t *testing.T) {
	d := &scripted{targets: agg(2, 1)}
	cfg := Config{Workers: 2, Engine: smallEngine(), Router: roundRobin(16),
		Autoscaler: &Autoscaler{Planner: d, Interval: 200 * time.Millisecond, MaxWorkers: 2, DrainTimeout: 100 * time.Millisecond}}
	// Four long streams from the start (about 2 s each), two per worker.
	reqs := steady(4, 400, 0)
	s := runSim(t, cfg, reqs)
	checkDrained(t, s)
	st := s.finishAutoscale()
	if st.DrainMigrated != 2 || s.stats.Migrations[messages.Fault_FAULT_ENGINE_ERROR] != 2 {
		t.Errorf("%d legs ended by the drain's timeout, %v migrations: want 2 of each", st.DrainMigrated, s.stats.Migrations)
	}
	for i, r := range s.results {
		if r.Error != "" || r.OutputTokens != 400 {
			t.Errorf("request %d: %q, %d tokens: want 400 tokens", i, r.Error, r.OutputTokens)
		}
	}
	// Drained at the second decision (400 ms), the timeout 100 ms later.
	if got := counts(st, planner.PoolAggregated, 450*time.Millisecond); got != [3]int{1, 0, 1} {
		t.Errorf("during the drain: %v, want 1 ready, 1 stopping", got)
	}
	if got := counts(st, planner.PoolAggregated, 520*time.Millisecond); got != [3]int{1, 0, 0} { // its step in flight ends first
		t.Errorf("after the drain's timeout: %v, want 1 ready", got)
	}
}

// TestAutoscaleRestart: a slot drained and started again runs a new engine: the router
// drops the old engine's blocks (a new epoch) and takes the new one's events; a start
// given up before it ends never makes the worker ready.
func TestAutoscaleRestart(t *testing.T) {
	d := &scripted{targets: agg(2, 1, 2, 2, 1, 2, 1)}
	cfg := Config{Workers: 1, Engine: smallEngine(), Router: roundRobin(16), EventDelay: 3 * time.Millisecond,
		Autoscaler: &Autoscaler{Planner: d, Interval: 300 * time.Millisecond, StartupDelay: 100 * time.Millisecond, MaxWorkers: 2}}
	s := runSim(t, cfg, steady(60, 10, 40*time.Millisecond))
	checkDrained(t, s)
	w := s.workers[1]
	if w.epoch != 3 || s.applyErrs != 0 {
		t.Errorf("worker-1 at epoch %d after three starts, %d batches not applied: want epoch 3, none", w.epoch, s.applyErrs)
	}
	for _, ws := range s.router.Stats().Workers {
		if ws.ID == w.name && (ws.Epoch != w.epoch || ws.Ready) {
			t.Errorf("router: worker-1 at epoch %d, ready %v: want %d, not ready", ws.Epoch, ws.Ready, w.epoch)
		}
	}
	// A start given up: asked for at 100 ms, ready at 1.1 s, but the decision at 200 ms
	// wants one worker again.
	d2 := &scripted{targets: agg(2, 1)}
	cfg.Autoscaler = &Autoscaler{Planner: d2, Interval: 100 * time.Millisecond, StartupDelay: time.Second, MaxWorkers: 2}
	s = runSim(t, cfg, steady(30, 10, 40*time.Millisecond))
	st := s.finishAutoscale()
	if st.Started != 1 || st.Cancelled != 1 || s.workers[1].slot != slotOff {
		t.Errorf("started %d, cancelled %d, slot %v: want 1, 1, off", st.Started, st.Cancelled, s.workers[1].slot)
	}
	for _, smp := range st.Samples {
		if smp.Ready > 1 {
			t.Errorf("at %v: %d ready: the cancelled start became ready", smp.At, smp.Ready)
		}
	}
}

// TestAutoscaleDisaggregated: prefill and decode pools scale apart; a new decode worker
// takes requests, a new prefill worker prefills them.
func TestAutoscaleDisaggregated(t *testing.T) {
	d := &scripted{targets: []map[planner.Pool]int{{planner.PoolPrefill: 2, planner.PoolDecode: 2}}}
	cfg := Config{Workers: 1, PrefillWorkers: 1, Engine: smallEngine(), Router: roundRobin(16), MaxLocalPrefillTokens: 1,
		KVBytesPerToken: 1024,
		Autoscaler: &Autoscaler{Planner: d, Interval: 500 * time.Millisecond, MaxWorkers: 3,
			GPUs: map[planner.Pool]int{planner.PoolPrefill: 2, planner.PoolDecode: 1}}}
	s := runSim(t, cfg, steady(60, 20, 30*time.Millisecond))
	checkDrained(t, s)
	st := s.finishAutoscale()
	if got := WorkerNames(3, 3); !reflect.DeepEqual(names(s), got) {
		t.Fatalf("slots %v, want %v", names(s), got)
	}
	used := map[string]bool{}
	for k := range s.legs {
		used[s.workers[s.legs[k].worker].name] = true
	}
	for _, name := range []string{"decode-0", "decode-1", "prefill-0", "prefill-1"} {
		if !used[name] {
			t.Errorf("%s ran no leg (used: %v)", name, used)
		}
	}
	if used["decode-2"] || used["prefill-2"] {
		t.Errorf("a slot never started ran a leg (used: %v)", used)
	}
	// Pools sampled apart; GPUs: prefill workers count 2 each.
	if c := counts(st, planner.PoolPrefill, time.Second); c != [3]int{2, 0, 0} {
		t.Errorf("prefill pool at 1 s: %v, want 2 ready", c)
	}
	end := (s.last - s.origin).Seconds()
	want := 3*end + 3*(end-0.5) // 1 decode + 1 prefill (2 GPUs) from 0; 1 more of each from 0.5 s
	if diff := st.GPUSeconds - want; diff < -1e-6 || diff > 1e-6 {
		t.Errorf("GPU-seconds %v, want %v", st.GPUSeconds, want)
	}
	for i, r := range s.results {
		if r.Error != "" {
			t.Errorf("request %d: %s %s", i, r.Error, r.Detail)
		}
	}
}

func names(s *simulator) []string {
	var out []string
	for _, w := range s.workers {
		out = append(out, w.name)
	}
	return out
}

// TestAutoscaleUnplaced: a target beyond the slots starts what fits and counts the rest.
func TestAutoscaleUnplaced(t *testing.T) {
	d := &scripted{targets: agg(5)}
	cfg := Config{Workers: 1, Engine: smallEngine(), Autoscaler: &Autoscaler{Planner: d, Interval: 100 * time.Millisecond, MaxWorkers: 3}}
	s := runSim(t, cfg, steady(10, 10, 50*time.Millisecond))
	st := s.finishAutoscale()
	if st.Started != 2 || st.Unplaced < 2 {
		t.Errorf("started %d, unplaced %d: want 2 and at least 2", st.Started, st.Unplaced)
	}
}

// TestAutoscaleDeterministic: the same run twice gives the same fleet and outcome.
func TestAutoscaleDeterministic(t *testing.T) {
	run := func() (bench.Outcome, Stats) {
		cfg := Config{Workers: 1, Engine: smallEngine(), Seed: 3, Autoscaler: &Autoscaler{
			Planner: &scripted{targets: agg(2, 3, 1, 2)}, Interval: 250 * time.Millisecond, StartupDelay: 80 * time.Millisecond, MaxWorkers: 4}}
		out, st, err := Run(context.Background(), cfg, sharedPrefixWorkload(300, 5, 2, 1, 16, 30, 100, 9))
		if err != nil {
			t.Fatal(err)
		}
		st.WallTime = 0
		return out, st
	}
	o1, s1 := run()
	o2, s2 := run()
	if !reflect.DeepEqual(o1, o2) || !reflect.DeepEqual(s1.Autoscale, s2.Autoscale) {
		t.Error("two runs of the same autoscaled workload differ")
	}
}

// TestAutoscaleWithPlanner: the planner core in load mode grows a one-worker fleet under a
// burst that fills its KV cache and shrinks it back to its minimum once the load is
// gone.
func TestAutoscaleWithPlanner(t *testing.T) {
	pc := planner.DefaultConfig()
	pc.Mode, pc.LoadInterval, pc.GPUBudget = planner.ModeLoad, 200*time.Millisecond, 4
	p, err := planner.New(pc)
	if err != nil {
		t.Fatal(err)
	}
	eng := smallEngine()
	cfg := Config{Workers: 1, Engine: eng, Autoscaler: &Autoscaler{Planner: p, Interval: pc.LoadInterval,
		StartupDelay: 100 * time.Millisecond, MaxWorkers: 4, Settle: 10 * time.Second}}
	// 2 s at 200 requests/s of 200-token prompts streaming 100 tokens: far beyond one
	// engine's 256 blocks.
	reqs := make([]bench.Request, 400)
	for i := range reqs {
		reqs[i] = bench.Request{Arrival: time.Duration(i) * 5 * time.Millisecond, InputLength: 200, OutputLength: 100, HashIDs: []int64{int64(i + 1)}}
	}
	out, st, err := Run(context.Background(), cfg, reqs)
	if err != nil {
		t.Fatal(err)
	}
	peak := 0
	for _, smp := range st.Autoscale.Samples {
		peak = max(peak, smp.Ready)
	}
	lastS := st.Autoscale.Samples[len(st.Autoscale.Samples)-1]
	if peak < 2 || lastS.Ready != 1 || lastS.Starting+lastS.Stopping != 0 {
		t.Errorf("peak %d ready, last sample %+v: want the fleet grown and back at 1", peak, lastS)
	}
	for i, r := range out.Results {
		if r.Error != "" {
			t.Fatalf("request %d failed: %s", i, r.Error)
		}
	}
}

func TestAutoscaleConfigErrors(t *testing.T) {
	good := func() Config {
		return Config{Workers: 2, Engine: smallEngine(), Autoscaler: &Autoscaler{Planner: &scripted{targets: agg(1)}, Interval: time.Second, MaxWorkers: 4}}
	}
	if _, err := newSimulator(good(), nil); err != nil {
		t.Fatalf("good config: %v", err)
	}
	for _, tc := range []struct {
		name string
		edit func(*Config)
		want string
	}{
		{"no planner", func(c *Config) { c.Autoscaler.Planner = nil }, "Autoscaler.Planner: required"},
		{"interval", func(c *Config) { c.Autoscaler.Interval = 0 }, "Autoscaler.Interval 0s"},
		{"long interval", func(c *Config) { c.Autoscaler.Interval = 2 * MaxEventDelay }, "Autoscaler.Interval"},
		{"startup", func(c *Config) { c.Autoscaler.StartupDelay = -1 }, "Autoscaler.StartupDelay"},
		{"drain", func(c *Config) { c.Autoscaler.DrainTimeout = -1 }, "Autoscaler.DrainTimeout"},
		{"settle", func(c *Config) { c.Autoscaler.Settle = -1 }, "Autoscaler.Settle"},
		{"slots", func(c *Config) { c.Autoscaler.MaxWorkers = 1 }, "Autoscaler.MaxWorkers 1: want at least Workers 2"},
		{"router bound", func(c *Config) { c.Autoscaler.MaxWorkers = kv.MaxWorkerID + 2 }, "the router takes at most"},
		{"memory", func(c *Config) { c.Engine.NumGPUBlocks = 1 << 20; c.Autoscaler.MaxWorkers = 200 }, "MemoryLimit"},
		{"gpus", func(c *Config) { c.Autoscaler.GPUs = map[planner.Pool]int{planner.PoolDecode: 65} }, "Autoscaler.GPUs[decode] 65"},
		{"lora", func(c *Config) { c.Engine.MaxLoras = 2 }, "LoRA adapters on an autoscaled fleet"},
	} {
		c := good()
		tc.edit(&c)
		if _, err := newSimulator(c, nil); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error with %q", tc.name, err, tc.want)
		}
	}
}
