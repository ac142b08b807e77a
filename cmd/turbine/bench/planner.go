package bench

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/turbine-llm/turbine/bench"
	"github.com/turbine-llm/turbine/bench/sim"
	"github.com/turbine-llm/turbine/cmd/turbine/internal/options"
	"github.com/turbine-llm/turbine/planner"
)

// Load ramps and autoscaled runs (docs/reference.md §27.8): --ramp replays a trace with
// its arrival rate swung by a multiplier schedule; --simulate --planner load|sla runs the
// simulated fleet under the planner core (with serve's planner flags); a real run with
// --poll-planner records the service's pools over time from GET /admin/planner;
// --interval-report checks every interval of a run against the TTFT and ITL targets.
// `turbine bench fleet` compares such runs.

// Defaults of the planner benchmark's flags.
const (
	// DefaultRampDuration is the time a --ramp replay takes.
	DefaultRampDuration = 10 * time.Minute
	// DefaultPlannerSettle: after the last answer, a simulation keeps deciding this long,
	// and a real run keeps polling the planner for at most this long until every pool is
	// back at its minimum.
	DefaultPlannerSettle = 2 * time.Minute
	// DefaultWorkerStartup is a simulated worker's start, from being asked for to ready:
	// what `turbine serve --planner` takes to start a mock worker. On the two-core
	// development machine its `turbine mocker` process reported its engine ready 0.31 to
	// 0.43 s after the planner asked (six starts), and the worker registers ready at its
	// next heartbeat (1 s apart); three to four seconds when the machine was saturated
	// (docs/reference.md §27.8).
	DefaultWorkerStartup = time.Second
)

// Plan holds the flags of load ramps and autoscaled runs.
type Plan struct {
	// Planner: serve's planner flags; --planner with --simulate makes the simulated
	// fleet autoscaled. Its targets also judge the intervals of --interval-report.
	Planner options.Planner
	// Ramp is the multiplier schedule (bench.ParseRamp) over RampDuration; RampRate the
	// arrival rate at 1× in requests/s (0: every request of the trace).
	Ramp         string
	RampDuration time.Duration
	RampRate     float64
	// IntervalReport > 0 cuts the run into intervals of this length checked against the
	// targets (intervals.csv).
	IntervalReport time.Duration
	// PollPlanner > 0 polls the service's GET /admin/planner this often during a real
	// run (fleet.csv).
	PollPlanner time.Duration
	// Settle: see DefaultPlannerSettle.
	Settle time.Duration
	// WorkerStartup is a simulated worker's start (see DefaultWorkerStartup).
	WorkerStartup time.Duration
	// FleetWorkers > 0 records a real run's service as that many workers throughout (a
	// static layout), for comparisons of GPU time.
	FleetWorkers int
}

// DefaultPlan returns the defaults: no ramp, no planner, no interval report, no polling.
func DefaultPlan() Plan {
	return Plan{Planner: options.DefaultPlanner(), RampDuration: DefaultRampDuration, Settle: DefaultPlannerSettle,
		WorkerStartup: DefaultWorkerStartup}
}

// rampFlags registers the load ramp's flags (a workload flag: compare takes them too).
func (o *Options) rampFlags(fs *flag.FlagSet) {
	fs.StringVar(&o.Plan.Ramp, "ramp", o.Plan.Ramp, "with --trace: replay it over --ramp-duration with its arrival rate swung by this multiplier `schedule`: "+
		"multipliers spread evenly (1,6,1) or TIME:MULT points (0s:1,5m:6,10m:1); the trace's own bursts are kept")
	fs.DurationVar(&o.Plan.RampDuration, "ramp-duration", o.Plan.RampDuration, "how long a --ramp replay takes")
	fs.Float64Var(&o.Plan.RampRate, "ramp-rate", o.Plan.RampRate, "--ramp: the arrival rate at 1× in requests/s (the trace's first requests are taken); 0: the whole trace")
}

