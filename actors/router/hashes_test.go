package router

import (
	"testing"
	"time"

	"github.com/turbine-llm/turbine/kv"
	"github.com/turbine-llm/turbine/messages"
	"google.golang.org/protobuf/proto"
)

// TestGrainRoutesOnBlockHashes: a Route that brings the prompt's block hashes and length
// instead of its tokens is answered as the same route with tokens; hashes made at
// another block size, or no prompt at all, get ROUTE_BAD_REQUEST and leave nothing
// tracked.
func TestGrainRoutesOnBlockHashes(t *testing.T) {
	prompt := []uint32{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}
	hashes := func(bs int) []uint64 { return kv.SequenceHashes(prompt, bs, "") }
	n := proto.Int32(int32(len(prompt)))
	cases := []struct {
		name    string
		req     *messages.RouteRequest
		outcome messages.RouteOutcome
	}{
		{"tokens", &messages.RouteRequest{TokenIds: prompt}, messages.RouteOutcome_ROUTE_OK},
		{"block hashes", &messages.RouteRequest{BlockHashes: hashes(4), PromptTokens: n}, messages.RouteOutcome_ROUTE_OK},
		{"hashed at block size 2", &messages.RouteRequest{BlockHashes: hashes(2), PromptTokens: n}, messages.RouteOutcome_ROUTE_BAD_REQUEST},
		{"hashed at block size 8", &messages.RouteRequest{BlockHashes: hashes(8), PromptTokens: n}, messages.RouteOutcome_ROUTE_BAD_REQUEST},
		{"hashes without a length", &messages.RouteRequest{BlockHashes: hashes(4)}, messages.RouteOutcome_ROUTE_BAD_REQUEST},
		{"no prompt", &messages.RouteRequest{}, messages.RouteOutcome_ROUTE_BAD_REQUEST},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			g := newGrain(t, &fakeClock{t: time.Unix(1000, 0)})
			for _, id := range []string{"w0", "w1"} {
				register(t, g, id, 4, 1)
			}
			if ack, err := g.PublishEvents(&messages.KvEventBatch{WorkerId: "w1", EngineEpoch: 1, Seq: 1,
				Events: []*messages.KvEvent{stored([]uint64{11, 12}, prompt[:8])}}, nil); err != nil || ack.NeedDump {
				t.Fatalf("publish: %+v %v", ack, err)
			}
			c.req.RequestId = "r1"
			resp, err := g.Route(c.req, nil)
			if err != nil || resp.Outcome != c.outcome {
				t.Fatalf("route: %+v %v, want outcome %v", resp, err, c.outcome)
			}
			st, _ := g.Stats(&messages.RouterStatsRequest{}, nil)
			if c.outcome != messages.RouteOutcome_ROUTE_OK {
				if st.Routed != 0 || st.Workers[0].ActiveRequests+st.Workers[1].ActiveRequests != 0 {
					t.Fatalf("a refused route was tracked: %+v", st)
				}
				return
			}
			if resp.WorkerId != "w1" || resp.OverlapBlocks != 2 || resp.PromptBlocks != 2 || resp.UncachedPrefillTokens != 3 {
				t.Fatalf("route = %+v, want w1 with 2 of 2 blocks cached, 3 tokens to prefill", resp)
			}
			if st.Workers[1].ActiveRequests != 1 || st.Workers[1].ActivePrefillTokens != 3 {
				t.Fatalf("stats %+v", st.Workers[1])
			}
		})
	}
}
