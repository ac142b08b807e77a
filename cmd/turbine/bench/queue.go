package bench

import (
	"flag"

	"github.com/turbine-llm/turbine/bench/sim"
)

// queueFlagNames are serve's busy thresholds and busy queue, which a simulation's router
// and flows take (a real run refuses them: the serve measured has its own).
var queueFlagNames = []string{"busy-kv-usage", "busy-prefill-tokens", "queue-depth", "queue-timeout"}

// queueFlags registers the busy thresholds and the busy queue of `turbine bench
// --simulate`, with serve's names and defaults (Fleet.Queue).
func (f *Fleet) queueFlags(fs *flag.FlagSet) {
	q := &f.Queue
	fs.Float64Var(&q.BusyKVUsage, "busy-kv-usage", q.BusyKVUsage,
		"a worker whose active KV blocks / total blocks exceed this fraction gets no new request (0: off)")
	fs.Int64Var(&q.BusyPrefillTokens, "busy-prefill-tokens", q.BusyPrefillTokens,
		"a worker with more active prefill tokens than this gets no new request (0: off)")
	fs.IntVar(&q.QueueDepth, "queue-depth", q.QueueDepth,
		"requests that wait (first in, first out) when every worker is busy; 0 fails them all_busy at once")
	fs.DurationVar(&q.QueueTimeout, "queue-timeout", q.QueueTimeout, "longest wait in the queue before all_busy")
}

// applyQueue sets the simulation's busy thresholds and busy queue from Fleet.Queue.
func (f *Fleet) applyQueue(cfg *sim.Config) {
	cfg.Router.Busy = f.Queue.Busy()
	cfg.QueueDepth, cfg.QueueTimeout = f.Queue.QueueDepth, f.Queue.QueueTimeout
}
