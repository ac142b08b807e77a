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
	runLoads(t, e, t0)
	if len(m.offloaded) != 0 {
		t.Fatalf("offloaded %d blocks before any eviction", len(m.offloaded))
	}
	aHashes := slices.Clone(e.cache.byHashKeys())
	mustAdd(t, e, Request{ID: "b", Prompt: seqTokens(2000, 29), MaxTokens: 1, IgnoreEOS: true})
	rr := runLoads(t, e, t0)
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

// runLoads steps e as run does, stepping at WakeAt when only lower-tier loads are in
// flight; rr.steps holds the working steps only.
func runLoads(t testing.TB, e *Engine, now time.Time) runResult {
	t.Helper()
	rr := runResult{tokens: map[string][]uint32{}, last: map[string]Output{}, end: now}
	for i := 0; e.HasWork(); i++ {
		if i > 100000 {
			t.Fatal("engine did not finish")
		}
		res := e.Step(rr.end)
		rr.events = append(rr.events, res.Events...)
		if res.Idle {
			if !res.WakeAt.After(rr.end) {
				t.Fatalf("idle step at %v with work left and wake-up %v: %+v", rr.end, res.WakeAt, e.Stats())
			}
			rr.end = res.WakeAt
			continue
		}
		for _, o := range res.Outputs {
			rr.tokens[o.RequestID] = append(rr.tokens[o.RequestID], o.TokenIDs...)
			rr.last[o.RequestID] = o
		}
		rr.steps = append(rr.steps, res)
		rr.end = res.End
	}
	return rr
}

// transfer is the modelled time of loading blocks blocks of bpt bytes per token and
// BlockSize bs from a tier of gbps GB/s at speedup.
func transfer(blocks, bs int, bpt int64, gbps, speedup float64) time.Duration {
	return time.Duration(float64(blocks*bs) * float64(bpt) / (gbps * 1e9) / speedup * 1e9)
}

func near(a, b time.Duration) bool { return (a - b).Abs() <= time.Microsecond }

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
		end := runLoads(t, e, t0).end
		mustAdd(t, e, Request{ID: "b", Prompt: seqTokens(5000, 16*39+1), MaxTokens: 1, IgnoreEOS: true})
		end = runLoads(t, e, end).end
		a.ID = "a2"
		mustAdd(t, e, a)
		rr := runLoads(t, e, end)
		first := rr.steps[0]
		out := rr.last["a2"]
		ttft[withTier] = first.End.Sub(end)
		if !withTier {
			if out.CachedTokens != 0 || first.PrefillTokens != len(a.Prompt) {
				t.Fatalf("without a tier: cached %d, prefill %d; want 0, %d (a's blocks evicted)", out.CachedTokens, first.PrefillTokens, len(a.Prompt))
			}
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
			t.Fatalf("%d blocks stored on the GPU in the step after the load, want 30", stored)
		}
		st := e.Stats().Tiers
		if st.OnboardedBlocks[kv.TierHost] != 30 || st.PrefixHits[kv.TierHost] != 480 || st.OnboardedBytes[kv.TierHost] != 30*uint64(cfg.BlockBytes()) {
			t.Fatalf("stats %+v", st)
		}
	}
	if ttft[true] >= ttft[false] {
		t.Fatalf("TTFT with the tier %v, without %v: want lower with", ttft[true], ttft[false])
	}
}

