package main

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestE2EApproximateRouting: through `turbine serve` with mock engines started without
// KV events, the router shows every worker in approximate index mode on /metrics and
// routes a repeated prompt (and a sibling sharing its prefix) to the worker it placed
// the first on, where the engine delivers cached tokens, though no KV event ever
// reached the router.
func TestE2EApproximateRouting(t *testing.T) {
	s := startServe(t, 2, "--speedup-ratio", "50", "--mocker-kv-events=false")
	ask := func(prompt string) (worker string, cached, promptTokens int) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		resp, err := s.postJSONRetried(ctx, "/v1/completions", map[string]any{
			"model": model, "prompt": prompt, "max_tokens": 4, "ignore_eos": true})
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		raw, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("status %d: %s", resp.StatusCode, raw)
		}
		var a struct {
			Usage struct {
				PromptTokens        int `json:"prompt_tokens"`
				PromptTokensDetails struct {
					CachedTokens int `json:"cached_tokens"`
				} `json:"prompt_tokens_details"`
			} `json:"usage"`
		}
		if err := json.Unmarshal(raw, &a); err != nil {
			t.Fatal(err)
		}
		return resp.Header.Get("X-Turbine-Worker"), a.Usage.PromptTokensDetails.CachedTokens, a.Usage.PromptTokens
	}
	modes := func() map[string]string {
		out := map[string]string{}
		resp, err := http.Get(s.url + "/metrics")
		if err != nil {
			return out
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		for _, line := range strings.Split(string(body), "\n") {
			name, labels, v, ok := parseMetricLine(line)
			if ok && name == "turbine_router_worker_index_mode" && labels["model"] == model && v == 1 {
				out[labels["worker"]] = labels["mode"]
			}
		}
		return out
	}
	s.waitFor(10*time.Second, "both workers' index mode on /metrics", func() bool { return len(modes()) == 2 })
	for w, m := range modes() {
		if m != "approximate" {
			t.Fatalf("worker %s: index mode %q, want approximate (its engine publishes no KV events)", w, m)
		}
	}
	prefix := longText("obsidian", 300) // ~900 tokens: many 64-token blocks
	first, _, _ := ask(prefix)
	for i, p := range []string{prefix, prefix + " and a different question"} {
		w, cached, n := ask(p)
		if w != first {
			t.Fatalf("request %d went to %s, want %s, where the router placed the prefix", i+2, w, first)
		}
		if cached < n/2 {
			t.Fatalf("request %d: %d of %d prompt tokens cached", i+2, cached, n)
		}
	}
	if s.indexed(first) != 0 {
		t.Fatalf("worker %s has %v indexed blocks without KV events", first, s.indexed(first))
	}
	s.waitIdle(t)
}
