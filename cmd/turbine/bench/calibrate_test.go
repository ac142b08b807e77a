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
	"sync"
	"testing"
	"time"

	"github.com/turbine-llm/turbine/bench/sim"
)

func TestHostFlagErrors(t *testing.T) {
	dir := t.TempDir()
	file := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	simRun := []string{"--simulate", "--trace", "testdata/mini.jsonl", "--max-model-len", "2048", "--out", dir}
	with := func(more ...string) []string { return append(append([]string{}, simRun...), more...) }
	big := file("big.json", `{"step_overhead_ms": 1, "url": "`+strings.Repeat("a", maxHostFile)+`"}`)
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"real run", []string{"--model", "m", "--step-overhead", "1ms"}, "--step-overhead: only with --simulate"},
		{"real run with a file", []string{"--model", "m", "--host-model", "h.json"}, "--host-model: only with --simulate"},
		{"negative step overhead", with("--step-overhead", "-1ms"), "--step-overhead -1ms: want 0 to 1h0m0s"},
		{"resolution of a day", with("--timer-resolution", "24h"), "--timer-resolution 24h0m0s: want 0 to 1h0m0s"},
		{"request overhead", with("--request-overhead", "-1s"), "--request-overhead -1s"},
		{"token overhead above 1 ms", with("--request-token-overhead", "2ms"), "--request-token-overhead 2ms: want 0 to 1ms"},
		{"file and a flag", with("--host-model", file("ok.json", `{"step_overhead_ms": 1}`), "--step-overhead", "1ms"),
			"--step-overhead 1ms: not with --host-model"},
		{"missing file", with("--host-model", filepath.Join(dir, "none.json")), "--host-model: open"},
		{"not JSON", with("--host-model", file("bad.json", "step: 1")), "--host-model " + dir + "/bad.json: invalid character"},
		{"wrong type", with("--host-model", file("str.json", `{"step_overhead_ms": "1ms"}`)), "cannot unmarshal string"},
		{"negative figure", with("--host-model", file("neg.json", `{"request_overhead_ms": -2}`)), "request_overhead_ms -2ms: want 0 to 1h0m0s"},
		{"figure of years", with("--host-model", file("years.json", `{"step_overhead_ms": 1e12}`)), "step_overhead_ms 1e+12: want a number of 0 to an hour"},
		{"token figure above 1 ms", with("--host-model", file("tok.json", `{"request_token_overhead_us": 1500}`)), "request_token_overhead_us 1.5ms: want 0 to 1ms"},
		{"too large", with("--host-model", big), "larger than 1048576 bytes"},
		{"calibrate with a trace", []string{"--calibrate", "--model", "m", "--trace", "testdata/mini.jsonl"}, "--trace testdata/mini.jsonl: not with --calibrate"},
		{"calibrate with simulate", []string{"--calibrate", "--model", "m", "--simulate"}, "--simulate true: not with --calibrate"},
		{"calibrate with workers", []string{"--calibrate", "--model", "m", "--workers", "4"}, "--workers 4: not with --calibrate"},
		{"calibrate without a model", []string{"--calibrate"}, "--model: required"},
		{"calibrate with a bad url", []string{"--calibrate", "--model", "m", "--url", "localhost:1"}, "--url"},
		{"calibrate with a bad speedup", []string{"--calibrate", "--model", "m", "--speedup-ratio", "0"}, "--speedup-ratio 0"},
		{"calibrate with a short context", []string{"--calibrate", "--model", "m", "--url", "http://127.0.0.1:1", "--max-model-len", "100"},
			"--max-model-len 100: want at least 192 tokens"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			err := Run(context.Background(), tc.args, &stdout, &stderr)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v: want one with %q", err, tc.want)
			}
		})
	}
}