// On an otherwise idle engine the onboarding request's first token comes after the load
// (blocks × block bytes over the tier's bandwidth, divided by the speedup ratio) plus the
// prefill of the rest: the admitting step is idle until the load ends, then one step
// computes the rest.
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
			bpt := tc.bpt
			if bpt == 0 {
				bpt = 131072
			}
			load := transfer(5, 4, bpt, tc.want, tc.speedup)
			res := e.Step(t0)
			if !res.Idle || !near(res.WakeAt.Sub(t0), load) || res.Duration != 0 {
				t.Fatalf("admitting step: idle %v, wake-up after %v, duration %v; want idle, %v, 0", res.Idle, res.WakeAt.Sub(t0), res.Duration, load)
			}
			if st := e.Stats(); st.Tiers.LoadingRequests != 1 || st.Waiting != 1 || st.Running != 0 || st.ActiveBlocks != 6 {
				t.Fatalf("while loading: %+v; want 1 loading and waiting, 6 blocks held", st)
			}
			if early := e.Step(res.WakeAt.Add(-time.Nanosecond)); !early.Idle || !early.WakeAt.Equal(res.WakeAt) {
				t.Fatalf("a step before the load ends: %+v", early)
			}
			res = e.Step(res.WakeAt)
			if want := cfg.StepDuration(3, 0, 0, 0); res.Duration != want {
				t.Fatalf("step after the load %v, want the prefill of the rest %v", res.Duration, want)
			}
			if ttft, want := res.End.Sub(t0), load+time.Duration(PrefillMillis(3)/tc.speedup*1e6); !near(ttft, want) {
				t.Fatalf("TTFT %v, want %v", ttft, want)
			}
			if res.PrefillTokens != 3 || len(res.Outputs) != 1 || res.Outputs[0].OnboardedTokens[tc.tier] != 20 {
				t.Fatalf("prefill %d, outputs %+v", res.PrefillTokens, res.Outputs)
			}
			if st := e.Stats().Tiers; !near(st.OnboardTime, load) || st.LoadingRequests != 0 {
				t.Fatalf("OnboardTime %v, want %v; loading %d", st.OnboardTime, load, st.LoadingRequests)
			}
		})
	}
}

// A request loading a long prefix does not slow the steps of a request decoding beside
// it: every step during the load is a decode step only, and the loaded request is
// scheduled at the first step boundary after its load, with only its last token to
// compute.
func TestTierOnboardDoesNotSlowDecode(t *testing.T) {
	const bs, blocks = 16, 40
	long := seqTokens(9000, bs*blocks+1)
	probe := newEngine(t, Config{BlockSize: bs, NumGPUBlocks: 128, MaxNumSeqs: 4, MaxNumBatchedTokens: 2048, MaxModelLen: 2048,
		EnablePrefixCaching: true, EnableChunkedPrefill: true, SpeedupRatio: 1, MeanOutputTokens: 16, Seed: 7})
	mustAdd(t, probe, Request{ID: "p", Prompt: long, MaxTokens: 1, IgnoreEOS: true})
	runLoads(t, probe, t0)
	for _, tc := range []struct {
		tier kv.Tier
		gbps kv.TierBandwidth
	}{
		{kv.TierHost, kv.TierBandwidth{Host: 0.2}},
		{kv.TierDisk, kv.TierBandwidth{Disk: 0.1}},
		{kv.TierRemote, kv.TierBandwidth{Remote: 0.2}},
	} {
		t.Run(tc.tier.String(), func(t *testing.T) {
			m := newMapTier()
			for _, h := range probe.cache.byHashKeys() {
				m.held[h] = tc.tier
			}
			cfg := probe.cfg
			cfg.Tiers, cfg.TierGBps = m, tc.gbps
			e := newEngine(t, cfg)
			mustAdd(t, e, Request{ID: "d", Prompt: seqTokens(1, bs+1), MaxTokens: 400, IgnoreEOS: true})
			now := t0
			for range 2 { // prefill and a first decode step
				now = e.Step(now).End
			}
			mustAdd(t, e, Request{ID: "o", Prompt: long, MaxTokens: 1, IgnoreEOS: true})
			load := transfer(blocks, bs, kv.DefaultKVBytesPerToken, tc.gbps.GBps(tc.tier), 1)
			loadedAt := now.Add(load)
			maxDecode := time.Duration(DecodeMillis(1) * 1e6)
			if load < 10*maxDecode {
				t.Fatalf("load %v is too short to show anything", load)
			}
			decodes := 0
			for {
				res := e.Step(now)
				if res.Idle {
					t.Fatalf("idle at %v with d decoding", now)
				}
				if res.PrefillTokens > 0 {
					if res.Start.Before(loadedAt) || res.Start.Sub(loadedAt) > maxDecode {
						t.Fatalf("o scheduled at %v, its load ends at %v", res.Start.Sub(t0), loadedAt.Sub(t0))
					}
					if res.PrefillTokens != 1 || len(res.Outputs) != 2 || res.Outputs[1].RequestID != "o" || res.Outputs[1].CachedTokens != bs*blocks {
						t.Fatalf("step after the load: prefill %d, outputs %+v", res.PrefillTokens, res.Outputs)
					}
					break
				}
				if res.DecodeSeqs != 1 || res.Duration > maxDecode {
					t.Fatalf("step at %v during the load: %d decoding, %v long; want d alone, at most %v", res.Start.Sub(t0), res.DecodeSeqs, res.Duration, maxDecode)
				}
				decodes++
				now = res.End
			}
			if min := int(load / maxDecode); decodes < min {
				t.Fatalf("%d decode steps during a load of %v, want at least %d", decodes, load, min)
			}
		})
	}
}