// planFlags registers the planner's flags (serve's, but for those of the connectors) and
// the autoscaled run's.
func (o *Options) planFlags(fs *flag.FlagSet) {
	serve := flag.NewFlagSet("serve", flag.ContinueOnError)
	o.Plan.Planner.Flags(serve, "serve")
	usage := map[string]string{
		"planner":               "--simulate: a planner sizes the simulated fleet during the run: load (from the workers' load) or sla (TTFT and ITL targets, with --planner-profile); empty: off",
		"planner-drain-timeout": "--simulate --planner: how long the requests of a worker being removed may run before the rest move to other workers",
	}
	serve.VisitAll(func(f *flag.Flag) {
		if slices.Contains(planConnectorFlags, f.Name) {
			return
		}
		if u, ok := usage[f.Name]; ok {
			f.Usage = u
		}
		fs.Var(f.Value, f.Name, f.Usage)
	})
	fs.DurationVar(&o.Plan.IntervalReport, "interval-report", o.Plan.IntervalReport, "cut the run into intervals of this `length` and check each one's TTFT and ITL p90 against --ttft-target and --itl-target (intervals.csv; 0: no)")
	fs.DurationVar(&o.Plan.PollPlanner, "poll-planner", o.Plan.PollPlanner, "a real run: poll the service's GET /admin/planner this often and record its pools over time (fleet.csv; 0: no)")
	fs.DurationVar(&o.Plan.Settle, "planner-settle", o.Plan.Settle, "after the last answer: --simulate --planner keeps deciding this long; --poll-planner keeps polling at most this long, until every pool is back at its minimum")
	fs.DurationVar(&o.Plan.WorkerStartup, "worker-startup", o.Plan.WorkerStartup, "--simulate --planner: a new worker's start, from being asked for to ready")
	fs.IntVar(&o.Plan.FleetWorkers, "fleet-workers", o.Plan.FleetWorkers, "a real run of a static layout: record the service as this many workers throughout (for turbine bench fleet's GPU-hours; 0: no)")
}

// planConnectorFlags are serve's planner flags a benchmark does without: the simulated
// planner changes the simulated fleet itself.
var planConnectorFlags = []string{"connector", "virtual-file", "virtual-webhook", "max-workers-per-node"}

// planSimulateFlags configure the simulated planner: a real run measures the service's.
var planSimulateFlags = []string{"planner", "gpu-budget", "min-workers", "planner-interval", "planner-predictor",
	"planner-profile", "planner-drain-timeout", "worker-startup"}

