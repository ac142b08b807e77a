package tracing

import (
	"context"
	"errors"
	"fmt"
	"math"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// Service names of Turbine's processes (the resource's service.name unless
// OTEL_SERVICE_NAME is set).
const (
	ServiceFrontend = "turbine-frontend"
	ServiceNode     = "turbine-node"
	ServiceServe    = "turbine-serve"
	ServiceEPP      = "turbine-epp"
)

// DefaultSampleRatio is --trace-sample-ratio's default: every trace.
const DefaultSampleRatio = 1.0

// Config is what Setup needs.
type Config struct {
	// Endpoint is where spans go (Resolve); the zero value turns tracing off.
	Endpoint Endpoint
	// SampleRatio is the share of new traces recorded, 0..1; a span whose parent (the
	// client's traceparent, or an upstream Turbine process) is sampled or not follows
	// its parent.
	SampleRatio float64
	// ServiceName is the resource's service.name (one of the Service* constants);
	// OTEL_SERVICE_NAME replaces it, and OTEL_RESOURCE_ATTRIBUTES adds attributes.
	ServiceName string
	// OnError gets the SDK's errors (an export that failed); nil: dropped.
	OnError func(error)
}

// Setup turns tracing on as cfg says and returns the shutdown that flushes the spans
// still buffered and turns it off; call it once when the process ends, with a context
// that bounds the flush. With cfg.Endpoint zero it does nothing: tracing stays off and
// shutdown returns nil. Other OTLP settings (OTEL_EXPORTER_OTLP_HEADERS,
// OTEL_EXPORTER_OTLP_TIMEOUT, OTEL_EXPORTER_OTLP_CERTIFICATE …) are read by the exporter
// from the environment. Errors: a sample ratio outside 0..1, the exporter's or the
// resource's.
func Setup(ctx context.Context, cfg Config) (shutdown func(context.Context) error, err error) {
	if cfg.Endpoint.Protocol == 0 {
		return func(context.Context) error { return nil }, nil
	}
	if math.IsNaN(cfg.SampleRatio) || cfg.SampleRatio < 0 || cfg.SampleRatio > 1 {
		return nil, fmt.Errorf("tracing: sample ratio %v: want 0..1", cfg.SampleRatio)
	}
	exp, err := newExporter(ctx, cfg.Endpoint)
	if err != nil {
		return nil, err
	}
	res, err := resource.New(ctx, resource.WithTelemetrySDK(),
		resource.WithAttributes(attribute.String("service.name", cfg.ServiceName)),
		resource.WithFromEnv()) // later wins: OTEL_SERVICE_NAME over the default
	if err != nil && res == nil {
		_ = exp.Shutdown(ctx)
		return nil, fmt.Errorf("tracing: resource: %w", err)
	}
	tp := sdktrace.NewTracerProvider(
		sdktrace.WithBatcher(exp),
		sdktrace.WithResource(res),
		sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.TraceIDRatioBased(cfg.SampleRatio))))
	if cfg.OnError != nil {
		otel.SetErrorHandler(otel.ErrorHandlerFunc(cfg.OnError))
	}
	restore := Install(tp)
	return func(ctx context.Context) error {
		restore()
		return tp.Shutdown(ctx)
	}, nil
}

// newExporter is the OTLP exporter of ep.
func newExporter(ctx context.Context, ep Endpoint) (*otlptrace.Exporter, error) {
	switch ep.Protocol {
	case ProtocolHTTP:
		opts := []otlptracehttp.Option{otlptracehttp.WithEndpoint(ep.HostPort), otlptracehttp.WithURLPath(ep.Path)}
		if ep.Insecure {
			opts = append(opts, otlptracehttp.WithInsecure())
		}
		return otlptracehttp.New(ctx, opts...)
	case ProtocolGRPC:
		opts := []otlptracegrpc.Option{otlptracegrpc.WithEndpoint(ep.HostPort)}
		if ep.Insecure {
			opts = append(opts, otlptracegrpc.WithInsecure())
		}
		return otlptracegrpc.New(ctx, opts...)
	}
	return nil, errors.New("tracing: endpoint without a protocol")
}
