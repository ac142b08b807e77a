package bench

import (
	"math"
	"testing"
)

func TestPercentile(t *testing.T) {
	for _, tc := range []struct {
		xs   []float64
		p    float64
		want float64
	}{
		{[]float64{5}, 50, 5},
		{[]float64{5}, 99, 5},
		{[]float64{1, 2, 3, 4}, 0, 1},
		{[]float64{1, 2, 3, 4}, 100, 4},
		{[]float64{1, 2, 3, 4}, 50, 2.5},
		{[]float64{1, 2, 3, 4}, 90, 3.7},
		{[]float64{0, 10}, 99, 9.9},
		{[]float64{1, 2, 3}, 150, 3},
		{[]float64{1, 2, 3}, -5, 1},
	} {
		if got := Percentile(tc.xs, tc.p); math.Abs(got-tc.want) > 1e-9 {
			t.Errorf("Percentile(%v, %v) = %v, want %v", tc.xs, tc.p, got, tc.want)
		}
	}
	if !math.IsNaN(Percentile(nil, 50)) {
		t.Error("Percentile of nothing is not NaN")
	}
}

func TestDescribe(t *testing.T) {
	d := Describe([]float64{4, 1, 3, 2})
	want := Dist{Count: 4, Mean: 2.5, P50: 2.5, P90: 3.7, P99: 3.97, Min: 1, Max: 4}
	if math.Abs(d.P99-want.P99) > 1e-9 || math.Abs(d.P90-want.P90) > 1e-9 {
		t.Fatalf("Describe = %+v, want %+v", d, want)
	}
	d.P90, d.P99 = want.P90, want.P99
	if d != want {
		t.Fatalf("Describe = %+v, want %+v", d, want)
	}
	if (Describe(nil) != Dist{}) {
		t.Fatal("Describe(nil) is not the zero Dist")
	}
	q := quantiles([]float64{0, 100})
	if len(q) != 101 || q[0] != 0 || q[37] != 37 || q[100] != 100 {
		t.Fatalf("quantiles = %v", q)
	}
}
