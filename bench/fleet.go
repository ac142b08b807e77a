package bench

import (
	"encoding/csv"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
)

// An autoscaled fleet over time (docs/reference.md §27.8): the pools' sizes as a
// simulation recorded them or as polling a service's GET /admin/planner saw them, the
// GPU time they took, and whether they came back to their minimum once the load ended.

// MaxFleetPoints bounds the points of a FleetReport (a poll a second for 30 days, per
// pool, is 7.8 million; a benchmark has a few thousand).
const MaxFleetPoints = 1_000_000

// FleetPoint is one pool's workers from AtS seconds (since the start of the run) until
// the pool's next point.
type FleetPoint struct {
	AtS  float64 `json:"at_s"`
	Pool string  `json:"pool"` // "aggregated", "prefill", "decode"
	// Ready, Starting, Stopping: its workers serving, asked for and not ready yet,
	// draining or stopping. Target: what the planner last asked for.
	Ready    int `json:"ready"`
	Starting int `json:"starting"`
	Stopping int `json:"stopping"`
	Target   int `json:"target"`
}

// Workers is the workers that hold GPUs: ready, starting and stopping ones.
func (p FleetPoint) Workers() int { return p.Ready + p.Starting + p.Stopping }

// FleetReport is an autoscaled run's fleet over time.
type FleetReport struct {
	// Source says where the points come from ("simulated", "GET /admin/planner every 1s").
	Source string `json:"source"`
	// MinWorkers is each pool's minimum (the planner's --min-workers).
	MinWorkers int `json:"min_workers"`
	// GPUsPerWorker is each pool's GPUs per worker (a pool missing: 1).
	GPUsPerWorker map[string]int `json:"gpus_per_worker,omitempty"`
	// Points, in time order.
	Points []FleetPoint `json:"points"`
	// EndS is when the series ends (the last poll, or the end of the simulation).
	EndS float64 `json:"end_s"`
	// GPUSeconds is the GPU time the workers held from 0 to EndS; GPUSecondsRun the same
	// from 0 to the run's last answer (Summary.DurationS).
	GPUSeconds    float64 `json:"gpu_seconds"`
	GPUSecondsRun float64 `json:"gpu_seconds_run"`
	// BackToMinS is the time after the run's last answer from which every pool had
	// MinWorkers ready and none starting or stopping, to the end of the series; absent
	// when the series does not end so.
	BackToMinS *float64 `json:"back_to_min_s,omitempty"`
}

// NewFleetReport builds a report of points (in time order) ending at endS, for a run
// whose last answer came at runS (seconds from its start).
func NewFleetReport(source string, minWorkers int, gpus map[string]int, points []FleetPoint, endS, runS float64) FleetReport {
	r := FleetReport{Source: source, MinWorkers: minWorkers, GPUsPerWorker: gpus, Points: points, EndS: endS}
	r.GPUSeconds = r.GPUSecondsBetween(0, endS)
	r.GPUSecondsRun = r.GPUSecondsBetween(0, min(runS, endS))
	if at, ok := r.backToMin(runS); ok {
		d := max(at-runS, 0)
		r.BackToMinS = &d
	}
	return r
}

// Pools lists the pools of the points, in order of first appearance.
func (r *FleetReport) Pools() []string {
	var pools []string
	for _, p := range r.Points {
		if !slices.Contains(pools, p.Pool) {
			pools = append(pools, p.Pool)
		}
	}
	return pools
}

// gpus is a pool's GPUs per worker.
func (r *FleetReport) gpus(pool string) int {
	if g := r.GPUsPerWorker[pool]; g > 0 {
		return g
	}
	return 1
}

// GPUSecondsBetween integrates the GPUs held (workers × GPUs per worker, every pool)
// from a to b seconds; before a pool's first point it holds none.
func (r *FleetReport) GPUSecondsBetween(a, b float64) float64 {
	var total float64
	for _, pool := range r.Pools() {
		var prev *FleetPoint
		for i := range r.Points {
			p := &r.Points[i]
			if p.Pool != pool {
				continue
			}
			if prev != nil {
				total += overlap(prev.AtS, p.AtS, a, b) * float64(prev.Workers()*r.gpus(pool))
			}
			prev = p
		}
		if prev != nil {
			total += overlap(prev.AtS, math.Max(prev.AtS, r.EndS), a, b) * float64(prev.Workers()*r.gpus(pool))
		}
	}
	return total
}

// overlap is the length of [x0, x1] ∩ [a, b].
func overlap(x0, x1, a, b float64) float64 { return math.Max(0, math.Min(x1, b)-math.Max(x0, a)) }

// At returns each pool's point in force at t seconds (pools without a point by then are
// missing).
func (r *FleetReport) At(t float64) map[string]FleetPoint {
	out := map[string]FleetPoint{}
	for _, p := range r.Points {
		if p.AtS > t {
			break
		}
		out[p.Pool] = p
	}
	return out
}

// backToMin is the earliest time (at least from) from which, to the end of the series,
// every pool has MinWorkers ready and none starting or stopping; ok is false when the
// series does not end so.
func (r *FleetReport) backToMin(from float64) (at float64, ok bool) {
	atMin := func(p FleetPoint) bool {
		return p.Ready == r.MinWorkers && p.Starting == 0 && p.Stopping == 0
	}
	last := r.At(math.Inf(1))
	if len(last) == 0 {
		return 0, false
	}
	for _, p := range last {
		if !atMin(p) {
			return 0, false
		}
	}
	return r.settledSince(from, atMin), true
}

