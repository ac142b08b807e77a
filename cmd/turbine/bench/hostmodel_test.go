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
	"testing"
)

// TestCalibrateRefusesFasterService: a service whose answers come faster than the
// timing model lets engines of the flags given produce them (here, one that answers at
// once, as a serve at --speedup-ratio 10 looks to a calibration at the default 1) is
// refused with an error naming --speedup-ratio, and no host.json is written.
func TestCalibrateRefusesFasterService(t *testing.T) {
	srv, _ := freshPrompts(t, func(int) int { return 0 })
	dir := t.TempDir()
	var stdout, stderr bytes.Buffer
	err := Run(context.Background(), []string{"--calibrate", "--url", srv.URL, "--model", "m", "--out", dir}, &stdout, &stderr)
	if err == nil || !strings.Contains(err.Error(), "faster than") || !strings.Contains(err.Error(), "--speedup-ratio 1") {
		t.Fatalf("error %v: want one saying the answers came faster than the model at --speedup-ratio 1 allows\nstdout:\n%s", err, stdout.String())
	}
	if _, err := os.Stat(filepath.Join(dir, "host.json")); !os.IsNotExist(err) {
		t.Errorf("host.json written (%v)", err)
	}
}

// TestCalibrateRecordsEngineSettings: host.json records the engine settings the fit
// assumed, the speedup ratio first.
func TestCalibrateRecordsEngineSettings(t *testing.T) {
	srv, _ := freshPrompts(t, func(int) int { return 0 })
	dir := t.TempDir()
	var stdout, stderr bytes.Buffer
	// At a million times the reference speed every modelled step takes nanoseconds:
	// nothing can answer faster than that.
	args := []string{"--calibrate", "--url", srv.URL, "--model", "m", "--speedup-ratio", "1e6", "--block-size", "32",
		"--num-gpu-blocks", "4096", "--max-num-batched-tokens", "2048", "--max-model-len", "8192", "--out", dir}
	if err := Run(context.Background(), args, &stdout, &stderr); err != nil {
		t.Fatalf("%v\n%s", err, stderr.String())
	}
	data, err := os.ReadFile(filepath.Join(dir, "host.json"))
	if err != nil {
		t.Fatal(err)
	}
	var got map[string]any
	if err := json.Unmarshal(data, &got); err != nil {
		t.Fatal(err)
	}
	for k, v := range map[string]float64{"speedup_ratio": 1e6, "block_size": 32, "num_gpu_blocks": 4096,
		"max_num_batched_tokens": 2048, "max_model_len": 8192, "timer_resolution_ms": ms(TimerResolution())} {
		if got[k] != v {
			t.Errorf("host.json %s = %v, want %v", k, got[k], v)
		}
	}
}

// TestSimulateRefusesHostModelOfAnotherSpeed: a host model measured at one speedup
// ratio is refused by a simulation at another (a file that does not say is refused:
// TestHostModelFileIsCalibrates).
func TestSimulateRefusesHostModelOfAnotherSpeed(t *testing.T) {
	dir := t.TempDir()
	hostFile := filepath.Join(dir, "host.json")
	if err := os.WriteFile(hostFile, []byte(`{"timer_resolution_ms": 1, "step_overhead_ms": 0.2, "request_overhead_ms": 3, "request_token_overhead_us": 0, "speedup_ratio": 10}`), 0o644); err != nil {
		t.Fatal(err)
	}
	run := func(extra ...string) error {
		args := append([]string{"--simulate", "--trace", "testdata/mini.jsonl", "--workers", "1", "--max-model-len", "2048",
			"--host-model", hostFile, "--out", t.TempDir()}, extra...)
		return Run(context.Background(), args, &bytes.Buffer{}, &bytes.Buffer{})
	}
	err := run()
	if err == nil || !strings.Contains(err.Error(), "--host-model "+hostFile+": measured at --speedup-ratio 10") ||
		!strings.Contains(err.Error(), "--speedup-ratio 1") {
		t.Fatalf("error %v: want one naming both speedup ratios", err)
	}
	if err := run("--speedup-ratio", "10"); err != nil {
		t.Fatalf("at the same speedup ratio: %v", err)
	}
}

// TestCalibrateNamesMaxModelLen: a serve of a shorter context than --max-model-len
// refuses the longest calibration prompts; the error says which flag to give.
func TestCalibrateNamesMaxModelLen(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var b struct {
			Prompt    []uint32 `json:"prompt"`
			MaxTokens int      `json:"max_tokens"`
		}
		_ = json.NewDecoder(r.Body).Decode(&b)
		if len(b.Prompt)+b.MaxTokens > 8192 {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusBadRequest)
			fmt.Fprintf(w, `{"error":{"message":"This model's maximum context length is 8192 tokens. However, you requested %d tokens.","type":"invalid_request_error","code":"context_length_exceeded"}}`,
				len(b.Prompt)+b.MaxTokens)
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		for range b.MaxTokens {
			fmt.Fprint(w, "data: {\"choices\":[{\"index\":0,\"text\":\"a\",\"finish_reason\":null}]}\n\n")
		}
		fmt.Fprintf(w, "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":%d,\"completion_tokens\":%d,\"prompt_tokens_details\":{\"cached_tokens\":0}}}\n\ndata: [DONE]\n\n",
			len(b.Prompt), b.MaxTokens)
	}))
	t.Cleanup(srv.Close)
	err := Run(context.Background(), []string{"--calibrate", "--url", srv.URL, "--model", "m", "--speedup-ratio", "1e6", "--out", t.TempDir()},
		&bytes.Buffer{}, &bytes.Buffer{})
	if err == nil || !strings.Contains(err.Error(), "16384 prompt tokens failed: http_400") || !strings.Contains(err.Error(), "--max-model-len 32768") {
		t.Fatalf("error %v: want the refusal and --max-model-len named", err)
	}
}
