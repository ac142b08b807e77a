package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/turbine-llm/turbine/bench"
)

// TestLoraFlagErrors: bad adapter flags are refused with an error naming the flag, as
// are the simulated engines' adapter flags and the adapter-blind routing mode where no
// simulation runs.
func TestLoraFlagErrors(t *testing.T) {
	sim := []string{"--simulate", "--trace", "testdata/mini.jsonl", "--workers", "2", "--max-model-len", "2048", "--progress-interval", "0"}
	real := []string{"--url", "http://127.0.0.1:1", "--model", "m", "--trace", "testdata/mini.jsonl"}
	compare := []string{"compare", "--isl", "40", "--osl", "3", "--requests", "8", "--rate", "10", "--ready-timeout", "1s"}
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"zipf without adapters", append(sim, "--lora-zipf", "2"), "--lora-zipf 2: only with --loras"},
		{"base fraction without adapters", append(sim, "--lora-base-fraction", "0.5"), "--lora-base-fraction 0.5: only with --loras"},
		{"negative adapters", append(sim, "--loras", "-1"), "--loras -1: want 0 to 100000"},
		{"too many adapters", append(sim, "--loras", "100001"), "--loras 100001"},
		{"zipf above the bound", append(sim, "--loras", "4", "--lora-zipf", "11"), "--lora-zipf 11: want 0 (uniform) to 10"},
		{"negative zipf", append(sim, "--loras", "4", "--lora-zipf", "-1"), "--lora-zipf -1"},
		{"base fraction above 1", append(sim, "--loras", "4", "--lora-base-fraction", "1.5"), "--lora-base-fraction 1.5: want 0 to 1"},
		{"negative slots", append(sim, "--max-loras", "-1"), "--max-loras -1: want 0 (no adapter slots) to 1024, as serve's"},
		{"more slots than serve takes", append(sim, "--max-loras", "1025"), "--max-loras 1025"},
		{"negative load time", append(sim, "--lora-load-ms", "-1"), "--lora-load-ms -1"},
		{"load time past an hour", append(sim, "--lora-load-ms", "4e6"), "--lora-load-ms 4e+06"},
		{"router load time NaN", append(sim, "--router-lora-load-ms", "NaN"), "--router-lora-load-ms NaN"},
		{"a misspelled suffix", append(sim, "--router-mode", "ttft:ignore"), `--router-mode "ttft:ignore"`},
		{"slots on a real run", append(real, "--max-loras", "4"), "--max-loras: only with --simulate"},
		{"load time on a real run", append(real, "--lora-load-ms", "10"), "--lora-load-ms: only with --simulate"},
		{"ignoring mode on real serves", append(compare, "--modes", "ttft,ttft:ignore-adapters"), "ttft:ignore-adapters: only with --simulate"},
		{"adapters on real serves", append(compare, "--loras", "4"), "--loras 4: only with --simulate"},
		{"slots on real serves", append(compare, "--max-loras", "4"), "--max-loras 4: only with --simulate"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := append(append([]string(nil), tc.args...), "--out", t.TempDir())
			err := Run(context.Background(), args, &bytes.Buffer{}, &bytes.Buffer{})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v: want one with %q", err, tc.want)
			}
		})
	}
}

// TestCompareSimulateLora compares the adapter-aware router with the one that ignores
// adapters on a simulated fleet: each mode's files are in its directory (the suffix's
// ':' written '-'), compare.json has each row's adapter figures, the table their
// columns, and the aware router loads fewer adapters.
func TestCompareSimulateLora(t *testing.T) {
	out := t.TempDir()
	var stdout, stderr bytes.Buffer
	args := []string{"compare", "--simulate", "--modes", "ttft,ttft:ignore-adapters", "--workers", "4", "--max-loras", "2",
		"--loras", "16", "--isl", "512", "--osl", "16", "--shared-prefix-groups", "2", "--shared-prefix-tokens", "256",
		"--rate", "20", "--requests", "400", "--out", out, "--progress-interval", "0"}
	if err := Run(context.Background(), args, &stdout, &stderr); err != nil {
		t.Fatalf("%v\n%s", err, stderr.String())
	}
	data, err := os.ReadFile(filepath.Join(out, "compare.json"))
	if err != nil {
		t.Fatal(err)
	}
	var c Comparison
	if err := json.Unmarshal(data, &c); err != nil {
		t.Fatal(err)
	}
	if len(c.Rows) != 2 || !strings.Contains(c.Workload, "with 16 LoRA adapters (Zipf 1)") {
		t.Fatalf("comparison %+v", c)
	}
	var loads [2]int64
	for i, r := range c.Rows {
		l := r.Lora
		if l == nil || l.Requests != 400 || l.Succeeded != 400 || l.Loads == nil || l.AdapterHitRate == nil || l.LoadsPerMinute == nil {
			t.Fatalf("%s: adapter figures %+v: want 400 adapter requests and the engines' figures", r.Mode, l)
		}
		loads[i] = *l.Loads
		s := readSummary(t, filepath.Join(out, modeDir(r.Mode), "summary.json"))
		if s.Lora == nil || s.Lora.Engines == nil || s.Lora.Engines.Loads != *l.Loads {
			t.Fatalf("%s: summary's adapter figures %+v", r.Mode, s.Lora)
		}
	}
	if _, err := os.Stat(filepath.Join(out, "ttft-ignore-adapters", "summary.json")); err != nil {
		t.Fatal(err)
	}
	if loads[0] == 0 || loads[0] >= loads[1] {
		t.Errorf("adapter loads: %d (aware), %d (ignoring): want fewer, and some, for the aware router", loads[0], loads[1])
	}
	if table := stdout.String(); !strings.Contains(table, "| adapter hits | adapter loads | loads/min |") {
		t.Errorf("table without the adapter columns:\n%s", table)
	}
	if !strings.Contains(stderr.String(), "adapter loads ") {
		t.Errorf("no adapter line in the summaries:\n%s", stderr.String())
	}
}

