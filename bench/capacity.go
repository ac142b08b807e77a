package bench

import (
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"
	"time"
)

// SLOTarget is one latency target of an SLO: a statistic of a latency distribution of a
// run's successful requests at most Limit.
type SLOTarget struct {
	Metric string        // "ttft", "itl" or "e2e" (Summary.TTFT, ITL, E2E)
	Stat   string        // "p50", "p90", "p99", "mean" or "max"
	Limit  time.Duration // > 0
}

// SLO is a service-level objective: targets that must all hold. A run meets it when
// every request of it succeeded and every target holds (SLO.Check).
type SLO []SLOTarget

// sloMetrics and sloStats are the names ParseSLO accepts, in the order String writes.
var (
	sloMetrics = []string{"ttft", "itl", "e2e"}
	sloStats   = []string{"p50", "p90", "p99", "mean", "max"}
)

// ParseSLO parses an SLO written as comma-separated METRIC-STAT=DURATION targets, e.g.
// "ttft-p99=3s" or "ttft-p50=500ms,itl-p99=50ms": METRIC is ttft, itl or e2e, STAT p50,
// p90, p99, mean or max, DURATION a Go duration above 0. Errors quote the spec and the
// target at fault: empty, malformed, unknown metric or statistic, a duration that is not
// one or not above 0, a target given twice.
func ParseSLO(spec string) (SLO, error) {
	var slo SLO
	for _, part := range strings.Split(spec, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		name, value, ok := strings.Cut(part, "=")
		metric, stat, ok2 := strings.Cut(strings.TrimSpace(name), "-")
		if !ok || !ok2 {
			return nil, fmt.Errorf("bench: SLO %q: %q: want METRIC-STAT=DURATION, e.g. ttft-p99=3s", spec, part)
		}
		metric, stat = strings.ToLower(metric), strings.ToLower(stat)
		if !slices.Contains(sloMetrics, metric) || !slices.Contains(sloStats, stat) {
			return nil, fmt.Errorf("bench: SLO %q: %q: want a metric of %s and a statistic of %s (e.g. ttft-p99=3s)",
				spec, name, strings.Join(sloMetrics, ", "), strings.Join(sloStats, ", "))
		}
		limit, err := time.ParseDuration(strings.TrimSpace(value))
		if err != nil || limit <= 0 {
			return nil, fmt.Errorf("bench: SLO %q: %s=%s: want a duration above 0 (e.g. 3s, 500ms)", spec, name, strings.TrimSpace(value))
		}
		t := SLOTarget{Metric: metric, Stat: stat, Limit: limit}
		if slices.ContainsFunc(slo, func(o SLOTarget) bool { return o.Metric == metric && o.Stat == stat }) {
			return nil, fmt.Errorf("bench: SLO %q: %s-%s given twice", spec, metric, stat)
		}
		slo = append(slo, t)
	}
	if len(slo) == 0 {
		return nil, fmt.Errorf("bench: SLO %q: no target (want e.g. ttft-p99=3s)", spec)
	}
	return slo, nil
}

// String writes the SLO as ParseSLO reads it.
func (slo SLO) String() string {
	parts := make([]string, len(slo))
	for i, t := range slo {
		parts[i] = fmt.Sprintf("%s-%s=%v", t.Metric, t.Stat, t.Limit)
	}
	return strings.Join(parts, ",")
}

// Check reports whether the run s meets the SLO and, when it does not, why: it fails
// when s has no request or any request failed, whatever its error kind (a timeout, a
// refusal, a broken stream: capacity is the rate served without errors), or when a
// target's statistic (over the successful requests, in ms) is above its limit. A target
// on a distribution without samples holds (ITL when no answer had a second token).
func (slo SLO) Check(s Summary) (bool, string) {
	switch {
	case s.Requests == 0:
		return false, "no request"
	case s.Failed > 0:
		var kinds []string
		for _, k := range slices.Sorted(maps.Keys(s.Errors)) {
			kinds = append(kinds, fmt.Sprintf("%s %d", k, s.Errors[k]))
		}
		return false, fmt.Sprintf("%d of %d requests failed (%s)", s.Failed, s.Requests, strings.Join(kinds, ", "))
	}
	for _, t := range slo {
		d := map[string]Dist{"ttft": s.TTFT, "itl": s.ITL, "e2e": s.E2E}[t.Metric]
		if d.Count == 0 {
			continue
		}
		v := map[string]float64{"p50": d.P50, "p90": d.P90, "p99": d.P99, "mean": d.Mean, "max": d.Max}[t.Stat]
		if limit := ms(t.Limit); v > limit {
			return false, fmt.Sprintf("%s %s %.1f ms > %.1f ms", strings.ToUpper(t.Metric), t.Stat, v, limit)
		}
	}
	return true, ""
}

// CapacitySearch finds the highest arrival rate at which a workload meets an SLO, by
// probing time scales: a scale multiplies every arrival time (Scale), so a smaller scale
// is a higher rate. The search is pure: Run calls a probe function, which runs the
// workload at a scale and says whether it passed.
//
// It brackets first: it probes Start, then halves the scale while probes pass (or
// doubles it while they fail), at most MaxSteps times and within [MinScale, MaxScale];
// then it bisects the bracket (geometric midpoints) until the failing and the passing
// scale are within a factor of 1+Precision. It assumes a workload that meets the SLO at
// one rate meets it at every lower rate; when probes are noisy and that does not hold,
// the result is still a passing scale with a failing one within the precision below it
// (a local edge), never a scale that failed. No scale is probed twice, and Run probes at
// most 1 + MaxSteps + ⌈log2(ln 2 / ln(1+Precision))⌉ times.
type CapacitySearch struct {
	Start              float64 // first scale probed, > 0
	Precision          float64 // relative, > 0
	MinScale, MaxScale float64 // bounds of the scales probed: 0 ≤ MinScale ≤ Start ≤ MaxScale (+Inf: none)
	MaxSteps           int     // most halvings or doublings while bracketing, ≥ 0
}

