package kv

import "time"

// Defaults of the router core, in one place (docs/reference.md §3, §4).
const (
	// DefaultPolicy is the routing policy of a Router unless configured otherwise.
	DefaultPolicy = PolicyTTFT
	// DefaultOverlapWeight weighs prefill blocks against decode blocks in the KV cost.
	DefaultOverlapWeight = 1.0
	// DefaultTemperature 0 means argmin (no softmax draw).
	DefaultTemperature = 0.0
	// DefaultMaxBufferedBatches bounds the event batches a Router keeps for a worker
	// while it waits for that worker's dump (they are replayed after it).
	DefaultMaxBufferedBatches = 4096
	// DefaultMaxLocalPrefillTokens: requests whose uncached prompt suffix on their decode
	// worker is at most this many tokens are prefilled there (docs/reference.md §6, the
	// reference max_local_prefill_length).
	DefaultMaxLocalPrefillTokens = 1000
	// DefaultMaxPrefillQueueTokens: the prefill pool's queue is long when every prefill
	// worker has more active prefill tokens than this: four full batches of 8192 tokens
	// (the reference max_num_batched_tokens), about 0.7 s of prefill in the reference
	// timing (docs/reference.md §7) — a wait past which prefilling a request on its decode
	// worker is usually faster than queueing it.
	DefaultMaxPrefillQueueTokens = 4 * 8192
	// DefaultMaxUnackedAge: a request routed with RouteInput.WillAck whose caller has not
	// acknowledged it (Router.Ack) within this long is expired. The frontend acknowledges
	// right after it sent the work, within milliseconds of the route's answer, and that
	// answer reaches it within its route timeout (5 s) or it frees the request itself: 30 s
	// leaves room for an acknowledgement queued behind a busy router, and still clears a
	// request whose frontend never learnt of its routing long before MaxSequenceAge.
	DefaultMaxUnackedAge = 30 * time.Second
	// DefaultApproxTTL: how long a routed prompt's blocks count as cached on a worker
	// without KV events, whose predictions are its whole index (docs/reference.md §3.4;
	// Dynamo's approximate mode uses 120 s).
	DefaultApproxTTL = 120 * time.Second
	// DefaultPredictBlocks bounds the blocks predicted on a worker that did not report
	// its KV capacity (the mock engine's default capacity).
	DefaultPredictBlocks = 16384
	// DefaultApproxAfterRequests and DefaultApproxAfterSilence: a worker that was routed
	// this many requests with a full KV block, the first of them this long ago, and sent
	// no KV event batch since, is routed in approximate mode until its next batch.
	DefaultApproxAfterRequests = 16
	DefaultApproxAfterSilence  = 30 * time.Second
	// DefaultSessionTTL and DefaultMaxSessions: a session (RouteInput.SessionID) names
	// the worker of its last request for this long after it, and at most this many
	// sessions are kept (least recently used out first; about 100 bytes each plus the
	// id).
	DefaultSessionTTL  = 10 * time.Minute
	DefaultMaxSessions = 65536
)

// Config configures a Router. Start from DefaultConfig and change fields; NewRouter
// validates it and names the field that is wrong.
type Config struct {
	// BlockSize is the KV block size in tokens; every worker must use the same.
	BlockSize int
	// Policy names the routing policy in Policies.
	Policy string
	// Policies is the policy registry; nil means DefaultPolicies().
	Policies *Registry
	// OverlapWeight (>= 0) and Temperature (>= 0): defaults of the KV cost; requests may
	// override both. Weight 0 ignores prefix caches (pure load balancing).
	OverlapWeight float64
	Temperature   float64
	// MaxSequenceAge: active sequences older than this are expired; <= 0 never.
	MaxSequenceAge time.Duration
	// MaxUnackedAge: a request routed with RouteInput.WillAck and not acknowledged
	// (Router.Ack) within this long is expired, with its prefill leg; <= 0 never.
	MaxUnackedAge time.Duration
	// Busy: thresholds above which a worker gets no new requests.
	Busy BusyThresholds
	// MaxBufferedBatches: see DefaultMaxBufferedBatches; <= 0 means the default.
	MaxBufferedBatches int
	// Profile: the engines' timing profile for the TTFT policy (kv/profile.go); the zero
	// value means DefaultProfile.
	Profile Profile
	// Disagg: conditional disaggregation, used while some worker has role prefill or
	// decode (disagg.go). Taken as given: start from DefaultDisaggConfig.
	Disagg DisaggConfig
	// PredictActive: on a worker with KV events, the prompt blocks of the requests
	// routed to it and still tracked count as cached there (a candidate's prefix hit is
	// the longer run), bridging the time until its events say so (approx.go;
	// docs/reference.md §3.3). Off in DefaultConfig (prefix hits are the index's
	// alone); Turbine's commands turn it on (--router-predict-active).
	PredictActive bool
	// ApproxTTL: a routed prompt's blocks count as cached on a worker in approximate
	// mode (IndexApproximate) for this long after the last request that used them;
	// <= 0 means DefaultApproxTTL.
	ApproxTTL time.Duration
	// PredictBlocks: the most blocks predicted on a worker whose total KV blocks are
	// unknown (otherwise its total bounds them); <= 0 means DefaultPredictBlocks.
	PredictBlocks int64
	// ApproxAfterRequests and ApproxAfterSilence: a worker routed ApproxAfterRequests
	// requests with at least one full KV block, the first of them ApproxAfterSilence
	// ago or more, without a KV event batch since, switches to approximate mode until
	// its next batch; ApproxAfterRequests <= 0 disables the switch (workers registered
	// with WorkerSpec.NoKVEvents are approximate regardless).
	ApproxAfterRequests int
	ApproxAfterSilence  time.Duration
	// SessionTTL and MaxSessions bound the sessions remembered (session.go); <= 0 means
	// DefaultSessionTTL and DefaultMaxSessions.
	SessionTTL  time.Duration
	MaxSessions int
	// NoDump: the index keeps only what routing needs, not the blocks' token ids
	// (NewIndexWithoutDump: about half the memory at block size 16), and DumpWorker
	// fails. The Router grain sets it: a moved grain rebuilds from the workers' dumps.
	NoDump bool
	// LoraLoadMs is the adapter load time assumed for a worker that has measured none
	// (ms; 0 means DefaultLoraLoadMs). IgnoreAdapters routes adapter requests as if
	// adapters did not matter: any worker with a slot is a candidate, loading on demand,
	// and no load is counted in the cost (a baseline for the benchmarks;
	// docs/reference.md §26.4).
	LoraLoadMs     float64
	IgnoreAdapters bool
	// TierCredit: what a block in a node's host memory, local disk or a remote store is
	// worth against a GPU hit (0..1 each; docs/reference.md §9.2). DefaultConfig holds
	// DefaultTierCredit (the mock model's); the Router grain computes it from the model
	// card (TierCreditsFor); the zero value credits no tier.
	TierCredit TierCredit
}

