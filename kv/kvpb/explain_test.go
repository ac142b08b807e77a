package kvpb

import (
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/turbine-llm/turbine/kv"
	"github.com/turbine-llm/turbine/messages"
)

func TestRouteExplainConversions(t *testing.T) {
	if in := RouteInput(&messages.RouteRequest{RequestId: "r", Explain: true}); !in.Explain {
		t.Error("RouteInput dropped explain")
	}
	d := kv.Decision{WorkerID: "w1", Candidates: []kv.ExplainedCandidate{
		{WorkerID: "w0", Cost: 12.5, Terms: []kv.Term{{Name: kv.TermWeightedPrefillBlocks, Value: 2.5}, {Name: kv.TermDecodeBlocks, Value: 10}}},
		{WorkerID: "w1", OverlapBlocks: 3, Cost: 4, Chosen: true},
	}}
	want := &messages.RouteResponse{WorkerId: "w1", Candidates: []*messages.RouteCandidate{
		{WorkerId: "w0", Cost: 12.5, Terms: []*messages.CostTerm{{Name: "weighted_prefill_blocks", Value: 2.5}, {Name: "decode_blocks", Value: 10}}},
		{WorkerId: "w1", OverlapBlocks: 3, Cost: 4, Chosen: true},
	}}
	if got := RouteResponse(d, nil); !proto.Equal(got, want) {
		t.Fatalf("got %v\nwant %v", got, want)
	}
	if got := RouteCandidates(nil); got != nil {
		t.Fatalf("no candidates: %v", got)
	}
}
