package trtllm

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/turbine-llm/turbine/engines"
	"github.com/turbine-llm/turbine/messages"
)

// A request trtllm-serve refuses itself (its 400 answer, in either of its error shapes)
// fails Generate with an *engines.InvalidRequestError carrying its message, streamed or
// as a context-only (prefill) leg, and so does a request the adapter refuses before
// sending it (a field trtllm-serve has no member for); an engine failure does not.
func TestGenerateRefused(t *testing.T) {
	prefill := &messages.SamplingParams{MaxTokens: 4, Disagg: &messages.DisaggParams{Leg: messages.Leg_LEG_PREFILL}}
	for _, tc := range []struct {
		name     string
		sampling *messages.SamplingParams
		status   int
		body     string
		invalid  bool
		msg      string
	}{
		{"stream, 400", &messages.SamplingParams{MaxTokens: 4}, 400, `{"error":"min_p: Input should be less than or equal to 1"}`, true,
			"min_p: Input should be less than or equal to 1"},
		{"stream, 400 error response", &messages.SamplingParams{MaxTokens: 4}, 400,
			`{"object":"error","message":"prompt is too long","type":"BadRequestError","code":400}`, true, "prompt is too long"},
		{"context-only leg, 400", prefill, 400, `{"error":"min_p: Input should be less than or equal to 1"}`, true,
			"min_p: Input should be less than or equal to 1"},
		{"adapter refuses cache_salt", &messages.SamplingParams{MaxTokens: 4, CacheSalt: "s"}, 0, "", true,
			"cache_salt: trtllm-serve has no such field"},
		{"engine failed", &messages.SamplingParams{MaxTokens: 4}, 500, `{"object":"error","message":"executor failed","type":"InternalServerError","code":500}`,
			false, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Path != "/v1/completions" {
					http.NotFound(w, r)
					return
				}
				if tc.status == 0 {
					t.Errorf("the adapter sent %s %s", r.Method, r.URL.Path)
				}
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(tc.status)
				_, _ = w.Write([]byte(tc.body))
			}))
			defer srv.Close()
			e := Connect(srv.URL, EngineOptions{Model: "m", BlockSize: 16})
			if c, ok := e.(interface{ Close() error }); ok {
				defer c.Close()
			}
			err := e.Generate(context.Background(), "r1", []uint32{1, 2, 3}, tc.sampling, func(engines.Chunk) error { return nil })
			var inv *engines.InvalidRequestError
			if err == nil || errors.As(err, &inv) != tc.invalid {
				t.Fatalf("%v: refused %v, want %v", err, inv != nil, tc.invalid)
			}
			if tc.invalid && (inv.Message != tc.msg || inv.Status != 400) {
				t.Errorf("status %d message %q, want %q", inv.Status, inv.Message, tc.msg)
			}
		})
	}
}
