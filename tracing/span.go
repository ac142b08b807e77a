package tracing

import (
	"context"
	"net/http"
	"sync/atomic"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// Span names (docs/tracing.md lists them with their attributes).
const (
	SpanReceive        = "gateway.receive" // server span of one HTTP request
	SpanPreprocess     = "preprocess"      // chat template and tokenization
	SpanRoute          = "route"           // the frontend's Route call
	SpanPrefill        = "prefill"         // a disaggregated request's prefill leg
	SpanDecode         = "decode"          // a worker leg (the whole request when aggregated)
	SpanRouterRoute    = "router.route"    // the Router grain deciding
	SpanWorkerGenerate = "worker.generate" // the worker running a leg on its engine
)

// Event names.
const (
	EventFirstToken = "first_token" // on a decode span: the leg's first token arrived
	EventMigration  = "migration"   // on a decode span: the leg continues a migrated request
)

// Attribute keys. OpenTelemetry's semantic conventions where one exists (http.*,
// error.type, gen_ai.*), turbine.* otherwise.
const (
	AttrHTTPMethod     = attribute.Key("http.request.method")
	AttrHTTPRoute      = attribute.Key("http.route")
	AttrHTTPStatus     = attribute.Key("http.response.status_code")
	AttrErrorType      = attribute.Key("error.type")
	AttrModel          = attribute.Key("gen_ai.request.model")
	AttrInputTokens    = attribute.Key("gen_ai.usage.input_tokens")
	AttrOutputTokens   = attribute.Key("gen_ai.usage.output_tokens")
	AttrCachedTokens   = attribute.Key("turbine.usage.cached_tokens")
	AttrRequestID      = attribute.Key("turbine.request_id")
	AttrEndpoint       = attribute.Key("turbine.endpoint")
	AttrStream         = attribute.Key("turbine.stream")
	AttrWorker         = attribute.Key("turbine.worker_id")
	AttrPrefillWorker  = attribute.Key("turbine.prefill_worker_id")
	AttrOverlapBlocks  = attribute.Key("turbine.route.overlap_blocks")
	AttrPromptBlocks   = attribute.Key("turbine.route.prompt_blocks")
	AttrCandidates     = attribute.Key("turbine.route.candidates")
	AttrOutcome        = attribute.Key("turbine.route.outcome")
	AttrDisagg         = attribute.Key("turbine.disagg.decision")
	AttrMigrations     = attribute.Key("turbine.migrations")
	AttrReason         = attribute.Key("turbine.migration.reason")
	AttrFromWorker     = attribute.Key("turbine.migration.from_worker")
	AttrFinishReason   = attribute.Key("turbine.finish_reason")
	AttrFault          = attribute.Key("turbine.fault")
	AttrLeg            = attribute.Key("turbine.leg")
	AttrPromptTokensIn = attribute.Key("turbine.prompt_tokens") // tokens sent with a leg (prompt + output so far after a migration)
)

// InstrumentationName is the tracer's name (the instrumentation scope of every span).
const InstrumentationName = "github.com/turbine-llm/turbine"

// state is what Install set: the tracer Turbine starts spans with and the propagator
// that reads and writes headers. nil: tracing off.
type state struct {
	tracer     trace.Tracer
	propagator propagation.TextMapPropagator
}

var current atomic.Pointer[state]

// Enabled reports whether tracing is on (Setup was given an endpoint, or Install a
// provider). Callers check it before building attributes, so that tracing off costs
// one atomic load.
func Enabled() bool { return current.Load() != nil }

// Propagator is W3C TraceContext (traceparent, tracestate) and W3C Baggage.
func Propagator() propagation.TextMapPropagator {
	return propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{})
}

// Install turns tracing on with tp (and Propagator) for this process, also as the
// OpenTelemetry globals, and returns the function that turns it off again and restores
// the globals as they were. Setup calls it; tests call it with an SDK provider over an
// in-memory exporter (go.opentelemetry.io/otel/sdk/trace/tracetest). Not for concurrent
// use with itself.
func Install(tp trace.TracerProvider) (restore func()) {
	prevTP, prevProp, prev := otel.GetTracerProvider(), otel.GetTextMapPropagator(), current.Load()
	prop := Propagator()
	otel.SetTracerProvider(tp)
	otel.SetTextMapPropagator(prop)
	current.Store(&state{tracer: tp.Tracer(InstrumentationName), propagator: prop})
	return func() {
		current.Store(prev)
		otel.SetTracerProvider(prevTP)
		otel.SetTextMapPropagator(prevProp)
	}
}

// noSpan is the span every helper returns while tracing is off (non-recording, invalid
// span context); returning it allocates nothing.
var noSpan = trace.SpanFromContext(context.Background())

// Start starts span name as a child of ctx's span (a root when it has none) and returns
// the context holding it. Off: ctx and a non-recording span, without allocating when
// opts is empty.
func Start(ctx context.Context, name string, opts ...trace.SpanStartOption) (context.Context, trace.Span) {
	st := current.Load()
	if st == nil {
		return ctx, noSpan
	}
	return st.tracer.Start(ctx, name, opts...)
}

// ExtractHeaders returns ctx with the remote span context (and baggage) of an incoming
// request's traceparent, tracestate and baggage headers; ctx itself when tracing is off
// or h has none.
func ExtractHeaders(ctx context.Context, h http.Header) context.Context {
	st := current.Load()
	if st == nil || len(h.Values("Traceparent")) == 0 && len(h.Values("Baggage")) == 0 {
		return ctx
	}
	return st.propagator.Extract(ctx, propagation.HeaderCarrier(h))
}

// InjectHeaders writes ctx's span context (traceparent, tracestate) and baggage into h,
// for an outgoing HTTP request (an engine's). Nothing when tracing is off or ctx holds
// no valid span context.
func InjectHeaders(ctx context.Context, h http.Header) {
	st := current.Load()
	if st == nil || !trace.SpanContextFromContext(ctx).IsValid() {
		return
	}
	st.propagator.Inject(ctx, propagation.HeaderCarrier(h))
}

// Traceparent is ctx's span context as a W3C traceparent value
// (00-<trace id>-<span id>-<flags>), which actor messages carry
// (RouteRequest.traceparent, Generate.traceparent); "" when tracing is off or ctx
// holds no valid span context.
func Traceparent(ctx context.Context) string {
	if current.Load() == nil {
		return ""
	}
	sc := trace.SpanContextFromContext(ctx)
	if !sc.IsValid() {
		return ""
	}
	var c onePair
	propagation.TraceContext{}.Inject(trace.ContextWithSpanContext(context.Background(), sc), &c)
	return c.value
}

// FromTraceparent returns ctx with the remote span context tp names (Traceparent's
// form), so that a span started from it is that span's child. ctx itself when tracing
// is off, tp is "" or malformed.
func FromTraceparent(ctx context.Context, tp string) context.Context {
	if tp == "" || current.Load() == nil {
		return ctx
	}
	return propagation.TraceContext{}.Extract(ctx, &onePair{key: "traceparent", value: tp})
}

// onePair is a carrier of the traceparent header alone.
type onePair struct{ key, value string }

func (c *onePair) Get(key string) string {
	if key == "traceparent" && c.key == key {
		return c.value
	}
	return ""
}

func (c *onePair) Set(key, value string) {
	if key == "traceparent" {
		c.key, c.value = key, value
	}
}

func (c *onePair) Keys() []string { return []string{"traceparent"} }
