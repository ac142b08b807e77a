package mocker

import (
	"fmt"
	"math"
	"time"

	"github.com/turbine-llm/turbine/kv"
)

// Lower KV tiers (docs/reference.md §9, §9.6): with Config.Tiers set, a registered block
// the GPU cache evicts is offloaded to the node's KV block manager (LowerTier.Offload),
// and a request admitted after its GPU prefix hit loads the consecutive blocks that
// follow and that a lower tier holds (Match, then Onboard) instead of computing them.
//
// Loads are asynchronous, as vLLM's KV connectors load (WAITING_FOR_REMOTE_KVS): at
// admission the request's GPU hit and the blocks of the loaded tokens and of its first
// chunk are allocated, and its load is queued on the engine's one link to the lower
// tiers. A load takes blocks × BlockSize × KVBytesPerToken bytes over each block's
// tier's bandwidth (TierGBps), divided by SpeedupRatio like every modelled time; the
// link carries one load at a time, first admitted first, so a load ends at
// max(now, the previous load's end) + its time. Meanwhile the request stays in the
// waiting queue, skipped, and other requests' steps go on without that cost; the first
// step that starts at or after the load's end schedules it like a request with that
// prefix cached (its onboarded blocks are then registered and announced with
// BlockStored, as computed ones are). A step with nothing to run but loads in flight is
// Idle with StepResult.WakeAt, the first load's end. Output.CachedTokens counts GPU and
// onboarded tokens, as vLLM's num_cached_tokens counts a KV connector's hits.

// LowerTier is the node's KV block manager as the engine core sees it: blocks are named
// by their sequence hashes (the router's, kv/hash.go; the LoRA adapter and cache salt are
// mixed in). Calls come from the engine's one owner, in step order; an implementation
// that does I/O keeps Offload from blocking (a queue) and makes Match and Onboard quick.
type LowerTier interface {
	// Offload hands over a block the GPU cache evicted. It may drop it (a full queue, a
	// refused write): a later Match then misses it.
	Offload(seqHash uint64)
	// Match returns the tiers of the leading blocks of seqHashes the lower tiers hold,
	// one per block, stopping at the first one none holds (len at most len(seqHashes);
	// empty when the first is missing). Nothing is read.
	Match(seqHashes []uint64) []kv.Tier
	// Onboard reads the blocks (seqHashes, in order, as Match returned them) back and
	// returns how many leading ones it read; a block that vanished since Match, or a
	// failed read, ends the run (the rest are computed).
	Onboard(seqHashes []uint64) int
}

// TierStats are the engine's lower-tier figures (Stats.Tiers), per tier indexed by
// kv.Tier (TierNone unused).
type TierStats struct {
	// OffloadedBlocks and OffloadedBytes count the blocks handed to LowerTier.Offload
	// (the block manager places them; its own figures say in which tier).
	OffloadedBlocks, OffloadedBytes uint64
	// OnboardedBlocks and OnboardedBytes count the blocks loaded back, by the tier
	// Match found them in; OnboardTime is the modelled time their transfers took
	// (divided by SpeedupRatio).
	OnboardedBlocks, OnboardedBytes [kv.NumTiers]uint64
	OnboardTime                     time.Duration
	// PrefixHits counts prompt tokens onboarded from each tier at admissions (the
	// lower tiers' share of prefix hits; Stats.PrefixHits is the GPU's, and
	// Stats.PrefixQueries the queries of both) [vllm:external_prefix_cache_hits, summed
	// over tiers].
	PrefixHits [kv.NumTiers]uint64
	// LoadingRequests are the admitted requests waiting for their load (counted in
	// Stats.Waiting too) [vllm: requests in WAITING_FOR_REMOTE_KVS].
	LoadingRequests int
}

// checkTiers validates Config's lower-tier figures; the caller names the flags.
func (c Config) checkTiers() error {
	for _, t := range []kv.Tier{kv.TierHost, kv.TierDisk, kv.TierRemote} {
		if g := c.TierGBps.GBps(t); !(g >= 0) || math.IsInf(g, 0) {
			return fmt.Errorf("mocker: %s tier bandwidth %v GB/s must be a finite number, at least 0 (0: kv.DefaultTierBandwidth's)", t, g)
		}
	}
	if c.KVBytesPerToken < 0 || c.KVBytesPerToken > MaxKVBytesPerToken {
		return fmt.Errorf("mocker: --kv-bytes-per-token %d: want 0 to %d (0: %d)", c.KVBytesPerToken, MaxKVBytesPerToken, kv.DefaultKVBytesPerToken)
	}
	return nil
}

// MaxKVBytesPerToken bounds Config.KVBytesPerToken (16 MiB, as the KV transfer's bound).
const MaxKVBytesPerToken = 16 << 20

// BlockBytes is the size in bytes of one KV block: BlockSize × KVBytesPerToken
// (kv.DefaultKVBytesPerToken when 0).
func (c Config) BlockBytes() int64 {
	bpt := c.KVBytesPerToken
	if bpt == 0 {
		bpt = kv.DefaultKVBytesPerToken
	}
	return int64(c.BlockSize) * bpt
}