// validatePlan checks the ramp and planner flags; errors name the flag. Planner flags
// set by their environment variables (serve's, in the same shell) are ignored by a real
// run.
func (o *Options) validatePlan() error {
	p := &o.Plan
	if !o.Simulate {
		for _, name := range planSimulateFlags {
			if g, ok := o.given[name]; ok && strings.HasPrefix(g, "--") {
				return fmt.Errorf("--%s: only with --simulate (a real run measures the service's planner: --poll-planner)", name)
			}
		}
		p.Planner.Mode = ""
	} else {
		for _, name := range []string{"poll-planner", "fleet-workers"} {
			if g, ok := o.given[name]; ok {
				return fmt.Errorf("%s: not with --simulate (a simulation records its own fleet)", g)
			}
		}
		p.PollPlanner, p.FleetWorkers = 0, 0
	}
	switch {
	case p.IntervalReport < 0:
		return fmt.Errorf("--interval-report %v: want >= 0", p.IntervalReport)
	case p.PollPlanner < 0 || p.PollPlanner > 0 && p.PollPlanner < 10*time.Millisecond:
		return fmt.Errorf("--poll-planner %v: want 0 or at least 10ms", p.PollPlanner)
	case p.Settle < 0 || p.Settle > sim.MaxSimulatedTime:
		return fmt.Errorf("--planner-settle %v: want 0 to %v", p.Settle, sim.MaxSimulatedTime)
	case p.WorkerStartup < 0 || p.WorkerStartup > sim.MaxEventDelay:
		return fmt.Errorf("--worker-startup %v: want 0 to %v", p.WorkerStartup, sim.MaxEventDelay)
	case p.FleetWorkers < 0:
		return fmt.Errorf("--fleet-workers %d: want >= 0", p.FleetWorkers)
	case p.FleetWorkers > 0 && p.PollPlanner > 0:
		return errors.New("--fleet-workers: not with --poll-planner (a static layout has no planner to poll)")
	case p.IntervalReport > 0 && (!(p.Planner.TTFTTargetMs > 0) || !(p.Planner.ITLTargetMs > 0) ||
		p.Planner.TTFTTargetMs > bench.MaxSummaryMillis || p.Planner.ITLTargetMs > bench.MaxSummaryMillis):
		return fmt.Errorf("--ttft-target %v, --itl-target %v: want numbers of milliseconds above 0 for --interval-report", p.Planner.TTFTTargetMs, p.Planner.ITLTargetMs)
	}
	if err := o.validateRamp(); err != nil {
		return err
	}
	if !p.Planner.Enabled() {
		return nil
	}
	p.Planner.Disaggregated = o.Fleet.PrefillWorkers > 0
	if err := p.Planner.Validate(); err != nil {
		return err
	}
	if slots := o.planSlots(); o.Fleet.Workers > slots || o.Fleet.PrefillWorkers > slots {
		return fmt.Errorf("--workers %d, --prefill-workers %d: a planned fleet starts with them, and --gpu-budget %d allows at most %d per pool",
			o.Fleet.Workers, o.Fleet.PrefillWorkers, p.Planner.GPUBudget, slots)
	}
	return nil
}

// validateRamp checks the ramp's flags.
func (o *Options) validateRamp() error {
	p := &o.Plan
	if p.Ramp == "" {
		for _, name := range []string{"ramp-duration", "ramp-rate"} {
			if g, ok := o.given[name]; ok {
				return fmt.Errorf("%s: only with --ramp", g)
			}
		}
		return nil
	}
	switch {
	case o.Trace == "":
		return errors.New("--ramp: only with --trace (a ramp warps a trace's arrivals)")
	case o.given["time-scale"] != "":
		return fmt.Errorf("%s: not with --ramp (the ramp sets the arrival times)", o.given["time-scale"])
	case !(p.RampRate >= 0) || math.IsInf(p.RampRate, 0):
		return fmt.Errorf("--ramp-rate %v: want a number of requests/s >= 0", p.RampRate)
	}
	if _, err := bench.ParseRamp(p.Ramp, p.RampDuration); err != nil {
		return fmt.Errorf("--ramp %q, --ramp-duration %v: %s", p.Ramp, p.RampDuration, strings.TrimPrefix(err.Error(), "bench: "))
	}
	return nil
}

// applyRamp warps a trace's requests by --ramp and describes the result.
func (o *Options) applyRamp(reqs []bench.Request) ([]bench.Request, string, error) {
	r, err := bench.ParseRamp(o.Plan.Ramp, o.Plan.RampDuration)
	if err != nil {
		return nil, "", fmt.Errorf("--ramp: %s", strings.TrimPrefix(err.Error(), "bench: "))
	}
	out, err := r.Apply(reqs, o.Plan.RampRate)
	if err != nil {
		return nil, "", fmt.Errorf("--ramp %s with --trace %s: %s", o.Plan.Ramp, o.Trace, strings.TrimPrefix(err.Error(), "bench: "))
	}
	base := float64(len(out)) / r.Area()
	return out, fmt.Sprintf("%s (%d requests, ramp %s over %v, %.3g requests/s at 1×)", filepath.Base(o.Trace), len(out), o.Plan.Ramp,
		o.Plan.RampDuration, base), nil
}

