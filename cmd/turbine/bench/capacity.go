package bench

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"path/filepath"
	"slices"
	"strings"

	"github.com/turbine-llm/turbine/bench"
)

// DefaultCapacityPrecision is --capacity-precision's default: a capacity sweep stops
// when the failing and the passing time scale are within 2 % of each other.
const DefaultCapacityPrecision = 0.02

// Bounds of a capacity sweep: --capacity-precision's range, and how many times the time
// scale is halved or doubled from the start before the sweep gives up bracketing (a
// factor of 65,536 either way).
const (
	MinCapacityPrecision = 0.001
	MaxCapacityPrecision = 1
	capacityMaxSteps     = 16
	// capacityMaxSlowdown bounds the time scales probed above the start: a fleet that
	// misses the SLO at a sixteenth of the start's rate is reported as below it (a real
	// probe lasts the trace's span times its scale).
	capacityMaxSlowdown = 16
)

// capacityFlags registers the flags of a capacity sweep (`turbine bench compare
// --find-capacity`).
func capacityFlags(o *Options, fs *flag.FlagSet) {
	fs.BoolVar(&o.FindCapacity, "find-capacity", o.FindCapacity, "per mode, search the time scale for the highest request rate that meets --slo (a run per probe: simulated with --simulate, a fresh serve otherwise)")
	fs.StringVar(&o.SLO, "slo", o.SLO, "--find-capacity: the `targets` a probe must meet, comma-separated METRIC-STAT=DURATION (METRIC ttft, itl, e2e; STAT p50, p90, p99, mean, max), e.g. ttft-p99=3s; any failed request fails a probe")
	fs.Float64Var(&o.CapacityPrecision, "capacity-precision", o.CapacityPrecision, fmt.Sprintf("--find-capacity: stop when the fastest passing and the slowest failing rate are within this `fraction` of each other (%g to %g)", float64(MinCapacityPrecision), float64(MaxCapacityPrecision)))
}

// validateCapacity checks the flags of a capacity sweep; errors name the flag.
func (o *Options) validateCapacity() error {
	if !o.FindCapacity {
		for _, name := range []string{"slo", "capacity-precision"} {
			if g, ok := o.given[name]; ok {
				return fmt.Errorf("%s: only with --find-capacity", g)
			}
		}
		return nil
	}
	if o.SLO == "" {
		return errors.New("--slo: required with --find-capacity (e.g. --slo ttft-p99=3s)")
	}
	if _, err := bench.ParseSLO(o.SLO); err != nil {
		return fmt.Errorf("--slo: %s", strings.TrimPrefix(err.Error(), "bench: "))
	}
	switch p := o.CapacityPrecision; {
	case !(p >= MinCapacityPrecision && p <= MaxCapacityPrecision):
		return fmt.Errorf("--capacity-precision %v: want %g to %g (a fraction: 0.02 is 2 %%)", p, float64(MinCapacityPrecision), float64(MaxCapacityPrecision))
	case o.Concurrency != 0:
		return fmt.Errorf("--concurrency %d: not with --find-capacity (the sweep varies the arrival rate; a bound on the requests in flight would hide the queueing it measures)", o.Concurrency)
	case o.generated():
		return fmt.Errorf("--duration %v without --rate: not with --find-capacity (a closed loop has no arrivals to scale; give --rate)", o.Duration)
	}
	return nil
}

// CapacitySweep is the result of --find-capacity, in compare.json.
type CapacitySweep struct {
	SLO            string        `json:"slo"`              // as bench.ParseSLO reads it
	Precision      float64       `json:"precision"`        // --capacity-precision
	StartTimeScale float64       `json:"start_time_scale"` // the first probe's
	BaseRPS        float64       `json:"base_rps"`         // the workload's request rate at time scale 1
	Rows           []CapacityRow `json:"rows"`
}

// CapacityRow is one routing mode's sweep. Rates are requests/s: the workload's requests
// over the span of its arrivals at the probe's time scale. Latencies are in ms.
type CapacityRow struct {
	Mode string `json:"mode"`
	// Outcome is bench.CapacityFound (a passing rate with a failing one within the
	// precision above it), bench.CapacityNoneFailed (every rate probed passed: the
	// capacity is at least CapacityRPS) or bench.CapacityNonePassed (none did: it is
	// below FailedRPS).
	Outcome string `json:"outcome"`
	// CapacityRPS and TimeScale are the fastest passing probe's; 0 when none passed.
	CapacityRPS float64 `json:"capacity_rps"`
	TimeScale   float64 `json:"time_scale"`
	// FailedRPS is the slowest failing rate above the capacity (with none passed, the
	// slowest rate probed); 0 when none failed.
	FailedRPS float64 `json:"failed_rps"`
	// RatioToRoundRobin is CapacityRPS over round-robin's, when round-robin is among the
	// modes and both passed somewhere.
	RatioToRoundRobin *float64 `json:"ratio_to_round_robin,omitempty"`
	// Probe indexes Probes: the run at capacity (with none passed, the slowest run).
	// HitRate, TTFTP50 and TTFTP99 are that run's.
	Probe   int      `json:"probe"`
	HitRate *float64 `json:"hit_rate"`
	TTFTP50 float64  `json:"ttft_p50_ms"`
	TTFTP99 float64  `json:"ttft_p99_ms"`
	// StartHitRate is the first probe's hit rate, at the start time scale.
	StartHitRate *float64   `json:"start_hit_rate"`
	Probes       []ProbeRow `json:"probes"`
}

