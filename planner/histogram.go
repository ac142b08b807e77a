package planner

import (
	"fmt"
	"math"
)

// Latency buckets of a Histogram: bucket 0 holds values below BucketMin; bucket i ≥ 1
// holds [BucketMin·BucketGrowth^(i-1), BucketMin·BucketGrowth^i); the last bucket holds
// everything from its lower bound up. Bounds are in milliseconds: 0.1 ms to about 190 s
// in steps of 5 %, so that a percentile read from a merged histogram is within 5 % of
// the exact one.
const (
	BucketMin    = 0.1
	BucketGrowth = 1.05
	NumBuckets   = 300
)

// Histogram counts latencies in milliseconds into the fixed buckets above. The zero
// value is empty and ready; a frontend keeps one per window and ships Counts in a
// messages.PlannerReport.
type Histogram struct {
	Counts [NumBuckets]uint64
	N      uint64
}

// bucketOf is the bucket index of v milliseconds.
func bucketOf(v float64) int {
	if !(v >= BucketMin) { // NaN and negatives count as the smallest
		return 0
	}
	x := math.Log(v/BucketMin) / math.Log(BucketGrowth)
	if x >= NumBuckets { // +Inf included: int(+Inf) is undefined (it landed in bucket 1)
		return NumBuckets - 1
	}
	i := 1 + int(math.Floor(x))
	return min(max(i, 1), NumBuckets-1)
}

// upper is the upper bound of bucket i in milliseconds (the last bucket's is its lower
// bound times BucketGrowth).
func upper(i int) float64 { return BucketMin * math.Pow(BucketGrowth, float64(i)) }

// Add counts one latency of v milliseconds.
func (h *Histogram) Add(v float64) {
	h.Counts[bucketOf(v)]++
	h.N++
}

// Merge adds other's counts to h.
func (h *Histogram) Merge(other *Histogram) {
	for i, c := range other.Counts {
		h.Counts[i] += c
	}
	h.N += other.N
}

// FromCounts builds a histogram from bucket counts as a report carries them. Errors:
// more counts than NumBuckets (fewer are padded with zeros).
func FromCounts(counts []uint64) (Histogram, error) {
	var h Histogram
	if len(counts) > NumBuckets {
		return h, fmt.Errorf("planner: %d latency buckets, want at most %d", len(counts), NumBuckets)
	}
	for i, c := range counts {
		h.Counts[i] = c
		h.N += c
	}
	return h, nil
}

// Quantile is the q-quantile (0 < q ≤ 1) in milliseconds, read as the upper bound of the
// bucket that holds it; ok is false for an empty histogram.
func (h *Histogram) Quantile(q float64) (ms float64, ok bool) {
	if h.N == 0 {
		return 0, false
	}
	rank := uint64(math.Ceil(q * float64(h.N)))
	rank = max(rank, 1)
	var seen uint64
	for i, c := range h.Counts {
		seen += c
		if seen >= rank {
			return upper(i), true
		}
	}
	return upper(NumBuckets - 1), true
}