// planSlots is each pool's worker slots of a simulated planned fleet: the GPU budget's
// workers.
func (o *Options) planSlots() int {
	return max(o.Plan.Planner.GPUBudget/max(o.Plan.Planner.TensorParallelSize, 1), 1)
}

// autoscaler is the simulated fleet's autoscaler: the planner core of the flags.
func (o *Options) autoscaler() (*sim.Autoscaler, error) {
	pc := o.Plan.Planner.Core(o.Fleet.PrefillWorkers > 0)
	p, err := planner.New(pc)
	if err != nil {
		return nil, fmt.Errorf("--planner: %w", err)
	}
	gpus := map[planner.Pool]int{}
	for _, pool := range planner.Pools {
		gpus[pool] = o.Plan.Planner.TensorParallelSize
	}
	return &sim.Autoscaler{Planner: p, Interval: o.Plan.Planner.Period(), StartupDelay: o.Plan.WorkerStartup,
		DrainTimeout: o.Plan.Planner.DrainTimeout, MaxWorkers: o.planSlots(), GPUs: gpus, Settle: o.Plan.Settle}, nil
}

// simulatedFleet puts an autoscaled simulation's fleet into s: the pools as the planner
// saw them at each decision, as GET /admin/planner shows a real one (so the two compare);
// it prints the decisions and the GPU time, exact and as those samples have it.
func (o *Options) simulatedFleet(s *bench.Summary, st sim.Stats, stderr io.Writer) {
	a := st.Autoscale
	if a == nil {
		return
	}
	gpus := map[string]int{}
	for _, pool := range planner.Pools {
		if g := o.Plan.Planner.TensorParallelSize; g > 1 {
			gpus[pool.String()] = g
		}
	}
	f := bench.NewFleetReport("simulated: the pools at each planner decision", o.Plan.Planner.MinWorkers, gpus,
		sim.FleetPoints(a.Seen), st.SimulatedTime.Seconds(), s.DurationS)
	s.Fleet = &f
	peak := 0
	for _, smp := range a.Samples {
		peak = max(peak, smp.Ready)
	}
	fmt.Fprintf(stderr, "bench: planner %s: %d decisions, %d workers started, %d stopped, at most %d ready in a pool; %.4f GPU-hours (%.4f from the decisions' samples)\n",
		o.Plan.Planner.Mode, len(a.Decisions), a.Started, a.Stopped, peak, a.GPUSeconds/3600, f.GPUSeconds/3600)
	if a.Unplaced > 0 {
		fmt.Fprintf(stderr, "bench: planner asked for %d workers beyond --gpu-budget's slots\n", a.Unplaced)
	}
}

// addIntervals puts the run's --interval-report into s.
func (o *Options) addIntervals(s *bench.Summary, results []bench.Result) error {
	if o.Plan.IntervalReport <= 0 {
		return nil
	}
	rep, err := bench.Intervals(bench.Outcome{Results: results}, o.Plan.IntervalReport, o.Plan.Planner.TTFTTargetMs, o.Plan.Planner.ITLTargetMs)
	if err != nil {
		return fmt.Errorf("--interval-report: %s", strings.TrimPrefix(err.Error(), "bench: "))
	}
	s.Intervals = &rep
	return nil
}

// staticFleet records a static layout of --fleet-workers workers throughout the run.
func (o *Options) staticFleet(s *bench.Summary) {
	if o.Plan.FleetWorkers <= 0 {
		return
	}
	pts := []bench.FleetPoint{{AtS: 0, Pool: planner.PoolAggregated.String(), Ready: o.Plan.FleetWorkers, Target: o.Plan.FleetWorkers}}
	f := bench.NewFleetReport(fmt.Sprintf("static: %d workers", o.Plan.FleetWorkers), o.Plan.FleetWorkers, nil, pts, s.DurationS, s.DurationS)
	s.Fleet = &f
}

