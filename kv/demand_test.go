package kv

import (
	"math"
	"testing"
	"time"
)

// TestPrefixDemand: note returns the earlier requests on a prefix, each weighing
// 2^(−age/DemandHalfLife); prefixes are counted apart; a retry (count false) reads the
// count without adding to it; after a clock that stepped back the decay restarts from
// the earlier time.
func TestPrefixDemand(t *testing.T) {
	const h = DemandHalfLife
	for _, tc := range []struct {
		name  string
		notes []struct {
			key uint64
			at  time.Duration
		}
		want []float64 // what each note returns
	}{
		{"first request", notes(1, 0), []float64{0}},
		{"same instant", notes(1, 0, 1, 0, 1, 0), []float64{0, 1, 2}},
		{"a half-life apart", notes(1, 0, 1, h, 1, 2*h), []float64{0, 0.5, 0.75}},
		{"prefixes apart", notes(1, 0, 2, 0, 1, 0, 2, h), []float64{0, 0, 1, 0.5}},
		{"the clock steps back", notes(1, h, 1, 0, 1, h), []float64{0, 1, 1}},
		{"a retry is not counted", notes(1, 0, -1, 0, 1, 0), []float64{0, 1, 1}},
		{"long forgotten", notes(1, 0, 1, 100*h), []float64{0, math.Exp2(-100)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var d prefixDemand
			for i, n := range tc.notes {
				// a negative key in the table is a retry of that prefix
				key, count := n.key, true
				if int64(key) < 0 {
					key, count = uint64(-int64(key)), false
				}
				if got := d.note(key, n.at, count); math.Abs(got-tc.want[i]) > 1e-12 {
					t.Errorf("note %d (%d at %v): %v, want %v", i, n.key, n.at, got, tc.want[i])
				}
			}
		})
	}
}

// notes builds a list of (key, at) pairs from alternating arguments.
func notes(kv ...any) []struct {
	key uint64
	at  time.Duration
} {
	var out []struct {
		key uint64
		at  time.Duration
	}
	for i := 0; i+1 < len(kv); i += 2 {
		var at time.Duration
		switch v := kv[i+1].(type) {
		case int:
			at = time.Duration(v)
		case time.Duration:
			at = v
		}
		out = append(out, struct {
			key uint64
			at  time.Duration
		}{uint64(int64(kv[i].(int))), at})
	}
	return out
}

// TestPrefixDemandBounded: many one-off prefixes are forgotten as their counts decay, and
// the table never holds more than about 2·demandMax, keeping the busiest prefix's count.
func TestPrefixDemandBounded(t *testing.T) {
	var d prefixDemand
	now := time.Duration(0)
	for i := 0; i < 3*demandMax; i++ {
		d.note(uint64(i)+1000, now, true)
		if i%64 == 0 {
			d.note(7, now, true) // a busy prefix
		}
		if len(d.m) > 2*demandMax+1 {
			t.Fatalf("after %d notes: %d prefixes tracked", i, len(d.m))
		}
		now += time.Microsecond
	}
	if n := d.note(7, now, false); n < 100 {
		t.Errorf("the busy prefix's demand %v after a sweep, want it kept", n)
	}
	// Ten minutes later every one-off prefix has decayed away at the next sweep.
	now += 10 * time.Minute
	d.sweep(now)
	if len(d.m) != 0 {
		t.Errorf("%d prefixes left after their counts decayed", len(d.m))
	}
}
