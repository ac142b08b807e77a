package flow

import (
	"testing"
	"time"

	"github.com/turbine-llm/turbine/messages"
)

// BenchmarkStepChunk measures a chunk's way through the flow on the aggregated path:
// its Step (numbering, credits, the stall timer re-armed) and the effects returned. A
// new request starts every 1024 chunks (its routing counted in).
func BenchmarkStepChunk(b *testing.B) {
	const perRequest = 1024
	cfg := DefaultConfig()
	sp := &messages.SamplingParams{MaxTokens: perRequest + 1}
	route := &messages.RouteResponse{WorkerId: "w0", Worker: &messages.ActorRef{Address: "a", Id: "w0"}}
	now := time.Unix(0, 0)
	var f *Flow
	ch := &messages.TokenChunk{TokenIds: []uint32{7}}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if i%perRequest == 0 {
			f = New(Request{ID: "r", Tokens: []uint32{1, 2, 3}, Sampling: sp}, cfg)
			f.Step(Start{}, now)
			f.Step(Routed{Response: route}, now)
		}
		ch.Index = uint32(i % perRequest)
		if len(f.Step(Chunk{Leg: 1, Chunk: ch}, now)) == 0 {
			b.Fatal("a chunk without effects")
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N), "ns/chunk")
}