func allOf(m map[string]FleetPoint, f func(FleetPoint) bool) bool {
	for _, p := range m {
		if !f(p) {
			return false
		}
	}
	return true
}

// settledSince is the start of the final stretch in which every pool satisfies ok (at
// least from).
func (r *FleetReport) settledSince(from float64, ok func(FleetPoint) bool) float64 {
	since := math.Inf(1)
	state := map[string]FleetPoint{}
	pools := len(r.Pools())
	for i := 0; i < len(r.Points); {
		t := r.Points[i].AtS
		for ; i < len(r.Points) && r.Points[i].AtS == t; i++ {
			state[r.Points[i].Pool] = r.Points[i]
		}
		good := len(state) == pools && allOf(state, ok)
		switch {
		case good && math.IsInf(since, 1):
			since = t
		case !good:
			since = math.Inf(1)
		}
	}
	return math.Max(since, from)
}

// Ready is the ready workers of every pool together at t seconds.
func (r *FleetReport) Ready(t float64) int {
	n := 0
	for _, p := range r.At(t) {
		n += p.Ready
	}
	return n
}

// FleetDifference compares two fleets' ready workers (every pool together) at every
// step seconds from 0 to the end of the shorter series: the mean and the largest
// absolute difference, and the number of instants compared. Errors: a step that is not
// positive, or more than MaxFleetPoints instants.
func FleetDifference(a, b *FleetReport, step float64) (mean float64, most, n int, err error) {
	end := math.Min(a.EndS, b.EndS)
	if !(step > 0) || end/step > MaxFleetPoints {
		return 0, 0, 0, fmt.Errorf("bench: fleet comparison step %v s over %v s: want above 0 and at most %d instants", step, end, MaxFleetPoints)
	}
	var sum float64
	for k := 0; float64(k)*step <= end; k++ {
		t := float64(k) * step
		d := a.Ready(t) - b.Ready(t)
		if d < 0 {
			d = -d
		}
		sum += float64(d)
		most = max(most, d)
		n++
	}
	if n > 0 {
		mean = sum / float64(n)
	}
	return mean, most, n, nil
}

// check checks a report as NewFleetReport makes it (ReadSummary).
func (r *FleetReport) check() error {
	switch {
	case len(r.Points) > MaxFleetPoints:
		return fmt.Errorf("fleet: %d points: want at most %d", len(r.Points), MaxFleetPoints)
	case r.MinWorkers < 0:
		return fmt.Errorf("fleet.min_workers %d: want >= 0", r.MinWorkers)
	case CheckLabel(r.Source) != nil:
		return fmt.Errorf("fleet.source %q: %v", r.Source, CheckLabel(r.Source))
	}
	vals := []float64{r.EndS, r.GPUSeconds, r.GPUSecondsRun}
	if r.BackToMinS != nil {
		vals = append(vals, *r.BackToMinS)
	}
	if err := checkValues("fleet (end_s, gpu_seconds, gpu_seconds_run, back_to_min_s)", vals, MaxSummaryRate); err != nil {
		return err
	}
	for pool, g := range r.GPUsPerWorker {
		if !validPool(pool) || g < 0 || g > 64 {
			return fmt.Errorf("fleet.gpus_per_worker[%q] = %d: want a pool (aggregated, prefill, decode) and 0 to 64", pool, g)
		}
	}
	for i, p := range r.Points {
		switch {
		case !validPool(p.Pool):
			return fmt.Errorf("fleet.points[%d].pool %q: want aggregated, prefill or decode", i, p.Pool)
		case p.Ready < 0 || p.Starting < 0 || p.Stopping < 0 || p.Target < 0:
			return fmt.Errorf("fleet.points[%d]: negative counts", i)
		case !(p.AtS >= 0 && p.AtS <= MaxArrival.Seconds()*2):
			return fmt.Errorf("fleet.points[%d].at_s %v: want 0 to %v", i, p.AtS, MaxArrival.Seconds()*2)
		case i > 0 && p.AtS < r.Points[i-1].AtS:
			return fmt.Errorf("fleet.points[%d].at_s %v: before the point before it (%v): want time order", i, p.AtS, r.Points[i-1].AtS)
		}
	}
	return nil
}

func validPool(s string) bool { return s == "aggregated" || s == "prefill" || s == "decode" }

// FleetCSVHeader is the header of WriteFleetCSV.
var FleetCSVHeader = []string{"at_s", "pool", "ready", "starting", "stopping", "target"}

// WriteFleetCSV writes one row per point.
func WriteFleetCSV(w io.Writer, r FleetReport) error {
	cw := csv.NewWriter(w)
	if err := cw.Write(FleetCSVHeader); err != nil {
		return err
	}
	for _, p := range r.Points {
		if err := cw.Write([]string{strconv.FormatFloat(p.AtS, 'f', 3, 64), p.Pool, strconv.Itoa(p.Ready),
			strconv.Itoa(p.Starting), strconv.Itoa(p.Stopping), strconv.Itoa(p.Target)}); err != nil {
			return err
		}
	}
	cw.Flush()
	return cw.Error()
}
