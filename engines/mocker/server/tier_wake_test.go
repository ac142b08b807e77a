package server

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/turbine-llm/turbine/engines/kvevents"
	"github.com/turbine-llm/turbine/engines/trtllm"
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
// ones; their BlockRemoved events are published like any step's, over ZeroMQ (vLLM) and
// on /kv_cache_events (TensorRT-LLM). Lost, they left a router's index holding blocks
// the engine no longer had, with no gap in the events' numbering to show it.
func TestIdleStepPublishesItsEvents(t *testing.T) {
	for _, dialect := range []DialectName{DialectVLLM, DialectTRTLLM} {
		t.Run(string(dialect), func(t *testing.T) {
			o := testOptions(t)
			o.Dialect = dialect
			o.Engine.NumGPUBlocks, o.Engine.MaxModelLen = 16, 256
			o.Engine.Tiers = hostTier{}
			if dialect == DialectTRTLLM {
				o.EventBufferMaxSize, o.PollWait = 1000, 10*time.Millisecond
			} else {
				var err error
				o.KVEvents, err = kvevents.ParseConfig(`{"enable_kv_cache_events":true,"publisher":"zmq","endpoint":"tcp://*:0","topic":"kv-events"}`)
				if err != nil {
					t.Fatal(err)
				}
			}
			s, hs := startServer(t, o)
			held := map[uint64]bool{} // blocks stored (since the subscription took effect), not removed
			seen := false             // an event has arrived: the subscription is in effect
			apply := func(evs []kv.Event) {
				seen = true
				for _, ev := range evs {
					switch ev.Kind {
					case kv.BlockStored, kv.BlockRemoved:
						for _, h := range ev.EngineHashes {
							if ev.Kind == kv.BlockStored {
								held[h] = true
							} else {
								delete(held, h)
							}
						}
					case kv.AllBlocksCleared:
						clear(held)
					}
				}
			}
			var drain func() // applies the events published so far, read as Turbine reads them
			if dialect == DialectTRTLLM {
				conv, err := trtllm.NewEventConverter(o.Engine.BlockSize)
				if err != nil {
					t.Fatal(err)
				}
				drain = func() {
					_, b := postJSON(t, hs.URL+"/kv_cache_events", "")
					evs, err := trtllm.DecodeKVCacheEvents(bytes.NewReader(b))
					if err != nil {
						t.Fatal(err)
					}
					for _, batch := range conv.Convert(evs, 0) {
						apply(batch.Events)
					}
				}
			} else {
				ep, _ := kvevents.ConsumerEndpoint(s.KVEventsEndpoint())
				msgs := subscribeKVEvents(t, ep)
				drain = func() {
					for {
						select {
						case m := <-msgs:
							_, b, err := kvevents.DecodeMessage(m.Frames)
							if err != nil {
								t.Fatal(err)
							}
							apply(b.Events)
						case <-time.After(300 * time.Millisecond):
							return
						}
					}
				}
			}
			// One-block prompts (computed: nothing precedes their last token) until the
			// events show the subscription in effect; every later one's block is seen
			// stored.
			for i := 0; !seen || len(held) < 4; i++ {
				if i > 100 {
					t.Fatal("no KV events received")
				}
				post(t, hs.URL, fmt.Sprintf(`{"model":"turbine-mock","prompt":%s,"max_tokens":1}`, jsonIDs(promptIDs(16 + i)[i:])))
				drain()
			}
			// 16 blocks: 15 onboarded and the last computed take the whole cache,
			// evicting every one-block prompt's block in the step that admits the load.
			big := make([]uint32, 15*16+1)
			for i := range big {
				big[i] = uint32(60000 + i)
			}
			post(t, hs.URL, fmt.Sprintf(`{"model":"turbine-mock","prompt":%s,"max_tokens":1}`, jsonIDs(big)))
			drain()
			if st := s.Stats(); len(held) != st.CachedBlocks || st.ActiveBlocks != 0 {
				t.Fatalf("the events leave %d blocks held, the engine caches %d (%d active)", len(held), st.CachedBlocks, st.ActiveBlocks)
			}
		})
	}
}
