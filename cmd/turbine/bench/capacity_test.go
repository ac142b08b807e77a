package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/turbine-llm/turbine/bench"
)

func TestRenderCapacityGolden(t *testing.T) {
	probes := func(n int) []ProbeRow {
		p := make([]ProbeRow, n)
		for i := range p {
			p[i].Succeeded = 300
		}
		return p
	}
	none := probes(5)
	none[4].Succeeded = 0
	c := Comparison{
		Workload:             "mooncake.jsonl (300 requests), time scale searched from 1",
		Fleet:                "simulated, 8 workers; mock engines: block size 64",
		HitRateCeiling:       ptr(0.37363),
		HitRateCeilingPooled: ptr(0.27312),
		PooledCacheTokens:    8388608,
		Capacity: &CapacitySweep{SLO: "ttft-p99=3s", Precision: 0.02, StartTimeScale: 1, BaseRPS: 3.4015, Rows: []CapacityRow{
			{Mode: "kv", Outcome: bench.CapacityFound, CapacityRPS: 23.0412, TimeScale: 0.147627, FailedRPS: 23.4, RatioToRoundRobin: ptr(1.50596),
				Probe: 8, HitRate: ptr(0.18894), TTFTP50: 301.25, TTFTP99: 2987.5, StartHitRate: ptr(0.20212), Probes: probes(10)},
			{Mode: "round-robin", Outcome: bench.CapacityFound, CapacityRPS: 15.3, TimeScale: 0.2223, FailedRPS: 15.5, RatioToRoundRobin: ptr(1),
				Probe: 6, HitRate: ptr(0.0812), TTFTP50: 274, TTFTP99: 2999.9, StartHitRate: ptr(0.0822), Probes: probes(9)},
			{Mode: "random", Outcome: bench.CapacityNoneFailed, CapacityRPS: 222918.8, TimeScale: 1.0 / 65536, Probe: 16,
				HitRate: ptr(0), TTFTP50: 20, TTFTP99: 40, StartHitRate: ptr(0), Probes: probes(17)},
			{Mode: "cache-aware", Outcome: bench.CapacityNonePassed, FailedRPS: 0.2126, Probe: 4, StartHitRate: ptr(0.17), Probes: none},
		}},
	}
	got := RenderCapacity(c)
	path := filepath.Join("testdata", "capacity.golden.md")
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run with -update to create it)", err)
	}
	if got != string(want) {
		t.Fatalf("table differs from %s (run with -update after an intended change):\n%s", path, got)
	}
}

// capacityArgs are the flags of a simulated capacity sweep of testdata/mini.jsonl (3
// requests within 4 ms: 750 requests/s at time scale 1) on two workers.
func capacityArgs(out, slo, modes string) []string {
	return []string{"compare", "--simulate", "--find-capacity", "--slo", slo, "--trace", "testdata/mini.jsonl", "--workers", "2",
		"--block-size", "16", "--num-gpu-blocks", "256", "--max-model-len", "2048", "--modes", modes, "--out", out,
		"--progress-interval", "0"}
}

// readComparison reads compare.json and checks that compare.md is the table on stdout.
func readComparison(t *testing.T, out, stdout string) Comparison {
	t.Helper()
	var cmp Comparison
	b, err := os.ReadFile(filepath.Join(out, "compare.json"))
	if err != nil || json.Unmarshal(b, &cmp) != nil {
		t.Fatalf("compare.json: %v %s", err, b)
	}
	md, err := os.ReadFile(filepath.Join(out, "compare.md"))
	if err != nil || !strings.HasPrefix(stdout, string(md)) || cmp.Capacity == nil || RenderCapacity(cmp) != string(md) {
		t.Fatalf("compare.md (%v) is not the table on stdout, nor that of compare.json:\n%s\n---\n%s", err, md, stdout)
	}
	return cmp
}

