package bench

import (
	"bytes"
	"context"
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/turbine-llm/turbine/bench"
)

// TestValidate: every flag error of `turbine bench` and `turbine bench compare` names
// its flag.
func TestValidate(t *testing.T) {
	m := []string{"--model", "m"}
	sim := []string{"--simulate", "--rate", "10"}
	with := func(base []string, more ...string) []string { return append(append([]string{}, base...), more...) }
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{}, "--model"},
		{with(m, "--url", "localhost:8000"), "--url"},
		{with(m, "--time-scale", "0"), "--time-scale"},
		{with(m, "--block-tokens", "0"), "--block-tokens"},
		{with(m, "--limit", "-1"), "--limit"},
		{with(m, "--concurrency", "-1"), "--concurrency"},
		{with(m, "--rate", "0"), "--concurrency"},
		{with(m, "--rate", "-1"), "--rate"},
		{with(m, "--concurrency", "2", "--isl", "0"), "--isl"},
		{with(m, "--concurrency", "2", "--osl", "0"), "--osl"},
		{with(m, "--concurrency", "2", "--requests", "0"), "--requests"},
		{with(m, "--out", ""), "--out"},
		{with(m, "--timeout", "0s"), "--timeout"},
		{with(m, "--progress-interval", "-1s"), "--progress-interval"},
		{with(m, "--trace", "x.txt"), "--trace"},
		{with(m, "--trace", "testdata/missing.jsonl"), "--trace"},
		{with(m, "--workers", "4"), "--workers"},
		{with(m, "--router-mode", "random"), "--router-mode"},
		{with(m, "--speedup-ratio", "10"), "--speedup-ratio"},
		{with(sim, "--url", "http://127.0.0.1:1"), "--url"},
		{with(sim, "--api-key", "sk-a"), "--api-key: not with --simulate"},
		{with(m, "--api-key", "sk-\x01a"), "--api-key: the key has a control character"},
		{with(m, "--label", "a\x01b"), `--label "a\x01b": has a control character (U+0001 at byte 1)`},
		{with(m, "--label", "kv\n"), `--label "kv\n": has a control character`},
		{with(m, "--label", "a\xffb"), `--label "a\xffb": not valid UTF-8`},
		{with(sim, "--label", "\x1b[1m", "--requests", "0"), `--label "\x1b[1m"`}, // checked first: nothing runs
		{with(sim, "--concurrency", "4"), "--concurrency"},
		{[]string{"--simulate"}, "--rate"},
		{with(sim, "--router-mode", "fastest"), "--router-mode"},
		{with(sim, "--workers", "0"), "--workers"},
		{with(sim, "--prefill-workers", "-1"), "--prefill-workers"},
		{with(sim, "--max-prefill-queue-tokens", "-5"), "--max-prefill-queue-tokens"},
		{with(sim, "--kv-transfer-bandwidth", "-1"), "--kv-transfer-bandwidth"},
		{with(sim, "--block-size", "0"), "--block-size"},
		{with(sim, "--num-gpu-blocks", "0"), "--num-gpu-blocks"},
		{with(sim, "--max-num-seqs", "0"), "--max-num-seqs"},
		{with(sim, "--max-num-batched-tokens", "0"), "--max-num-batched-tokens"},
		{with(sim, "--max-model-len", "0"), "--max-model-len"},
		{with(sim, "--speedup-ratio", "0"), "--speedup-ratio"},
		{with(sim, "--overlap-weight", "-1"), "--overlap-weight"},
		{with(sim, "--router-temperature", "-1"), "--router-temperature"},
		{[]string{"--simulate", "--trace", "testdata/mini.jsonl", "--max-model-len", "600"}, "--max-model-len"},
		{[]string{"--simulate", "--trace", "testdata/mini.jsonl", "--out", ""}, "--out"},

		{[]string{"compare", "--modes", ""}, "--modes"},
		{[]string{"compare", "--modes", "kv,fastest"}, "--modes"},
		{[]string{"compare", "--modes", "kv,kv"}, "--modes"},
		{[]string{"compare", "--model", ""}, "--model"},
		{[]string{"compare", "--workers", "0"}, "--workers"},
		{[]string{"compare", "--ready-timeout", "0s"}, "--ready-timeout"},
		{[]string{"compare", "--prefill-workers", "-1"}, "--prefill-workers"},
		{[]string{"compare", "--block-size", "0"}, "--block-size"},
		{[]string{"compare", "--kv-bytes-per-token", "-10"}, "--kv-bytes-per-token"},
		{[]string{"compare", "--simulate", "--rate", "1", "--kv-bytes-per-token", "-1"}, "--kv-bytes-per-token"},
		{[]string{"compare", "--simulate", "--rate", "1", "--kv-transfer-bandwidth", "0"}, "--kv-transfer-bandwidth"},
		{[]string{"compare", "--max-local-prefill-tokens", "-1"}, "--max-local-prefill-tokens"},
		{[]string{"compare", "--num-gpu-blocks", "1"}, "--num-gpu-blocks"},
		{[]string{"compare", "--speedup-ratio", "-2"}, "--speedup-ratio"},
		{[]string{"compare", "--rate", "0"}, "--concurrency"},
		{[]string{"compare", "--trace", "testdata/mini.jsonl", "--max-model-len", "600"}, "--max-model-len"},
		{[]string{"compare", "--trace", "testdata/mini.jsonl", "--time-scale", "-1"}, "--time-scale"},
		{[]string{"compare", "--simulate", "--concurrency", "2"}, "--concurrency"},
		{[]string{"compare", "--simulate", "--prefill-workers", "-1", "--rate", "1"}, "--prefill-workers"},
		{[]string{"compare", "--url", "http://x"}, "-url"},
	} {
		err := Run(context.Background(), tc.args, &bytes.Buffer{}, &bytes.Buffer{})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: error %v, want one naming %s", tc.args, err, tc.want)
		}
	}
}

