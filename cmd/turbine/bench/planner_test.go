package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/turbine-llm/turbine/bench"
)

// writeTrace writes a Mooncake trace of n requests, one every gap, each with prompt
// tokens of its own and osl output tokens.
func writeTrace(t *testing.T, n int, gap time.Duration, isl, osl int) string {
	t.Helper()
	var b strings.Builder
	blocks := (isl + bench.DefaultBlockTokens - 1) / bench.DefaultBlockTokens
	for i := range n {
		ids := make([]string, blocks)
		for k := range ids {
			ids[k] = fmt.Sprint(i*blocks + k)
		}
		fmt.Fprintf(&b, `{"timestamp":%d,"input_length":%d,"output_length":%d,"hash_ids":[%s]}`+"\n",
			(time.Duration(i) * gap).Milliseconds(), isl, osl, strings.Join(ids, ","))
	}
	path := filepath.Join(t.TempDir(), "trace.jsonl")
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestPlanFlagErrors: every ramp and planner flag error names its flag.
func TestPlanFlagErrors(t *testing.T) {
	trace := writeTrace(t, 50, time.Second, 100, 5)
	real := []string{"--model", "m", "--trace", trace}
	sim := []string{"--simulate", "--trace", trace}
	with := func(base []string, more ...string) []string { return append(append([]string{}, base...), more...) }
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--model", "m", "--rate", "1", "--ramp", "1,6,1"}, "--ramp: only with --trace"},
		{with(real, "--ramp", "1,6,1", "--time-scale", "2"), "--time-scale 2: not with --ramp"},
		{with(real, "--ramp", "1,x"), `--ramp "1,x", --ramp-duration 10m0s: ramp point 2 "x"`},
		{with(real, "--ramp", "1,6,1", "--ramp-duration", "0s"), "ramp duration 0s"},
		{with(real, "--ramp", "1,6,1", "--ramp-rate", "-1"), "--ramp-rate -1"},
		{with(real, "--ramp-duration", "1m"), "--ramp-duration 1m0s: only with --ramp"},
		{with(real, "--ramp-rate", "2"), "--ramp-rate 2: only with --ramp"},
		{with(real, "--ramp", "1,6,1", "--ramp-duration", "10s", "--ramp-rate", "10"), "needs 350 requests; the trace has 50"},
		{with(real, "--planner", "load"), "--planner: only with --simulate"},
		{with(real, "--gpu-budget", "4"), "--gpu-budget: only with --simulate"},
		{with(real, "--connector", "virtual"), "flag provided but not defined: -connector"},
		{with(sim, "--max-workers-per-node", "3"), "flag provided but not defined: -max-workers-per-node"},
		{with(sim, "--poll-planner", "1s"), "--poll-planner 1s: not with --simulate"},
		{with(real, "--poll-planner", "1ms"), "--poll-planner 1ms"},
		{with(real, "--poll-planner", "1s", "--fleet-workers", "3"), "--fleet-workers: not with --poll-planner"},
		{with(real, "--fleet-workers", "-1"), "--fleet-workers -1"},
		{with(real, "--interval-report", "-1s"), "--interval-report -1s"},
		{with(real, "--interval-report", "1s", "--itl-target", "0"), "--itl-target 0: want numbers of milliseconds above 0"},
		{with(sim, "--planner", "load", "--worker-startup", "-1s"), "--worker-startup -1s"},
		{with(sim, "--planner", "load", "--planner-settle", "-1s"), "--planner-settle -1s"},
		{with(sim, "--planner", "fast"), `--planner "fast": want load or sla`},
		{with(sim, "--planner", "sla"), "--planner sla needs --planner-profile"},
		{with(sim, "--planner", "load", "--workers", "9"), "--workers 9, --prefill-workers 0: a planned fleet starts with them, and --gpu-budget 8 allows at most 8 per pool"},
		{with(sim, "--planner", "load", "--min-workers", "0"), "--min-workers 0"},
	} {
		err := Run(context.Background(), with(tc.args, "--out", t.TempDir()), &bytes.Buffer{}, &bytes.Buffer{})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: %v, want an error with %q", tc.args, err, tc.want)
		}
	}
}