// writePlanFiles writes intervals.csv and fleet.csv when s has them.
func writePlanFiles(dir string, s bench.Summary) error {
	if s.Intervals != nil {
		if err := writeFile(filepath.Join(dir, "intervals.csv"), func(w io.Writer) error { return bench.WriteIntervalsCSV(w, *s.Intervals) }); err != nil {
			return err
		}
	}
	if s.Fleet != nil {
		if err := writeFile(filepath.Join(dir, "fleet.csv"), func(w io.Writer) error { return bench.WriteFleetCSV(w, *s.Fleet) }); err != nil {
			return err
		}
	}
	return nil
}

// printPlan prints the intervals' and the fleet's lines of a summary.
func printPlan(w io.Writer, s bench.Summary) {
	if iv := s.Intervals; iv != nil {
		fmt.Fprintf(w, "  intervals of %gs within TTFT p90 ≤ %g ms and ITL p90 ≤ %g ms: %d of %d (%.1f%%; intervals.csv)\n",
			iv.IntervalS, iv.TTFTTargetMs, iv.ITLTargetMs, iv.Within, iv.Measured, 100*iv.WithinFraction)
	}
	if f := s.Fleet; f != nil {
		back := "not back at the minimum"
		if f.BackToMinS != nil {
			back = fmt.Sprintf("back at %d per pool %.0f s after the last answer", f.MinWorkers, *f.BackToMinS)
		}
		peak := 0
		for _, p := range f.Points {
			peak = max(peak, p.Ready)
		}
		fmt.Fprintf(w, "  fleet (%s): at most %d ready in a pool, %.4f GPU-hours during the run (%.4f to %.0f s), %s (fleet.csv)\n",
			f.Source, peak, f.GPUSecondsRun/3600, f.GPUSeconds/3600, f.EndS, back)
	}
}

// plannerStatus is the part of GET /admin/planner a poll reads.
type plannerStatus struct {
	MinWorkers int    `json:"min_workers"`
	Decisions  int64  `json:"decisions"`
	At         string `json:"at"`
	Error      string `json:"error"`
	Pools      []struct {
		Pool          string `json:"pool"`
		Ready         int    `json:"ready"`
		Starting      int    `json:"starting"`
		Stopping      int    `json:"stopping"`
		Target        int    `json:"target"`
		GPUsPerEngine int    `json:"gpus_per_engine"`
	} `json:"pools"`
}

// maxStatusBytes bounds a planner status read (a few kB).
const maxStatusBytes = 1 << 20

// plannerPoll polls a service's GET /admin/planner and keeps the pools of each new
// decision, at the decision's time (since the run's start).
type plannerPoll struct {
	get   func(ctx context.Context) (plannerStatus, error)
	start time.Time
	every time.Duration

	mu         sync.Mutex
	points     []bench.FleetPoint
	decisions  int64
	minWorkers int
	gpus       map[string]int
	atMin      bool // the latest status has every pool at its minimum, nothing starting or stopping
	polls      int
	failures   int
	lastErr    string
	endS       float64
	changed    chan struct{} // closed and replaced at each successful poll
}

// startPoll polls url's planner for model every o.Plan.PollPlanner until stop; the
// times are from start.
func (o *Options) startPoll(ctx context.Context, base, model string, start time.Time) (*plannerPoll, func()) {
	client := &http.Client{Timeout: max(o.Plan.PollPlanner, 5*time.Second)}
	u := strings.TrimSuffix(base, "/") + "/admin/planner?model=" + url.QueryEscape(model)
	key := o.APIKey
	p := &plannerPoll{start: start, every: o.Plan.PollPlanner, changed: make(chan struct{}), gpus: map[string]int{},
		get: func(ctx context.Context) (plannerStatus, error) { return getPlannerStatus(ctx, client, u, key) }}
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(p.every)
		defer t.Stop()
		for {
			p.poll(ctx, time.Now())
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}()
	return p, func() { cancel(); <-done }
}