// TestCompareFindCapacitySimulate sweeps simulated fleets to each outcome: an SLO that
// holds at the start's rate and not at sixteen times it (found), one that always holds,
// one that never does. Every probe's run is kept; the row's figures are its run's.
func TestCompareFindCapacitySimulate(t *testing.T) {
	const rate1 = 3 / 0.004 // mini.jsonl's rate at time scale 1
	for _, tc := range []struct {
		slo, outcome string
	}{
		{"ttft-p99=45ms", bench.CapacityFound}, // TTFT p99 is about 54 ms at time scale 1, 30 ms at 16
		{"ttft-p99=1h,e2e-max=1h", bench.CapacityNoneFailed},
		{"ttft-p50=1ms", bench.CapacityNonePassed},
	} {
		t.Run(tc.slo, func(t *testing.T) {
			out := t.TempDir()
			var stdout, stderr bytes.Buffer
			if err := Run(context.Background(), capacityArgs(out, tc.slo, "round-robin,kv"), &stdout, &stderr); err != nil {
				t.Fatalf("%v\n%s", err, stderr.String())
			}
			cmp := readComparison(t, out, stdout.String())
			sw := cmp.Capacity
			slo, err := bench.ParseSLO(tc.slo)
			if err != nil {
				t.Fatal(err)
			}
			if sw.SLO != slo.String() || sw.Precision != DefaultCapacityPrecision || sw.StartTimeScale != 1 || math.Abs(sw.BaseRPS-rate1) > 1e-6 ||
				len(sw.Rows) != 2 || len(cmp.Rows) != 2 || cmp.HitRateCeilingPooled == nil || cmp.PooledCacheTokens != 2*256*16 {
				t.Fatalf("comparison %+v, sweep %+v", cmp, sw)
			}
			rr := sw.Rows[0]
			if rr.Mode != "round-robin" || rr.Outcome != tc.outcome {
				t.Fatalf("round-robin: %+v: want outcome %s", rr, tc.outcome)
			}
			for i, row := range sw.Rows {
				checkCapacityRow(t, out, row, rate1)
				if cmp.Rows[i].Mode != row.Mode || cmp.Rows[i].TTFTP99 != row.TTFTP99 {
					t.Errorf("compare row %+v is not the run at capacity of %+v", cmp.Rows[i], row)
				}
				wantRatio := row.CapacityRPS / rr.CapacityRPS
				switch {
				case rr.CapacityRPS == 0 || row.CapacityRPS == 0:
					if row.RatioToRoundRobin != nil {
						t.Errorf("%s: ratio %v without two capacities", row.Mode, *row.RatioToRoundRobin)
					}
				case row.RatioToRoundRobin == nil || math.Abs(*row.RatioToRoundRobin-wantRatio) > 1e-12:
					t.Errorf("%s: ratio %v, want %v", row.Mode, row.RatioToRoundRobin, wantRatio)
				}
			}
			if !strings.Contains(stderr.String(), "bench: mode round-robin: probe 1: time scale 1 (750 requests/s): ") {
				t.Errorf("stderr has no line per probe:\n%s", stderr.String())
			}
		})
	}
}