// TestSimulateTraceWithLoras: a trace replayed with --loras names an adapter for every
// request, drawn by --seed; the summary reports them, and the hit-rate ceiling counts
// requests under different adapters as sharing nothing.
func TestSimulateTraceWithLoras(t *testing.T) {
	run := func(extra ...string) bench.Summary {
		t.Helper()
		out := t.TempDir()
		args := append([]string{"--simulate", "--trace", "testdata/mini.jsonl", "--workers", "2", "--max-model-len", "2048",
			"--progress-interval", "0", "--out", out}, extra...)
		var stdout, stderr bytes.Buffer
		if err := Run(context.Background(), args, &stdout, &stderr); err != nil {
			t.Fatalf("%v\n%s", err, stderr.String())
		}
		return readSummary(t, filepath.Join(out, "summary.json"))
	}
	plain := run()
	// Seed 1 draws different adapters for the trace's first two requests, which share
	// their first hash id.
	with := run("--loras", "8", "--lora-zipf", "0", "--max-loras", "1")
	if plain.Lora != nil || with.Lora == nil || with.Lora.Requests != 3 || !strings.HasSuffix(with.Workload, "with 8 LoRA adapters (Zipf 0)") {
		t.Fatalf("workloads %q (adapters %+v) and %q (adapters %+v)", plain.Workload, plain.Lora, with.Workload, with.Lora)
	}
	if *plain.HitRateCeiling <= 0 || *with.HitRateCeiling != 0 {
		t.Fatalf("hit-rate ceilings %v without adapters, %v with: want above 0, then 0", *plain.HitRateCeiling, *with.HitRateCeiling)
	}
}

func i64(x int64) *int64 { return &x }

// TestRenderComparisonLoraGolden: rows with adapter figures get the adapter columns: the
// adapter requests' TTFT when some requests name none, the engines' hits, loads and loads
// per minute when a simulation measured them ("-" where a row has none).
func TestRenderComparisonLoraGolden(t *testing.T) {
	c := Comparison{
		Workload: "synthetic isl 2048 osl 128 rate 20/s with 64 LoRA adapters (Zipf 1, base model 0.2)",
		Fleet:    "simulated, 8 workers",
		Rows: []CompareRow{
			{Mode: "ttft", HitRate: ptr(0.376), TTFTP50: 44.04, TTFTP99: 124.9, ITLP50: 6.07, ITLP99: 38.94, OutputThroughput: 2533.4,
				Requests: 100, Succeeded: 100, Errors: map[string]int{},
				Lora: &CompareLora{Requests: 80, Succeeded: 80, TTFTP50: 46.5, TTFTP99: 130.25, AdapterHitRate: ptr(0.802), Loads: i64(393), LoadsPerMinute: ptr(233.44)}},
			{Mode: "ttft:ignore-adapters", HitRate: ptr(0.38), TTFTP50: 91.4, TTFTP99: 522.1, ITLP50: 6.07, ITLP99: 88.44, OutputThroughput: 2518,
				Requests: 100, Succeeded: 99, Failed: 1, Errors: map[string]int{"timeout": 1},
				Lora: &CompareLora{Requests: 80, Succeeded: 79, TTFTP50: 95, TTFTP99: 530.5, AdapterHitRate: ptr(0.318), Loads: i64(1356), LoadsPerMinute: ptr(800.3)}},
			{Mode: "kv", Requests: 100, Failed: 100, Errors: map[string]int{"connect": 100},
				Lora: &CompareLora{Requests: 80}},
		},
	}
	got := RenderComparison(c)
	path := filepath.Join("testdata", "compare_lora.golden.md")
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