// getPlannerStatus reads one status.
func getPlannerStatus(ctx context.Context, client *http.Client, u, key string) (plannerStatus, error) {
	var st plannerStatus
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return st, err
	}
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	resp, err := client.Do(req)
	if err != nil {
		return st, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxStatusBytes))
	if err != nil {
		return st, err
	}
	if resp.StatusCode != http.StatusOK {
		return st, fmt.Errorf("HTTP %d: %.200s", resp.StatusCode, strings.TrimSpace(string(body)))
	}
	if err := json.Unmarshal(body, &st); err != nil {
		return st, fmt.Errorf("not a planner status: %v", err)
	}
	return st, nil
}

// poll reads the status once at now.
func (p *plannerPoll) poll(ctx context.Context, now time.Time) {
	st, err := p.get(ctx)
	p.mu.Lock()
	defer p.mu.Unlock()
	p.polls++
	if err != nil {
		if ctx.Err() == nil {
			p.failures++
			p.lastErr = err.Error()
		}
		return
	}
	p.record(st, now)
	close(p.changed)
	p.changed = make(chan struct{})
}

// record keeps a status read at now: a new decision's pools at the decision's time
// (the poll's when the status has no parseable time), never before the last point.
func (p *plannerPoll) record(st plannerStatus, now time.Time) {
	t := now.Sub(p.start).Seconds()
	p.endS = math.Max(p.endS, t)
	p.minWorkers = st.MinWorkers
	if st.Decisions == 0 || st.Decisions == p.decisions {
		return
	}
	p.decisions = st.Decisions
	if at, err := time.Parse(time.RFC3339Nano, st.At); err == nil {
		t = at.Sub(p.start).Seconds()
	}
	if n := len(p.points); n > 0 {
		t = math.Max(t, p.points[n-1].AtS)
	}
	t = math.Max(t, 0)
	p.atMin = len(st.Pools) > 0
	for _, pl := range st.Pools {
		if !slices.Contains([]string{"aggregated", "prefill", "decode"}, pl.Pool) {
			continue
		}
		if pl.GPUsPerEngine > 1 {
			p.gpus[pl.Pool] = pl.GPUsPerEngine
		}
		p.points = append(p.points, bench.FleetPoint{AtS: t, Pool: pl.Pool, Ready: max(pl.Ready, 0), Starting: max(pl.Starting, 0),
			Stopping: max(pl.Stopping, 0), Target: max(pl.Target, 0)})
		if pl.Ready != st.MinWorkers || pl.Starting != 0 || pl.Stopping != 0 {
			p.atMin = false
		}
	}
}

// settle waits, after the run, until a decision shows every pool at its minimum with
// nothing starting or stopping, for at most d (or until ctx ends).
func (p *plannerPoll) settle(ctx context.Context, d time.Duration) {
	deadline := time.NewTimer(d)
	defer deadline.Stop()
	for {
		p.mu.Lock()
		atMin, changed := p.atMin, p.changed
		p.mu.Unlock()
		if atMin {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-deadline.C:
			return
		case <-changed:
		}
	}
}

// report is the fleet the polls saw, for a run whose last answer came runS seconds
// after its start; nil when no decision was seen.
func (p *plannerPoll) report(runS float64) *bench.FleetReport {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.points) == 0 {
		return nil
	}
	f := bench.NewFleetReport(fmt.Sprintf("GET /admin/planner every %v", p.every), p.minWorkers, p.gpus, slices.Clone(p.points), p.endS, runS)
	return &f
}

// describe says how the polls went, for stderr.
func (p *plannerPoll) describe() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	s := fmt.Sprintf("bench: planner polled %d times, %d decisions seen", p.polls, p.decisions)
	if p.failures > 0 {
		s += fmt.Sprintf(", %d polls failed (last: %s)", p.failures, p.lastErr)
	}
	return s
}