// checkCapacityRow checks a row against its probes and their files.
func checkCapacityRow(t *testing.T, out string, row CapacityRow, rate1 float64) {
	t.Helper()
	if len(row.Probes) == 0 || len(row.Probes) > bench.MaxCapacityProbes(DefaultCapacityPrecision, capacityMaxSteps) {
		t.Fatalf("%s: %d probes", row.Mode, len(row.Probes))
	}
	for i, p := range row.Probes {
		if p.Dir != fmt.Sprintf("%s/probe-%02d", row.Mode, i+1) || math.Abs(p.RPS-rate1/p.TimeScale) > 1e-6*p.RPS {
			t.Fatalf("%s: probe %d %+v", row.Mode, i+1, p)
		}
		s := readSummary(t, filepath.Join(out, p.Dir, "summary.json"))
		if s.Label != row.Mode || s.TTFT.P99 != p.TTFTP99 || s.Failed != p.Failed || s.HitRateCeilingPooled == nil ||
			!strings.Contains(s.Workload, fmt.Sprintf("time scale %.6g", p.TimeScale)) {
			t.Fatalf("%s: probe %d: summary %+v does not match %+v", row.Mode, i+1, s, p)
		}
	}
	at := row.Probes[row.Probe]
	same := func(a, b *float64) bool { return a == nil && b == nil || a != nil && b != nil && *a == *b }
	if !same(row.HitRate, at.HitRate) || row.TTFTP50 != at.TTFTP50 || row.TTFTP99 != at.TTFTP99 || !same(row.StartHitRate, row.Probes[0].HitRate) {
		t.Fatalf("%s: row %+v: want the figures of probe %d %+v", row.Mode, row, row.Probe+1, at)
	}
	failed := func(rps float64) bool {
		for _, p := range row.Probes {
			if p.RPS == rps {
				return !p.Pass
			}
		}
		return false
	}
	switch row.Outcome {
	case bench.CapacityFound:
		if !at.Pass || at.RPS != row.CapacityRPS || at.TimeScale != row.TimeScale || !failed(row.FailedRPS) ||
			row.FailedRPS <= row.CapacityRPS || row.FailedRPS/row.CapacityRPS > 1+DefaultCapacityPrecision+1e-9 {
			t.Fatalf("%s: found %+v: want a passing probe at capacity, a failing one within 2 %% above", row.Mode, row)
		}
	case bench.CapacityNoneFailed:
		for _, p := range row.Probes {
			if !p.Pass {
				t.Fatalf("%s: none failed, but %+v did", row.Mode, p)
			}
		}
		if at.RPS != row.CapacityRPS || row.FailedRPS != 0 || len(row.Probes) != 1+capacityMaxSteps {
			t.Fatalf("%s: none failed %+v: want every halving probed, the fastest the capacity", row.Mode, row)
		}
	case bench.CapacityNonePassed:
		for _, p := range row.Probes {
			if p.Pass {
				t.Fatalf("%s: none passed, but %+v did", row.Mode, p)
			}
		}
		if row.CapacityRPS != 0 || at.RPS != row.FailedRPS || at.TimeScale != capacityMaxSlowdown || len(row.Probes) != 5 {
			t.Fatalf("%s: none passed %+v: want doublings to %d times the start's time scale, capacity 0", row.Mode, row, capacityMaxSlowdown)
		}
	default:
		t.Fatalf("%s: outcome %q", row.Mode, row.Outcome)
	}
}

// TestCompareFindCapacityServe sweeps against the fake serve: each probe starts a serve
// of its own (cold caches), and every probe fails an SLO no server meets.
func TestCompareFindCapacityServe(t *testing.T) {
	out := t.TempDir()
	t.Setenv(fakeServeEnv, "ok")
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	args := []string{"compare", "--serve-executable", exe, "--workers", "3", "--isl", "40", "--osl", "3", "--requests", "6",
		"--rate", "100", "--find-capacity", "--slo", "ttft-p99=1ns", "--modes", "round-robin", "--out", out, "--progress-interval", "0"}
	var stdout, stderr bytes.Buffer
	if err := Run(context.Background(), args, &stdout, &stderr); err != nil {
		t.Fatalf("%v\n%s", err, stderr.String())
	}
	cmp := readComparison(t, out, stdout.String())
	row := cmp.Capacity.Rows[0]
	if row.Outcome != bench.CapacityNonePassed || len(row.Probes) != 5 || !strings.Contains(row.Probes[0].Why, "TTFT p99") {
		t.Fatalf("row %+v: want 5 failing probes", row)
	}
	if n := strings.Count(stderr.String(), "bench: mode round-robin: starting "); n != 5 {
		t.Fatalf("%d serves started for 5 probes:\n%s", n, stderr.String())
	}
	for _, p := range row.Probes {
		if s := readSummary(t, filepath.Join(out, p.Dir, "summary.json")); s.Succeeded != 6 {
			t.Fatalf("%s: %+v", p.Dir, s)
		}
	}
	if !strings.Contains(stdout.String(), "| round-robin |") || !strings.Contains(stdout.String(), " < ") {
		t.Fatalf("table:\n%s", stdout.String())
	}
}

