package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/turbine-llm/turbine/bench"
)

// TestValidateSynthetic: every error of the synthetic workload's flags (lengths, shared
// prefix, duration, endpoint) names its flags and quotes the bad part.
func TestValidateSynthetic(t *testing.T) {
	m := []string{"--model", "m", "--concurrency", "2"}
	with := func(more ...string) []string { return append(append([]string{}, m...), more...) }
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{with("--isl", "uniform:5"), []string{"--isl", `"uniform:5": want uniform:MIN:MAX`}},
		{with("--isl", "uniform:900:100"), []string{"--isl", "MIN 900 is above MAX 100"}},
		{with("--isl", "normal:x:1"), []string{"--isl", `MEAN "x"`}},
		{with("--isl", "gauss:1:2"), []string{"--isl", `unknown distribution "gauss"`}},
		{with("--isl", "many"), []string{"--isl", `"many": want N, uniform:MIN:MAX`}},
		{with("--osl", "0"), []string{"--osl", `N "0"`}},
		{with("--osl", "lognormal:10:-1"), []string{"--osl", `SD "-1"`}},
		{with("--requests", "x"), []string{"-requests", "want an integer"}},
		{with("--requests", "20000000"), []string{"--requests 20000000", "at most"}},
		{with("--duration", "-1s"), []string{"--duration -1s"}},
		{with("--duration", "1m", "--requests", "5"), []string{"--requests 5", "--duration 1m0s", "give one"}},
		{with("--rate", "1000000", "--duration", "1h"), []string{"--rate", "--duration", "requests expected"}},
		{with("--shared-prefix-groups", "-1"), []string{"--shared-prefix-groups -1"}},
		{with("--shared-prefix-tokens", "-1"), []string{"--shared-prefix-tokens -1"}},
		{with("--shared-prefix-groups", "2"), []string{"--shared-prefix-groups 2", "needs --shared-prefix-tokens"}},
		{with("--shared-prefix-tokens", "10"), []string{"--shared-prefix-tokens 10", "needs --shared-prefix-groups"}},
		{with("--shared-prefix-groups", "2", "--shared-prefix-tokens", "1024"), []string{"--shared-prefix-tokens 1024", "--isl 1024", "shortest prompt (1024 tokens)"}},
		{with("--shared-prefix-groups", "2", "--shared-prefix-tokens", "100", "--isl", "uniform:50:500"), []string{"--shared-prefix-tokens 100", "--isl uniform:50:500"}},
		{with("--shared-prefix-groups", "2", "--shared-prefix-tokens", "100", "--isl", "normal:90:500"), []string{"--shared-prefix-tokens 100", "mean prompt (90 tokens)"}},
		{with("--endpoint", "grpc"), []string{`--endpoint "grpc"`, "completions or chat"}},
		{with("--trace", "testdata/mini.jsonl", "--duration", "1m"), []string{"--duration 1m0s", "only for a synthetic workload"}},
		{with("--trace", "testdata/mini.jsonl", "--shared-prefix-groups", "2", "--shared-prefix-tokens", "8"), []string{"--shared-prefix-groups", "only for a synthetic workload"}},
		{[]string{"--simulate", "--rate", "1", "--endpoint", "chat"}, []string{"--endpoint chat", "not with --simulate"}},

		{[]string{"compare", "--concurrency", "2", "--isl", "uniform:9:1"}, []string{"--isl", "MIN 9 is above MAX 1"}},
		{[]string{"compare", "--concurrency", "2", "--duration", "1m", "--requests", "3"}, []string{"--requests 3", "--duration 1m0s"}},
		{[]string{"compare", "--concurrency", "2", "--endpoint", "text"}, []string{`--endpoint "text"`}},
		{[]string{"compare", "--simulate", "--rate", "1", "--endpoint", "chat"}, []string{"--endpoint chat"}},
		{[]string{"compare", "--concurrency", "2", "--shared-prefix-tokens", "5"}, []string{"--shared-prefix-groups"}},
		{[]string{"compare", "--concurrency", "2", "--duration", "10s", "--isl", "uniform:100:4000", "--osl", "200", "--max-model-len", "4096"},
			[]string{"--max-model-len 4096", "4200 tokens", "--isl uniform:100:4000"}},
	} {
		err := Run(context.Background(), tc.args, &bytes.Buffer{}, &bytes.Buffer{})
		for _, want := range tc.want {
			if err == nil || !strings.Contains(err.Error(), want) {
				t.Errorf("%v: error %v, want one containing %s", tc.args, err, want)
				break
			}
		}
	}
}

