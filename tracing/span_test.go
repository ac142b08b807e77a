package tracing

import (
	"context"
	"net/http"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
)

// TestPropagation: a traceparent written by Traceparent and read by FromTraceparent
// links a span to its parent (as across an actor message); headers likewise; with
// tracing off nothing is written or read.
func TestPropagation(t *testing.T) {
	const tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	ctx := context.Background()
	if Traceparent(trace.ContextWithSpanContext(ctx, FromTraceparentOn(t, tp))) != "" {
		t.Error("Traceparent wrote a value with tracing off")
	}
	if FromTraceparent(ctx, tp) != ctx || ExtractHeaders(ctx, http.Header{"Traceparent": {tp}}) != ctx {
		t.Error("a traceparent read with tracing off")
	}
	h := http.Header{}
	InjectHeaders(trace.ContextWithSpanContext(ctx, FromTraceparentOn(t, tp)), h)
	if len(h) != 0 {
		t.Errorf("headers written with tracing off: %v", h)
	}

	rec := tracetest.NewSpanRecorder()
	t.Cleanup(Install(sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))))
	for _, bad := range []string{"", "00-zz-00f067aa0ba902b7-01", "00-00000000000000000000000000000000-00f067aa0ba902b7-01"} {
		if trace.SpanContextFromContext(FromTraceparent(ctx, bad)).IsValid() {
			t.Errorf("FromTraceparent(%q) gave a valid parent", bad)
		}
	}
	pctx := FromTraceparent(ctx, tp)
	sctx, sp := Start(pctx, SpanRoute)
	got := Traceparent(sctx)
	want := "00-4bf92f3577b34da6a3ce929d0e0e4736-" + sp.SpanContext().SpanID().String() + "-01"
	if got != want {
		t.Errorf("Traceparent = %q, want %q", got, want)
	}
	_, child := Start(FromTraceparent(ctx, got), SpanRouterRoute)
	child.End()
	sp.End()
	ended := rec.Ended()
	if len(ended) != 2 || ended[0].Parent().SpanID() != sp.SpanContext().SpanID() || !ended[0].Parent().IsRemote() ||
		ended[1].Parent().SpanID().String() != "00f067aa0ba902b7" {
		t.Fatalf("spans %v: want router.route the child of route, route the child of the traceparent", ended)
	}
	h = http.Header{}
	InjectHeaders(sctx, h)
	if h.Get("Traceparent") != want {
		t.Errorf("injected header %q, want %q", h.Get("Traceparent"), want)
	}
	if sc := trace.SpanContextFromContext(ExtractHeaders(ctx, h)); sc.SpanID() != sp.SpanContext().SpanID() {
		t.Errorf("extracted %v", sc)
	}
}

// FromTraceparentOn parses tp as a span context whatever tracing's state.
func FromTraceparentOn(t *testing.T, tp string) trace.SpanContext {
	t.Helper()
	tid, _ := trace.TraceIDFromHex(tp[3:35])
	sid, _ := trace.SpanIDFromHex(tp[36:52])
	return trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid, TraceFlags: trace.FlagsSampled, Remote: true})
}

// TestStartOffAllocatesNothing: the helpers a request passes through cost no allocation
// while tracing is off.
func TestStartOffAllocatesNothing(t *testing.T) {
	ctx := context.Background()
	h := http.Header{}
	n := testing.AllocsPerRun(100, func() {
		c, sp := Start(ctx, SpanRoute)
		sp.End()
		_ = Traceparent(c)
		_ = FromTraceparent(c, "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
		InjectHeaders(c, h)
		_ = ExtractHeaders(c, h)
		_ = Enabled()
	})
	if n != 0 {
		t.Fatalf("%v allocations per request with tracing off", n)
	}
}
