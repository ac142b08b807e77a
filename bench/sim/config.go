package sim

import (
	"fmt"
	"math"
	"time"

	"github.com/turbine-llm/turbine/bench"
	"github.com/turbine-llm/turbine/engines/mocker"
	"github.com/turbine-llm/turbine/flow"
	"github.com/turbine-llm/turbine/kv"
)

// Defaults of the disaggregated model (docs/reference.md §6, §7).
const (
	// DefaultTransferBandwidth is the KV transfer bandwidth between a prefill and a
	// decode engine, in bytes per second (docs/reference.md §7: 64 GB/s).
	DefaultTransferBandwidth = 64e9
	// DefaultMaxLocalPrefillTokens is the conditional disaggregation threshold, in
	// tokens: a prompt with more uncached tokens than this is prefilled remotely
	// (docs/reference.md §6: 1000).
	DefaultMaxLocalPrefillTokens = kv.DefaultMaxLocalPrefillTokens
)

// Bounds of a Config's figures: outside them a simulation's times or memory run away
// (durations past time.Duration's 292 years, or more memory than a machine has).
const (
	// MaxKVBytesPerToken bounds KVBytesPerToken (16 MiB): about 30 times the largest
	// model's KV cache per token (Llama-3.1-405B in bfloat16, 2 × 126 layers × 8 KV heads
	// × 128 × 2 bytes = 516 kB).
	MaxKVBytesPerToken = 16 << 20
	// MinTransferBandwidth and MaxTransferBandwidth bound TransferBandwidth, in bytes/s:
	// from 1 MB/s (a slow network link) to 10 TB/s (above NVLink 5's 1.8 TB/s per GPU).
	MinTransferBandwidth = 1e6
	MaxTransferBandwidth = 1e13
	// MinSpeedupRatio and MaxSpeedupRatio bound Engine.SpeedupRatio: from a thousand
	// times slower than the timing model (a 17 ms prefill step then takes 17 s) to the
	// mock engine's own bound, mocker.MaxSpeedupRatio (a million times faster: a 1 ms
	// decode step then takes 1 ns). A mock engine takes any slower ratio above 0; a
	// simulation does not, as its steps would last minutes of virtual time each and,
	// far slower, overflow MaxSimulatedTime.
	MinSpeedupRatio = 1e-3
	MaxSpeedupRatio = mocker.MaxSpeedupRatio
	// MaxEventDelay bounds EventDelay, StepOverhead, TimerResolution and
	// RequestOverhead.
	MaxEventDelay = time.Hour
	// MaxSimulatedTime bounds the virtual time of any event, from offset 0 (100 years):
	// a step or KV transfer that would end later fails the run (Run's error) instead of
	// wrapping around to a negative time.
	MaxSimulatedTime = 100 * 365 * 24 * time.Hour
	// DefaultMemoryLimit is the memory estimate (MemoryEstimate) a Config may reach
	// unless MemoryLimit says otherwise: 8 GiB.
	DefaultMemoryLimit = 8 << 30
	// DefaultQueueRetry is how often the head of the busy queue routes again while
	// nothing else wakes it, the gateway's own period (gateway.DefaultQueueRetry).
	DefaultQueueRetry = 20 * time.Millisecond
)

// MemoryEstimate is the memory in bytes a fleet of workers engines of numBlocks KV
// blocks of blockSize tokens takes once every cache is full: the engines' blocks and
// prefix-cache maps and the router's index of every block (its tokens and a bitset of
// one bit per worker), measured at 250 to 900 bytes per block (more with larger blocks
// and more workers) and estimated a little above:
//
//	workers × (numBlocks × (200 + 4·blockSize + 8·⌈workers/64⌉) + 16 KiB)
//
// It does not count the workload (its requests and results).
//
// A figure beyond int64 saturates at math.MaxInt64.
func MemoryEstimate(workers, numBlocks, blockSize int) int64 {
	w, b, bs := float64(workers), float64(numBlocks), float64(blockSize)
	est := w * (b*(200+4*bs+8*math.Ceil(w/64)) + 16<<10)
	if est >= math.MaxInt64 {
		return math.MaxInt64
	}
	return int64(est)
}