// TestSimulateWithHostModel: a host.json's figures reach the simulation, as do the four
// flags, and lengthen what the plain simulation gives by what the model says.
func TestSimulateWithHostModel(t *testing.T) {
	dir := t.TempDir()
	hostFile := filepath.Join(dir, "host.json")
	if err := os.WriteFile(hostFile, []byte(`{"timer_resolution_ms": 1, "step_overhead_ms": 0.5, "request_overhead_ms": 3, "request_token_overhead_us": 2, "speedup_ratio": 10}`), 0o644); err != nil {
		t.Fatal(err)
	}
	run := func(extra ...string) (summaryTTFT, summaryITL float64, stderr string) {
		out := t.TempDir()
		var so, se bytes.Buffer
		args := append([]string{"--simulate", "--trace", "testdata/mini.jsonl", "--workers", "1", "--block-size", "16",
			"--num-gpu-blocks", "256", "--max-model-len", "2048", "--speedup-ratio", "10", "--out", out}, extra...)
		if err := Run(context.Background(), args, &so, &se); err != nil {
			t.Fatalf("%v\n%s", err, se.String())
		}
		s := readSummary(t, filepath.Join(out, "summary.json"))
		return s.TTFT.Min, s.ITL.Min, se.String()
	}
	plainTTFT, plainITL, plainErr := run()
	fileTTFT, fileITL, fileErr := run("--host-model", hostFile)
	flagTTFT, flagITL, _ := run("--timer-resolution", "1ms", "--step-overhead", "500us", "--request-overhead", "3ms", "--request-token-overhead", "2us")
	if strings.Contains(plainErr, "host model") || !strings.Contains(fileErr, "bench: host model: steps rounded up to 1ms plus 500µs, requests plus 3ms and 2µs per prompt token") {
		t.Errorf("stderr without a model:\n%s\nwith one:\n%s", plainErr, fileErr)
	}
	if fileTTFT != flagTTFT || fileITL != flagITL {
		t.Errorf("the file gave TTFT %v, ITL %v; the flags %v, %v: want the same", fileTTFT, fileITL, flagTTFT, flagITL)
	}
	// The shortest gap: a decode step of 5.74 ms / 10 (and a little more for the KV in
	// use) is 1 ms plus 0.5 ms; the first token comes at least 3 ms plus 2 µs per prompt
	// token later.
	if plainITL >= 1 || fileITL != 1.5 {
		t.Errorf("ITL min %v ms plain, %v ms with the model: want below 1, and 1.5", plainITL, fileITL)
	}
	if fileTTFT < plainTTFT+3 {
		t.Errorf("TTFT min %v ms plain, %v ms with the model: want at least 3 ms more", plainTTFT, fileTTFT)
	}
}

// freshPrompts answers streaming completions at once, with no cached token, and
// records each request's prompt length and max_tokens.
func freshPrompts(t *testing.T, cached func(prompt int) int) (*httptest.Server, func() [][2]int) {
	var mu sync.Mutex
	var seen [][2]int
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var b struct {
			Prompt    []uint32 `json:"prompt"`
			MaxTokens int      `json:"max_tokens"`
		}
		if err := json.NewDecoder(r.Body).Decode(&b); err != nil {
			t.Errorf("body: %v", err)
		}
		mu.Lock()
		seen = append(seen, [2]int{len(b.Prompt), b.MaxTokens})
		mu.Unlock()
		w.Header().Set("Content-Type", "text/event-stream")
		for range b.MaxTokens {
			fmt.Fprint(w, "data: {\"choices\":[{\"index\":0,\"text\":\"a\",\"finish_reason\":null}]}\n\n")
			w.(http.Flusher).Flush()
		}
		fmt.Fprintf(w, "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":%d,\"completion_tokens\":%d,\"prompt_tokens_details\":{\"cached_tokens\":%d}}}\n\ndata: [DONE]\n\n",
			len(b.Prompt), b.MaxTokens, cached(len(b.Prompt)))
	}))
	t.Cleanup(srv.Close)
	return srv, func() [][2]int {
		mu.Lock()
		defer mu.Unlock()
		return append([][2]int(nil), seen...)
	}
}

