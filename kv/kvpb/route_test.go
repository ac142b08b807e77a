package kvpb

import (
	"errors"
	"fmt"
	"reflect"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/turbine-llm/turbine/kv"
	"github.com/turbine-llm/turbine/messages"
)

func TestRouteInput(t *testing.T) {
	w, temp := 0.5, 0.0
	for _, tc := range []struct {
		name string
		req  *messages.RouteRequest
		want kv.RouteInput
	}{
		{"empty", &messages.RouteRequest{}, kv.RouteInput{}},
		{"every field", &messages.RouteRequest{RequestId: "r.1", TokenIds: []uint32{1, 2}, LoraName: "l", OverlapWeight: &w,
			Temperature: &temp, ExcludeWorkers: []string{"w1"}, ExcludePrefillWorkers: []string{"p1"}, LocalPrefill: true, WillAck: true,
			PinWorker: "w2"},
			kv.RouteInput{RequestID: "r.1", Tokens: []uint32{1, 2}, LoraName: "l", HasOverlapWeight: true, OverlapWeight: 0.5,
				HasTemperature: true, Temperature: 0, Exclude: []string{"w1"}, ExcludePrefill: []string{"p1"}, LocalPrefill: true, WillAck: true,
				PinWorker: "w2"}},
		{"admitted", &messages.RouteRequest{RequestId: "r.2", Admitted: true}, kv.RouteInput{RequestID: "r.2", Admitted: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := RouteInput(tc.req); !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("got %+v\nwant %+v", got, tc.want)
			}
		})
	}
}

func TestRouteResponse(t *testing.T) {
	for _, tc := range []struct {
		name string
		d    kv.Decision
		err  error
		want *messages.RouteResponse
	}{
		{"aggregated", kv.Decision{WorkerID: "w0", Worker: 3, OverlapBlocks: 2, PromptBlocks: 5, PrefillTokens: 190,
			Disagg: kv.DisaggAggregated, UncachedPrefillTokens: 190},
			nil, &messages.RouteResponse{WorkerId: "w0", OverlapBlocks: 2, PromptBlocks: 5, UncachedPrefillTokens: 190}},
		{"remote", kv.Decision{WorkerID: "d0", PromptBlocks: 4, Disagg: kv.DisaggRemote, UncachedPrefillTokens: 256,
			Prefill: &kv.PrefillLeg{WorkerID: "p1", OverlapBlocks: 1, PrefillTokens: 192, RequestID: kv.PrefillRequestID("r")}},
			nil, &messages.RouteResponse{WorkerId: "d0", PromptBlocks: 4, DisaggDecision: messages.DisaggDecision_DISAGG_REMOTE,
				UncachedPrefillTokens: 256, PrefillWorkerId: "p1", PrefillOverlapBlocks: 1, PrefillRequestId: kv.PrefillRequestID("r")}},
		{"local", kv.Decision{WorkerID: "d1", Disagg: kv.DisaggLocalShortPrefill, UncachedPrefillTokens: 12},
			nil, &messages.RouteResponse{WorkerId: "d1", DisaggDecision: messages.DisaggDecision_DISAGG_LOCAL_SHORT_PREFILL,
				UncachedPrefillTokens: 12}},
		// An error: its text (set below) and outcome only, whatever the decision holds.
		{"all busy", kv.Decision{WorkerID: "w0", PromptBlocks: 3}, fmt.Errorf("%w: 2 ready workers over the busy thresholds", kv.ErrAllBusy),
			&messages.RouteResponse{Outcome: messages.RouteOutcome_ROUTE_ALL_BUSY}},
		{"no workers", kv.Decision{}, kv.ErrNoWorkers, &messages.RouteResponse{Outcome: messages.RouteOutcome_ROUTE_NO_WORKERS}},
		{"no prefill workers", kv.Decision{}, kv.ErrNoPrefillWorkers,
			&messages.RouteResponse{Outcome: messages.RouteOutcome_ROUTE_NO_PREFILL_WORKERS}},
		{"bad request", kv.Decision{}, fmt.Errorf("%w: empty request id", kv.ErrInvalidRequest),
			&messages.RouteResponse{Outcome: messages.RouteOutcome_ROUTE_BAD_REQUEST}},
		{"a policy's error", kv.Decision{}, errors.New("kv: policy failed"), &messages.RouteResponse{Outcome: messages.RouteOutcome_ROUTE_NO_WORKERS}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := RouteResponse(tc.d, tc.err)
			if tc.err != nil {
				tc.want.Error = tc.err.Error()
			}
			if !proto.Equal(got, tc.want) {
				t.Fatalf("got %v\nwant %v", got, tc.want)
			}
		})
	}
}
