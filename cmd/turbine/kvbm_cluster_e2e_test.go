package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"testing"
	"time"
)

// kvbmExplained is the part of an explained completion TestKvbmClusterInventory reads.
type kvbmExplained struct {
	Usage struct {
		PromptTokens        int `json:"prompt_tokens"`
		PromptTokensDetails struct {
			CachedTokens int `json:"cached_tokens"`
		} `json:"prompt_tokens_details"`
	} `json:"usage"`
	Turbine struct {
		WorkerID string `json:"worker_id"`
		Route    *struct {
			Candidates []struct {
				WorkerID      string             `json:"worker_id"`
				OverlapBlocks int                `json:"overlap_blocks"`
				Terms         map[string]float64 `json:"terms"`
				Chosen        bool               `json:"chosen"`
			} `json:"candidates"`
		} `json:"route"`
	} `json:"turbine"`
}

// explainedCompletion sends prompt to s with the route explained.
func explainedCompletion(t *testing.T, s *server, prompt string) kvbmExplained {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	resp, err := s.postJSONRetried(ctx, "/v1/completions", map[string]any{
		"model": model, "prompt": prompt, "max_tokens": 2, "ignore_eos": true,
		"turbine": map[string]any{"explain_route": true}})
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d: %s", resp.StatusCode, raw)
	}
	var a kvbmExplained
	if err := json.Unmarshal(raw, &a); err != nil || a.Turbine.Route == nil {
		t.Fatalf("no turbine.route in %s (%v)", raw, err)
	}
	return a
}

// TestKvbmClusterInventory: a Consul cluster of a frontend and `turbine node --kvbm` with
// two mock workers whose GPU caches hold a few prompts. Prompts that overflow the caches
// make the engines offload evicted blocks to the node's block manager, which publishes
// them to the model's Router grain; the first prompt, sent again once its blocks left
// the GPUs, is explained with host-tier hits, its usage counts the onboarded tokens as
// cached, GET /admin/kvbm lists the node with offloads and onboards, and the frontend's
// /metrics carries the router's tier index (the turbine_kvbm_* families live on the
// node's process, which has no HTTP endpoint: docs/reference.md §9.5).
func TestKvbmClusterInventory(t *testing.T) {
	c := newLocalCluster(t)
	fe := c.frontend("frontend")
	// 64-token blocks of 64 bytes per token (4 KiB blocks); 24 GPU blocks per worker:
	// a ~900-token prompt takes 15 of them.
	c.node("kvbm-node", 2, "--kvbm", "--kvbm-resp-port", "0", "--kvbm-lm-port", "-1", "--kvbm-host-bytes", "64MiB",
		"--num-gpu-blocks", "24", "--max-model-len", "1536", "--kv-bytes-per-token", "64")
	fe.waitReady(model, 2)
	first := longText("feldspar", 300)
	a := explainedCompletion(t, fe, first)
	if a.Usage.PromptTokens < 15*64 {
		t.Fatalf("the first prompt has %d tokens, want at least 15 blocks", a.Usage.PromptTokens)
	}
	// Eight more prompts of as many blocks: each worker's cache evicts the first's blocks.
	for i := 0; i < 8; i++ {
		explainedCompletion(t, fe, longText(fmt.Sprintf("quartz%d", i), 300))
	}
	fe.waitFor(20*time.Second, "the node's offloaded blocks in the router's tier index", func() bool {
		return metricSum(fe, "turbine_router_tier_blocks") >= 10
	})
	again := explainedCompletion(t, fe, first)
	var host float64
	for _, cand := range again.Turbine.Route.Candidates {
		if cand.Chosen {
			host = cand.Terms["host_hit_blocks"]
			if cand.OverlapBlocks*64 >= again.Usage.PromptTokensDetails.CachedTokens {
				t.Errorf("candidate %+v: its GPU hit covers the %d cached tokens, nothing was onboarded",
					cand, again.Usage.PromptTokensDetails.CachedTokens)
			}
		}
	}
	if host <= 0 || again.Usage.PromptTokensDetails.CachedTokens < int(host)*64 {
		t.Fatalf("resent prompt: host_hit_blocks %v, cached tokens %d of %d: want host hits, counted as cached (%+v)",
			host, again.Usage.PromptTokensDetails.CachedTokens, again.Usage.PromptTokens, again.Turbine.Route)
	}
	var l kvbmList
	fe.waitFor(10*time.Second, "the node's offloads and onboards in GET /admin/kvbm", func() bool {
		l = fe.kvbm()
		return len(l.Nodes) == 1 && l.Nodes[0].NodeID == "kvbm-node" && l.Nodes[0].Offloads > 0 && l.Nodes[0].Onboards > 0
	})
	if n := l.Nodes[0]; len(n.Models) != 1 || n.Models[0] != model || n.OffloadBytes == 0 || n.OnboardBytes == 0 {
		t.Fatalf("GET /admin/kvbm: %+v", l)
	}
	fe.waitFor(10*time.Second, "the routed host-tier hits in /metrics", func() bool {
		return metricSum(fe, "turbine_router_tier_hit_blocks_total") >= host
	})
}
