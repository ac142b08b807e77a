package server

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/go-zeromq/zmq4"

	"github.com/turbine-llm/turbine/engines/kvevents"
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

// TestIdleStepPublishesItsEvents: a step that only admits a request whose prefix a lower
// tier holds runs nothing (Idle) but allocates the blocks of the load, evicting cached
// ones; their BlockRemoved events are published like any step's. Lost, they left a
// router's index holding blocks the engine no longer had, with no gap in the events'
// numbering to show it.
func TestIdleStepPublishesItsEvents(t *testing.T) {
	o := testOptions(t)
	o.Engine.NumGPUBlocks = 16
	o.Engine.MaxModelLen = 256
	o.Engine.Tiers = hostTier{}
	var err error
	o.KVEvents, err = kvevents.ParseConfig(`{"enable_kv_cache_events":true,"publisher":"zmq","endpoint":"tcp://*:0","topic":"kv-events"}`)
	if err != nil {
		t.Fatal(err)
	}
	s, hs := startServer(t, o)
	ep, _ := kvevents.ConsumerEndpoint(s.KVEventsEndpoint())
	msgs := subscribeKVEvents(t, ep)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	held := map[uint64]bool{} // blocks stored since the subscription took effect, not removed
	apply := func(m zmq4.Msg) {
		_, b, err := kvevents.DecodeMessage(m.Frames)
		if err != nil {
			t.Fatal(err)
		}
		for _, ev := range b.Events {
			for _, h := range ev.EngineHashes {
				switch ev.Kind {
				case kv.BlockStored:
					held[h] = true
				case kv.BlockRemoved:
					delete(held, h)
				}
			}
		}
	}
	// One-block prompts (computed: nothing precedes their last token) until a batch
	// shows the subscription in effect; every later one's block is seen stored.
	for i, seen := 0, false; !seen || len(held) < 4; i++ {
		post(t, hs.URL, fmt.Sprintf(`{"prompt":%s,"max_tokens":1}`, jsonIDs(promptIDs(16 + i)[i:])))
		for drained := false; !drained; {
			select {
			case m := <-msgs:
				apply(m)
				seen = true
			case <-time.After(50 * time.Millisecond):
				drained = true
			case <-ctx.Done():
				t.Fatal("no KV event message received")
			}
		}
	}
	// 16 blocks: 15 onboarded and the last computed take the whole cache, evicting every
	// one-block prompt's block in the step that admits the load.
	big := make([]uint32, 15*16+1)
	for i := range big {
		big[i] = uint32(60000 + i)
	}
	post(t, hs.URL, fmt.Sprintf(`{"prompt":%s,"max_tokens":1}`, jsonIDs(big)))
	for drained := false; !drained; {
		select {
		case m := <-msgs:
			apply(m)
		case <-time.After(300 * time.Millisecond):
			drained = true
		}
	}
	cached := metricLine(t, getMetrics(t, hs.URL), "turbine_mocker_kv_cached_blocks")
	if float64(len(held)) != cached {
		t.Fatalf("the events leave %d blocks held, the engine caches %v", len(held), cached)
	}
}

// metricLine returns the value of the unlabelled metric name in a /metrics body.
func metricLine(t *testing.T, body, name string) float64 {
	t.Helper()
	for _, line := range strings.Split(body, "\n") {
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			if err != nil {
				t.Fatalf("%s: %v", line, err)
			}
			return f
		}
	}
	t.Fatalf("/metrics has no %s", name)
	return 0
}
