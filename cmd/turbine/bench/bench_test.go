package bench

import (
	"bytes"
	"context"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/turbine-llm/turbine/bench"
)

func TestValidate(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{}, "--model"},
		{[]string{"--model", "m", "--url", "localhost:8000"}, "--url"},
		{[]string{"--model", "m", "--time-scale", "0"}, "--time-scale"},
		{[]string{"--model", "m", "--block-tokens", "0"}, "--block-tokens"},
		{[]string{"--model", "m", "--rate", "0"}, "--concurrency"},
		{[]string{"--model", "m", "--rate", "-1"}, "--rate"},
		{[]string{"--model", "m", "--concurrency", "2", "--isl", "0"}, "--isl"},
		{[]string{"--model", "m", "--trace", "x.txt"}, "--trace"},
		{[]string{"--model", "m", "--trace", "testdata/missing.jsonl"}, "--trace"},
	} {
		err := Run(context.Background(), tc.args, &bytes.Buffer{}, &bytes.Buffer{})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: error %v, want one naming %s", tc.args, err, tc.want)
		}
	}
}

// server answers streaming completions like vLLM, reporting half the prompt as cached.
func server(t *testing.T) *httptest.Server {
	return httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
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
	}))
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
}

func TestRunSyntheticErrors(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, `{"error":{"message":"busy"}}`, http.StatusServiceUnavailable)
	}))
	defer srv.Close()
	dir := t.TempDir()
	var stdout, stderr bytes.Buffer
	args := []string{"--url", srv.URL, "--model", "m", "--isl", "20", "--osl", "2", "--requests", "5", "--concurrency", "2", "--out", dir}
	if err := Run(context.Background(), args, &stdout, &stderr); err != nil {
		t.Fatal(err)
	}
	s := readSummary(t, filepath.Join(dir, "summary.json"))
	if s.Failed != 5 || s.Errors["http_503"] != 5 || s.PrefixCacheHitRate != nil {
		t.Fatalf("summary %+v: want 5 failures of kind http_503 and no hit rate", s)
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