// runFleet is `turbine bench fleet [-o cmp.svg] [-step 1s] A.json B.json …`: for each
// run its intervals within target, its GPU-hours and whether its pools came back to the
// minimum; the difference of the first two fleets' ready workers over time; and, with -o,
// a plot of the ready workers and each interval's p90s.
func runFleet(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("turbine bench fleet", flag.ContinueOnError)
	fs.SetOutput(stderr)
	out := fs.String("o", "", "picture to write: SVG, or PNG when the name ends in .png (empty: none)")
	step := fs.Duration("step", time.Second, "compare the first two fleets' ready workers at every `step` from the start")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: turbine bench fleet [-o cmp.svg|cmp.png] [-step 1s] SUMMARY.json ...")
		fs.PrintDefaults()
	}
	files, err := parseFiles(fs, args)
	if errors.Is(err, flag.ErrHelp) {
		return nil
	} else if err != nil {
		return err
	}
	if len(files) == 0 {
		return errors.New("fleet: no summary.json given")
	}
	if *step <= 0 {
		return fmt.Errorf("-step %v: want above 0", *step)
	}
	format := ""
	if *out != "" {
		switch ext := strings.ToLower(filepath.Ext(*out)); ext {
		case ".png":
			format = "png"
		case ".svg":
			format = "svg"
		default:
			return fmt.Errorf("-o %s: want a .svg or .png file", *out)
		}
	}
	var runs []bench.Summary
	for _, name := range files {
		s, err := readSummaryFile(name)
		if err != nil {
			return fmt.Errorf("fleet: %s", strings.TrimPrefix(err.Error(), "bench: "))
		}
		if s.Label == "" {
			s.Label = name
		}
		runs = append(runs, s)
	}
	fmt.Fprintf(stdout, "%-28s %10s %14s %10s %10s %s\n", "run", "duration_s", "intervals_ok", "gpu_hours", "peak", "back to minimum")
	var fleets []*bench.Summary
	for i := range runs {
		s := &runs[i]
		ok, gpu, peak, back := "-", "-", "-", "-"
		if iv := s.Intervals; iv != nil {
			ok = fmt.Sprintf("%d/%d %.1f%%", iv.Within, iv.Measured, 100*iv.WithinFraction)
		}
		if f := s.Fleet; f != nil {
			fleets = append(fleets, s)
			gpu = fmt.Sprintf("%.4f", f.GPUSecondsRun/3600)
			n := 0
			for _, p := range f.Points {
				n = max(n, p.Ready)
			}
			peak = fmt.Sprint(n)
			back = "no"
			if f.BackToMinS != nil {
				back = fmt.Sprintf("after %.0f s", *f.BackToMinS)
			}
		}
		fmt.Fprintf(stdout, "%-28s %10.1f %14s %10s %10s %s\n", legend(s.Label), s.DurationS, ok, gpu, peak, back)
	}
	if len(fleets) >= 2 {
		a, b := fleets[0], fleets[1]
		mean, most, n, err := bench.FleetDifference(a.Fleet, b.Fleet, step.Seconds())
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "ready workers, %s against %s: mean absolute difference %.3f, at most %d, over %d instants %v apart\n",
			legend(a.Label), legend(b.Label), mean, most, n, *step)
	}
	if format == "" {
		return nil
	}
	return writeFile(*out, func(w io.Writer) error { return bench.PlotFleet(w, runs, format) })
}

// legend shortens a run's label for a table column.
func legend(label string) string {
	r := []rune(label)
	if len(r) <= 28 {
		return label
	}
	return string(r[:27]) + "…"
}

// readSummaryFile reads a summary.json (bench.ReadSummary).
func readSummaryFile(name string) (bench.Summary, error) {
	f, err := os.Open(name)
	if err != nil {
		return bench.Summary{}, err
	}
	defer f.Close()
	return bench.ReadSummary(f, name)
}