// TestRequestsFromEnvironment: --requests given by its environment variable is given,
// so it excludes --duration as the flag does.
func TestRequestsFromEnvironment(t *testing.T) {
	t.Setenv("TURBINE_REQUESTS", "7")
	err := Run(context.Background(), []string{"--model", "m", "--concurrency", "1", "--duration", "1s"}, &bytes.Buffer{}, &bytes.Buffer{})
	if err == nil || !strings.Contains(err.Error(), "--requests 7") {
		t.Fatalf("error %v, want one naming --requests 7", err)
	}
}

// recordingServer answers streaming completions like server, and chat completions in
// the chat wire format (a role chunk, content chunks, a finish chunk, usage with the
// prompt's words plus 5 template tokens), and keeps every prompt it got.
type recordingServer struct {
	*httptest.Server
	mu      sync.Mutex
	prompts [][]uint32
	texts   []string
}

func newRecordingServer(t *testing.T) *recordingServer {
	rs := &recordingServer{}
	rs.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var b struct {
			Prompt    []uint32 `json:"prompt"`
			MaxTokens int      `json:"max_tokens"`
			Messages  []struct {
				Content string `json:"content"`
			} `json:"messages"`
			MaxCompletionTokens int `json:"max_completion_tokens"`
		}
		if err := json.NewDecoder(r.Body).Decode(&b); err != nil {
			t.Errorf("body: %v", err)
		}
		w.Header().Set("Content-Type", "text/event-stream")
		switch r.URL.Path {
		case "/v1/completions":
			rs.mu.Lock()
			rs.prompts = append(rs.prompts, b.Prompt)
			rs.mu.Unlock()
			for range b.MaxTokens {
				fmt.Fprint(w, "data: {\"choices\":[{\"index\":0,\"text\":\"a\",\"finish_reason\":null}]}\n\n")
			}
			fmt.Fprintf(w, "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":%d,\"completion_tokens\":%d,\"prompt_tokens_details\":{\"cached_tokens\":%d}}}\n\ndata: [DONE]\n\n",
				len(b.Prompt), b.MaxTokens, len(b.Prompt)/2)
		case "/v1/chat/completions":
			if len(b.Messages) != 1 {
				t.Errorf("chat request with %d messages, want 1", len(b.Messages))
				return
			}
			rs.mu.Lock()
			rs.texts = append(rs.texts, b.Messages[0].Content)
			rs.mu.Unlock()
			fmt.Fprint(w, "data: {\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\"},\"finish_reason\":null}]}\n\n")
			for range b.MaxCompletionTokens {
				fmt.Fprint(w, "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\" a\"},\"finish_reason\":null}]}\n\n")
			}
			prompt := len(strings.Fields(b.Messages[0].Content)) + 5
			fmt.Fprintf(w, "data: {\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"length\"}]}\n\ndata: {\"choices\":[],\"usage\":{\"prompt_tokens\":%d,\"completion_tokens\":%d}}\n\ndata: [DONE]\n\n",
				prompt, b.MaxCompletionTokens)
		default:
			http.NotFound(w, r)
		}
	}))
	return rs
}

// TestRunSyntheticSharedPrefix: drawn lengths and a shared prefix reach the server (the
// prompts of one group begin with the same 70 tokens) and the summary holds the
// workload's hit-rate ceiling.
func TestRunSyntheticSharedPrefix(t *testing.T) {
	srv := newRecordingServer(t)
	defer srv.Close()
	dir := t.TempDir()
	var stdout, stderr bytes.Buffer
	args := []string{"--url", srv.URL, "--model", "m", "--isl", "uniform:100:300", "--osl", "normal:4:1", "--requests", "20",
		"--concurrency", "4", "--shared-prefix-groups", "2", "--shared-prefix-tokens", "70", "--block-tokens", "16",
		"--seed", "3", "--out", dir, "--progress-interval", "0"}
	if err := Run(context.Background(), args, &stdout, &stderr); err != nil {
		t.Fatalf("%v\n%s", err, stderr.String())
	}
	s := readSummary(t, filepath.Join(dir, "summary.json"))
	reqs, err := bench.SyntheticSpec{ISL: length(t, "uniform:100:300"), OSL: length(t, "normal:4:1"), Requests: 20,
		PrefixGroups: 2, PrefixTokens: 70, BlockTokens: 16, Seed: 3}.Generate()
	if err != nil {
		t.Fatal(err)
	}
	var in, out int64
	for _, r := range reqs {
		in += int64(r.InputLength)
		out += int64(r.OutputLength)
	}
	want := bench.Ceiling(reqs, 16)
	if s.Succeeded != 20 || s.InputTokens != in || s.OutputTokens != out || s.HitRateCeiling == nil || math.Abs(*s.HitRateCeiling-want) > 1e-12 || want == 0 {
		t.Fatalf("summary %+v: want 20 valid requests, %d input and %d output tokens, ceiling %v", s, in, out, want)
	}
	if s.Workload != "synthetic isl uniform:100:300 osl normal:4:1 shared prefix 2×70" {
		t.Fatalf("workload %q", s.Workload)
	}
	groups := map[[70]uint32]int{}
	for _, p := range srv.prompts {
		groups[[70]uint32(p[:70])]++
	}
	if len(groups) != 2 {
		t.Fatalf("%d distinct 70-token prefixes, want 2", len(groups))
	}
	if !strings.Contains(stdout.String(), "hit-rate ceiling") {
		t.Errorf("stdout has no ceiling:\n%s", stdout.String())
	}
}