// tierGBps is tier t's bandwidth in GB/s: Config.TierGBps's, or kv.DefaultTierBandwidth's
// where that is 0.
func (c Config) tierGBps(t kv.Tier) float64 {
	if g := c.TierGBps.GBps(t); g > 0 {
		return g
	}
	return kv.DefaultTierBandwidth().GBps(t)
}

// OnboardTime is the modelled time of loading blocks blocks from tier t into GPU memory:
// blocks × BlockBytes / the tier's bandwidth, divided by SpeedupRatio.
func (c Config) OnboardTime(t kv.Tier, blocks int) time.Duration {
	if blocks <= 0 {
		return 0
	}
	g := c.tierGBps(t)
	if g <= 0 {
		return 0
	}
	sec := float64(blocks) * float64(c.BlockBytes()) / (g * 1e9)
	return time.Duration(sec / c.SpeedupRatio * float64(time.Second))
}

// offload hands the evicted blocks recorded by the cache to the lower tier.
func (e *Engine) offload() {
	if e.cfg.Tiers == nil {
		e.cache.evicted = e.cache.evicted[:0]
		return
	}
	bb := uint64(e.cfg.BlockBytes())
	for _, h := range e.cache.evicted {
		e.cfg.Tiers.Offload(h)
		e.stats.Tiers.OffloadedBlocks++
		e.stats.Tiers.OffloadedBytes += bb
	}
	e.cache.evicted = e.cache.evicted[:0]
}

// lowerHits returns the tiers of the blocks of s after its GPU hit (hits blocks) that a
// lower tier holds, at most to the block before the last prompt token.
func (e *Engine) lowerHits(s *sequence, hits int) []kv.Tier {
	if e.cfg.Tiers == nil || !e.cfg.EnablePrefixCaching {
		return nil
	}
	limit := (len(s.tokens) - 1) / e.cfg.BlockSize
	if hits >= limit {
		return nil
	}
	e.ensureHashes(s, limit)
	tiers := e.cfg.Tiers.Match(s.hashes[hits:limit])
	if len(tiers) > limit-hits {
		tiers = tiers[:limit-hits]
	}
	for k, t := range tiers {
		if t == kv.TierNone {
			return tiers[:k]
		}
	}
	return tiers
}

// onboard loads the blocks of s from hits on (tiers as lowerHits found them) and returns
// how many were read and the modelled time of the transfers.
func (e *Engine) onboard(s *sequence, hits int, tiers []kv.Tier) (int, time.Duration) {
	if len(tiers) == 0 {
		return 0, 0
	}
	got := e.cfg.Tiers.Onboard(s.hashes[hits : hits+len(tiers)])
	got = max(0, min(got, len(tiers)))
	var d time.Duration
	bs, bb := e.cfg.BlockSize, uint64(e.cfg.BlockBytes())
	for _, t := range tiers[:got] {
		d += e.cfg.OnboardTime(t, 1)
		e.stats.Tiers.OnboardedBlocks[t]++
		e.stats.Tiers.OnboardedBytes[t] += bb
		e.stats.Tiers.PrefixHits[t] += uint64(bs)
	}
	e.stats.Tiers.OnboardTime += d
	return got, d
}

// queueLoad queues a load of d on the engine's link at now and returns when it ends: the
// link carries one load at a time, in the order they were queued.
func (e *Engine) queueLoad(now time.Time, d time.Duration) time.Time {
	start := e.linkFree
	if start.Before(now) {
		start = now
	}
	e.linkFree = start.Add(d)
	e.stats.Tiers.LoadingRequests++
	return e.linkFree
}

// nextLoaded returns the earliest end after now of the loads in flight (zero when none).
func (e *Engine) nextLoaded(now time.Time) time.Time {
	var at time.Time
	for _, s := range e.waiting {
		if s.loading && s.loadedAt.After(now) && (at.IsZero() || s.loadedAt.Before(at)) {
			at = s.loadedAt
		}
	}
	return at
}

// loadedChunk returns how many tokens a request whose load ended computes in a step
// with budget tokens left, and grows its blocks for them: the rest of its prompt within
// the budget, or, when blocks are short, what the blocks it holds cover (those of its
// first chunk were allocated at admission: at least one token). ok is false when it
// cannot run (without chunked prefill the whole rest must fit the budget and the
// blocks); it stays waiting, its load done.
func (e *Engine) loadedChunk(s *sequence, budget int) (n int, ok bool) {
	bs := e.cfg.BlockSize
	rest := len(s.tokens) - s.computed
	if !e.cfg.EnableChunkedPrefill && rest > budget {
		return 0, false
	}
	n = min(rest, budget)
	need := ceilDiv(s.computed+n, bs) - len(s.blocks)
	if need > e.cache.available() {
		if !e.cfg.EnableChunkedPrefill {
			return 0, false
		}
		if n = min(n, len(s.blocks)*bs-s.computed); n <= 0 {
			return 0, false
		}
		need = 0
	}
	e.grow(s, need)
	e.stats.Tiers.LoadingRequests--
	return n, true
}
