package epp

import (
	"context"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/turbine-llm/turbine/gateway"
	"github.com/turbine-llm/turbine/messages"
	"github.com/turbine-llm/turbine/model"
)

// cards is a fixed model list for the preparer.
type cards []*messages.ModelCard

func (c cards) Models(context.Context) ([]*messages.ModelCard, error) { return c, nil }
func (c cards) Recent(string) bool                                    { return false }

// timedTurbine tokenizes with the gateway's code and a builtin card (as ClusterTurbine
// does) and times its router, which answers at once, so that the router's time can be
// taken off the exchange.
type timedTurbine struct {
	*fakeTurbine
	pre    *preparer
	routed time.Duration
}

func (b *timedTurbine) Prepare(ctx context.Context, req *PickRequest) (*gateway.GenerateRequest, *Error) {
	return b.pre.prepare(ctx, req)
}

func (b *timedTurbine) Route(ctx context.Context, model string, rr *messages.RouteRequest) (*messages.RouteResponse, error) {
	start := time.Now()
	r, err := b.fakeTurbine.Route(ctx, model, rr)
	b.routed += time.Since(start)
	return r, err
}

func (b *timedTurbine) Free(string, string) {}

// BenchmarkEPPOverhead: the request path of a ~4k-token chat request (headers, body in
// Envoy's pieces, the pick, the re-chunked body back) through the Envoy-posing client,
// minus the routing decision: what the EPP adds to a request (target ≤ 1 ms p50).
func BenchmarkEPPOverhead(b *testing.B) {
	src, ft := threeWorkers()
	m, err := model.LoadModel("builtin:cl100k_base")
	if err != nil {
		b.Fatal(err)
	}
	// The tokenizer loads once, as the frontend's ModelLoader keeps it.
	loader := func(*messages.ModelCard) (gateway.Preprocessor, error) { return gateway.PreprocessorOf(m), nil }
	pre, err := newPreparer(cards{{Model: "m", Tokenizer: "builtin:cl100k_base", ContextLength: 32768, KvBlockSize: 16}}, loader, 0)
	if err != nil {
		b.Fatal(err)
	}
	tb := &timedTurbine{fakeTurbine: ft, pre: pre}
	h := startEPP(b, &Picker{Source: src, Turbine: tb})
	words := strings.Fields(strings.Repeat("the quick brown fox jumps over the lazy dog near a quiet river ", 340))
	body := chatBody("m", strings.Join(words, " "), true) // about 4,000 tokens
	ctx := context.Background()
	x := h.requestPath(b, ctx, "/v1/chat/completions", body, 16<<10, nil) // warm: the tokenizer loads once
	x.stream.CloseSend()
	samples := make([]float64, 0, b.N)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		tb.routed = 0
		start := time.Now()
		x := h.requestPath(b, ctx, "/v1/chat/completions", body, 16<<10, nil)
		took := time.Since(start) - tb.routed
		x.stream.CloseSend()
		if x.destination() == "" {
			b.Fatal("no pick")
		}
		samples = append(samples, float64(took)/float64(time.Millisecond))
	}
	b.StopTimer()
	sort.Float64s(samples)
	b.ReportMetric(samples[len(samples)/2], "ms_p50")
	b.ReportMetric(samples[len(samples)*99/100], "ms_p99")
}