// ProbeRow is one probe of a sweep: a run of the workload at a time scale.
type ProbeRow struct {
	Dir       string   `json:"dir"` // its files, relative to --out: MODE/probe-NN
	TimeScale float64  `json:"time_scale"`
	RPS       float64  `json:"rps"`
	Pass      bool     `json:"pass"`
	Why       string   `json:"why,omitempty"` // the failed condition (bench.SLO.Check)
	HitRate   *float64 `json:"hit_rate"`
	TTFTP50   float64  `json:"ttft_p50_ms"`
	TTFTP99   float64  `json:"ttft_p99_ms"`
	Succeeded int      `json:"succeeded"` // latencies are of these
	Failed    int      `json:"failed"`
}

// findCapacity is `turbine bench compare --find-capacity`: per mode a capacity search
// (bench.CapacitySearch) over the time scale of reqs (arrivals at --time-scale), each
// probe a run in a directory of its own (--out/MODE/probe-NN: summary.json,
// requests.csv, plot.svg), simulated or against a fresh serve; then the table
// (compare.md, stdout), compare.json and compare.svg (each mode's run at capacity).
func (o *Options) findCapacity(ctx context.Context, exe string, reqs []bench.Request, modes []string, cmp Comparison, stdout, stderr io.Writer) error {
	slo, err := bench.ParseSLO(o.SLO)
	if err != nil {
		return fmt.Errorf("--slo: %w", err)
	}
	span := bench.ArrivalSpan(reqs)
	if span <= 0 {
		what := fmt.Sprintf("the workload's %d requests arrive at the same instant", len(reqs))
		if len(reqs) == 1 {
			what = "the workload is one request"
		}
		return fmt.Errorf("--find-capacity: %s: no rate to scale (want arrivals spread in time: a trace, or a synthetic --rate)", what)
	}
	start := 1.0
	if o.Trace != "" {
		start = o.TimeScale
	}
	spanAt1 := span.Seconds() / start // the arrivals' span at time scale 1
	rate := func(s float64) float64 { return float64(len(reqs)) / (spanAt1 * s) }
	last := slices.MaxFunc(reqs, func(a, b bench.Request) int { return int(a.Arrival - b.Arrival) }).Arrival
	search := bench.CapacitySearch{Start: start, Precision: o.CapacityPrecision, MaxScale: start * capacityMaxSlowdown, MaxSteps: capacityMaxSteps}
	if last > 0 { // every arrival stays within bench.MaxArrival
		search.MaxScale = max(start, min(search.MaxScale, start*bench.MaxArrival.Seconds()/last.Seconds()))
	}
	base := filepath.Base(o.Trace)
	if o.Trace == "" {
		base = cmp.Workload
	}
	cmp.Workload = fmt.Sprintf("%s (%d requests), time scale searched from %g", base, len(reqs), start)
	sweep := &CapacitySweep{SLO: slo.String(), Precision: o.CapacityPrecision, StartTimeScale: start, BaseRPS: rate(1)}
	fmt.Fprintf(stderr, "bench: finding each mode's capacity at %s: time scale from %g (%.3g requests/s), to %g %%, at most %d probes per mode\n",
		slo, start, rate(start), 100*o.CapacityPrecision, bench.MaxCapacityProbes(o.CapacityPrecision, capacityMaxSteps))
	var runs []bench.Summary
	for _, mode := range modes {
		row := CapacityRow{Mode: mode}
		var sums []bench.Summary
		res, err := search.Run(func(s float64) (bool, error) {
			scaled := slices.Clone(reqs)
			if err := bench.Scale(scaled, s/start); err != nil {
				return false, err
			}
			workload := fmt.Sprintf("%s (%d requests, time scale %.6g)", base, len(reqs), s)
			var sum bench.Summary
			var results []bench.Result
			var err error
			if o.Simulate {
				sum, results, err = o.simulate(ctx, scaled, workload, mode, mode, stderr)
			} else {
				sum, results, err = o.serveAndMeasure(ctx, exe, scaled, workload, mode, stderr)
			}
			if err != nil {
				return false, err
			}
			if err := ctx.Err(); err != nil {
				return false, fmt.Errorf("stopped: %w", err)
			}
			dir := filepath.Join(modeDir(mode), fmt.Sprintf("probe-%02d", len(row.Probes)+1))
			if err := write(filepath.Join(o.Out, dir), sum, results); err != nil {
				return false, err
			}
			pass, why := slo.Check(sum)
			verdict := "meets the SLO"
			if !pass {
				verdict = "fails: " + why
			}
			fmt.Fprintf(stderr, "bench: mode %s: probe %d: time scale %.4g (%.3g requests/s): %s (%s)\n",
				mode, len(row.Probes)+1, s, rate(s), verdict, filepath.Join(o.Out, dir))
			row.Probes = append(row.Probes, ProbeRow{Dir: filepath.ToSlash(dir), TimeScale: s, RPS: rate(s), Pass: pass, Why: why,
				HitRate: sum.PrefixCacheHitRate, TTFTP50: sum.TTFT.P50, TTFTP99: sum.TTFT.P99, Succeeded: sum.Succeeded, Failed: sum.Failed})
			sums = append(sums, sum)
			return pass, nil
		})
		if err != nil {
			return fmt.Errorf("mode %s: probe %d: %w", mode, len(row.Probes)+1, err)
		}
		row.Outcome = res.Outcome
		at := res.Scale
		if res.Scale > 0 {
			row.CapacityRPS, row.TimeScale = rate(res.Scale), res.Scale
		} else {
			at = res.FailScale
		}
		if res.FailScale > 0 {
			row.FailedRPS = rate(res.FailScale)
		}
		row.Probe = slices.IndexFunc(row.Probes, func(p ProbeRow) bool { return p.TimeScale == at })
		p := row.Probes[row.Probe]
		row.HitRate, row.TTFTP50, row.TTFTP99, row.StartHitRate = p.HitRate, p.TTFTP50, p.TTFTP99, row.Probes[0].HitRate
		sweep.Rows = append(sweep.Rows, row)
		runs = append(runs, sums[row.Probe])
		cmp.Rows = append(cmp.Rows, compareRow(mode, sums[row.Probe]))
		printSummary(stderr, sums[row.Probe], filepath.Join(o.Out, row.Probes[row.Probe].Dir))
	}
	setRatios(sweep.Rows)
	cmp.Capacity = sweep
	return writeComparison(o.Out, RenderCapacity(cmp), cmp, runs, stdout)
}

