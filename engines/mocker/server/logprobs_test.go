package server

import (
	"bytes"
	"fmt"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// goldenBody compares an answer with testdata/name after blanking its random id and
// creation time (-update rewrites the file).
func goldenBody(t *testing.T, name string, got []byte) {
	t.Helper()
	got = regexp.MustCompile(`"id":"cmpl-[0-9a-f]+"`).ReplaceAll(got, []byte(`"id":"cmpl-ID"`))
	got = regexp.MustCompile(`"created":[0-9]+`).ReplaceAll(got, []byte(`"created":0`))
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run with -update)", err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("answer differs from %s:\n%s", path, got)
	}
}

// vLLM's completions logprobs: the choice's logprobs object over the output tokens and
// prompt_logprobs, tokens named by id or decoded.
func TestVLLMCompletionLogprobs(t *testing.T) {
	_, hs := startServer(t, testOptions(t))
	for _, tc := range []struct{ name, body string }{
		{"vllm_logprobs_ids.json", `{"prompt":[1000,1003,1006,1009],"max_tokens":4,"ignore_eos":true,"logprobs":2,"prompt_logprobs":1,"return_tokens_as_token_ids":true,"return_token_ids":true}`},
		{"vllm_logprobs_text.json", `{"prompt":"The capital of France is","max_tokens":3,"ignore_eos":true,"logprobs":0}`},
	} {
		resp, b := post(t, hs.URL, tc.body)
		if resp.StatusCode != 200 {
			t.Fatalf("%s: %d %s", tc.name, resp.StatusCode, b)
		}
		goldenBody(t, tc.name, b)
		c := decodeMap(t, b)["choices"].([]any)[0].(map[string]any)
		lp := c["logprobs"].(map[string]any)
		if n := len(lp["tokens"].([]any)); n != 3 && n != 4 {
			t.Fatalf("%s: %d tokens", tc.name, n)
		}
		for i, top := range lp["top_logprobs"].([]any) {
			sum := 0.0
			for _, v := range top.(map[string]any) {
				sum += math.Exp(v.(float64))
			}
			if sum > 1 {
				t.Fatalf("%s: position %d sums to %v", tc.name, i, sum)
			}
		}
	}
	// Streamed: the same logprobs, one position per chunk, text offsets running on.
	resp, err := http.Post(hs.URL+"/v1/completions", "application/json", strings.NewReader(`{"prompt":"The capital of France is","max_tokens":3,"ignore_eos":true,"logprobs":0,"stream":true}`))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var frames strings.Builder
	for _, ev := range readSSE(t, resp.Body) {
		fmt.Fprintf(&frames, "data: %s\n\n", ev.raw)
	}
	goldenBody(t, "vllm_logprobs_stream.txt", []byte(frames.String()))
}