// TestFindCapacityFlags: the sweep's flags are checked before anything runs, the errors
// naming the flag (or its variable) and what is wrong.
func TestFindCapacityFlags(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "none") // a serve that would not start
	for _, tc := range []struct {
		name string
		args []string
		env  map[string]string
		want string
	}{
		{"no SLO", []string{"--find-capacity"}, nil, "--slo: required with --find-capacity (e.g. --slo ttft-p99=3s)"},
		{"a bad SLO", []string{"--find-capacity", "--slo", "ttft-p95=3s"}, nil,
			`--slo: SLO "ttft-p95=3s": "ttft-p95": want a metric of ttft, itl, e2e and a statistic of p50, p90, p99, mean, max`},
		{"a bad SLO from the environment", []string{"--find-capacity"}, map[string]string{"TURBINE_SLO": "ttft-p99=soon"},
			`--slo: SLO "ttft-p99=soon": ttft-p99=soon: want a duration above 0`},
		{"the sweep from the environment", nil, map[string]string{"TURBINE_FIND_CAPACITY": "true"}, "--slo: required with --find-capacity"},
		{"an SLO without the sweep", []string{"--slo", "ttft-p99=3s"}, nil, "--slo ttft-p99=3s: only with --find-capacity"},
		{"a precision without the sweep", nil, map[string]string{"TURBINE_CAPACITY_PRECISION": "0.05"},
			"TURBINE_CAPACITY_PRECISION=0.05: only with --find-capacity"},
		{"precision 0", []string{"--find-capacity", "--slo", "ttft-p99=3s", "--capacity-precision", "0"}, nil,
			"--capacity-precision 0: want 0.001 to 1 (a fraction: 0.02 is 2 %)"},
		{"precision 2", []string{"--find-capacity", "--slo", "ttft-p99=3s", "--capacity-precision", "2"}, nil, "--capacity-precision 2: want 0.001 to 1"},
		{"a bound on requests in flight", []string{"--find-capacity", "--slo", "ttft-p99=3s", "--concurrency", "4"}, nil,
			"--concurrency 4: not with --find-capacity"},
		{"a closed loop", []string{"--find-capacity", "--slo", "ttft-p99=3s", "--duration", "1m", "--concurrency", "0"}, nil,
			"--duration 1m0s without --rate: not with --find-capacity"},
		{"one request", []string{"--find-capacity", "--slo", "ttft-p99=3s", "--trace", "testdata/mini.jsonl", "--limit", "1"}, nil,
			"--find-capacity: the workload is one request: no rate to scale"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for k, v := range tc.env {
				t.Setenv(k, v)
			}
			args := append([]string{"compare", "--serve-executable", missing, "--modes", "round-robin", "--out", t.TempDir()}, tc.args...)
			err := Run(context.Background(), args, &bytes.Buffer{}, &bytes.Buffer{})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v: want %q", err, tc.want)
			}
		})
	}
}

// TestRunSimulatePooledCeiling: a simulation's summary has the pooled-cache ceiling of
// its fleet (2 workers × 256 blocks × 16 tokens hold all of mini.jsonl: the infinite
// ceiling, 512/1400) and prints it.
func TestRunSimulatePooledCeiling(t *testing.T) {
	dir := t.TempDir()
	var stdout, stderr bytes.Buffer
	args := []string{"--simulate", "--trace", "testdata/mini.jsonl", "--workers", "2", "--block-size", "16", "--num-gpu-blocks", "256",
		"--max-model-len", "2048", "--out", dir, "--progress-interval", "0"}
	if err := Run(context.Background(), args, &stdout, &stderr); err != nil {
		t.Fatalf("%v\n%s", err, stderr.String())
	}
	s := readSummary(t, filepath.Join(dir, "summary.json"))
	if s.HitRateCeilingPooled == nil || math.Abs(*s.HitRateCeilingPooled-512.0/1400) > 1e-12 || s.PooledCacheTokens != 2*256*16 {
		t.Fatalf("pooled ceiling %v of %d tokens: want 512/1400 of 8192", s.HitRateCeilingPooled, s.PooledCacheTokens)
	}
	if want := "pooled-cache ceiling 36.6% (one LRU prefix cache of 8192 tokens"; !strings.Contains(stdout.String(), want) {
		t.Fatalf("stdout lacks %q:\n%s", want, stdout.String())
	}
}
