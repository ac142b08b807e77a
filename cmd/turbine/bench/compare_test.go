package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"github.com/turbine-llm/turbine/cmd/turbine/internal/serveproc"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata/")

func ptr(x float64) *float64 { return &x }

func TestRenderComparisonGolden(t *testing.T) {
	for _, tc := range []struct {
		golden string
		c      Comparison
	}{
		{"compare_trace.golden.md", Comparison{
			Workload:       "mooncake.jsonl (300 requests, time scale 1)",
			Fleet:          "turbine serve, 8 workers; mock engines: block size 64",
			HitRateCeiling: ptr(0.36642),
			Rows: []CompareRow{
				{Mode: "kv", HitRate: ptr(0.3312), TTFTP50: 120.04, TTFTP99: 1510.5, ITLP50: 7.125, ITLP99: 19.5, OutputThroughput: 4321.06, Requests: 300, Succeeded: 300, Errors: map[string]int{}},
				{Mode: "round-robin", HitRate: ptr(0.0751), TTFTP50: 410.2, TTFTP99: 9120.75, ITLP50: 7.5, ITLP99: 40.25, OutputThroughput: 3900.5, Requests: 300, Succeeded: 297, Failed: 3,
					Errors: map[string]int{"http_503": 2, "connect": 1}},
				{Mode: "random", Requests: 300, Failed: 300, Errors: map[string]int{"connect": 300}},
			},
		}},
		{"compare_synthetic.golden.md", Comparison{
			Workload: "synthetic isl 1024 osl 128",
			Fleet:    "simulated, 2 workers",
			Rows:     []CompareRow{{Mode: "cache-aware", HitRate: ptr(0), TTFTP50: 50, TTFTP99: 60, ITLP50: 5, ITLP99: 6, OutputThroughput: 100, Requests: 10, Succeeded: 10}},
		}},
	} {
		t.Run(tc.golden, func(t *testing.T) {
			got := RenderComparison(tc.c)
			path := filepath.Join("testdata", tc.golden)
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
		})
	}
}

// TestCompareFakeServe runs every mode against the fake serve of this test binary: one
// process per mode, started, measured and stopped.
func TestCompareFakeServe(t *testing.T) {
	out := t.TempDir()
	var stdout, stderr bytes.Buffer
	args := fakeServeArgs(t, "ok", out)
	if err := Run(context.Background(), append([]string{"compare"}, args...), &stdout, &stderr); err != nil {
		t.Fatalf("%v\n%s", err, stderr.String())
	}
	modes := []string{"ttft", "kv", "round-robin", "random", "cache-aware"}
	for _, m := range modes {
		s := readSummary(t, filepath.Join(out, m, "summary.json"))
		if s.Label != m || s.Succeeded != 8 || s.Failed != 0 {
			t.Fatalf("%s: summary %+v: want label %s, 8 valid requests", m, s, m)
		}
		for _, f := range []string{"requests.csv", "plot.svg"} {
			if _, err := os.Stat(filepath.Join(out, m, f)); err != nil {
				t.Fatal(err)
			}
		}
	}
	var cmp Comparison
	b, err := os.ReadFile(filepath.Join(out, "compare.json"))
	if err != nil || json.Unmarshal(b, &cmp) != nil {
		t.Fatalf("compare.json: %v %s", err, b)
	}
	if len(cmp.Rows) != 5 || cmp.HitRateCeiling != nil || !strings.HasPrefix(cmp.Fleet, "turbine serve, 3 workers") {
		t.Fatalf("comparison %+v: want 5 rows (the default modes), no ceiling (synthetic), 3 workers", cmp)
	}
	for i, r := range cmp.Rows {
		want := 0.0
		if r.Mode == "kv" {
			want = 0.5
		}
		if r.Mode != modes[i] || r.HitRate == nil || math.Abs(*r.HitRate-want) > 1e-9 || r.Failed != 0 || r.OutputThroughput <= 0 {
			t.Fatalf("row %d %+v: want mode %s, hit rate %v, no failure", i, r, modes[i], want)
		}
	}
	md, err := os.ReadFile(filepath.Join(out, "compare.md"))
	if err != nil || !strings.HasPrefix(stdout.String(), string(md)) || RenderComparison(cmp) != string(md) {
		t.Fatalf("compare.md (%v) is not the table on stdout:\n%s\n---\n%s", err, md, stdout.String())
	}
	svg, err := os.ReadFile(filepath.Join(out, "compare.svg"))
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range modes {
		if !bytes.Contains(svg, []byte(">"+m+"<")) {
			t.Errorf("compare.svg has no series %s", m)
		}
	}
}

// TestCompareServeFails: a serve that exits names its mode and its last log lines.
func TestCompareServeFails(t *testing.T) {
	out := t.TempDir()
	var stdout, stderr bytes.Buffer
	args := fakeServeArgs(t, "fail:round-robin", out, "--modes", "kv,round-robin,random")
	err := Run(context.Background(), append([]string{"compare"}, args...), &stdout, &stderr)
	if err == nil {
		t.Fatal("no error")
	}
	msg := err.Error()
	for _, want := range []string{"mode round-robin", "exited with status 1 before logging \"turbine serving\"", "out of KV blocks", "starting line 29"} {
		if !strings.Contains(msg, want) {
			t.Errorf("error lacks %q:\n%s", want, msg)
		}
	}
	if strings.Contains(msg, "starting line 5\"") {
		t.Errorf("error quotes more than the last %d log lines:\n%s", serveproc.LogLines, msg)
	}
	if _, err := os.Stat(filepath.Join(out, "kv", "summary.json")); err != nil {
		t.Errorf("the mode before the failure was not written: %v", err)
	}
	if _, err := os.Stat(filepath.Join(out, "random")); err == nil {
		t.Error("the mode after the failure ran")
	}
}

func TestReadyWorkers(t *testing.T) {
	const exposition = `# HELP turbine_router_worker_ready 1 when ready
# TYPE turbine_router_worker_ready gauge
turbine_router_worker_ready{model="m",worker="w0"} 1
turbine_router_worker_ready{model="m",worker="w1"} 0
turbine_router_worker_ready{worker="w2",model="m"} 1
turbine_router_worker_ready{model="other",worker="w0"} 1
turbine_router_worker_ready_total{model="m",worker="w3"} 1
`
	if got := serveproc.ReadyWorkers(exposition, "m"); got != 2 {
		t.Fatalf("ready workers of m: %d, want 2", got)
	}
}

// TestCompareMissingExecutable: a serve that cannot start names its mode.
func TestCompareMissingExecutable(t *testing.T) {
	args := []string{"compare", "--serve-executable", filepath.Join(t.TempDir(), "none"), "--modes", "random",
		"--concurrency", "1", "--requests", "1", "--out", t.TempDir()}
	err := Run(context.Background(), args, &bytes.Buffer{}, &bytes.Buffer{})
	if err == nil || !strings.Contains(err.Error(), "mode random") || !strings.Contains(err.Error(), "none") {
		t.Fatalf("error %v: want one naming the mode and the executable", err)
	}
}
