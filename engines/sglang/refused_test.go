package sglang

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	"github.com/turbine-llm/turbine/engines"
	"github.com/turbine-llm/turbine/messages"
)

// A request SGLang refuses itself — its 400 answer, or its abort of the request with
// status 400 (an input it will not take, found once the request is queued) — fails
// Generate with an *engines.InvalidRequestError carrying SGLang's message, and so does a
// request the adapter refuses before sending it; an engine failure, its abort with 5xx
// (a decode leg's failed KV transfer) and an error frame without a status do not.
func TestGenerateRefused(t *testing.T) {
	const tooLong = "The input (9000 tokens) is longer than the model's context length (8192 tokens)."
	abort := func(status int, msg string) string {
		return `data: {"text":"","output_ids":[],"meta_info":{"id":"r1","finish_reason":{"type":"abort","message":"` + msg +
			`","status_code":` + strconv.Itoa(status) + `},"prompt_tokens":3,"completion_tokens":0,"cached_tokens":0}}` + "\n\ndata: [DONE]\n\n"
	}
	decode := &messages.SamplingParams{MaxTokens: 4, Disagg: &messages.DisaggParams{Leg: messages.Leg_LEG_DECODE,
		BootstrapHost: "10.0.0.1", BootstrapPort: 8998, BootstrapRoom: 1}}
	for _, tc := range []struct {
		name     string
		sampling *messages.SamplingParams
		status   int
		body     string
		invalid  bool
		msg      string
		kv       bool
	}{
		{"400", &messages.SamplingParams{MaxTokens: 4}, 400,
			`{"object":"error","message":"` + tooLong + `","type":"BadRequestError","param":null,"code":400}`, true, tooLong, false},
		{"400, error object", &messages.SamplingParams{MaxTokens: 4}, 400, `{"error":{"message":"min_p must be in [0, 1]"}}`, true,
			"min_p must be in [0, 1]", false},
		{"abort with 400", &messages.SamplingParams{MaxTokens: 4}, 200, abort(400, tooLong), true, tooLong, false},
		{"adapter refuses bad_words", &messages.SamplingParams{MaxTokens: 4, BadWords: []string{"x"}}, 0, "", true,
			"bad_words: SGLang has no such sampling parameter", false},
		{"engine failed", &messages.SamplingParams{MaxTokens: 4}, 500, `{"error":{"message":"scheduler died"}}`, false, "", false},
		{"error frame", &messages.SamplingParams{MaxTokens: 4}, 200, `data: {"error":{"message":"boom"}}` + "\n\ndata: [DONE]\n\n",
			false, "", false},
		{"decode leg, KV transfer failed", decode, 200,
			abort(500, "Decode transfer failed for request r1 with exception KVTransferError(bootstrap_room=1): gone"), false, "", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				switch {
				case r.URL.Path == "/abort_request":
					return
				case tc.status == 0:
					t.Errorf("the adapter sent %s %s", r.Method, r.URL.Path)
				}
				if strings.HasPrefix(tc.body, "data:") {
					w.Header().Set("Content-Type", "text/event-stream")
				} else {
					w.Header().Set("Content-Type", "application/json")
				}
				w.WriteHeader(tc.status)
				_, _ = w.Write([]byte(tc.body))
			}))
			defer srv.Close()
			err := Connect(srv.URL, 16).Generate(context.Background(), "r1", []uint32{1, 2, 3}, tc.sampling,
				func(engines.Chunk) error { return nil })
			var inv *engines.InvalidRequestError
			if err == nil || errors.As(err, &inv) != tc.invalid || errors.Is(err, engines.ErrKVTransfer) != tc.kv {
				t.Fatalf("%v: refused %v (want %v), KV transfer %v", err, inv != nil, tc.invalid, tc.kv)
			}
			if tc.invalid && (inv.Message != tc.msg || inv.Status != 400) {
				t.Errorf("status %d message %q, want %q", inv.Status, inv.Message, tc.msg)
			}
		})
	}
}
