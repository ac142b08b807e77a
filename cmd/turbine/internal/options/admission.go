package options

import (
	"context"
	"flag"
	"fmt"
	"math"
	"net"
	"net/http"
	"runtime"
	"time"

	"github.com/rs/zerolog"
	"github.com/turbine-llm/turbine/gateway"
	"github.com/turbine-llm/turbine/kv"
)

// Defaults of the overload and shutdown flags.
const (
	// DefaultDrainTimeout is how long in-flight requests may run after SIGTERM.
	DefaultDrainTimeout = 30 * time.Second
	// DefaultCanaryInterval is how long an engine may stay idle before its canary (docs/reference.md §10).
	DefaultCanaryInterval = 10 * time.Second
	// DefaultMaxConcurrentRequestsPerCPU: by default a frontend handles at most this many
	// generation requests at once (--max-concurrent-requests) per CPU it may use
	// (GOMAXPROCS): 256 on two cores. It bounds the frontend's own work — HTTP streams,
	// Router grain calls, receivers — which grows with its CPUs, not the engines'
	// capacity (the busy thresholds guard that). BENCHMARKS.md ("Saturation") has the
	// measurements behind the figure.
	DefaultMaxConcurrentRequestsPerCPU = 128
)

// Admission are the gateway's overload and shutdown flags: the routers' starting busy
// thresholds, the bound on the requests a frontend handles at once, the bounded queue of
// requests that find every worker busy or no slot free, and the drain period on SIGTERM.
type Admission struct {
	BusyKVUsage       float64       // fraction; 0: off
	BusyPrefillTokens int64         // tokens; 0: off
	MaxConcurrent     int           // generation requests handled at once; 0: no limit
	QueueDepth        int           // per model; 0: busy answers 503 at once
	QueueTimeout      time.Duration // longest wait in the queue
	DrainTimeout      time.Duration // grace for in-flight requests on SIGTERM
	RequestTimeout    time.Duration // longest generation; 0: no limit
}

// DefaultAdmission returns busy tests off, 128 concurrent requests per CPU, no queue and a
// 30 s drain.
func DefaultAdmission() Admission {
	return Admission{MaxConcurrent: DefaultMaxConcurrentRequestsPerCPU * runtime.GOMAXPROCS(0),
		QueueTimeout: gateway.DefaultQueueTimeout, DrainTimeout: DefaultDrainTimeout}
}

// Flags registers the admission flags on fs.
func (o *Admission) Flags(fs *flag.FlagSet) {
	fs.Float64Var(&o.BusyKVUsage, "busy-kv-usage", o.BusyKVUsage,
		"a worker whose active KV blocks / total blocks exceed this fraction gets no new request (0: off; change at run time with POST /admin/busy_thresholds)")
	fs.Int64Var(&o.BusyPrefillTokens, "busy-prefill-tokens", o.BusyPrefillTokens,
		"a worker with more active prefill tokens than this gets no new request (0: off)")
	fs.IntVar(&o.MaxConcurrent, "max-concurrent-requests", o.MaxConcurrent,
		"generation requests this frontend handles at once, from arrival to the end of the answer; more wait in the queue (--queue-depth) or get 503 server_overloaded with Retry-After at once (0: no limit; default 128 per CPU)")
	fs.IntVar(&o.QueueDepth, "queue-depth", o.QueueDepth,
		"requests per model that wait (first in, first out) when every worker is busy or --max-concurrent-requests are running; 0 answers them 503 at once")
	fs.DurationVar(&o.QueueTimeout, "queue-timeout", o.QueueTimeout, "longest wait in the queue before a 503")
	fs.DurationVar(&o.RequestTimeout, "request-timeout", o.RequestTimeout,
		"longest a generation (or an embeddings request) may run from arrival to last token; past it the engine request is cancelled and the client gets 504 (0: no limit)")
	fs.DurationVar(&o.DrainTimeout, "drain-timeout", o.DrainTimeout,
		"on SIGTERM, how long requests in flight may run to their end (new ones get 503) before the rest are ended as migratable")
}

// Validate checks the admission options; errors name the flag.
func (o *Admission) Validate() error {
	switch {
	case math.IsNaN(o.BusyKVUsage) || o.BusyKVUsage < 0 || o.BusyKVUsage > 1:
		return fmt.Errorf("--busy-kv-usage %g: want a fraction from 0 to 1 (0: off)", o.BusyKVUsage)
	case o.BusyPrefillTokens < 0:
		return fmt.Errorf("--busy-prefill-tokens %d: want ≥ 0 (0: off)", o.BusyPrefillTokens)
	case o.MaxConcurrent < 0 || o.MaxConcurrent > 1_000_000:
		return fmt.Errorf("--max-concurrent-requests %d: want 0..1000000 (0: no limit)", o.MaxConcurrent)
	case o.QueueDepth < 0 || o.QueueDepth > 1_000_000:
		return fmt.Errorf("--queue-depth %d: want 0..1000000", o.QueueDepth)
	case o.QueueTimeout <= 0:
		return fmt.Errorf("--queue-timeout %v: must be > 0", o.QueueTimeout)
	case o.DrainTimeout < 0:
		return fmt.Errorf("--drain-timeout %v: must be ≥ 0", o.DrainTimeout)
	case o.RequestTimeout < 0:
		return fmt.Errorf("--request-timeout %v: must be ≥ 0 (0: no limit)", o.RequestTimeout)
	}
	return nil
}

// Busy returns the routers' starting busy thresholds.
func (o *Admission) Busy() kv.BusyThresholds {
	return kv.BusyThresholds{KVUsage: o.BusyKVUsage, PrefillTokens: o.BusyPrefillTokens}
}

// Gateway sets the concurrency limit, queue and request-timeout fields of cfg.
func (o *Admission) Gateway(cfg gateway.Config) gateway.Config {
	cfg.MaxConcurrentRequests = o.MaxConcurrent
	cfg.QueueDepth, cfg.QueueTimeout, cfg.RequestTimeout = o.QueueDepth, o.QueueTimeout, o.RequestTimeout
	return cfg
}

// Canary is the workers' canary flag (docs/reference.md §10).
type Canary struct{ CanaryInterval time.Duration }

// DefaultCanary returns a 10 s canary interval.
func DefaultCanary() Canary { return Canary{CanaryInterval: DefaultCanaryInterval} }

// Flags registers --canary-interval on fs.
func (o *Canary) Flags(fs *flag.FlagSet) {
	fs.DurationVar(&o.CanaryInterval, "canary-interval", o.CanaryInterval,
		"an engine idle this long gets a one-token canary request; a failure takes its worker out of routing until one passes (0: off)")
}

// Validate checks the canary option; errors name the flag.
func (o *Canary) Validate() error {
	if o.CanaryInterval < 0 {
		return fmt.Errorf("--canary-interval %v: must be ≥ 0 (0: off)", o.CanaryInterval)
	}
	return nil
}

// ServeDrained serves handler on ln like Serve; when ctx ends it calls drain (which
// should refuse new requests and return once those in flight ended) before shutting the
// HTTP server down. It returns nil after a shutdown and the server's error otherwise.
func ServeDrained(ctx context.Context, ln net.Listener, handler http.Handler, log zerolog.Logger, drain func()) error {
	srv := newHTTPServer(handler)
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case <-ctx.Done():
		log.Info().Msg("shutting down: draining")
	case err := <-errc:
		return fmt.Errorf("http server: %w", err)
	}
	if drain != nil {
		drain()
	}
	shutdownCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_ = srv.Shutdown(shutdownCtx)
	log.Info().Msg("shut down")
	return nil
}