// server answers streaming completions like vLLM, reporting half the prompt as cached.
func server(t *testing.T) *httptest.Server { return httptest.NewServer(completions(t)) }

// completions is server's handler.
func completions(t *testing.T) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		var b struct {
			Prompt    []uint32 `json:"prompt"`
			MaxTokens int      `json:"max_tokens"`
		}
		if err := json.NewDecoder(r.Body).Decode(&b); err != nil {
			t.Errorf("body: %v", err)
		}
		w.Header().Set("Content-Type", "text/event-stream")
		for range b.MaxTokens {
			fmt.Fprint(w, "data: {\"choices\":[{\"index\":0,\"text\":\"a\",\"finish_reason\":null}]}\n\n")
			w.(http.Flusher).Flush()
		}
		fmt.Fprintf(w, "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":%d,\"completion_tokens\":%d,\"prompt_tokens_details\":{\"cached_tokens\":%d}}}\n\ndata: [DONE]\n\n",
			len(b.Prompt), b.MaxTokens, len(b.Prompt)/2)
	}
}

func TestRunTraceAndPlot(t *testing.T) {
	srv := server(t)
	defer srv.Close()
	dir := t.TempDir()
	var stdout, stderr bytes.Buffer
	args := []string{"--url", srv.URL, "--model", "m", "--trace", "testdata/mini.jsonl", "--time-scale", "0.5", "--out", dir, "--label", "mini"}
	if err := Run(context.Background(), args, &stdout, &stderr); err != nil {
		t.Fatalf("%v\n%s", err, stderr.String())
	}
	s := readSummary(t, filepath.Join(dir, "summary.json"))
	if s.Label != "mini" || s.Succeeded != 3 || s.Failed != 0 || s.OutputTokens != 9 || s.InputTokens != 1400 || s.ITL.Count != 6 {
		t.Fatalf("summary %+v: want 3 valid requests, 9 output and 1400 input tokens, 6 gaps", s)
	}
	if s.PrefixCacheHitRate == nil || *s.PrefixCacheHitRate != 0.5 {
		t.Fatalf("hit rate %v, want 0.5", s.PrefixCacheHitRate)
	}
	if s.TTFT.P50 <= 0 || s.TTFT.P50 > s.E2E.P50 || s.TTFT.Max > s.E2E.Max {
		t.Fatalf("TTFT %+v not within E2E %+v", s.TTFT, s.E2E)
	}
	f, err := os.Open(filepath.Join(dir, "requests.csv"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	rows, err := csv.NewReader(f).ReadAll()
	if err != nil || len(rows) != 4 || rows[3][8] != "4" {
		t.Fatalf("requests.csv: %v, rows %v; want 3 requests, the last with 4 output tokens", err, rows)
	}
	if svg, err := os.ReadFile(filepath.Join(dir, "plot.svg")); err != nil || !bytes.Contains(svg, []byte("<svg")) {
		t.Fatalf("plot.svg: %v", err)
	}
	if !strings.Contains(stdout.String(), "prefix-cache hit rate 50.0%") {
		t.Errorf("stdout has no hit rate:\n%s", stdout.String())
	}

	cmp := filepath.Join(dir, "cmp.svg")
	a := filepath.Join(dir, "summary.json")
	if err := Run(context.Background(), []string{"plot", a, a, "-o", cmp}, &stdout, &stderr); err != nil {
		t.Fatal(err)
	}
	if svg, err := os.ReadFile(cmp); err != nil || bytes.Count(svg, []byte("mini")) < 2 {
		t.Fatalf("cmp.svg: %v; want the label of both runs", err)
	}
	if err := Run(context.Background(), []string{"plot", "-o", cmp, filepath.Join(dir, "requests.csv")}, &stdout, &stderr); err == nil {
		t.Fatal("plot of a CSV: no error")
	}
	pngPath := filepath.Join(dir, "cmp.png")
	if err := Run(context.Background(), []string{"plot", a, "-o", pngPath}, &stdout, &stderr); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(pngPath); err != nil || !bytes.HasPrefix(b, []byte("\x89PNG\r\n\x1a\n")) {
		t.Fatalf("cmp.png: %v; want a PNG file", err)
	}
	if err := Run(context.Background(), []string{"plot", a, "-o", filepath.Join(dir, "cmp.gif")}, &stdout, &stderr); err == nil || !strings.Contains(err.Error(), "-o") {
		t.Fatalf("plot to .gif: %v, want an error naming -o", err)
	}
}

func TestRunSyntheticErrors(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, `{"error":{"message":"busy"}}`, http.StatusServiceUnavailable)
	}))
	defer srv.Close()
	dir := t.TempDir()
	var stdout, stderr bytes.Buffer
	args := []string{"--url", srv.URL, "--model", "m", "--isl", "20", "--osl", "2", "--requests", "5", "--concurrency", "2", "--out", dir}
	// Nothing succeeded: the run fails (a script must not take it for a result), with its
	// files written and no made-up latencies printed.
	err := Run(context.Background(), args, &stdout, &stderr)
	if !errors.Is(err, ErrNoSuccess) || !strings.Contains(err.Error(), "5 of 5 failed (http_503 5)") {
		t.Fatalf("Run: %v, want ErrNoSuccess naming 5 http_503 failures", err)
	}
	s := readSummary(t, filepath.Join(dir, "summary.json"))
	if s.Failed != 5 || s.Errors["http_503"] != 5 || s.PrefixCacheHitRate != nil {
		t.Fatalf("summary %+v: want 5 failures of kind http_503 and no hit rate", s)
	}
	if out := stdout.String(); strings.Count(out, "no samples") != 3 || strings.Contains(out, "p50") {
		t.Errorf("stdout prints latencies without samples:\n%s", out)
	}
}