// CapacityProbe is one probe of a search: the scale and whether it passed.
type CapacityProbe struct {
	Scale float64
	Pass  bool
}

// Capacity outcomes: CapacityResult.Outcome.
const (
	// CapacityFound: Scale passed and FailScale, within the precision below it, failed.
	CapacityFound = "found"
	// CapacityNoneFailed: every probe passed, down to MinScale or MaxSteps halvings;
	// the capacity is at least the rate at Scale.
	CapacityNoneFailed = "none_failed"
	// CapacityNonePassed: every probe failed, up to MaxScale or MaxSteps doublings; the
	// capacity is below the rate at FailScale, and Scale is 0.
	CapacityNonePassed = "none_passed"
)

// CapacityResult is what a search found.
type CapacityResult struct {
	Outcome   string          // CapacityFound, CapacityNoneFailed or CapacityNonePassed
	Scale     float64         // the smallest scale that passed; 0 when none did
	FailScale float64         // the largest failing scale below Scale (any, when none passed); 0 when none failed
	Probes    []CapacityProbe // in the order probed
}

// Check reports what makes the search unusable.
func (c CapacitySearch) Check() error {
	switch {
	case !(c.Start > 0) || math.IsInf(c.Start, 0):
		return fmt.Errorf("bench: capacity search: start scale %v: want a positive number", c.Start)
	case !(c.Precision > 0) || math.IsInf(c.Precision, 0):
		return fmt.Errorf("bench: capacity search: precision %v: want a positive number", c.Precision)
	case !(c.MinScale >= 0 && c.MinScale <= c.Start && c.Start <= c.MaxScale):
		return fmt.Errorf("bench: capacity search: scales from %v to %v: want 0 ≤ min ≤ start (%v) ≤ max", c.MinScale, c.MaxScale, c.Start)
	case c.MaxSteps < 0:
		return fmt.Errorf("bench: capacity search: %d steps: want >= 0", c.MaxSteps)
	}
	return nil
}

// Run searches with probe, which runs the workload at a scale and reports whether it met
// the SLO; an error from probe ends the search and is returned with the probes so far.
func (c CapacitySearch) Run(probe func(scale float64) (bool, error)) (CapacityResult, error) {
	if err := c.Check(); err != nil {
		return CapacityResult{}, err
	}
	var res CapacityResult
	try := func(s float64) (bool, error) {
		pass, err := probe(s)
		if err != nil {
			return false, err
		}
		res.Probes = append(res.Probes, CapacityProbe{Scale: s, Pass: pass})
		return pass, nil
	}
	pass, err := try(c.Start)
	if err != nil {
		return res, err
	}
	lo, hi := 0.0, 0.0 // the largest failing and the smallest passing scale
	if pass {
		hi = c.Start
		for step := 0; lo == 0; step++ {
			next := max(hi/2, c.MinScale)
			if step == c.MaxSteps || next >= hi || next <= 0 {
				res.Outcome, res.Scale = CapacityNoneFailed, hi
				return res, nil
			}
			if pass, err = try(next); err != nil {
				return res, err
			}
			if pass {
				hi = next
			} else {
				lo = next
			}
		}
	} else {
		lo = c.Start
		for step := 0; hi == 0; step++ {
			next := min(lo*2, c.MaxScale)
			if step == c.MaxSteps || next <= lo || math.IsInf(next, 0) {
				res.Outcome, res.FailScale = CapacityNonePassed, lo
				return res, nil
			}
			if pass, err = try(next); err != nil {
				return res, err
			}
			if pass {
				hi = next
			} else {
				lo = next
			}
		}
	}
	for hi/lo > 1+c.Precision {
		mid := math.Sqrt(lo * hi)
		if !(mid > lo && mid < hi) {
			break // the bracket cannot be split in float64
		}
		if pass, err = try(mid); err != nil {
			return res, err
		}
		if pass {
			hi = mid
		} else {
			lo = mid
		}
	}
	res.Outcome, res.Scale, res.FailScale = CapacityFound, hi, lo
	return res, nil
}

// MaxCapacityProbes is how many probes a search of precision p may run at most: the
// first, maxSteps to bracket and the bisection's.
func MaxCapacityProbes(p float64, maxSteps int) int {
	return 1 + maxSteps + max(int(math.Ceil(math.Log2(math.Ln2/math.Log1p(p)))), 0)
}

// ArrivalSpan is the time from the first arrival of reqs to the last; 0 for fewer than
// two requests. A workload's rate at time scale s is len(reqs) / (span × s).
func ArrivalSpan(reqs []Request) time.Duration {
	if len(reqs) < 2 {
		return 0
	}
	first, last := reqs[0].Arrival, reqs[0].Arrival
	for _, r := range reqs[1:] {
		first, last = min(first, r.Arrival), max(last, r.Arrival)
	}
	return last - first
}
