package gateway

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/turbine-llm/turbine/tracing"
)

// discardSpans is a span processor that drops every span: the cost measured is the
// spans' own, not an exporter's.
type discardSpans struct{}

func (discardSpans) OnStart(context.Context, sdktrace.ReadWriteSpan) {}
func (discardSpans) OnEnd(sdktrace.ReadOnlySpan)                     {}
func (discardSpans) Shutdown(context.Context) error                  { return nil }
func (discardSpans) ForceFlush(context.Context) error                { return nil }

// benchTracedRequests runs whole non-streaming chat requests with a client traceparent
// against a scripted backend (4 chunks) and reports ns/request and allocs/request.
func benchTracedRequests(b *testing.B) {
	be := newFakeBackend(tokens("a"), tokens("b"), tokens("c"), finish("d", "stop"))
	s, err := New(Config{}, be, fakeOptions(fakePreprocessor{})...)
	if err != nil {
		b.Fatal(err)
	}
	body := `{"model":"tiny",` + hiChat + `}`
	b.ReportAllocs()
	start := time.Now()
	for b.Loop() {
		r := httptest.NewRequest(http.MethodPost, chatPath, strings.NewReader(body))
		r.Header.Set("Content-Type", "application/json")
		r.Header.Set("traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
		rr := newRecorder()
		s.ServeHTTP(rr, r)
		if rr.Code != 200 {
			b.Fatal(rr.Body.String())
		}
		be.mu.Lock()
		be.requests, be.streams = be.requests[:0], be.streams[:0]
		be.mu.Unlock()
	}
	b.ReportMetric(float64(time.Since(start).Nanoseconds())/float64(b.N), "ns/request")
}

// BenchmarkRequestTracingOff: tracing off (the default): the gateway's spans cost one
// atomic load per instrumented point.
func BenchmarkRequestTracingOff(b *testing.B) { benchTracedRequests(b) }

// BenchmarkRequestTracingOn: tracing on, every trace sampled, spans dropped at the end.
func BenchmarkRequestTracingOn(b *testing.B) {
	defer tracing.Install(sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(discardSpans{})))()
	benchTracedRequests(b)
}
