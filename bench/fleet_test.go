package bench

import (
	"bytes"
	"io"
	"math"
	"slices"
	"strings"
	"testing"
	"time"
)

// rampFleet is one aggregated pool: 1 worker, 2 more asked for at 10 s (ready at 12 s),
// both drained at 40 s (stopped at 45 s), the run's last answer at 42 s, the series
// ending at 60 s.
func rampFleet() []FleetPoint {
	return []FleetPoint{
		{AtS: 0, Pool: "aggregated", Ready: 1, Target: 1},
		{AtS: 10, Pool: "aggregated", Ready: 1, Starting: 2, Target: 3},
		{AtS: 12, Pool: "aggregated", Ready: 3, Target: 3},
		{AtS: 40, Pool: "aggregated", Ready: 1, Stopping: 2, Target: 1},
		{AtS: 45, Pool: "aggregated", Ready: 1, Target: 1},
	}
}

func TestFleetReport(t *testing.T) {
	r := NewFleetReport("simulated", 1, nil, rampFleet(), 60, 42)
	if r.GPUSeconds != 60+2*35 || r.GPUSecondsRun != 42+2*32 {
		t.Errorf("GPU-seconds %v over the series, %v over the run: want 130, 106", r.GPUSeconds, r.GPUSecondsRun)
	}
	if r.BackToMinS == nil || *r.BackToMinS != 3 {
		t.Errorf("back to the minimum %v s after the last answer, want 3", r.BackToMinS)
	}
	if got := r.Ready(11); got != 1 {
		t.Errorf("Ready(11) = %d, want 1", got)
	}
	if got := r.Ready(12); got != 3 {
		t.Errorf("Ready(12) = %d, want 3", got)
	}
	// Already at the minimum when the run ended: 0; never back: absent.
	if r := NewFleetReport("s", 1, nil, rampFleet(), 60, 50); r.BackToMinS == nil || *r.BackToMinS != 0 {
		t.Errorf("back at the minimum before the end: %v, want 0", r.BackToMinS)
	}
	pts := rampFleet()[:4]
	if r := NewFleetReport("s", 1, nil, pts, 60, 42); r.BackToMinS != nil {
		t.Errorf("never back at the minimum: %v, want absent", *r.BackToMinS)
	}
	// Two pools: prefill GPUs count 2 each; back at the minimum only once both are.
	two := []FleetPoint{
		{AtS: 0, Pool: "prefill", Ready: 1, Target: 1}, {AtS: 0, Pool: "decode", Ready: 1, Target: 1},
		{AtS: 5, Pool: "decode", Ready: 2, Target: 2},
		{AtS: 20, Pool: "prefill", Ready: 2, Target: 2},
		{AtS: 30, Pool: "decode", Ready: 1, Target: 1},
		{AtS: 35, Pool: "prefill", Ready: 1, Target: 1},
	}
	r2 := NewFleetReport("s", 1, map[string]int{"prefill": 2}, two, 40, 25)
	if want := 2*(20+2*15+5) + (5 + 2*25 + 10); r2.GPUSeconds != float64(want) {
		t.Errorf("two pools: %v GPU-seconds, want %d", r2.GPUSeconds, want)
	}
	if r2.BackToMinS == nil || *r2.BackToMinS != 10 {
		t.Errorf("two pools back at the minimum %v s after the run, want 10", r2.BackToMinS)
	}
	if err := r2.check(); err != nil {
		t.Error(err)
	}
	var buf bytes.Buffer
	if err := WriteFleetCSV(&buf, r2); err != nil {
		t.Fatal(err)
	}
	if lines := strings.Split(strings.TrimSpace(buf.String()), "\n"); len(lines) != 7 || lines[3] != "5.000,decode,2,0,0,2" {
		t.Errorf("CSV:\n%s", buf.String())
	}
}

func TestFleetDifference(t *testing.T) {
	a := NewFleetReport("a", 1, nil, rampFleet(), 60, 42)
	b := rampFleet()
	for i := range b { // the same fleet, ready 2 s later
		if b[i].AtS > 0 {
			b[i].AtS += 2
		}
	}
	br := NewFleetReport("b", 1, nil, b, 60, 42)
	mean, most, n, err := FleetDifference(&a, &br, 1)
	if err != nil {
		t.Fatal(err)
	}
	// At 12 and 13 s a has 3 ready, b 1; at 40 and 41 s a has 1, b 3.
	if n != 61 || most != 2 || math.Abs(mean-8.0/61) > 1e-12 {
		t.Errorf("difference: mean %v, most %d over %d instants: want %v, 2, 61", mean, most, n, 8.0/61)
	}
	if _, _, _, err := FleetDifference(&a, &br, 0); err == nil {
		t.Error("step 0: no error")
	}
}