// Config describes the simulated fleet. The zero values of Engine and Router mean
// mocker.DefaultConfig() and kv.DefaultConfig(Engine.BlockSize).
type Config struct {
	// Workers is the number of aggregated workers (at least 1); with PrefillWorkers > 0
	// it is the number of decode workers.
	Workers int
	// PrefillWorkers is the number of prefill workers of xPyD disaggregated serving (X
	// prefill, Y = Workers decode workers); 0 means aggregated serving.
	PrefillWorkers int
	// Engine is every worker's mock engine configuration (block size, KV blocks, batch
	// limits, speedup ratio ...).
	Engine mocker.Config
	// PrefillEngine is the prefill workers' mock engine configuration where it differs
	// from Engine's, as engines of another tensor-parallel size do (KV blocks, batch
	// limits, timing); its zero value means Engine. Its BlockSize, MaxModelLen,
	// SpeedupRatio and MaxLoras must equal Engine's (the router, the workload's checks and
	// the KV transfer read them from Engine); Seed 0 is Config.Seed, as Engine's.
	PrefillEngine mocker.Config
	// Router is the routing policy and its weights. Router.BlockSize must equal
	// Engine.BlockSize; 0 is filled with it. Router.LoraLoadMs, the adapter load time
	// the router assumes for a worker that has loaded none yet, 0 is filled with the
	// engines' (Engine.LoraLoadMillis over Engine.SpeedupRatio; lora.go).
	Router kv.Config
	// BlockTokens is the number of prompt tokens per trace hash id for bench.Tokens
	// (0: bench.DefaultBlockTokens).
	BlockTokens int
	// EventDelay is the virtual time between the end of an engine step and its KV events
	// reaching the router (0 to MaxEventDelay; 0: at once).
	EventDelay time.Duration
	// StepOverhead is virtual time added to every engine step beyond the timing model's
	// (0 to MaxEventDelay; 0: none): a real engine loop's own work between steps and its timer's
	// lateness, which on a busy machine is a sizeable part of a short decode step.
	StepOverhead time.Duration
	// TimerResolution rounds every step's modelled duration up to a multiple of it
	// before StepOverhead is added (0 to MaxEventDelay; 0: exact): the granularity of a
	// real engine loop's timer (TimerWait; 1 ms for Go on Linux).
	TimerResolution time.Duration
	// RequestOverhead and RequestTokenOverhead are the host's time on each request
	// (HTTP, JSON, gateway, router and worker), fixed and per prompt token: its first
	// token and its end reach the client RequestOverhead + prompt tokens ×
	// RequestTokenOverhead later than its engine produced them (0 to MaxEventDelay and
	// 0 to MaxTokenOverhead; 0: none). The engines' schedule does not change; a
	// request whose answer, the cost added, would reach its client past RequestTimeout
	// times out, as the client saw it. host.go has the model; FitHost measures the four
	// figures.
	RequestOverhead      time.Duration
	RequestTokenOverhead time.Duration
	// KVBytesPerToken is the model's KV cache size per token in bytes, for the transfer
	// time of disaggregated requests (0 to MaxKVBytesPerToken; 0: transfers take no
	// time).
	KVBytesPerToken int64
	// TransferBandwidth is the KV transfer bandwidth between a prefill and a decode
	// engine in bytes per second at the reference timing, MinTransferBandwidth to
	// MaxTransferBandwidth (0: DefaultTransferBandwidth); like every engine time it is
	// divided by Engine.SpeedupRatio (MinSpeedupRatio to MaxSpeedupRatio here).
	TransferBandwidth float64
	// MaxLocalPrefillTokens is the conditional disaggregation threshold in tokens: a
	// request whose uncached prompt suffix on its decode worker is at most this long is
	// prefilled there. It sets Router.Disagg.MaxLocalPrefillTokens; 0 keeps the
	// router's (DefaultMaxLocalPrefillTokens in kv.DefaultConfig).
	MaxLocalPrefillTokens int
	// Seed seeds the router's random choices (random policy, ties, softmax draws) and is
	// the engines' generation seed unless Engine.Seed is set.
	Seed uint64
	// MemoryLimit bounds MemoryEstimate of the fleet (Workers + PrefillWorkers engines)
	// in bytes; 0: DefaultMemoryLimit.
	MemoryLimit int64
	// Flow is every request's flow configuration (migration limit, stall timeout,
	// credits ...), as the frontend's; its zero value means flow.DefaultConfig().
	Flow flow.Config
	// RequestTimeout is how long a client waits for its answer, the host's request
	// cost included, as the bench client's --timeout: past it the request fails with
	// bench.ErrTimeout (its E2E the timeout) and its flow cancels what still runs (0:
	// forever; at most MaxSimulatedTime).
	RequestTimeout time.Duration
	// QueueDepth is how many requests may wait in the busy queue, first in first out,
	// when the router finds every worker busy (Router.Busy's thresholds), as the
	// gateway's --queue-depth; 0: none, such a request fails with ErrAllBusy at once.
	// A request waits at most QueueTimeout (above 0, at most MaxSimulatedTime, when
	// QueueDepth is set; it becomes Flow.QueueTimeout), then fails with ErrAllBusy;
	// the queue's head routes again whenever a request frees load and every QueueRetry
	// (0: DefaultQueueRetry; at most MaxEventDelay).
	QueueDepth   int
	QueueTimeout time.Duration
	QueueRetry   time.Duration
	// Faults strike the fleet during the run (see Fault), in any order; one due once
	// every request has ended does not (Stats.Faults says which struck).
	Faults []Fault
	// Heartbeat is how often each worker registers with the router again, with the LoRA
	// adapters its engine holds, when the engines have adapter slots (Engine.MaxLoras >
	// 0; lora.go); 0: DefaultHeartbeat; at most MaxEventDelay.
	Heartbeat time.Duration
	// Autoscaler, when set, makes a planner size the fleet during the run: Workers (and
	// PrefillWorkers) are then the workers ready at the start (autoscale.go).
	Autoscaler *Autoscaler
	// Kvbm, when set, gives every worker's node a KV block manager (kvbm.go): host
	// memory and disk below the GPU cache, blocks of BlockSize × KVBytesPerToken bytes
	// (0: kv.DefaultKVBytesPerToken), and its inventory reaches the router.
	Kvbm *Kvbm
	// Progress, when set, is called as each request ends (finished or failed) with the
	// number ended so far and the total, from the goroutine that called Run.
	Progress func(done, total int)
}