// TestRunDuration: with --rate, --duration sends the Poisson arrivals drawn until then;
// without, a closed loop sends until then and waits for the answers in flight.
func TestRunDuration(t *testing.T) {
	srv := newRecordingServer(t)
	defer srv.Close()
	dir := t.TempDir()
	var stdout, stderr bytes.Buffer
	args := []string{"--url", srv.URL, "--model", "m", "--isl", "30", "--osl", "2", "--rate", "100", "--duration", "300ms",
		"--out", dir, "--progress-interval", "0"}
	if err := Run(context.Background(), args, &stdout, &stderr); err != nil {
		t.Fatalf("%v\n%s", err, stderr.String())
	}
	reqs, err := bench.SyntheticSpec{ISL: bench.FixedLength(30), OSL: bench.FixedLength(2), Rate: 100, Duration: 300 * time.Millisecond,
		BlockTokens: bench.DefaultBlockTokens, Seed: 1}.Generate()
	if err != nil {
		t.Fatal(err)
	}
	if s := readSummary(t, filepath.Join(dir, "summary.json")); s.Requests != len(reqs) || s.Succeeded != len(reqs) || s.Workload != "synthetic isl 30 osl 2 rate 100/s for 300ms" {
		t.Fatalf("summary %+v: want the %d arrivals before 300ms, all valid", s, len(reqs))
	}

	args = []string{"--url", srv.URL, "--model", "m", "--isl", "uniform:10:50", "--osl", "3", "--concurrency", "3", "--duration", "200ms",
		"--out", dir, "--progress-interval", "0"}
	stderr.Reset()
	if err := Run(context.Background(), args, &stdout, &stderr); err != nil {
		t.Fatalf("%v\n%s", err, stderr.String())
	}
	s := readSummary(t, filepath.Join(dir, "summary.json"))
	if s.Requests == 0 || s.Failed != 0 || s.HitRateCeiling != nil || !strings.Contains(stderr.String(), "a closed loop of 3 in flight for 200ms") {
		t.Fatalf("summary %+v: want some requests, all valid, no ceiling\n%s", s, stderr.String())
	}
}

// TestRunChatEndpoint: --endpoint chat sends text prompts whose words are the prompt's
// tokens, and the summary counts the server's prompt tokens.
func TestRunChatEndpoint(t *testing.T) {
	srv := newRecordingServer(t)
	defer srv.Close()
	dir := t.TempDir()
	var stdout, stderr bytes.Buffer
	args := []string{"--url", srv.URL, "--model", "m", "--endpoint", "chat", "--isl", "40", "--osl", "4", "--requests", "6",
		"--concurrency", "2", "--shared-prefix-groups", "1", "--shared-prefix-tokens", "20", "--out", dir, "--progress-interval", "0"}
	if err := Run(context.Background(), args, &stdout, &stderr); err != nil {
		t.Fatalf("%v\n%s", err, stderr.String())
	}
	s := readSummary(t, filepath.Join(dir, "summary.json"))
	if s.Succeeded != 6 || s.InputTokens != 6*(40+5) || s.OutputTokens != 24 || s.ITL.Count != 6*3 {
		t.Fatalf("summary %+v: want 6 valid answers of 45 prompt tokens (usage), 4 output tokens, 3 gaps each", s)
	}
	if len(srv.texts) != 6 || len(srv.prompts) != 0 {
		t.Fatalf("%d chat and %d completion requests, want 6 and 0", len(srv.texts), len(srv.prompts))
	}
	prefix := strings.Join(strings.Fields(srv.texts[0])[:20], " ")
	for _, text := range srv.texts {
		if len(strings.Fields(text)) != 40 || !strings.HasPrefix(text, prefix+" ") {
			t.Fatalf("prompt %q: want 40 words beginning with the shared 20", text)
		}
	}
}