func TestFleetReportCheck(t *testing.T) {
	for _, tc := range []struct {
		name string
		edit func(*FleetReport)
		want string
	}{
		{"pool", func(r *FleetReport) { r.Points[1].Pool = "mixed" }, `pool "mixed"`},
		{"counts", func(r *FleetReport) { r.Points[1].Ready = -1 }, "negative counts"},
		{"order", func(r *FleetReport) { r.Points[2].AtS = 1 }, "want time order"},
		{"time", func(r *FleetReport) { r.Points[0].AtS = math.NaN() }, "at_s NaN"},
		{"gpus", func(r *FleetReport) { r.GPUsPerWorker = map[string]int{"decode": 100} }, "gpus_per_worker"},
		{"end", func(r *FleetReport) { r.EndS = -1 }, "end_s"},
		{"source", func(r *FleetReport) { r.Source = "a\x00b" }, "control character"},
	} {
		r := NewFleetReport("s", 1, nil, rampFleet(), 60, 42)
		tc.edit(&r)
		if err := r.check(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error with %q", tc.name, err, tc.want)
		}
	}
}

// TestSummaryWithFleetRoundTrips: a summary with intervals and a fleet reads back, and
// one whose fleet is damaged is refused.
func TestSummaryWithFleetRoundTrips(t *testing.T) {
	o := Outcome{Results: []Result{{TTFT: msd(10), ITL: []time.Duration{msd(5)}, E2E: msd(15)}}, Duration: msd(15)}
	s := Summarize(o)
	rep, err := Intervals(o, time.Second, 500, 50)
	if err != nil {
		t.Fatal(err)
	}
	f := NewFleetReport("simulated", 1, nil, rampFleet(), 60, 42)
	s.Intervals, s.Fleet = &rep, &f
	var buf bytes.Buffer
	if err := WriteSummary(&buf, s); err != nil {
		t.Fatal(err)
	}
	back, err := ReadSummary(bytes.NewReader(buf.Bytes()), "s.json")
	if err != nil {
		t.Fatal(err)
	}
	if back.Fleet == nil || len(back.Fleet.Points) != 5 || back.Intervals == nil || back.Intervals.Within != 1 {
		t.Errorf("read back: fleet %+v, intervals %+v", back.Fleet, back.Intervals)
	}
	bad := strings.Replace(buf.String(), `"pool": "aggregated"`, `"pool": "nonesuch"`, 1)
	if _, err := ReadSummary(strings.NewReader(bad), "s.json"); err == nil || !strings.Contains(err.Error(), "nonesuch") {
		t.Errorf("a damaged fleet: %v, want an error naming the pool", err)
	}
}

func TestPlotFleet(t *testing.T) {
	o := Outcome{Results: []Result{{TTFT: msd(10), ITL: []time.Duration{msd(5)}, E2E: msd(15)}}, Duration: msd(15)}
	rep, err := Intervals(o, time.Second, 500, 50)
	if err != nil {
		t.Fatal(err)
	}
	f := NewFleetReport("simulated", 1, nil, rampFleet(), 60, 42)
	runs := []Summary{{Label: "real", Fleet: &f, Intervals: &rep}, {Label: "sim <&>", Fleet: &f}}
	var buf bytes.Buffer
	if err := PlotFleet(&buf, runs, "svg"); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"Ready workers", "TTFT p90 per interval", "real", "sim &lt;&amp;&gt;"} {
		if !strings.Contains(buf.String(), want) {
			t.Errorf("the SVG lacks %q", want)
		}
	}
	if err := PlotFleet(&buf, []Summary{{Label: "plain"}}, "svg"); err == nil {
		t.Error("a summary without fleet or intervals: no error")
	}
	if err := PlotFleet(&buf, runs, "gif"); err == nil {
		t.Error("format gif: no error")
	}
	want := []float64{0, 1, 12, 1, 12, 3, 40, 3, 40, 1, 60, 1}
	got := readySteps(&f)
	var flat []float64
	for _, p := range got {
		flat = append(flat, p.X, p.Y)
	}
	if !slices.Equal(flat, want) {
		t.Errorf("ready steps %v, want %v", flat, want)
	}
}

// FuzzReadSummaryFleet: a summary file's intervals and fleet are outside input: reading
// one never panics, and what ReadSummary accepts can be measured, compared and plotted.
func FuzzReadSummaryFleet(f *testing.F) {
	o := Outcome{Results: []Result{{TTFT: msd(10), ITL: []time.Duration{msd(5)}, E2E: msd(15)}}, Duration: msd(15)}
	s := Summarize(o)
	rep, _ := Intervals(o, time.Second, 500, 50)
	fl := NewFleetReport("simulated", 1, map[string]int{"decode": 2}, rampFleet(), 60, 42)
	s.Intervals, s.Fleet = &rep, &fl
	var buf bytes.Buffer
	if err := WriteSummary(&buf, s); err != nil {
		f.Fatal(err)
	}
	f.Add(buf.Bytes())
	f.Add([]byte(`{"requests":0,"succeeded":0,"failed":0,"fleet":{"points":[{"at_s":1e300,"pool":"decode"}],"end_s":1}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		s, err := ReadSummary(bytes.NewReader(data), "f.json")
		if err != nil || s.Fleet == nil {
			return
		}
		s.Fleet.GPUSecondsBetween(0, s.Fleet.EndS)
		if _, _, _, err := FleetDifference(s.Fleet, s.Fleet, math.Max(s.Fleet.EndS/1000, 1)); err != nil {
			t.Fatalf("FleetDifference of an accepted fleet: %v", err)
		}
		if err := PlotFleet(io.Discard, []Summary{s}, "svg"); err != nil && len(s.Fleet.Points) > 0 {
			t.Fatalf("PlotFleet of an accepted summary: %v", err)
		}
	})
}
