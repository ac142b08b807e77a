package options

import (
	"context"
	"flag"
	"fmt"
	"math"
	"os"
	"time"

	"github.com/rs/zerolog"
	"github.com/turbine-llm/turbine/tracing"
)

// Tracing are the OpenTelemetry tracing flags of serve, frontend, node and epp
// (docs/tracing.md).
type Tracing struct {
	// OTLPEndpoint is where spans are exported (tracing.ParseEndpoint's forms); "": the
	// environment's OTEL_EXPORTER_OTLP_ENDPOINT, else tracing off.
	OTLPEndpoint string
	// OTLPInsecure: OTLP/gRPC in plaintext (http:// is plaintext already).
	OTLPInsecure bool
	// SampleRatio is the share of new traces recorded, 0..1.
	SampleRatio float64
	// getenv reads the environment (os.Getenv; tests replace it).
	getenv func(string) string
}

// DefaultTracing returns tracing off (no endpoint), every trace sampled once on.
func DefaultTracing() Tracing { return Tracing{SampleRatio: tracing.DefaultSampleRatio} }

// Flags registers --otlp-endpoint, --otlp-insecure and --trace-sample-ratio on fs.
func (o *Tracing) Flags(fs *flag.FlagSet) {
	fs.StringVar(&o.OTLPEndpoint, "otlp-endpoint", o.OTLPEndpoint,
		"export OpenTelemetry traces of every request to this OTLP receiver: http://host:4318 or https://… (OTLP/HTTP), "+
			"host:4317 or grpc://host:4317 (OTLP/gRPC); empty: "+tracing.EnvEndpoint+" when set, else tracing off")
	fs.BoolVar(&o.OTLPInsecure, "otlp-insecure", o.OTLPInsecure,
		"OTLP/gRPC without TLS (an http:// endpoint is plaintext already)")
	fs.Float64Var(&o.SampleRatio, "trace-sample-ratio", o.SampleRatio,
		"share of new traces recorded, 0 to 1; a request whose traceparent says sampled or not follows it")
}

// Validate checks the tracing options; errors name the flag (or the variable).
func (o *Tracing) Validate() error {
	if math.IsNaN(o.SampleRatio) || o.SampleRatio < 0 || o.SampleRatio > 1 {
		return fmt.Errorf("--trace-sample-ratio %v: want 0..1", o.SampleRatio)
	}
	if _, _, err := o.endpoint(); err != nil {
		return err
	}
	return nil
}

// endpoint resolves the export endpoint from the flag, else the environment.
func (o *Tracing) endpoint() (tracing.Endpoint, bool, error) {
	getenv := o.getenv
	if getenv == nil {
		getenv = os.Getenv
	}
	ep, ok, err := tracing.Resolve(o.OTLPEndpoint, o.OTLPInsecure, getenv)
	if err != nil && o.OTLPEndpoint != "" {
		err = fmt.Errorf("--otlp-endpoint: %w", err)
	}
	return ep, ok, err
}

// Start turns tracing on for this process as service (tracing.ServiceFrontend, …) when
// an endpoint is set, logging where spans go and export failures, and returns the
// shutdown to defer: it flushes buffered spans for at most 5 s. Tracing off: nothing
// happens and shutdown does nothing.
func (o *Tracing) Start(ctx context.Context, service string, log zerolog.Logger) (shutdown func(), err error) {
	ep, ok, err := o.endpoint()
	if err != nil {
		return nil, err
	}
	if !ok {
		return func() {}, nil
	}
	stop, err := tracing.Setup(ctx, tracing.Config{Endpoint: ep, SampleRatio: o.SampleRatio, ServiceName: service,
		OnError: func(err error) { log.Warn().Err(err).Msg("tracing: export failed") }})
	if err != nil {
		return nil, err
	}
	log.Info().Str("otlp_endpoint", ep.HostPort+ep.Path).Str("protocol", ep.Protocol.String()).Bool("insecure", ep.Insecure).
		Float64("sample_ratio", o.SampleRatio).Msg("tracing on")
	return func() {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		if err := stop(sctx); err != nil {
			log.Warn().Err(err).Msg("tracing: flushing spans at exit")
		}
	}, nil
}