// TestSimulatePlannedRamp: --simulate --planner load on a ramp grows the fleet at the
// peak and shrinks it to the minimum afterwards; the summary, fleet.csv and
// intervals.csv say so.
func TestSimulatePlannedRamp(t *testing.T) {
	trace := writeTrace(t, 2000, 100*time.Millisecond, 200, 60)
	dir := t.TempDir()
	var stdout, stderr bytes.Buffer
	args := []string{"--simulate", "--trace", trace, "--workers", "1", "--block-size", "16", "--num-gpu-blocks", "128",
		"--max-model-len", "1024", "--ramp", "1,6,1", "--ramp-duration", "60s", "--ramp-rate", "3",
		"--planner", "load", "--planner-interval", "1s", "--gpu-budget", "6", "--worker-startup", "500ms", "--planner-settle", "30s",
		"--interval-report", "5s", "--ttft-target", "2000", "--itl-target", "100", "--out", dir, "--progress-interval", "0"}
	if err := Run(context.Background(), args, &stdout, &stderr); err != nil {
		t.Fatalf("%v\n%s", err, stderr.String())
	}
	s := readSummary(t, filepath.Join(dir, "summary.json"))
	if s.Requests != 630 || s.Failed != 0 { // 3/s × 60 s × a mean multiplier of 3.5
		t.Fatalf("%d requests, %d failed: want 630, none", s.Requests, s.Failed)
	}
	f, iv := s.Fleet, s.Intervals
	if f == nil || iv == nil {
		t.Fatalf("summary without a fleet (%v) or intervals (%v)", f, iv)
	}
	peak := 0
	for _, p := range f.Points {
		peak = max(peak, p.Ready)
	}
	if peak < 2 || peak > 6 || f.BackToMinS == nil || !strings.HasPrefix(f.Source, "simulated") || f.GPUSecondsRun <= 60 {
		t.Errorf("fleet: peak %d, back to the minimum %v, source %q, %v GPU-seconds: want 2 to 6 at the peak, back at 1, over 60",
			peak, f.BackToMinS, f.Source, f.GPUSecondsRun)
	}
	if iv.IntervalS != 5 || iv.Measured < 12 || iv.TTFTTargetMs != 2000 {
		t.Errorf("intervals %+v", iv)
	}
	for _, name := range []string{"fleet.csv", "intervals.csv"} {
		if b, err := os.ReadFile(filepath.Join(dir, name)); err != nil || bytes.Count(b, []byte("\n")) < 3 {
			t.Errorf("%s: %v", name, err)
		}
	}
	for _, want := range []string{"intervals of 5s within TTFT p90 ≤ 2000 ms and ITL p90 ≤ 100 ms", "fleet (simulated"} {
		if !strings.Contains(stdout.String(), want) {
			t.Errorf("stdout lacks %q:\n%s", want, stdout.String())
		}
	}
	if !strings.Contains(stderr.String(), "bench: planner load: ") {
		t.Errorf("stderr lacks the planner's line:\n%s", stderr.String())
	}

	// turbine bench fleet compares the run with itself: no difference.
	stdout.Reset()
	a := filepath.Join(dir, "summary.json")
	svg := filepath.Join(dir, "fleet.svg")
	if err := Run(context.Background(), []string{"fleet", a, a, "-o", svg}, &stdout, &stderr); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(stdout.String(), "mean absolute difference 0.000, at most 0") {
		t.Errorf("fleet comparison:\n%s", stdout.String())
	}
	if b, err := os.ReadFile(svg); err != nil || !bytes.Contains(b, []byte("Ready workers")) {
		t.Errorf("fleet.svg: %v", err)
	}
	if err := Run(context.Background(), []string{"fleet"}, &stdout, &stderr); err == nil {
		t.Error("fleet without summaries: no error")
	}
}

// plannerServer answers completions (one token each) and GET /admin/planner with a
// scripted fleet: a new decision every call, 3 workers for the first polls, then 1.
type plannerServer struct {
	polls atomic.Int64
	model atomic.Value
}