// normalize fills the defaults of c and validates it; errors name the field.
func (c Config) normalize() (Config, error) {
	if c.Engine == (mocker.Config{}) {
		c.Engine = mocker.DefaultConfig()
	}
	if c.Engine.Seed == 0 {
		c.Engine.Seed = c.Seed
	}
	if r := c.Engine.SpeedupRatio; !(r >= MinSpeedupRatio && r <= MaxSpeedupRatio) { // before Engine.Validate, whose range is wider
		return c, fmt.Errorf("sim: Engine.SpeedupRatio %v: want %g to %g", r, float64(MinSpeedupRatio), float64(MaxSpeedupRatio))
	}
	if err := c.Engine.Validate(); err != nil {
		return c, fmt.Errorf("sim: Engine: %w", err)
	}
	if err := c.normalizePrefillEngine(); err != nil {
		return c, err
	}
	if c.Kvbm != nil {
		k := *c.Kvbm // the caller's stays as given
		c.Kvbm = &k
	}
	if err := c.normalizeKvbm(); err != nil {
		return c, err
	}
	if isZeroRouter(c.Router) {
		c.Router = kv.DefaultConfig(c.Engine.BlockSize)
	}
	if c.Router.BlockSize == 0 {
		c.Router.BlockSize = c.Engine.BlockSize
	}
	if c.Router.LoraLoadMs == 0 {
		c.Router.LoraLoadMs = float64(c.Engine.LoraLoadTime()) / float64(time.Millisecond)
	}
	if c.BlockTokens == 0 {
		c.BlockTokens = bench.DefaultBlockTokens
	}
	if c.TransferBandwidth == 0 {
		c.TransferBandwidth = DefaultTransferBandwidth
	}
	if c.MemoryLimit == 0 {
		c.MemoryLimit = DefaultMemoryLimit
	}
	if c.Flow == (flow.Config{}) {
		c.Flow = flow.DefaultConfig()
	}
	if c.QueueRetry == 0 {
		c.QueueRetry = DefaultQueueRetry
	}
	if c.Heartbeat == 0 {
		c.Heartbeat = DefaultHeartbeat
	}
	switch {
	case c.Workers < 1:
		return c, fmt.Errorf("sim: Workers %d: want at least 1", c.Workers)
	case c.PrefillWorkers < 0:
		return c, fmt.Errorf("sim: PrefillWorkers %d: want >= 0", c.PrefillWorkers)
	case c.Workers+c.PrefillWorkers > kv.MaxWorkerID+1:
		return c, fmt.Errorf("sim: Workers %d + PrefillWorkers %d: the router takes at most %d workers",
			c.Workers, c.PrefillWorkers, kv.MaxWorkerID+1)
	case c.Router.BlockSize != c.Engine.BlockSize:
		return c, fmt.Errorf("sim: Router.BlockSize %d differs from Engine.BlockSize %d", c.Router.BlockSize, c.Engine.BlockSize)
	case c.BlockTokens < 1:
		return c, fmt.Errorf("sim: BlockTokens %d: want at least 1", c.BlockTokens)
	case c.EventDelay < 0 || c.EventDelay > MaxEventDelay:
		return c, fmt.Errorf("sim: EventDelay %v: want 0 to %v", c.EventDelay, MaxEventDelay)
	case c.StepOverhead < 0 || c.StepOverhead > MaxEventDelay:
		return c, fmt.Errorf("sim: StepOverhead %v: want 0 to %v", c.StepOverhead, MaxEventDelay)
	case c.TimerResolution < 0 || c.TimerResolution > MaxEventDelay:
		return c, fmt.Errorf("sim: TimerResolution %v: want 0 to %v", c.TimerResolution, MaxEventDelay)
	case c.RequestOverhead < 0 || c.RequestOverhead > MaxEventDelay:
		return c, fmt.Errorf("sim: RequestOverhead %v: want 0 to %v", c.RequestOverhead, MaxEventDelay)
	case c.RequestTokenOverhead < 0 || c.RequestTokenOverhead > MaxTokenOverhead:
		return c, fmt.Errorf("sim: RequestTokenOverhead %v: want 0 to %v per prompt token", c.RequestTokenOverhead, MaxTokenOverhead)
	case c.KVBytesPerToken < 0 || c.KVBytesPerToken > MaxKVBytesPerToken:
		return c, fmt.Errorf("sim: KVBytesPerToken %d: want 0 to %d bytes", c.KVBytesPerToken, MaxKVBytesPerToken)
	case !(c.TransferBandwidth >= MinTransferBandwidth && c.TransferBandwidth <= MaxTransferBandwidth):
		return c, fmt.Errorf("sim: TransferBandwidth %v bytes/s: want %g to %g", c.TransferBandwidth, MinTransferBandwidth, MaxTransferBandwidth)
	case c.MaxLocalPrefillTokens < 0:
		return c, fmt.Errorf("sim: MaxLocalPrefillTokens %d: want >= 0", c.MaxLocalPrefillTokens)
	case c.MemoryLimit < 0:
		return c, fmt.Errorf("sim: MemoryLimit %d bytes: want >= 0", c.MemoryLimit)
	case c.Flow.Credits < 1 || c.Flow.MigrationLimit < 0 || c.Flow.StallTimeout < 0 || c.Flow.AcceptTimeout < 0 || c.Flow.PrefillReleaseWait < 0 || c.Flow.TerminatedGrace < 0:
		return c, fmt.Errorf("sim: Flow %+v: want Credits >= 1, and MigrationLimit and the durations >= 0", c.Flow)
	case c.RequestTimeout < 0 || c.RequestTimeout > MaxSimulatedTime:
		return c, fmt.Errorf("sim: RequestTimeout %v: want 0 to %v", c.RequestTimeout, MaxSimulatedTime)
	case c.QueueDepth < 0:
		return c, fmt.Errorf("sim: QueueDepth %d: want >= 0 (0: no busy queue)", c.QueueDepth)
	case c.QueueDepth > 0 && (c.QueueTimeout <= 0 || c.QueueTimeout > MaxSimulatedTime):
		return c, fmt.Errorf("sim: QueueTimeout %v with QueueDepth %d: want above 0, at most %v", c.QueueTimeout, c.QueueDepth, MaxSimulatedTime)
	case c.QueueRetry < 0 || c.QueueRetry > MaxEventDelay:
		return c, fmt.Errorf("sim: QueueRetry %v: want 0 to %v", c.QueueRetry, MaxEventDelay)
	case c.Engine.MaxLoras > MaxLoras:
		return c, fmt.Errorf("sim: Engine.MaxLoras %d: want at most %d", c.Engine.MaxLoras, MaxLoras)
	case c.Heartbeat < 0 || c.Heartbeat > MaxEventDelay:
		return c, fmt.Errorf("sim: Heartbeat %v: want 0 to %v", c.Heartbeat, MaxEventDelay)
	}
	c.Flow.QueueTimeout = 0
	if c.QueueDepth > 0 {
		c.Flow.QueueTimeout = c.QueueTimeout
	}
	for i, f := range c.Faults {
		if f.At < 0 || f.At > MaxSimulatedTime || f.Kind != FaultKill {
			return c, fmt.Errorf("sim: Faults[%d]: %s at %v: want FaultKill at 0 to %v", i, f.Kind, f.At, MaxSimulatedTime)
		}
	}
	if est := c.memoryEstimate(); est > c.MemoryLimit {
		prefillBlocks := ""
		if c.PrefillEngine.NumGPUBlocks != c.Engine.NumGPUBlocks {
			prefillBlocks = fmt.Sprintf(" (PrefillEngine.NumGPUBlocks %d for the prefill workers)", c.PrefillEngine.NumGPUBlocks)
		}
		return c, fmt.Errorf("sim: Workers %d + PrefillWorkers %d engines of Engine.NumGPUBlocks %d blocks of %d tokens%s need about %s once their caches fill, above MemoryLimit %s: fewer workers or KV blocks",
			c.Workers, c.PrefillWorkers, c.Engine.NumGPUBlocks, c.Engine.BlockSize, prefillBlocks, Bytes(est), Bytes(c.MemoryLimit))
	}
	if c.MaxLocalPrefillTokens > 0 {
		c.Router.Disagg.MaxLocalPrefillTokens = c.MaxLocalPrefillTokens
	}
	if err := c.normalizeAutoscaler(); err != nil {
		return c, err
	}
	return c, nil
}