// setRatios sets each row's capacity ratio to round-robin's, when round-robin is a row
// and it and the row passed somewhere.
func setRatios(rows []CapacityRow) {
	i := slices.IndexFunc(rows, func(r CapacityRow) bool { return r.Mode == "round-robin" })
	if i < 0 || rows[i].CapacityRPS <= 0 {
		return
	}
	for j := range rows {
		if rows[j].CapacityRPS > 0 {
			ratio := rows[j].CapacityRPS / rows[i].CapacityRPS
			rows[j].RatioToRoundRobin = &ratio
		}
	}
}

// RenderCapacity renders a capacity sweep (c.Capacity) as a Markdown table under lines
// naming the workload, the fleet, the ceilings and the SLO: per mode the capacity (≥ when
// every probe passed, < when none did), its ratio to round-robin's, the time scale, hit
// rate and TTFT at capacity, the hit rate at the start time scale and the probes run.
func RenderCapacity(c Comparison) string {
	var b strings.Builder
	sw := c.Capacity
	fmt.Fprintf(&b, "Workload: %s\n\nFleet: %s\n\n", c.Workload, c.Fleet)
	writeCeilings(&b, c)
	fmt.Fprintf(&b, "Capacity: the highest request rate at which %s holds and every request succeeds (%.3g requests/s at time scale 1; time scale searched to within %g %%)\n\n",
		sw.SLO, sw.BaseRPS, 100*sw.Precision)
	head := []string{"mode", "capacity req/s", "× round-robin", "time scale", "hit rate", "TTFT p50 ms", "TTFT p99 ms",
		fmt.Sprintf("hit rate at T=%g", sw.StartTimeScale), "probes"}
	pct := func(x *float64) string {
		if x == nil {
			return "-"
		}
		return fmt.Sprintf("%.1f %%", 100**x)
	}
	rows := [][]string{head}
	for _, r := range sw.Rows {
		capacity, scale, ratio := rps(r.CapacityRPS), fmt.Sprintf("%.4g", r.TimeScale), "-"
		switch r.Outcome {
		case bench.CapacityNoneFailed:
			capacity = "≥ " + capacity
		case bench.CapacityNonePassed:
			capacity, scale = "< "+rps(r.FailedRPS), "-"
		}
		if r.RatioToRoundRobin != nil {
			ratio = fmt.Sprintf("%.2f", *r.RatioToRoundRobin)
		}
		lat := func(x float64) string {
			if r.Probes[r.Probe].Succeeded == 0 {
				return "-"
			}
			return fmt.Sprintf("%.1f", x)
		}
		rows = append(rows, []string{r.Mode, capacity, ratio, scale, pct(r.HitRate), lat(r.TTFTP50), lat(r.TTFTP99),
			pct(r.StartHitRate), fmt.Sprint(len(r.Probes))})
	}
	writeTable(&b, rows)
	return b.String()
}

// rps writes a request rate: two decimals, or four significant digits from 100,000 up.
func rps(x float64) string {
	if x >= 1e5 {
		return fmt.Sprintf("%.4g", x)
	}
	return fmt.Sprintf("%.2f", x)
}
