package bench

import (
	"math"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestParseRamp(t *testing.T) {
	for _, tc := range []struct {
		spec string
		d    time.Duration
		want []RampPoint
	}{
		{"1,6,1", 10 * time.Minute, []RampPoint{{0, 1}, {5 * time.Minute, 6}, {10 * time.Minute, 1}}},
		{" 1 , 2 ,3,4 ", 3 * time.Second, []RampPoint{{0, 1}, {time.Second, 2}, {2 * time.Second, 3}, {3 * time.Second, 4}}},
		{"2", time.Minute, []RampPoint{{0, 2}, {time.Minute, 2}}},
		{"0s:1,4m:6,6m:6,10m:1", 10 * time.Minute, []RampPoint{{0, 1}, {4 * time.Minute, 6}, {6 * time.Minute, 6}, {10 * time.Minute, 1}}},
		{"0s:0,1m:1", time.Minute, []RampPoint{{0, 0}, {time.Minute, 1}}},
	} {
		r, err := ParseRamp(tc.spec, tc.d)
		if err != nil {
			t.Errorf("ParseRamp(%q): %v", tc.spec, err)
			continue
		}
		if !slices.Equal(r.Points, tc.want) || r.Duration != tc.d {
			t.Errorf("ParseRamp(%q) = %v over %v, want %v", tc.spec, r.Points, r.Duration, tc.want)
		}
		back, err := ParseRamp(r.String(), r.Duration) // String round-trips
		if err != nil || !slices.Equal(back.Points, r.Points) {
			t.Errorf("ParseRamp(%q.String() = %q) = %v, %v", tc.spec, r.String(), back.Points, err)
		}
	}
}

func TestParseRampErrors(t *testing.T) {
	for _, tc := range []struct {
		spec string
		d    time.Duration
		want string
	}{
		{"", time.Minute, "want 1 to 1000"},
		{"1,x,1", time.Minute, `ramp point 2 "x": multiplier "x": want a number`},
		{"1,-1,1", time.Minute, "ramp point 2: multiplier -1: want 0 to"},
		{"1,NaN", time.Minute, "multiplier NaN"},
		{"1,+Inf", time.Minute, "multiplier +Inf"},
		{"0,0", time.Minute, "every multiplier is 0"},
		{"0s:1,2", time.Minute, "give every point as TIME:MULT, or none"},
		{"1s:1,1m:2", time.Minute, "the first point must be at 0s"},
		{"0s:1,30s:2", time.Minute, "the last point must be at the ramp's duration, 1m0s"},
		{"0s:1,40s:2,30s:2,1m:1", time.Minute, "ramp point 3 at 30s: not after point 2"},
		{"0s:1,x:2", time.Minute, `time "x": want a duration`},
		{"1,6,1", 0, "ramp duration 0s"},
		{"1,6,1", MaxArrival + time.Second, "ramp duration"},
		{strings.Repeat("1,", MaxRampPoints) + "1", time.Minute, "want 1 to 1000"},
	} {
		_, err := ParseRamp(tc.spec, tc.d)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("ParseRamp(%.40q, %v) = %v, want an error with %q", tc.spec, tc.d, err, tc.want)
		}
	}
}

// uniform is n requests one per gap, each with its own lengths and hash id.
func uniform(n int, gap time.Duration) []Request {
	reqs := make([]Request, n)
	for i := range reqs {
		reqs[i] = Request{Arrival: time.Duration(i) * gap, InputLength: 100 + i, OutputLength: 1 + i%7, HashIDs: []int64{int64(i)}}
	}
	return reqs
}