// TestCalibrate runs --calibrate against a server that answers at once: it sends the
// warm-up and the calibration requests one at a time, writes host.json and prints the
// flags that give its figures.
func TestCalibrate(t *testing.T) {
	srv, seen := freshPrompts(t, func(int) int { return 0 })
	dir := t.TempDir()
	var stdout, stderr bytes.Buffer
	// A server that answers at once is faster than any engine slower than a million
	// times the timing model (TestCalibrateRefusesFasterService).
	args := []string{"--calibrate", "--url", srv.URL, "--model", "m", "--max-model-len", "8192", "--speedup-ratio", "1e6", "--out", dir}
	if err := Run(context.Background(), args, &stdout, &stderr); err != nil {
		t.Fatalf("%v\n%s", err, stderr.String())
	}
	// 16384 tokens do not fit 8192: a warm-up of 128, then 128 and 4096 three times.
	want := [][2]int{{128, 64}, {128, 64}, {4096, 64}, {128, 64}, {4096, 64}, {128, 64}, {4096, 64}}
	if got := seen(); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("requests (prompt, max_tokens) %v, want %v", got, want)
	}
	data, err := os.ReadFile(filepath.Join(dir, "host.json"))
	if err != nil {
		t.Fatal(err)
	}
	var hf HostFile
	if err := json.Unmarshal(data, &hf); err != nil {
		t.Fatal(err)
	}
	h, err := hf.Host()
	if err != nil {
		t.Fatal(err)
	}
	// Tokens come faster than the timing model's decode steps: no step overhead. The
	// first token costs what sending the prompt costs (JSON both ways), which the
	// request overheads hold, whatever they come to on this machine.
	if h.StepOverhead != 0 || h.RequestOverhead < 0 || h.RequestTokenOverhead < 0 || len(hf.Samples) != 6 ||
		hf.URL != srv.URL || hf.Model != "m" || hf.SpeedupRatio != 1e6 {
		t.Errorf("host.json %+v, model %+v", hf, h)
	}
	if _, err := time.Parse(time.RFC3339, hf.MeasuredAt); err != nil {
		t.Errorf("measured_at: %v", err)
	}
	if out := stdout.String(); !strings.Contains(out, "--host-model "+filepath.Join(dir, "host.json")) || !strings.Contains(out, hostArgs(h)) {
		t.Errorf("stdout:\n%s", out)
	}
	if n := strings.Count(stderr.String(), "prompt tokens: TTFT"); n != 6 {
		t.Errorf("stderr reports %d answers, want 6:\n%s", n, stderr.String())
	}
}

func TestCalibrateRefusesCachedPrompts(t *testing.T) {
	srv, _ := freshPrompts(t, func(n int) int { return n / 2 })
	var stdout, stderr bytes.Buffer
	err := Run(context.Background(), []string{"--calibrate", "--url", srv.URL, "--model", "m", "--out", t.TempDir()}, &stdout, &stderr)
	if err == nil || !strings.Contains(err.Error(), "served 64 of a fresh prompt's 128 tokens from a cache") {
		t.Fatalf("error %v: want the cached prompt named", err)
	}
}

func TestHostFileRoundTrip(t *testing.T) {
	for _, h := range []sim.Host{
		{},
		{TimerResolution: time.Millisecond, StepOverhead: 312345 * time.Nanosecond, RequestOverhead: 2937436 * time.Nanosecond,
			RequestTokenOverhead: 1491 * time.Nanosecond},
	} {
		hf := HostFile{TimerResolutionMS: ms(h.TimerResolution), StepOverheadMS: ms(h.StepOverhead), RequestOverheadMS: ms(h.RequestOverhead),
			RequestTokenOverheadUS: float64(h.RequestTokenOverhead) / float64(time.Microsecond)}
		data, err := json.Marshal(hf)
		if err != nil {
			t.Fatal(err)
		}
		var back HostFile
		if err := json.Unmarshal(data, &back); err != nil {
			t.Fatal(err)
		}
		if got, err := back.Host(); err != nil || got != h {
			t.Errorf("%+v came back as %+v (%v)", h, got, err)
		}
	}
}
