package mocker

import (
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/turbine-llm/turbine/kv"
)

// mapTier is a LowerTier in memory: offloaded blocks land in host memory.
type mapTier struct {
	held      map[uint64]kv.Tier
	offloaded []uint64
	onboarded []uint64
	// readCap, when >= 0, bounds the blocks one Onboard reads (blocks that vanished).
	readCap int
}

func newMapTier() *mapTier { return &mapTier{held: map[uint64]kv.Tier{}, readCap: -1} }

func (m *mapTier) Offload(h uint64) {
	m.offloaded = append(m.offloaded, h)
	m.held[h] = kv.TierHost
}

func (m *mapTier) Match(hs []uint64) []kv.Tier {
	var out []kv.Tier
	for _, h := range hs {
		t, ok := m.held[h]
		if !ok {
			break
		}
		out = append(out, t)
	}
	return out
}

func (m *mapTier) Onboard(hs []uint64) int {
	n := len(hs)
	if m.readCap >= 0 {
		n = min(n, m.readCap)
	}
	m.onboarded = append(m.onboarded, hs[:n]...)
	return n
}

// allTier holds every block in one tier.
type allTier struct{ t kv.Tier }

func (allTier) Offload(uint64) {}
func (a allTier) Match(hs []uint64) []kv.Tier {
	out := make([]kv.Tier, len(hs))
	for i := range out {
		out[i] = a.t
	}
	return out
}
func (allTier) Onboard(hs []uint64) int { return len(hs) }

func tierConfig(tiers LowerTier) Config {
	c := smallConfig()
	c.NumGPUBlocks, c.MaxModelLen = 8, 32
	c.Tiers = tiers
	return c
}

// A block the GPU cache evicts is offloaded, once, by its sequence hash.
func TestTierOffloadOnEviction(t *testing.T) {
	m := newMapTier()
	e := newEngine(t, tierConfig(m))
	mustAdd(t, e, Request{ID: "a", Prompt: seqTokens(1000, 17), MaxTokens: 1, IgnoreEOS: true})
	run(t, e, t0)
	if len(m.offloaded) != 0 {
		t.Fatalf("offloaded %d blocks before any eviction", len(m.offloaded))
	}
	aHashes := slices.Clone(e.cache.byHashKeys())
	mustAdd(t, e, Request{ID: "b", Prompt: seqTokens(2000, 29), MaxTokens: 1, IgnoreEOS: true})
	rr := run(t, e, t0)
	removed := 0
	for _, ev := range rr.events {
		if ev.Kind == kv.BlockRemoved {
			removed += len(ev.EngineHashes)
		}
	}
	if removed != 4 || len(m.offloaded) != 4 {
		t.Fatalf("%d blocks removed, %d offloaded; want a's 4 full blocks both", removed, len(m.offloaded))
	}
	slices.Sort(aHashes)
	got := slices.Sorted(slices.Values(m.offloaded))
	if !slices.Equal(got, aHashes) {
		t.Fatalf("offloaded %x, want a's blocks %x", got, aHashes)
	}
	st := e.Stats().Tiers
	if st.OffloadedBlocks != 4 || st.OffloadedBytes != 4*uint64(e.cfg.BlockBytes()) {
		t.Fatalf("stats %+v", st)
	}
}

// byHashKeys lists the registered sequence hashes (for tests).
func (c *blockCache) byHashKeys() []uint64 {
	var out []uint64
	for h := range c.byHash {
		out = append(out, h)
	}
	return out
}

// A request whose prefix was evicted from the GPU cache is onboarded, not recomputed: it
// computes only its last token, reports the onboarded tokens as cached, and its first
// token comes sooner than when it recomputes.
func TestTierOnboardNotRecompute(t *testing.T) {
	ttft := map[bool]time.Duration{}
	for _, withTier := range []bool{false, true} {
		m := newMapTier()
		cfg := smallConfig()
		cfg.BlockSize, cfg.NumGPUBlocks, cfg.MaxModelLen, cfg.MaxNumBatchedTokens = 16, 40, 640, 1024
		if withTier {
			cfg.Tiers = m
		}
		e := newEngine(t, cfg)
		a := Request{ID: "a", Prompt: seqTokens(1000, 16*30+1), MaxTokens: 1, IgnoreEOS: true}
		mustAdd(t, e, a)
		end := run(t, e, t0).end
		mustAdd(t, e, Request{ID: "b", Prompt: seqTokens(5000, 16*39+1), MaxTokens: 1, IgnoreEOS: true})
		end = run(t, e, end).end
		a.ID = "a2"
		mustAdd(t, e, a)
		rr := run(t, e, end)
		first := rr.steps[0]
		out := rr.last["a2"]
		if !withTier {
			if out.CachedTokens != 0 || first.PrefillTokens != len(a.Prompt) {
				t.Fatalf("without a tier: cached %d, prefill %d; want 0, %d (a's blocks evicted)", out.CachedTokens, first.PrefillTokens, len(a.Prompt))
			}
			ttft[withTier] = first.Duration
			continue
		}
		if first.PrefillTokens != 1 || out.CachedTokens != 16*30 || out.OnboardedTokens[kv.TierHost] != 16*30 {
			t.Fatalf("with a tier: prefill %d, cached %d, onboarded %v; want 1, 480, 480 from host", first.PrefillTokens, out.CachedTokens, out.OnboardedTokens)
		}
		if len(m.onboarded) != 30 {
			t.Fatalf("onboarded %d blocks, want 30", len(m.onboarded))
		}
		stored := 0
		for _, ev := range first.Events {
			if ev.Kind == kv.BlockStored && ev.Medium == mediumGPU {
				stored += len(ev.EngineHashes)
			}
		}
		if stored != 30 {
			t.Fatalf("%d blocks stored on the GPU in the onboarding step, want 30", stored)
		}
		st := e.Stats().Tiers
		if st.OnboardedBlocks[kv.TierHost] != 30 || st.PrefixHits[kv.TierHost] != 480 || st.OnboardedBytes[kv.TierHost] != 30*uint64(cfg.BlockBytes()) {
			t.Fatalf("stats %+v", st)
		}
		ttft[withTier] = first.Duration
	}
	if ttft[true] >= ttft[false] {
		t.Fatalf("TTFT with the tier %v, without %v: want lower with", ttft[true], ttft[false])
	}
}