// TestRampRateFollowsMultiplier: a uniform trace warped by 1,6,1 arrives in each window
// at the base rate times the window's mean multiplier.
func TestRampRateFollowsMultiplier(t *testing.T) {
	r, err := ParseRamp("1,6,1", 100*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if got := r.Area(); math.Abs(got-350) > 1e-9 { // 100 s at a mean of 3.5×
		t.Fatalf("Area = %v, want 350", got)
	}
	const rate = 4.0 // requests/s at 1×
	out, err := r.Apply(uniform(5000, 100*time.Millisecond), rate)
	if err != nil {
		t.Fatal(err)
	}
	if len(out) != 1400 {
		t.Fatalf("%d requests, want rate × area = 1400", len(out))
	}
	const win = 10 * time.Second
	counts := make([]int, 10)
	for i, q := range out {
		if i > 0 && q.Arrival < out[i-1].Arrival {
			t.Fatalf("request %d arrives at %v, before request %d at %v", i, q.Arrival, i-1, out[i-1].Arrival)
		}
		if q.InputLength != 100+i || q.OutputLength != 1+i%7 || q.HashIDs[0] != int64(i) {
			t.Fatalf("request %d = %+v: lengths or hash ids changed", i, q)
		}
		counts[min(int(q.Arrival/win), 9)]++
	}
	for k, c := range counts {
		// The mean multiplier over [k·10 s, (k+1)·10 s): the ramp is linear there.
		a, b := time.Duration(k)*win, time.Duration(k+1)*win
		want := rate * win.Seconds() * (r.Mult(a) + r.Mult(b)) / 2
		if math.Abs(float64(c)-want) > 1.5 {
			t.Errorf("window %d (%v to %v): %d requests, want %.1f", k, a, b, c, want)
		}
	}
	if out[0].Arrival != 0 || out[len(out)-1].Arrival >= r.Duration {
		t.Errorf("arrivals from %v to %v: want from 0 and before %v", out[0].Arrival, out[len(out)-1].Arrival, r.Duration)
	}
}

// TestRampKeepsBursts: a constant ramp scales the trace's time linearly, so requests
// that arrived together still do, and gaps keep their proportions.
func TestRampKeepsBursts(t *testing.T) {
	trace := []Request{{Arrival: 0}, {Arrival: 0}, {Arrival: 3 * time.Second}, {Arrival: 3 * time.Second}, {Arrival: 4 * time.Second}, {Arrival: 9 * time.Second}}
	r, err := ParseRamp("1", 60*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	out, err := r.Apply(trace, 0)
	if err != nil {
		t.Fatal(err)
	}
	// Span 9 s × 6/5 = 10.8 s maps to 60 s: times × 60/10.8.
	for i, q := range out {
		want := time.Duration(float64(trace[i].Arrival) * 60 / 10.8)
		if d := q.Arrival - want; d < -time.Microsecond || d > time.Microsecond {
			t.Errorf("request %d at %v, want %v", i, q.Arrival, want)
		}
	}
	if trace[2].Arrival != 3*time.Second {
		t.Error("Apply changed its input")
	}
}

// TestRampPause: no request arrives where the multiplier is 0.
func TestRampPause(t *testing.T) {
	r, err := ParseRamp("0s:2,10s:2,10.001s:0,20s:0,20.001s:2,30s:2", 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	out, err := r.Apply(uniform(1000, time.Second), 0)
	if err != nil {
		t.Fatal(err)
	}
	for i, q := range out {
		if q.Arrival > 10002*time.Millisecond && q.Arrival < 20*time.Second {
			t.Errorf("request %d arrives at %v, in the pause", i, q.Arrival)
		}
	}
}

func TestRampApplyErrors(t *testing.T) {
	r, err := ParseRamp("1,6,1", 100*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		trace []Request
		rate  float64
		want  string
	}{
		{"too few", uniform(100, time.Second), 1, "needs 350 requests; the trace has 100"},
		{"negative rate", uniform(100, time.Second), -1, "ramp rate -1"},
		{"infinite rate", uniform(100, time.Second), math.Inf(1), "ramp rate +Inf"},
		{"empty", nil, 0, "no request to send"},
		{"rounds to none", uniform(10, time.Second), 0.001, "no request to send"},
		{"out of order", []Request{{Arrival: time.Second}, {Arrival: 0}}, 0, "request 1 arrives before request 0"},
	} {
		if _, err := r.Apply(tc.trace, tc.rate); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: Apply = %v, want an error with %q", tc.name, err, tc.want)
		}
	}
	if _, err := (Ramp{Duration: time.Second, Points: []RampPoint{{0, 1}}}).Apply(uniform(3, time.Second), 0); err == nil {
		t.Error("Apply of a one-point ramp: no error")
	}
}

// TestRampInverse: at inverts the cumulative multiplier on every kind of segment.
func TestRampInverse(t *testing.T) {
	r, err := ParseRamp("0s:0,10s:5,20s:5,30s:1,40s:0", 40*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	cum := func(t time.Duration) float64 { // numeric integral of Mult
		const steps = 20000
		var s float64
		for k := range steps {
			s += r.Mult(time.Duration((float64(k)+0.5)/steps*float64(t))) * t.Seconds() / steps
		}
		return s
	}
	for _, y := range []float64{0, 1, 25, 30, 74.9, 75, 100, 104.9, 105, 108, r.Area()} {
		at := r.at(y)
		if got := cum(at); math.Abs(got-y) > 1e-3*math.Max(1, y) {
			t.Errorf("at(%v) = %v, whose cumulative multiplier is %v", y, at, got)
		}
	}
}

func FuzzParseRamp(f *testing.F) {
	for _, s := range []string{"1,6,1", "0s:1,5m:6,10m:1", "2", "0,0", "1e300", "0s:1,1ns:2,10m:1"} {
		f.Add(s, int64(10*time.Minute))
	}
	f.Fuzz(func(t *testing.T, spec string, d int64) {
		r, err := ParseRamp(spec, time.Duration(d))
		if err != nil {
			return
		}
		if err := r.Validate(); err != nil {
			t.Fatalf("ParseRamp(%q) gave an invalid ramp: %v", spec, err)
		}
		out, err := r.Apply(uniform(50, time.Second), 0)
		if err != nil {
			t.Fatalf("Apply: %v", err)
		}
		for i, q := range out {
			if q.Arrival < 0 || q.Arrival > r.Duration || i > 0 && q.Arrival < out[i-1].Arrival {
				t.Fatalf("request %d at %v: outside 0 to %v or out of order", i, q.Arrival, r.Duration)
			}
		}
	})
}
