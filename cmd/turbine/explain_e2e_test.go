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

// TestE2EExplainedRouteAndVerifiedHits: through `turbine serve` with mock engines, a
// prompt sent again once its blocks reached the router's index is routed to the worker
// holding them; the `turbine` extension explains the choice (every worker a candidate,
// the chosen one marked, kv's cost terms adding up to its cost), its predicted overlap is
// the cached tokens the engine delivered, and /metrics counts both per worker, with no
// gap flagged.
func TestE2EExplainedRouteAndVerifiedHits(t *testing.T) {
	s := startServe(t, 2, "--speedup-ratio", "50", "--router-mode", "kv")
	prompt := longText("feldspar", 300) // ~900 tokens: many 64-token blocks
	type candidate struct {
		WorkerID      string             `json:"worker_id"`
		OverlapBlocks int                `json:"overlap_blocks"`
		Cost          float64            `json:"cost"`
		Terms         map[string]float64 `json:"terms"`
		Chosen        bool               `json:"chosen"`
	}
	type answer struct {
		Usage struct {
			PromptTokens        int `json:"prompt_tokens"`
			PromptTokensDetails struct {
				CachedTokens int `json:"cached_tokens"`
			} `json:"prompt_tokens_details"`
		} `json:"usage"`
		Turbine struct {
			WorkerID     string `json:"worker_id"`
			CachedTokens int    `json:"cached_tokens"`
			Route        *struct {
				PredictedOverlapTokens int         `json:"predicted_overlap_tokens"`
				Candidates             []candidate `json:"candidates"`
			} `json:"route"`
		} `json:"turbine"`
	}
	ask := func() answer {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		resp, err := s.postJSONRetried(ctx, "/v1/completions", map[string]any{
			"model": model, "prompt": prompt, "max_tokens": 4, "ignore_eos": true,
			"turbine": map[string]any{"explain_route": true}})
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		raw, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("status %d: %s", resp.StatusCode, raw)
		}
		var a answer
		if err := json.Unmarshal(raw, &a); err != nil || a.Turbine.Route == nil {
			t.Fatalf("no turbine.route in %s (%v)", raw, err)
		}
		return a
	}
	first := ask()
	w := first.Turbine.WorkerID
	s.waitFor(10*time.Second, "the prompt's blocks in the router's index", func() bool { return s.indexed(w) > 10 })
	second := ask()
	r := second.Turbine.Route
	cached := second.Usage.PromptTokensDetails.CachedTokens
	switch {
	case second.Turbine.WorkerID != w:
		t.Fatalf("the repeated prompt went to %s, want %s, which holds it", second.Turbine.WorkerID, w)
	case cached < second.Usage.PromptTokens/2:
		t.Fatalf("cached %d of %d prompt tokens", cached, second.Usage.PromptTokens)
	case r.PredictedOverlapTokens != cached:
		t.Fatalf("predicted overlap %d tokens, delivered %d", r.PredictedOverlapTokens, cached)
	case len(r.Candidates) != 2:
		t.Fatalf("candidates %+v, want both workers", r.Candidates)
	}
	for _, c := range r.Candidates {
		if c.Chosen != (c.WorkerID == w) {
			t.Errorf("candidate %+v: chosen wrong (served by %s)", c, w)
		}
		if sum := c.Terms["weighted_prefill_blocks"] + c.Terms["decode_blocks"]; len(c.Terms) != 2 || sum != c.Cost {
			t.Errorf("candidate %+v: terms do not add up to the cost", c)
		}
		if c.Chosen && c.OverlapBlocks*64 < cached {
			t.Errorf("candidate %+v: overlap under the %d tokens delivered", c, cached)
		}
	}
	// Both requests counted on the worker that served them: predicted == delivered.
	want := float64(first.Usage.PromptTokensDetails.CachedTokens + cached)
	var pred, deliv, gap float64 = -1, -1, -1
	s.waitFor(10*time.Second, "the hit counters", func() bool {
		resp, err := http.Get(s.url + "/metrics")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		for _, line := range strings.Split(string(body), "\n") {
			name, labels, v, ok := parseMetricLine(line)
			if !ok || labels["model"] != model || labels["worker"] != w {
				continue
			}
			switch name {
			case "turbine_frontend_predicted_cached_tokens_total":
				pred = v
			case "turbine_frontend_delivered_cached_tokens_total":
				deliv = v
			case "turbine_frontend_cache_hit_gap":
				gap = v
			}
		}
		return deliv == want
	})
	if pred != want || gap != 0 {
		t.Fatalf("worker %s: predicted %v, delivered %v, gap %v; want %v, %v, 0", w, pred, deliv, gap, want, want)
	}
	s.waitIdle(t)
}
