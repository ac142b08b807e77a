package worker

import "time"

// Defaults of Config (the zero value of a field means its default) and the worker's fixed
// bounds, in one place.
const (
	DefaultHost          = "127.0.0.1"       // Config.Host: where the engine listens
	DefaultHeartbeat     = time.Second       // Config.Heartbeat
	DefaultReadyTimeout  = 120 * time.Second // Config.ReadyTimeout: a starting engine's first healthy answer
	DefaultStopGrace     = 5 * time.Second   // Config.StopGrace: SIGTERM to SIGKILL
	DefaultCanaryTimeout = 3 * time.Second   // Config.CanaryTimeout
	// DefaultMaxLoraRank is Config.MaxLoraRank: vLLM's --max-lora-rank default.
	DefaultMaxLoraRank = 16
	// DefaultLoraLoadTimeout is Config.LoraLoadTimeout: one adapter load or unload call.
	DefaultLoraLoadTimeout = 60 * time.Second
	// DefaultLoraWaitTimeout is Config.LoraWaitTimeout: a request waiting for its
	// adapter's load on demand.
	DefaultLoraWaitTimeout = 30 * time.Second
	// DefaultLoraCheckTimeout is Config.LoraCheckTimeout: an adapter folder's check (a
	// few stats and one small read) on a file system that does not answer.
	DefaultLoraCheckTimeout = 10 * time.Second
	// DefaultLoraUnloadGrace is Config.LoraUnloadGrace: the requests of an adapter being
	// unloaded may run this long.
	DefaultLoraUnloadGrace = 30 * time.Second
	// DefaultPinnedReleaseGrace is Config.PinnedReleaseGrace: a decode leg that got the
	// transfer parameters before the partition has begun its read by then.
	DefaultPinnedReleaseGrace = 5 * time.Second
	// MaxKnownLoras bounds the known LoRA adapters a worker keeps (loaded before and
	// evicted since, still registered; docs/reference.md §26.2): past it the least recently
	// used is forgotten. The Router grain takes up to 4096 in a registration.
	MaxKnownLoras = 1024
)

const (
	// failedRetry is how soon a canary follows a failed one: the worker is out of routing
	// meanwhile, so a recovered engine (a paused process resumed) should not wait a whole
	// interval to serve again.
	failedRetry = 2 * time.Second
	// drainOverrun: DrainAndStop stops a worker that has not reported drained this long
	// after its grace.
	drainOverrun = 10 * time.Second
	// resubscribeWait: the pause before a KV event subscription that ended is made again.
	resubscribeWait = 200 * time.Millisecond
	// healthPoll and healthTimeout: a starting engine's health is asked every healthPoll,
	// each call bounded by healthTimeout, until Config.ReadyTimeout.
	healthPoll    = 100 * time.Millisecond
	healthTimeout = time.Second
	// loadTimeout bounds the load scrape of a heartbeat.
	loadTimeout = time.Second
	// minFrozenAfter: the least time an engine that answers no scrape must also produce no
	// chunk before its requests are handed back (frozenAfter).
	minFrozenAfter = 5 * time.Second
	// The catalog entry a heartbeat announces lives catalogTTLHeartbeats heartbeats, at
	// least minCatalogTTL: generous, so that a slow heartbeat never makes the model vanish.
	catalogTTLHeartbeats = 5
	minCatalogTTL        = 3 * time.Second
	// leaveWait: how long a stopping worker waits for its deregistration to be delivered.
	leaveWait = 2 * time.Second
	// releaseKVTimeout bounds a ReleaseKv call to the engine.
	releaseKVTimeout = 5 * time.Second
	// pinnedKeep: how long a finished prefill leg waits for its receiver's end (past
	// vLLM's VLLM_NIXL_ABORT_REQUEST_TIMEOUT of 480 s the engine has freed its blocks).
	pinnedKeep = 10 * time.Minute
	// pinnedStoppedKeep: how long after its receiver stopped a finished prefill leg's
	// parameters stay for a ReleaseKv that comes without them.
	pinnedStoppedKeep = 30 * time.Second
)