func (p *plannerServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == "/admin/planner" {
		n := p.polls.Add(1)
		p.model.Store(r.URL.Query().Get("model"))
		ready := 3
		if n > 4 {
			ready = 1
		}
		json.NewEncoder(w).Encode(map[string]any{"min_workers": 1, "decisions": n, "at": time.Now().UTC().Format(time.RFC3339Nano),
			"pools": []map[string]any{{"pool": "aggregated", "ready": ready, "starting": 0, "stopping": 0, "target": ready, "gpus_per_engine": 1}}})
		return
	}
	completions(nil)(w, r)
}

// TestPollPlanner: a real run with --poll-planner records the service's pools at each
// decision, keeps polling after the run until they are back at the minimum, and reports
// the GPU time.
func TestPollPlanner(t *testing.T) {
	ps := &plannerServer{}
	srv := httptest.NewServer(ps)
	defer srv.Close()
	dir := t.TempDir()
	var stdout, stderr bytes.Buffer
	args := []string{"--url", srv.URL, "--model", "mm", "--trace", "testdata/mini.jsonl", "--poll-planner", "20ms",
		"--planner-settle", "10s", "--interval-report", "1s", "--out", dir}
	start := time.Now()
	if err := Run(context.Background(), args, &stdout, &stderr); err != nil {
		t.Fatalf("%v\n%s", err, stderr.String())
	}
	if time.Since(start) > 5*time.Second {
		t.Errorf("the run took %v: the settle wait did not end at the minimum", time.Since(start))
	}
	s := readSummary(t, filepath.Join(dir, "summary.json"))
	f := s.Fleet
	if f == nil || len(f.Points) < 5 || f.Points[0].Ready != 3 || f.Points[len(f.Points)-1].Ready != 1 || f.BackToMinS == nil {
		t.Fatalf("fleet %+v: want points from 3 ready down to 1, back at the minimum", f)
	}
	if !strings.HasPrefix(f.Source, "GET /admin/planner every 20ms") || ps.model.Load() != "mm" {
		t.Errorf("source %q, model %v", f.Source, ps.model.Load())
	}
	if !strings.Contains(stderr.String(), "bench: planner polled") {
		t.Errorf("stderr:\n%s", stderr.String())
	}
}

// TestPollPlannerRefused: a service without a planner answers every poll with an
// error: the run still succeeds, says so, and has no fleet.
func TestPollPlannerRefused(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/admin/planner" {
			http.Error(w, `{"error":{"message":"No planner runs in this cluster"}}`, http.StatusServiceUnavailable)
			return
		}
		completions(nil)(w, r)
	}))
	defer srv.Close()
	dir := t.TempDir()
	var stderr bytes.Buffer
	args := []string{"--url", srv.URL, "--model", "m", "--trace", "testdata/mini.jsonl", "--poll-planner", "20ms",
		"--planner-settle", "200ms", "--out", dir}
	if err := Run(context.Background(), args, &bytes.Buffer{}, &stderr); err != nil {
		t.Fatal(err)
	}
	if s := readSummary(t, filepath.Join(dir, "summary.json")); s.Fleet != nil {
		t.Errorf("a fleet without a planner: %+v", s.Fleet)
	}
	if !strings.Contains(stderr.String(), "polls failed (last: HTTP 503") {
		t.Errorf("stderr:\n%s", stderr.String())
	}
}

// TestStaticFleet: --fleet-workers records a static layout for the GPU-time comparison;
// a planner's variable from the environment (serve's, in the same shell) does not turn
// a real run into a simulated planner's.
func TestStaticFleet(t *testing.T) {
	t.Setenv("TURBINE_PLANNER", "load")
	srv := server(t)
	defer srv.Close()
	dir := t.TempDir()
	args := []string{"--url", srv.URL, "--model", "m", "--trace", "testdata/mini.jsonl", "--fleet-workers", "4", "--out", dir}
	if err := Run(context.Background(), args, &bytes.Buffer{}, &bytes.Buffer{}); err != nil {
		t.Fatal(err)
	}
	s := readSummary(t, filepath.Join(dir, "summary.json"))
	if f := s.Fleet; f == nil || f.Source != "static: 4 workers" || f.GPUSecondsRun != 4*s.DurationS {
		t.Fatalf("fleet %+v, duration %v: want 4 workers throughout", f, s.DurationS)
	}
}
