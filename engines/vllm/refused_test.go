package vllm

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/turbine-llm/turbine/engines"
	"github.com/turbine-llm/turbine/messages"
	"google.golang.org/protobuf/proto"
)

// A request vLLM refuses itself (its 400 BadRequestError or FastAPI's 422) fails
// Generate with an *engines.InvalidRequestError carrying vLLM's message, on every path
// a request takes (a stream, prompt_logprobs answered in one body, a prefill leg), and
// so does a request the adapter refuses before sending it; an engine failure or a
// decode leg's KV load failure does not.
func TestGenerateRefused(t *testing.T) {
	const salt = `{"error":{"message":"cache_salt should have at most 1024 characters, got 1025.","type":"BadRequestError","param":"cache_salt","code":400}}`
	prefill := &messages.SamplingParams{MaxTokens: 4, Disagg: &messages.DisaggParams{Leg: messages.Leg_LEG_PREFILL}}
	decode := &messages.SamplingParams{MaxTokens: 4, Disagg: &messages.DisaggParams{Leg: messages.Leg_LEG_DECODE,
		KvTransferParams: `{"remote_block_ids":[1]}`}}
	for _, tc := range []struct {
		name     string
		sampling *messages.SamplingParams
		status   int
		body     string
		invalid  bool
		msg      string
		kv       bool
	}{
		{"stream, 400", &messages.SamplingParams{MaxTokens: 4}, 400, salt, true, "cache_salt should have at most 1024 characters, got 1025.", false},
		{"stream, 422", &messages.SamplingParams{MaxTokens: 4}, 422, `{"detail":"top_k: value is not a valid integer"}`, true,
			"top_k: value is not a valid integer", false},
		{"prompt logprobs, 400", &messages.SamplingParams{MaxTokens: 4, PromptLogprobs: proto.Int32(1)}, 400, salt, true,
			"cache_salt should have at most 1024 characters, got 1025.", false},
		{"prefill leg, 400", prefill, 400, salt, true, "cache_salt should have at most 1024 characters, got 1025.", false},
		{"decode leg, 400", decode, 400, salt, true, "cache_salt should have at most 1024 characters, got 1025.", false},
		{"adapter refuses a malformed schema", &messages.SamplingParams{MaxTokens: 4,
			Structured: &messages.StructuredOutput{JsonSchema: "{"}}, 0, "", true, "structured output: the JSON Schema is not JSON", false},
		{"engine failed", &messages.SamplingParams{MaxTokens: 4}, 500, `{"error":{"message":"CUDA error","type":"InternalServerError"}}`,
			false, "", false},
		{"decode leg, KV load failed", decode, 503, `{"error":{"message":"KV cache load failed","type":"KVTransferError"}}`,
			false, "", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if tc.status == 0 {
					t.Errorf("the adapter sent %s %s", r.Method, r.URL.Path)
				}
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(tc.status)
				_, _ = w.Write([]byte(tc.body))
			}))
			defer srv.Close()
			err := Connect(srv.URL, EngineOptions{Model: "m"}).Generate(context.Background(), "r1", []uint32{1, 2, 3}, tc.sampling,
				func(engines.Chunk) error { return nil })
			var inv *engines.InvalidRequestError
			if err == nil || errors.As(err, &inv) != tc.invalid || errors.Is(err, engines.ErrKVTransfer) != tc.kv {
				t.Fatalf("%v: refused %v (want %v), KV transfer %v", err, inv != nil, tc.invalid, tc.kv)
			}
			if tc.invalid && (inv.Message != tc.msg || inv.Status != max(tc.status, 400)) {
				t.Errorf("status %d message %q, want %q", inv.Status, inv.Message, tc.msg)
			}
		})
	}
}