func readSummary(t *testing.T, path string) bench.Summary {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	s, err := bench.ReadSummary(f, path)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestRunSimulate: --simulate replays the trace on a simulated fleet and writes what a
// real run writes, with the trace's hit-rate ceiling.
func TestRunSimulate(t *testing.T) {
	dir := t.TempDir()
	var stdout, stderr bytes.Buffer
	args := []string{"--simulate", "--trace", "testdata/mini.jsonl", "--workers", "2", "--router-mode", "cache-aware",
		"--block-size", "16", "--num-gpu-blocks", "256", "--max-model-len", "2048", "--out", dir}
	if err := Run(context.Background(), args, &stdout, &stderr); err != nil {
		t.Fatalf("%v\n%s", err, stderr.String())
	}
	s := readSummary(t, filepath.Join(dir, "summary.json"))
	if s.Succeeded != 3 || s.OutputTokens != 9 || s.URL != "simulated: 2 workers, router cache-aware" || s.PrefixCacheHitRate == nil {
		t.Fatalf("summary %+v: want 3 valid simulated requests with a hit rate", s)
	}
	// mini.jsonl: the second request shares its first 512-token block with the first.
	if s.HitRateCeiling == nil || math.Abs(*s.HitRateCeiling-512.0/1400) > 1e-12 || *s.PrefixCacheHitRate > *s.HitRateCeiling {
		t.Fatalf("hit rate %v, ceiling %v: want the ceiling 512/1400 and a hit rate below it", s.PrefixCacheHitRate, s.HitRateCeiling)
	}
	for _, f := range []string{"requests.csv", "plot.svg"} {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			t.Fatal(err)
		}
	}
	if !strings.Contains(stdout.String(), "hit-rate ceiling 36.6%") || !strings.Contains(stderr.String(), "bench: 3/3 simulated") {
		t.Fatalf("stdout:\n%s\nstderr:\n%s", stdout.String(), stderr.String())
	}
}

