package sim

import (
	"fmt"
	"math"
	"time"

	"github.com/turbine-llm/turbine/bench"
	"github.com/turbine-llm/turbine/engines/mocker"
	"github.com/turbine-llm/turbine/kv"
)

// Defaults of the disaggregated model (REFERENCE §6, §7).
const (
	// DefaultTransferBandwidth is the KV transfer bandwidth between a prefill and a
	// decode engine, in bytes per second (REFERENCE §7: 64 GB/s).
	DefaultTransferBandwidth = 64e9
	// DefaultMaxLocalPrefillTokens is the conditional disaggregation threshold, in
	// tokens: a prompt with more uncached tokens than this is prefilled remotely
	// (REFERENCE §6: 1000).
	DefaultMaxLocalPrefillTokens = kv.DefaultMaxLocalPrefillTokens
)

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
	// Router is the routing policy and its weights. Router.BlockSize must equal
	// Engine.BlockSize; 0 is filled with it.
	Router kv.Config
	// BlockTokens is the number of prompt tokens per trace hash id for bench.Tokens
	// (0: bench.DefaultBlockTokens).
	BlockTokens int
	// EventDelay is the virtual time between the end of an engine step and its KV events
	// reaching the router (>= 0; 0: at once).
	EventDelay time.Duration
	// StepOverhead is virtual time added to every engine step beyond the timing model's
	// (>= 0; 0: none): a real engine loop's own work between steps and its timer's
	// lateness, which on a busy machine is a sizeable part of a short decode step.
	StepOverhead time.Duration
	// KVBytesPerToken is the model's KV cache size per token in bytes, for the transfer
	// time of disaggregated requests (>= 0; 0: transfers take no time).
	KVBytesPerToken int64
	// TransferBandwidth is the KV transfer bandwidth between a prefill and a decode
	// engine in bytes per second at the reference timing (0: DefaultTransferBandwidth);
	// like every engine time it is divided by Engine.SpeedupRatio.
	TransferBandwidth float64
	// MaxLocalPrefillTokens is the conditional disaggregation threshold in tokens: a
	// request whose uncached prompt suffix on its decode worker is at most this long is
	// prefilled there. It sets Router.Disagg.MaxLocalPrefillTokens; 0 keeps the
	// router's (DefaultMaxLocalPrefillTokens in kv.DefaultConfig).
	MaxLocalPrefillTokens int
	// Seed seeds the router's random choices (random policy, ties, softmax draws) and is
	// the engines' generation seed unless Engine.Seed is set.
	Seed uint64
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
	if err := c.Engine.Validate(); err != nil {
		return c, fmt.Errorf("sim: Engine: %w", err)
	}
	if isZeroRouter(c.Router) {
		c.Router = kv.DefaultConfig(c.Engine.BlockSize)
	}
	if c.Router.BlockSize == 0 {
		c.Router.BlockSize = c.Engine.BlockSize
	}
	if c.BlockTokens == 0 {
		c.BlockTokens = bench.DefaultBlockTokens
	}
	if c.TransferBandwidth == 0 {
		c.TransferBandwidth = DefaultTransferBandwidth
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
	case c.EventDelay < 0:
		return c, fmt.Errorf("sim: EventDelay %v: want >= 0", c.EventDelay)
	case c.StepOverhead < 0:
		return c, fmt.Errorf("sim: StepOverhead %v: want >= 0", c.StepOverhead)
	case c.KVBytesPerToken < 0:
		return c, fmt.Errorf("sim: KVBytesPerToken %d: want >= 0", c.KVBytesPerToken)
	case !(c.TransferBandwidth > 0) || math.IsInf(c.TransferBandwidth, 0):
		return c, fmt.Errorf("sim: TransferBandwidth %v bytes/s: want a positive number", c.TransferBandwidth)
	case c.MaxLocalPrefillTokens < 0:
		return c, fmt.Errorf("sim: MaxLocalPrefillTokens %d: want >= 0", c.MaxLocalPrefillTokens)
	}
	if c.MaxLocalPrefillTokens > 0 {
		c.Router.Disagg.MaxLocalPrefillTokens = c.MaxLocalPrefillTokens
	}
	return c, nil
}

// isZeroRouter reports whether r is kv.Config's zero value (Policies is a pointer, so
// the struct compares).
func isZeroRouter(r kv.Config) bool { return r == kv.Config{} }
