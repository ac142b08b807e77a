package frontend

import (
	"testing"

	"github.com/turbine-llm/turbine/engines"
	"github.com/turbine-llm/turbine/messages"
)

func TestFaultOf(t *testing.T) {
	kvErr := "engine: " + engines.ErrKVTransfer.Error() + ": sglang: engine answered 500: Decode transfer failed"
	for _, tc := range []struct {
		name string
		ch   *messages.TokenChunk
		want string
	}{
		{"tokens", &messages.TokenChunk{TokenIds: []uint32{1}}, ""},
		{"finish", &messages.TokenChunk{FinishReason: "length"}, ""},
		{"refused", &messages.TokenChunk{FinishReason: "error", Error: "engine: bad request"}, ""},
		{"engine died", &messages.TokenChunk{FinishReason: "error", Error: "engine: EOF", Migratable: true}, FaultEngineError},
		{"KV load failure", &messages.TokenChunk{FinishReason: "error", Error: kvErr, Migratable: true}, FaultKVTransfer},
		{"KV load failure, not migratable", &messages.TokenChunk{FinishReason: "error", Error: kvErr}, ""},
	} {
		if got := faultOf(tc.ch); got != tc.want {
			t.Errorf("%s: faultOf = %q, want %q", tc.name, got, tc.want)
		}
	}
}