// The onboarding step lasts the prefill of the rest plus blocks × block bytes over the
// tier's bandwidth, divided by the speedup ratio.
func TestTierOnboardTiming(t *testing.T) {
	for _, tc := range []struct {
		name    string
		tier    kv.Tier
		gbps    kv.TierBandwidth
		bpt     int64
		speedup float64
		want    float64 // GB/s used
	}{
		{"host default", kv.TierHost, kv.TierBandwidth{}, 0, 1, kv.DefaultHostGBps},
		{"disk default", kv.TierDisk, kv.TierBandwidth{}, 0, 1, kv.DefaultDiskGBps},
		{"host 2GBps", kv.TierHost, kv.TierBandwidth{Host: 2}, 1 << 20, 1, 2},
		{"disk 0.5GBps speedup 4", kv.TierDisk, kv.TierBandwidth{Host: 9, Disk: 0.5}, 65536, 4, 0.5},
		{"remote", kv.TierRemote, kv.TierBandwidth{Remote: 3}, 4096, 1, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := smallConfig()
			cfg.Tiers, cfg.TierGBps, cfg.KVBytesPerToken, cfg.SpeedupRatio = allTier{tc.tier}, tc.gbps, tc.bpt, tc.speedup
			e := newEngine(t, cfg)
			mustAdd(t, e, Request{ID: "r", Prompt: seqTokens(1, 4*5+3), MaxTokens: 1, IgnoreEOS: true})
			res := e.Step(t0)
			bpt := tc.bpt
			if bpt == 0 {
				bpt = 131072
			}
			blocks := 5
			wantMs := (PrefillMillis(3) + float64(blocks*4)*float64(bpt)/(tc.want*1e9)*1e3) / tc.speedup
			if got := float64(res.Duration) / 1e6; math.Abs(got-wantMs) > 1e-3 {
				t.Fatalf("step %v ms, want %v ms", got, wantMs)
			}
			if res.PrefillTokens != 3 || len(res.Outputs) != 1 || res.Outputs[0].OnboardedTokens[tc.tier] != 20 {
				t.Fatalf("prefill %d, outputs %+v", res.PrefillTokens, res.Outputs)
			}
			wantOn := float64(blocks*4) * float64(bpt) / (tc.want * 1e9) / tc.speedup * 1e9
			if st := e.Stats().Tiers; math.Abs(float64(st.OnboardTime)-wantOn) > 10 {
				t.Fatalf("OnboardTime %v, want %v ns", st.OnboardTime, wantOn)
			}
		})
	}
}

// Blocks that vanish between Match and Onboard are computed.
func TestTierOnboardShortRead(t *testing.T) {
	m := newMapTier()
	m.readCap = 2
	cfg := smallConfig()
	cfg.Tiers = m
	e := newEngine(t, cfg)
	// Fill the tier with the prompt's blocks from a first engine without eviction
	// pressure: offload them by hand.
	probe := newEngine(t, smallConfig())
	p := Request{ID: "p", Prompt: seqTokens(1, 4*5+3), MaxTokens: 1, IgnoreEOS: true}
	mustAdd(t, probe, p)
	run(t, probe, t0)
	for _, h := range probe.cache.byHashKeys() {
		m.held[h] = kv.TierDisk
	}
	mustAdd(t, e, p)
	res := e.Step(t0)
	if res.PrefillTokens != 23-8 || res.Outputs[0].CachedTokens != 8 || res.Outputs[0].OnboardedTokens[kv.TierDisk] != 8 {
		t.Fatalf("prefill %d, output %+v; want 15 computed after 2 blocks read", res.PrefillTokens, res.Outputs)
	}
}

func TestTierConfigValidate(t *testing.T) {
	for _, tc := range []struct {
		mut  func(*Config)
		want string
	}{
		{func(c *Config) { c.TierGBps.Host = -1 }, "host tier bandwidth"},
		{func(c *Config) { c.TierGBps.Disk = math.NaN() }, "disk tier bandwidth"},
		{func(c *Config) { c.TierGBps.Remote = math.Inf(1) }, "remote tier bandwidth"},
		{func(c *Config) { c.KVBytesPerToken = -1 }, "--kv-bytes-per-token"},
		{func(c *Config) { c.KVBytesPerToken = MaxKVBytesPerToken + 1 }, "--kv-bytes-per-token"},
	} {
		c := DefaultConfig()
		tc.mut(&c)
		err := c.Validate()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: error %v, want %q", c.TierGBps, err, tc.want)
		}
	}
}
