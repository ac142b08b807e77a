package configure

import (
	"cmp"
	"math"
	"slices"
	"sort"

	"github.com/turbine-llm/turbine/engines/mocker"
	"github.com/turbine-llm/turbine/planner"
)

// tableTiming is an engine profile's timing (planner.EngineProfile.Timing) with its
// curves laid out once, so that a simulation's millions of steps each read them without
// allocating: the same interpolation as EngineProfile.TTFT and ITL (a differential test
// holds them equal), about a hundred times cheaper per decode step.
type tableTiming struct {
	prefillX, prefillY []float64
	// contexts are the decode points' distinct contexts, ascending; usage[i] and itl[i]
	// the curve of contexts[i]: usages ascending, the highest ITL of equal usages.
	contexts   []float64
	usage, itl [][]float64
}

var _ mocker.Timing = (*tableTiming)(nil)

// newTableTiming lays out e's curves; e must be valid (planner.Profile.Validate).
func newTableTiming(e *planner.EngineProfile) *tableTiming {
	t := &tableTiming{}
	for _, p := range e.Prefill {
		t.prefillX, t.prefillY = append(t.prefillX, float64(p.ISL)), append(t.prefillY, p.TTFTMs)
	}
	pts := slices.Clone(e.Decode)
	slices.SortStableFunc(pts, func(a, b planner.DecodePoint) int {
		return cmp.Or(cmp.Compare(a.Context, b.Context), cmp.Compare(a.KVUsage, b.KVUsage))
	})
	for _, p := range pts {
		c := float64(p.Context)
		n := len(t.contexts)
		if n == 0 || t.contexts[n-1] != c {
			t.contexts, t.usage, t.itl = append(t.contexts, c), append(t.usage, nil), append(t.itl, nil)
			n++
		}
		us, ys := t.usage[n-1], t.itl[n-1]
		if k := len(us); k > 0 && us[k-1] == p.KVUsage {
			ys[k-1] = math.Max(ys[k-1], p.ITLMs)
			continue
		}
		t.usage[n-1], t.itl[n-1] = append(us, p.KVUsage), append(ys, p.ITLMs)
	}
	return t
}

// PrefillMillis is EngineProfile.TTFT at t tokens; 0 for t <= 0.
func (t *tableTiming) PrefillMillis(tokens int) float64 {
	if tokens <= 0 {
		return 0
	}
	x := float64(tokens)
	v := interp(t.prefillX, t.prefillY, x)
	if x < t.prefillX[0] { // below the first point: at least its rate (as EngineProfile.TTFT)
		v = math.Max(v, t.prefillY[0]*x/t.prefillX[0])
	}
	return math.Max(0.01, v)
}

// DecodeMillis is EngineProfile.ITL at KV usage u and context tokens per sequence.
func (t *tableTiming) DecodeMillis(u, context float64) float64 {
	cs := t.contexts
	context = math.Max(cs[0], math.Min(cs[len(cs)-1], context))
	i := sort.SearchFloat64s(cs, context)
	if cs[i] == context || i == 0 {
		return t.itlAt(i, u)
	}
	y0, y1 := t.itlAt(i-1, u), t.itlAt(i, u)
	return y0 + (y1-y0)*(context-cs[i-1])/(cs[i]-cs[i-1])
}

// itlAt interpolates the curve of contexts[i] at usage u, held at its ends.
func (t *tableTiming) itlAt(i int, u float64) float64 {
	xs := t.usage[i]
	u = math.Max(xs[0], math.Min(xs[len(xs)-1], u))
	return interp(xs, t.itl[i], u)
}

// interp is the profile's interpolation: linear between the points around x (xs
// ascending), extrapolated from the two end points beyond them, constant for one point.
func interp(xs, ys []float64, x float64) float64 {
	n := len(xs)
	if n == 1 {
		return ys[0]
	}
	i := sort.SearchFloat64s(xs, x)
	switch {
	case i == 0:
		i = 1
	case i >= n:
		i = n - 1
	}
	x0, x1, y0, y1 := xs[i-1], xs[i], ys[i-1], ys[i]
	if x1 == x0 {
		return y1
	}
	return y0 + (y1-y0)*(x-x0)/(x1-x0)
}