// TestCompareSimulate runs every mode on a simulated fleet.
func TestCompareSimulate(t *testing.T) {
	dir := t.TempDir()
	var stdout, stderr bytes.Buffer
	args := []string{"compare", "--simulate", "--trace", "testdata/mini.jsonl", "--workers", "2", "--block-size", "16",
		"--num-gpu-blocks", "256", "--max-model-len", "2048", "--out", dir, "--progress-interval", "0"}
	if err := Run(context.Background(), args, &stdout, &stderr); err != nil {
		t.Fatalf("%v\n%s", err, stderr.String())
	}
	for _, m := range []string{"kv", "round-robin", "random", "cache-aware"} {
		if s := readSummary(t, filepath.Join(dir, m, "summary.json")); s.Succeeded != 3 || s.Label != m {
			t.Fatalf("%s: %+v", m, s)
		}
	}
	if !strings.Contains(stdout.String(), "| hit rate (ceiling 36.6 %) |") || !strings.Contains(stdout.String(), "Fleet: simulated, 2 workers") {
		t.Fatalf("table:\n%s", stdout.String())
	}
}

// TestRunDefaultLabel: the default label (the workload's description) of a trace whose
// file name has control characters or invalid UTF-8 has them as U+FFFD, so that the run's
// summary reads back and plots.
func TestRunDefaultLabel(t *testing.T) {
	trace, err := os.ReadFile("testdata/mini.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ file, want string }{
		{"mini.jsonl", "mini.jsonl (3 requests, time scale 1)"},
		{"mi\x01ni.jsonl", "mi\ufffdni.jsonl (3 requests, time scale 1)"},
		{"mi\tni\x7f.jsonl", "mi\ufffdni\ufffd.jsonl (3 requests, time scale 1)"},
		{"mi\xffni.jsonl", "mi\ufffdni.jsonl (3 requests, time scale 1)"},
	} {
		t.Run(fmt.Sprintf("%q", tc.file), func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, tc.file)
			if err := os.WriteFile(path, trace, 0o644); err != nil {
				t.Fatal(err)
			}
			out := filepath.Join(dir, "out")
			args := []string{"--simulate", "--trace", path, "--workers", "2", "--block-size", "16", "--num-gpu-blocks", "256",
				"--max-model-len", "2048", "--out", out, "--progress-interval", "0"}
			if err := Run(context.Background(), args, &bytes.Buffer{}, &bytes.Buffer{}); err != nil {
				t.Fatal(err)
			}
			summary := filepath.Join(out, "summary.json")
			if s := readSummary(t, summary); s.Label != tc.want {
				t.Fatalf("label %q, want %q", s.Label, tc.want)
			}
			if err := Run(context.Background(), []string{"plot", "-o", filepath.Join(dir, "p.svg"), summary}, &bytes.Buffer{}, &bytes.Buffer{}); err != nil {
				t.Fatal(err)
			}
		})
	}
}
