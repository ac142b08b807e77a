package bench

import (
	"math"
	"slices"
)

// Percentile returns the p-th percentile (0 ≤ p ≤ 100) of sorted (ascending) by linear
// interpolation between closest ranks (NumPy's default); NaN when sorted is empty.
func Percentile(sorted []float64, p float64) float64 {
	if len(sorted) == 0 {
		return math.NaN()
	}
	p = min(max(p, 0), 100)
	rank := p / 100 * float64(len(sorted)-1)
	lo := int(math.Floor(rank))
	hi := min(lo+1, len(sorted)-1)
	return sorted[lo] + (rank-float64(lo))*(sorted[hi]-sorted[lo])
}

// Dist summarizes a sample (milliseconds in reports). Zero value: no sample.
type Dist struct {
	Count int     `json:"count"`
	Mean  float64 `json:"mean"`
	P50   float64 `json:"p50"`
	P90   float64 `json:"p90"`
	P99   float64 `json:"p99"`
	Min   float64 `json:"min"`
	Max   float64 `json:"max"`
}

// Describe summarizes xs (it is sorted in place).
func Describe(xs []float64) Dist {
	if len(xs) == 0 {
		return Dist{}
	}
	slices.Sort(xs)
	var sum float64
	for _, x := range xs {
		sum += x
	}
	return Dist{Count: len(xs), Mean: sum / float64(len(xs)), P50: Percentile(xs, 50), P90: Percentile(xs, 90),
		P99: Percentile(xs, 99), Min: xs[0], Max: xs[len(xs)-1]}
}

// quantiles returns the 0th, 1st, …, 100th percentiles of sorted: a CDF of 101 points.
func quantiles(sorted []float64) []float64 {
	if len(sorted) == 0 {
		return nil
	}
	out := make([]float64, 101)
	for i := range out {
		out[i] = Percentile(sorted, float64(i))
	}
	return out
}
