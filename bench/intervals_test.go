package bench

import (
	"bytes"
	"math"
	"strings"
	"testing"
	"time"
)

func msd(x float64) time.Duration { return time.Duration(x * float64(time.Millisecond)) }

// TestIntervals: samples fall in the interval of their token, failures in that of their
// end; an interval is within when each p90 it has meets its target and nothing failed.
func TestIntervals(t *testing.T) {
	o := Outcome{Results: []Result{
		// Interval 0: TTFT 100 and 300 ms; gaps of 10 ms at 0.11 and 0.12 s.
		{Start: 0, TTFT: msd(100), ITL: []time.Duration{msd(10), msd(10)}, E2E: msd(120)},
		{Start: msd(200), TTFT: msd(300), E2E: msd(300)},
		// Interval 1: a TTFT of 900 ms (over the 500 ms target) and a gap at 1.7 s; its
		// second gap, of 300 ms (over 50), ends at 2 s.
		{Start: msd(600), TTFT: msd(900), ITL: []time.Duration{msd(200), msd(300)}, E2E: msd(1400)},
		// Interval 3: one failure.
		{Start: msd(3100), E2E: msd(100), Error: ErrTimeout},
		// Interval 5: fine.
		{Start: msd(5000), TTFT: msd(50), ITL: []time.Duration{msd(20)}, E2E: msd(70)},
	}}
	rep, err := Intervals(o, time.Second, 500, 50)
	if err != nil {
		t.Fatal(err)
	}
	want := []Interval{
		{StartS: 0, TTFTs: 2, ITLs: 2, TTFTP90Ms: 280, ITLP90Ms: 10, Within: true},
		{StartS: 1, TTFTs: 1, ITLs: 1, TTFTP90Ms: 900, ITLP90Ms: 200},
		{StartS: 2, ITLs: 1, ITLP90Ms: 300},
		{StartS: 3, Failed: 1},
		{StartS: 4},
		{StartS: 5, TTFTs: 1, ITLs: 1, TTFTP90Ms: 50, ITLP90Ms: 20, Within: true},
	}
	if len(rep.Intervals) != len(want) {
		t.Fatalf("%d intervals, want %d: %+v", len(rep.Intervals), len(want), rep.Intervals)
	}
	for k, w := range want {
		g := rep.Intervals[k]
		if math.Abs(g.TTFTP90Ms-w.TTFTP90Ms) > 1e-9 || math.Abs(g.ITLP90Ms-w.ITLP90Ms) > 1e-9 {
			t.Errorf("interval %d p90s %v, %v: want %v, %v", k, g.TTFTP90Ms, g.ITLP90Ms, w.TTFTP90Ms, w.ITLP90Ms)
		}
		g.TTFTP90Ms, g.ITLP90Ms, w.TTFTP90Ms, w.ITLP90Ms = 0, 0, 0, 0
		if g != w {
			t.Errorf("interval %d = %+v, want %+v", k, g, w)
		}
	}
	if rep.Measured != 5 || rep.Within != 2 || math.Abs(rep.WithinFraction-0.4) > 1e-12 {
		t.Errorf("measured %d, within %d (%v): want 5, 2, 0.4", rep.Measured, rep.Within, rep.WithinFraction)
	}
	if err := rep.check(); err != nil {
		t.Errorf("check: %v", err)
	}
	var buf bytes.Buffer
	if err := WriteIntervalsCSV(&buf, rep); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 7 || lines[4] != "3.000,0,0,1,,,false" || lines[5] != "4.000,0,0,0,,," {
		t.Errorf("CSV:\n%s", buf.String())
	}
}

func TestIntervalsErrors(t *testing.T) {
	o := Outcome{Results: []Result{{Start: time.Hour, TTFT: time.Millisecond, E2E: time.Millisecond}}}
	for _, tc := range []struct {
		interval  time.Duration
		ttft, itl float64
		want      string
	}{
		{0, 500, 50, "interval 0s"},
		{time.Second, 0, 50, "TTFT target 0 ms"},
		{time.Second, 500, math.NaN(), "ITL target NaN ms"},
		{time.Millisecond, 500, 50, "want at most 100000"},
	} {
		if _, err := Intervals(o, tc.interval, tc.ttft, tc.itl); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Intervals(%v, %v, %v) = %v, want an error with %q", tc.interval, tc.ttft, tc.itl, err, tc.want)
		}
	}
}

func TestIntervalReportCheck(t *testing.T) {
	good := func() IntervalReport {
		r, err := Intervals(Outcome{Results: []Result{{TTFT: msd(10), E2E: msd(10)}}}, time.Second, 500, 50)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	for _, tc := range []struct {
		name string
		edit func(*IntervalReport)
		want string
	}{
		{"interval", func(r *IntervalReport) { r.IntervalS = 0 }, "interval_s"},
		{"target", func(r *IntervalReport) { r.ITLTargetMs = math.Inf(1) }, "targets"},
		{"counts", func(r *IntervalReport) { r.Intervals[0].TTFTs = -1 }, "negative counts"},
		{"p90", func(r *IntervalReport) { r.Intervals[0].TTFTP90Ms = math.NaN() }, "ttft_p90_ms"},
		{"within", func(r *IntervalReport) { r.Within = 0 }, "do not match"},
		{"fraction", func(r *IntervalReport) { r.WithinFraction = 0.5 }, "within_fraction"},
	} {
		r := good()
		if err := r.check(); err != nil {
			t.Fatalf("good: %v", err)
		}
		tc.edit(&r)
		if err := r.check(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error with %q", tc.name, err, tc.want)
		}
	}
}