// TestRunSimulateSharedPrefix: a simulated run of a shared-prefix workload for a
// duration reports the ceiling, and its hit rate stays below it (the engines cache whole
// 16-token KV blocks of the 70-token prefix: 64 tokens).
func TestRunSimulateSharedPrefix(t *testing.T) {
	dir := t.TempDir()
	var stdout, stderr bytes.Buffer
	args := []string{"--simulate", "--rate", "20", "--duration", "3s", "--isl", "lognormal:300:100", "--osl", "uniform:2:6",
		"--shared-prefix-groups", "3", "--shared-prefix-tokens", "70", "--workers", "2", "--block-size", "16",
		"--num-gpu-blocks", "1024", "--max-model-len", "4096", "--out", dir, "--progress-interval", "0"}
	if err := Run(context.Background(), args, &stdout, &stderr); err != nil {
		t.Fatalf("%v\n%s", err, stderr.String())
	}
	s := readSummary(t, filepath.Join(dir, "summary.json"))
	if s.Failed != 0 || s.Succeeded < 30 || s.HitRateCeiling == nil || s.PrefixCacheHitRate == nil ||
		*s.PrefixCacheHitRate <= 0 || *s.PrefixCacheHitRate > *s.HitRateCeiling {
		t.Fatalf("summary %+v: want about 60 valid requests, a hit rate above 0 and at most the ceiling", s)
	}
}

// TestCompareSyntheticFlags: compare takes the new workload flags: drawn lengths and a
// shared prefix (the table names the ceiling), and a closed loop for a duration (each
// mode's summary holds the ceiling of what it sent).
func TestCompareSyntheticFlags(t *testing.T) {
	out := t.TempDir()
	var stdout, stderr bytes.Buffer
	args := fakeServeArgs(t, "ok", out, "--modes", "kv,random", "--isl", "uniform:40:80", "--osl", "normal:3:1",
		"--shared-prefix-groups", "2", "--shared-prefix-tokens", "20")
	if err := Run(context.Background(), append([]string{"compare"}, args...), &stdout, &stderr); err != nil {
		t.Fatalf("%v\n%s", err, stderr.String())
	}
	var cmp Comparison
	b, err := os.ReadFile(filepath.Join(out, "compare.json"))
	if err != nil || json.Unmarshal(b, &cmp) != nil {
		t.Fatalf("compare.json: %v %s", err, b)
	}
	if len(cmp.Rows) != 2 || cmp.HitRateCeiling == nil || *cmp.HitRateCeiling <= 0 || !strings.Contains(cmp.Workload, "shared prefix 2×20") {
		t.Fatalf("comparison %+v: want 2 rows and the shared prefix's ceiling", cmp)
	}

	out = t.TempDir()
	stdout.Reset()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	args = []string{"compare", "--serve-executable", exe, "--modes", "kv,round-robin", "--workers", "2", "--isl", "40", "--osl", "2",
		"--concurrency", "2", "--duration", "150ms", "--shared-prefix-groups", "1", "--shared-prefix-tokens", "16",
		"--out", out, "--progress-interval", "0"}
	if err := Run(context.Background(), args, &stdout, &stderr); err != nil {
		t.Fatalf("%v\n%s", err, stderr.String())
	}
	for _, m := range []string{"kv", "round-robin"} {
		s := readSummary(t, filepath.Join(out, m, "summary.json"))
		if s.Requests == 0 || s.Failed != 0 || s.HitRateCeiling == nil {
			t.Fatalf("%s: summary %+v: want valid requests and a ceiling", m, s)
		}
	}
}

func length(t *testing.T, s string) bench.Length {
	t.Helper()
	l, err := bench.ParseLength(s)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// TestProgressSpinner: a run of a duration has no known total; its live bar counts the
// requests done without one.
func TestProgressSpinner(t *testing.T) {
	defer func(t time.Duration) { barThrottle = t }(barThrottle)
	barThrottle = 0
	var w bytes.Buffer
	p := newProgress(&w, 5*time.Second, -1, "loop", true)
	var r bench.Runner
	p.runner(&r)
	r.Observe(bench.ProgressState{Done: 4, Total: 7, InFlight: 3, TTFTP50: 12})
	r.Observe(bench.ProgressState{Done: 9, Total: 9})
	p.finish()
	out := w.String()
	for _, want := range []string{"loop: 3 in flight, 0 errors, TTFT p50 12.0 ms (4/-)", "(9/-)"} {
		if !strings.Contains(out, want) {
			t.Errorf("spinner output lacks %q:\n%q", want, out)
		}
	}
}