// BusyThresholds mark a worker busy (docs/reference.md §4); busy workers are skipped by every
// policy. A value <= 0 disables its test (the default: both off).
type BusyThresholds struct {
	// KVUsage: busy when active blocks / total KV blocks > KVUsage (a fraction, e.g.
	// 0.9). Workers that did not report their total blocks are never busy by this test.
	KVUsage float64
	// PrefillTokens: busy when active prefill tokens > PrefillTokens (tokens).
	PrefillTokens int64
}

// DefaultConfig returns the default configuration for KV blocks of blockSize tokens.
func DefaultConfig(blockSize int) Config {
	return Config{
		BlockSize:           blockSize,
		Policy:              DefaultPolicy,
		OverlapWeight:       DefaultOverlapWeight,
		Temperature:         DefaultTemperature,
		MaxSequenceAge:      DefaultMaxSequenceAge,
		MaxUnackedAge:       DefaultMaxUnackedAge,
		MaxBufferedBatches:  DefaultMaxBufferedBatches,
		Disagg:              DefaultDisaggConfig(),
		Profile:             DefaultProfile(),
		ApproxTTL:           DefaultApproxTTL,
		PredictBlocks:       DefaultPredictBlocks,
		ApproxAfterRequests: DefaultApproxAfterRequests,
		ApproxAfterSilence:  DefaultApproxAfterSilence,
		SessionTTL:          DefaultSessionTTL,
		MaxSessions:         DefaultMaxSessions,
		TierCredit:          DefaultTierCredit(),
	}
}

// DefaultDisaggConfig returns the conditional-disaggregation defaults: local prefill up
// to DefaultMaxLocalPrefillTokens uncached tokens, a long queue past
// DefaultMaxPrefillQueueTokens, local fallback when no prefill worker is ready.
func DefaultDisaggConfig() DisaggConfig {
	return DisaggConfig{MaxLocalPrefillTokens: DefaultMaxLocalPrefillTokens,
		MaxPrefillQueueTokens: DefaultMaxPrefillQueueTokens}
}

// Bandwidths of the lower KV tiers into GPU memory (docs/reference.md §9.2), in GB/s
// (1e9 bytes per second): the router's default tier credits are computed from them
// (TierCreditsFor), and the mock engine models its onboarding at the same figures, so
// both sides of a benchmark agree. Host: pinned host memory over PCIe (about half of a
// PCIe 5 x16 link's 50 GB/s per direction, what DMA copies of 0.5–2 MiB blocks reach);
// Disk: one NVMe drive (a PCIe 5 drive peaks near 7 GB/s, reads of block files less);
// Remote: another node's block manager over the network (a 100 Gb/s link, 12.5 GB/s raw).
const (
	DefaultHostGBps   = 25.0
	DefaultDiskGBps   = 5.0
	DefaultRemoteGBps = 10.0
)

// DefaultKVBytesPerToken is the KV cache size of one token (bytes) assumed when a model
// card has no architecture figures (a mock model): Llama-3.1-8B's 2·32·8·128·2 = 131,072,
// the mock engine's modelled figure too.
const DefaultKVBytesPerToken = 131072

// TierBandwidth is the transfer bandwidth of each lower tier into GPU memory, in GB/s
// (1e9 bytes per second); a figure <= 0 means the tier is unusable (credit 0).
type TierBandwidth struct {
	Host, Disk, Remote float64
}

// DefaultTierBandwidth returns DefaultHostGBps, DefaultDiskGBps and DefaultRemoteGBps.
func DefaultTierBandwidth() TierBandwidth {
	return TierBandwidth{Host: DefaultHostGBps, Disk: DefaultDiskGBps, Remote: DefaultRemoteGBps}
}

// GBps returns tier t's bandwidth in GB/s (0 for TierNone and unknown tiers).
func (b TierBandwidth) GBps(t Tier) float64 {
	switch t {
	case TierHost:
		return b.Host
	case TierDisk:
		return b.Disk
	case TierRemote:
		return b.Remote
	}
	return 0
}
