package server

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/turbine-llm/turbine/kv"
)

// hostTier is a lower tier holding every block in host memory.
type hostTier struct{}

func (hostTier) Offload(uint64) {}
func (hostTier) Match(hs []uint64) []kv.Tier {
	out := make([]kv.Tier, len(hs))
	for i := range out {
		out[i] = kv.TierHost
	}
	return out
}
func (hostTier) Onboard(hs []uint64) int { return len(hs) }

// TestLoopWakesAfterLoad: a request alone on the engine whose prefix a lower tier holds
// is answered once its load ends; the loop steps again at the load's end rather than
// waiting for another request (docs/reference.md §9.6).
func TestLoopWakesAfterLoad(t *testing.T) {
	o := testOptions(t)
	o.Engine.Tiers = hostTier{}
	o.Engine.TierGBps = kv.TierBandwidth{Host: 0.002} // 40 blocks of 16 tokens: 419 ms / 100
	prompt := promptIDs(40*16 + 1)
	load := o.Engine.OnboardTime(kv.TierHost, 40)
	_, hs := startServer(t, o)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	body := fmt.Sprintf(`{"model":"turbine-mock","prompt":%s,"max_tokens":2,"ignore_eos":true}`, jsonIDs(prompt))
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, hs.URL+"/v1/completions", strings.NewReader(body))
	start := time.Now()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("no answer: %v (the loop did not step after the load)", err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d: %s", resp.StatusCode, b)
	}
	if took := time.Since(start); took < load {
		t.Fatalf("answered in %v, before the load's %v", took, load)
	}
	m := decodeMap(t, b)
	usage := m["usage"].(map[string]any)
	if d, ok := usage["prompt_tokens_details"].(map[string]any); ok && d["cached_tokens"] != float64(40*16) {
		t.Fatalf("cached tokens %v, want %d", d["cached_tokens"], 40*16)
	}
}