// Loads are serialised on the engine's one link, first admitted first: the second
// request's load ends after both transfers. A request behind them with nothing to load
// runs at once, and aborting a loading request frees its blocks.
func TestTierLoadQueue(t *testing.T) {
	cfg := smallConfig()
	cfg.Tiers, cfg.TierGBps = allTier{kv.TierHost}, kv.TierBandwidth{Host: 0.01}
	e := newEngine(t, cfg)
	mustAdd(t, e, Request{ID: "a", Prompt: seqTokens(1, 4*3+1), MaxTokens: 1, IgnoreEOS: true})
	mustAdd(t, e, Request{ID: "b", Prompt: seqTokens(100, 4*5+1), MaxTokens: 1, IgnoreEOS: true})
	mustAdd(t, e, Request{ID: "c", Prompt: seqTokens(200, 3), MaxTokens: 1, IgnoreEOS: true}) // under a block: nothing to load
	da := transfer(3, 4, kv.DefaultKVBytesPerToken, 0.01, 1)
	db := transfer(5, 4, kv.DefaultKVBytesPerToken, 0.01, 1)
	res := e.Step(t0)
	if res.Idle || len(res.Outputs) != 1 || res.Outputs[0].RequestID != "c" || res.Duration != cfg.StepDuration(3, 0, 0, 0) {
		t.Fatalf("first step: %+v; want c alone, its prefill's time", res)
	}
	if st := e.Stats(); st.Tiers.LoadingRequests != 2 || st.ActiveBlocks != 4+6 {
		t.Fatalf("after the first step: %+v; want a and b loading, holding 4 and 6 blocks", st)
	}
	res = e.Step(res.End)
	if !res.Idle || !near(res.WakeAt.Sub(t0), da) {
		t.Fatalf("second step: idle %v, wake-up after %v; want idle, %v", res.Idle, res.WakeAt.Sub(t0), da)
	}
	res = e.Step(res.WakeAt)
	if len(res.Outputs) != 1 || res.Outputs[0].RequestID != "a" {
		t.Fatalf("step at a's load end: %+v; want a", res.Outputs)
	}
	res = e.Step(res.End)
	if !res.Idle || !near(res.WakeAt.Sub(t0), da+db) {
		t.Fatalf("b's wake-up after %v, want %v (after a's transfer)", res.WakeAt.Sub(t0), da+db)
	}
	if !e.Abort("b") {
		t.Fatal("b not found")
	}
	if st := e.Stats(); e.HasWork() || st.ActiveBlocks != 0 || st.Tiers.LoadingRequests != 0 {
		t.Fatalf("after aborting b: work %v, %+v", e.HasWork(), st)
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
	if want := transfer(2, 4, kv.DefaultKVBytesPerToken, kv.DefaultDiskGBps, 1); !res.Idle || !near(res.WakeAt.Sub(t0), want) {
		t.Fatalf("admitting step: idle %v, wake-up after %v; want %v (2 blocks)", res.Idle, res.WakeAt.Sub(t0), want)
	}
	res = e.Step(res.WakeAt)
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
