package frontend

import (
	"slices"
	"testing"

	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/turbine-llm/turbine/messages"
	"github.com/turbine-llm/turbine/tracing"
)

// recordSpans turns tracing on over an in-memory recorder for the test.
func recordSpans(t *testing.T) *tracetest.SpanRecorder {
	t.Helper()
	rec := tracetest.NewSpanRecorder()
	t.Cleanup(tracing.Install(sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))))
	return rec
}

// named returns the ended spans called name, in the order they started.
func named(rec *tracetest.SpanRecorder, name string) []sdktrace.ReadOnlySpan {
	var out []sdktrace.ReadOnlySpan
	for _, s := range rec.Ended() {
		if s.Name() == name {
			out = append(out, s)
		}
	}
	slices.SortFunc(out, func(a, b sdktrace.ReadOnlySpan) int { return a.StartTime().Compare(b.StartTime()) })
	return out
}

func attr(s sdktrace.ReadOnlySpan, key string) string {
	for _, kv := range s.Attributes() {
		if string(kv.Key) == key {
			return kv.Value.Emit()
		}
	}
	return ""
}

// traceparentOf is the traceparent a leg's Generate must carry for span s.
func traceparentOf(s sdktrace.ReadOnlySpan) string {
	return "00-" + s.SpanContext().TraceID().String() + "-" + s.SpanContext().SpanID().String() + "-01"
}

// TestTraceMigration: a leg whose engine failed ends its decode span as an error; the
// leg that continues the request on another worker has its own decode span with the
// migration event (reason, from, to); each route has its span; each Generate carries
// its leg's span as traceparent.
func TestTraceMigration(t *testing.T) {
	rec := recordSpans(t)
	first, second := &scriptedWorker{failAfter: 3, fault: "error"}, &scriptedWorker{failAfter: -1}
	h := buildHarness(t, harnessOpts{limit: 1}, first, second)
	if h.startErr != nil {
		t.Fatal(h.startErr)
	}
	h.drain(t)
	h.stream.Close()
	routes, decodes := named(rec, tracing.SpanRoute), named(rec, tracing.SpanDecode)
	if len(routes) != 2 || len(decodes) != 2 {
		t.Fatalf("%d route and %d decode spans, want 2 each", len(routes), len(decodes))
	}
	failed, cont := decodes[0], decodes[1]
	if failed.Status().Code != codes.Error || attr(failed, "turbine.fault") != messages.Fault_FAULT_ENGINE_ERROR.String() ||
		attr(failed, "turbine.worker_id") != "w0" || attr(failed, "gen_ai.usage.output_tokens") != "3" {
		t.Errorf("failed leg's span: status %v, attributes %v", failed.Status(), failed.Attributes())
	}
	ev := cont.Events()
	i := slices.IndexFunc(ev, func(e sdktrace.Event) bool { return e.Name == tracing.EventMigration })
	if i < 0 {
		t.Fatalf("continuing leg's events %v: no migration", ev)
	}
	got := map[string]string{}
	for _, kv := range ev[i].Attributes {
		got[string(kv.Key)] = kv.Value.Emit()
	}
	if got["turbine.migration.reason"] != messages.Fault_FAULT_ENGINE_ERROR.Label() || got["turbine.migration.from_worker"] != "w0" ||
		got["turbine.worker_id"] != "w1" {
		t.Errorf("migration event attributes %v", got)
	}
	if attr(cont, "turbine.worker_id") != "w1" || attr(cont, "gen_ai.usage.output_tokens") != "5" || cont.Status().Code == codes.Error {
		t.Errorf("continuing leg's span: status %v, attributes %v", cont.Status(), cont.Attributes())
	}
	if g := first.generates; len(g) != 1 || g[0].Traceparent != traceparentOf(failed) {
		t.Errorf("first worker's Generate traceparent %q, want %q", g[0].GetTraceparent(), traceparentOf(failed))
	}
	if g := second.generates; len(g) != 1 || g[0].Traceparent != traceparentOf(cont) {
		t.Errorf("second worker's Generate traceparent %q, want %q", g[0].GetTraceparent(), traceparentOf(cont))
	}
	if h.router.routes[0].Traceparent != traceparentOf(routes[0]) {
		t.Errorf("RouteRequest traceparent %q, want the route span's %q", h.router.routes[0].Traceparent, traceparentOf(routes[0]))
	}
}

// TestTracePrefillLeg: a disaggregated request has a prefill span (its Generate carries
// it) and a decode span; only the decode span has first_token.
func TestTracePrefillLeg(t *testing.T) {
	rec := recordSpans(t)
	pre := &scriptedWorker{failAfter: -1}
	h := buildHarness(t, harnessOpts{prefill: []*scriptedWorker{pre}}, &scriptedWorker{failAfter: -1})
	if h.startErr != nil {
		t.Fatal(h.startErr)
	}
	h.drain(t)
	h.stream.Close()
	prefills, decodes := named(rec, tracing.SpanPrefill), named(rec, tracing.SpanDecode)
	if len(prefills) != 1 || len(decodes) != 1 {
		t.Fatalf("%d prefill and %d decode spans, want 1 each", len(prefills), len(decodes))
	}
	if g := pre.generates; len(g) != 1 || g[0].Traceparent != traceparentOf(prefills[0]) {
		t.Errorf("prefill worker's Generate traceparent %q, want %q", g[0].GetTraceparent(), traceparentOf(prefills[0]))
	}
	if slices.ContainsFunc(prefills[0].Events(), func(e sdktrace.Event) bool { return e.Name == tracing.EventFirstToken }) ||
		!slices.ContainsFunc(decodes[0].Events(), func(e sdktrace.Event) bool { return e.Name == tracing.EventFirstToken }) {
		t.Errorf("first_token events: prefill %v, decode %v; want the decode leg's only", prefills[0].Events(), decodes[0].Events())
	}
}

// TestTraceOff: with tracing off, nothing carries a traceparent.
func TestTraceOff(t *testing.T) {
	w := &scriptedWorker{failAfter: -1}
	h := buildHarness(t, harnessOpts{}, w)
	if h.startErr != nil {
		t.Fatal(h.startErr)
	}
	h.drain(t)
	if tp := w.generates[0].Traceparent + h.router.routes[0].Traceparent; tp != "" || h.stream.trace != nil {
		t.Errorf("traceparent %q with tracing off", tp)
	}
}