// normalizePrefillEngine fills PrefillEngine (its zero value is Engine, once Engine is
// normalized) and checks it against Engine; errors name the field.
func (c *Config) normalizePrefillEngine() error {
	if c.PrefillEngine == (mocker.Config{}) {
		c.PrefillEngine = c.Engine
		return nil
	}
	if c.PrefillEngine.Seed == 0 {
		c.PrefillEngine.Seed = c.Seed
	}
	p, e := c.PrefillEngine, c.Engine
	if p.BlockSize != e.BlockSize || p.MaxModelLen != e.MaxModelLen || p.SpeedupRatio != e.SpeedupRatio || p.MaxLoras != e.MaxLoras {
		return fmt.Errorf("sim: PrefillEngine: BlockSize %d, MaxModelLen %d, SpeedupRatio %g and MaxLoras %d must equal Engine's (%d, %d, %g, %d)",
			p.BlockSize, p.MaxModelLen, p.SpeedupRatio, p.MaxLoras, e.BlockSize, e.MaxModelLen, e.SpeedupRatio, e.MaxLoras)
	}
	if err := p.Validate(); err != nil {
		return fmt.Errorf("sim: PrefillEngine: %w", err)
	}
	return nil
}

// memoryEstimate is MemoryEstimate of the fleet: the decode (or aggregated) workers'
// engines of Engine.NumGPUBlocks blocks and the prefill workers' of
// PrefillEngine.NumGPUBlocks, the router's bitsets sized for every worker.
func (c *Config) memoryEstimate() int64 {
	if c.PrefillEngine.NumGPUBlocks == c.Engine.NumGPUBlocks {
		return MemoryEstimate(c.Workers+c.PrefillWorkers, c.Engine.NumGPUBlocks, c.Engine.BlockSize)
	}
	all := float64(c.Workers + c.PrefillWorkers)
	perBlock := 200 + 4*float64(c.Engine.BlockSize) + 8*math.Ceil(all/64)
	est := float64(c.Workers)*(float64(c.Engine.NumGPUBlocks)*perBlock+16<<10) +
		float64(c.PrefillWorkers)*(float64(c.PrefillEngine.NumGPUBlocks)*perBlock+16<<10)
	if est >= math.MaxInt64 {
		return math.MaxInt64
	}
	return int64(est)
}

// Bytes writes a memory size in GiB, MiB or KiB with one decimal (or in bytes below
// 1 KiB), for error messages.
func Bytes(b int64) string {
	switch {
	case b >= 1<<30:
		return fmt.Sprintf("%.1f GiB", float64(b)/(1<<30))
	case b >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20))
	case b >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(b)/(1<<10))
	}
	return fmt.Sprintf("%d bytes", b)
}

// isZeroRouter reports whether r is kv.Config's zero value (Policies is a pointer, so
// the struct compares).
func isZeroRouter(r kv.Config) bool { return r == kv.Config{} }
