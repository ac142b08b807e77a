package kv

import (
	"fmt"
	"math"
)

// TierCredit is what a block found in a lower tier is worth to the routing cost, as a
// fraction of a GPU prefix hit (0..1, docs/reference.md §9.2): the `ttft` policy counts
// a tier block as that fraction of a cached block (the uncached prefill shrinks by
// fraction × block tokens, equivalently the onboarding time is added), the `kv` policy
// credits the overlap the same way. 0: the tier is worth nothing (recomputing is as
// fast); 1: as good as a GPU hit.
type TierCredit struct {
	Host, Disk, Remote float64
}

// Of returns tier t's fraction (0 for TierNone and unknown tiers).
func (c TierCredit) Of(t Tier) float64 {
	switch t {
	case TierHost:
		return c.Host
	case TierDisk:
		return c.Disk
	case TierRemote:
		return c.Remote
	}
	return 0
}

// Validate reports a fraction outside 0..1 (or not a number), naming its field.
func (c TierCredit) Validate() error {
	for _, f := range []struct {
		name string
		v    float64
	}{{"TierCredit.Host", c.Host}, {"TierCredit.Disk", c.Disk}, {"TierCredit.Remote", c.Remote}} {
		if !(f.v >= 0 && f.v <= 1) {
			return fmt.Errorf("%w: %s %v must be a fraction of a GPU hit in 0..1", ErrInvalidConfig, f.name, f.v)
		}
	}
	return nil
}

// PrefillTokensPerSecond is the profile's prefill rate at full chunks: ChunkTokens tokens
// per StepPrefillMs(ChunkTokens), in tokens per second (0 for a profile that takes no
// time).
func (p Profile) PrefillTokensPerSecond() float64 {
	c := float64(max(p.ChunkTokens, 1))
	ms := p.StepPrefillMs(c)
	if !(ms > 0) {
		return 0
	}
	return c / ms * 1000
}

// TierFraction is the credit of a tier block (docs/reference.md §9.2): one minus the
// time to load a block from the tier over the time to compute it,
//
//	fraction = 1 − (block bytes / bandwidth) / (block tokens / prefill rate)
//	         = 1 − kvBytesPerToken · prefill rate / bandwidth   (the block size cancels)
//
// clamped to [0, 1]; kvBytesPerToken in bytes, tokensPerSecond the engine's prefill rate,
// gbps the tier's bandwidth in GB/s (1e9 bytes/s). A bandwidth or a rate <= 0 (or not a
// number) gives 0.
func TierFraction(kvBytesPerToken, tokensPerSecond, gbps float64) float64 {
	if !(gbps > 0) || !(tokensPerSecond > 0) || !(kvBytesPerToken > 0) || math.IsInf(gbps, 0) || math.IsInf(tokensPerSecond, 0) {
		return 0
	}
	f := 1 - kvBytesPerToken*tokensPerSecond/(gbps*1e9)
	return math.Max(0, math.Min(1, f))
}

// TierCreditsFor computes the credits of the three lower tiers for a model whose KV
// cache takes kvBytesPerToken bytes per token (<= 0: DefaultKVBytesPerToken), on engines
// timed by prof (its PrefillTokensPerSecond), over the tiers' bandwidths bw (a figure
// <= 0 gives that tier 0).
func TierCreditsFor(kvBytesPerToken int64, prof Profile, bw TierBandwidth) TierCredit {
	bpt := float64(kvBytesPerToken)
	if kvBytesPerToken <= 0 {
		bpt = DefaultKVBytesPerToken
	}
	rate := prof.PrefillTokensPerSecond()
	return TierCredit{Host: TierFraction(bpt, rate, bw.Host), Disk: TierFraction(bpt, rate, bw.Disk),
		Remote: TierFraction(bpt, rate, bw.Remote)}
}

// DefaultTierCredit is TierCreditsFor(DefaultKVBytesPerToken, DefaultProfile(),
// DefaultTierBandwidth()): the mock model's credits, what DefaultConfig holds until a
// model card says more (the Router grain computes them from the card).
func DefaultTierCredit() TierCredit {
	return TierCreditsFor(DefaultKVBytesPerToken, DefaultProfile(), DefaultTierBandwidth())
}
