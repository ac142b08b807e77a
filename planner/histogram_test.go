package planner

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

func TestHistogramBuckets(t *testing.T) {
	for _, tc := range []struct {
		v    float64
		want int
	}{
		{math.NaN(), 0}, {-5, 0}, {0, 0}, {0.0999, 0},
		{0.1, 1}, {0.1049, 1}, {0.106, 2},
		{math.Inf(1), NumBuckets - 1}, {1e300, NumBuckets - 1}, {math.MaxFloat64, NumBuckets - 1},
	} {
		if got := bucketOf(tc.v); got != tc.want {
			t.Errorf("bucketOf(%v) = %d, want %d", tc.v, got, tc.want)
		}
	}
	// Every bucket i ≥ 1 holds [upper(i-1), upper(i)): its bounds fall in it and in the next.
	for i := 1; i < NumBuckets-1; i++ {
		lo, hi := upper(i-1), upper(i)
		if b := bucketOf(lo * 1.0000001); b != i {
			t.Fatalf("just above bucket %d's lower bound %v: bucket %d", i, lo, b)
		}
		if b := bucketOf(hi * 0.9999999); b != i {
			t.Fatalf("just below bucket %d's upper bound %v: bucket %d", i, hi, b)
		}
	}
	if top := upper(NumBuckets - 2); top < 180_000 {
		t.Errorf("buckets end at %v ms, want about 190 s", top)
	}
}

// A percentile read from the histogram is the upper bound of its bucket: never below
// the exact one, and within 5 % above it.
func TestHistogramQuantileAccuracy(t *testing.T) {
	r := rand.New(rand.NewPCG(4, 2))
	var h Histogram
	var xs []float64
	for range 20000 {
		v := math.Exp(3 + 1.2*r.NormFloat64()) // lognormal around 20 ms
		xs = append(xs, v)
		h.Add(v)
	}
	slices.Sort(xs)
	for _, q := range []float64{0.5, 0.9, 0.99} {
		exact := xs[int(math.Ceil(q*float64(len(xs))))-1]
		got, ok := h.Quantile(q)
		if !ok || got < exact || got > exact*BucketGrowth*1.0000001 {
			t.Errorf("p%v = %.4f, exact %.4f: want within [exact, exact × %v]", q*100, got, exact, BucketGrowth)
		}
	}
	var empty Histogram
	if _, ok := empty.Quantile(0.9); ok {
		t.Error("an empty histogram has a quantile")
	}
	// q beyond (0, 1] still answers from the data.
	if v, ok := h.Quantile(0); !ok || v != upper(bucketOf(xs[0])) {
		t.Errorf("q=0: %v", v)
	}
	if v, ok := h.Quantile(2); !ok || v < xs[len(xs)-1] {
		t.Errorf("q=2: %v below the largest value", v)
	}
}

// Merging frontends' histograms is exact: the merge equals one histogram of all values.
func TestHistogramMergeAndCounts(t *testing.T) {
	r := rand.New(rand.NewPCG(8, 1))
	var a, b, all Histogram
	for i := range 5000 {
		v := r.Float64() * 3000
		if i%3 == 0 {
			a.Add(v)
		} else {
			b.Add(v)
		}
		all.Add(v)
	}
	a.Merge(&b)
	if a != all {
		t.Fatal("merged histogram differs from the histogram of all values")
	}
	back, err := FromCounts(all.Counts[:])
	if err != nil || back != all {
		t.Fatalf("FromCounts round trip: %v", err)
	}
	short, err := FromCounts([]uint64{1, 2, 3})
	if err != nil || short.N != 6 || short.Counts[2] != 3 || short.Counts[3] != 0 {
		t.Errorf("FromCounts of 3 buckets: %v %+v", err, short.Counts[:4])
	}
	if _, err := FromCounts(make([]uint64, NumBuckets+1)); err == nil {
		t.Error("FromCounts accepted more buckets than NumBuckets")
	}
}

func TestWindowObservation(t *testing.T) {
	var w Window
	if o := w.Observation(scriptStart, time.Minute, 0); o.Requests != 0 || o.ISLMean != 0 || o.TTFTP90Ms != 0 {
		t.Errorf("empty window: %+v", o)
	}
	for i := range 10 {
		w.AddRequest(1000+100*i, 50)
		w.AddTTFT(time.Duration(10*(i+1)) * time.Millisecond)
		w.AddQueue(time.Duration(i) * time.Millisecond)
	}
	w.AddITL(20*time.Millisecond, 90)
	w.AddITL(200*time.Millisecond, 10)
	w.AddITL(time.Second, -3) // a negative count adds nothing
	var other Window
	other.AddRequest(3000, 150)
	other.AddTTFT(time.Second)
	w.Merge(&other)
	o := w.Observation(scriptStart, 30*time.Second, 2)
	if o.Requests != 11 || o.Frontends != 2 || o.Duration != 30*time.Second || !o.Start.Equal(scriptStart) {
		t.Errorf("counts: %+v", o)
	}
	if want := (14500.0 + 3000) / 11; math.Abs(o.ISLMean-want) > 1e-9 || math.Abs(o.OSLMean-650.0/11) > 1e-9 {
		t.Errorf("means: ISL %v OSL %v", o.ISLMean, o.OSLMean)
	}
	// TTFT: 10..100 ms and 1 s; p90 is the 10th of 11 values, 100 ms, read as its bucket's
	// upper bound.
	if o.TTFTP90Ms < 100 || o.TTFTP90Ms > 105 {
		t.Errorf("TTFT p90 %v, want 100 ms within 5 %%", o.TTFTP90Ms)
	}
	// ITL: 90 gaps of 20 ms, 10 of 200 ms: p90 is 20 ms.
	if o.ITLP90Ms < 20 || o.ITLP90Ms > 21 {
		t.Errorf("ITL p90 %v, want 20 ms within 5 %%", o.ITLP90Ms)
	}
	if w.ITL.N != 100 {
		t.Errorf("ITL counted %d gaps, want 100", w.ITL.N)
	}
	if err := CheckObservation(o); err != nil {
		t.Errorf("a window's observation is refused: %v", err)
	}
}
