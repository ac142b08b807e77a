package enginehttp

import (
	"context"
	"errors"
	"io"
	"net/http"
	"testing"

	"github.com/turbine-llm/turbine/engines"
)

// A generation the engine refuses itself (its 400 or 422 answer, before any stream
// starts), streamed (Stream) or answered in one body (Submit), is an
// *engines.InvalidRequestError carrying the engine's own message and wrapping what the
// engine's client decoded, so that the worker neither blames the engine nor has the
// request re-sent elsewhere; any other error status (the engine failed, is overloaded,
// timed out, or is set up unlike its worker) is the decoded error alone.
func TestGenerationRefused(t *testing.T) {
	send := map[string]func(*Client) error{
		"stream": func(c *Client) error {
			st, err := c.Stream(context.Background(), http.MethodPost, "/v1/completions", []byte(`{}`), nil, 1<<10)
			if err == nil {
				_ = st.Close()
			}
			return err
		},
		"one body": func(c *Client) error {
			resp, err := c.Submit(context.Background(), http.MethodPost, "/v1/completions", []byte(`{}`), nil)
			if err == nil {
				_, _ = io.Copy(io.Discard, resp.Body)
				_ = resp.Body.Close()
			}
			return err
		},
	}
	for _, tc := range []struct {
		name    string
		status  int
		body    string
		invalid bool
		msg     string
	}{
		{"vLLM 400", 400, `{"error":{"message":"cache_salt should have at most 1024 characters, got 1025.","type":"BadRequestError","param":"cache_salt","code":400}}`,
			true, "cache_salt should have at most 1024 characters, got 1025."},
		{"SGLang 400", 400, `{"object":"error","message":"The input (9000 tokens) is longer than the model's context length (8192 tokens).","type":"BadRequestError","param":null,"code":400}`,
			true, "The input (9000 tokens) is longer than the model's context length (8192 tokens)."},
		{"trtllm-serve 400", 400, `{"error":"min_p: must be in [0, 1]"}`, true, "min_p: must be in [0, 1]"},
		{"FastAPI 422", 422, `{"detail":[{"loc":["body","top_k"],"msg":"value is not a valid integer"}]}`, true,
			"[map[loc:[body top_k] msg:value is not a valid integer]]"},
		{"empty 400", 400, ``, true, "Bad Request"},
		{"500", 500, `{"error":{"message":"CUDA out of memory","type":"InternalServerError"}}`, false, ""},
		{"503", 503, `{"error":{"message":"KV cache load failed","type":"KVTransferError"}}`, false, ""},
		{"408", 408, `{"error":{"message":"timed out"}}`, false, ""},
		{"429", 429, `{"error":{"message":"too many requests"}}`, false, ""},
		{"404 model name", 404, `{"error":{"message":"The model ` + "`x`" + ` does not exist.","type":"NotFoundError"}}`, false, ""},
		{"401 key", 401, `{"error":"Unauthorized"}`, false, ""},
	} {
		for way, do := range send {
			t.Run(tc.name+", "+way, func(t *testing.T) {
				c := testClient(t, func(w http.ResponseWriter, r *http.Request) {
					w.WriteHeader(tc.status)
					_, _ = w.Write([]byte(tc.body))
				})
				err := do(c)
				var inv *engines.InvalidRequestError
				var ae *answerErr
				if !errors.As(err, &ae) || ae.status != tc.status {
					t.Fatalf("%v: the engine's decoded answer is lost", err)
				}
				if errors.As(err, &inv) != tc.invalid {
					t.Fatalf("%v: invalid request %v, want %v", err, inv != nil, tc.invalid)
				}
				if tc.invalid && (inv.Message != tc.msg || inv.Status != tc.status || err.Error() != ae.Error()) {
					t.Errorf("status %d, message %q (want %q), text %q", inv.Status, inv.Message, tc.msg, err)
				}
			})
		}
	}
}

// Requests of the client's own (health, metrics, the model list) keep the decoded error
// alone whatever the status: only a request the caller's client sent can be refused.
func TestOwnRequestsNotRefusals(t *testing.T) {
	c := testClient(t, func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusBadRequest)
		_, _ = w.Write([]byte(`{"error":{"message":"no"}}`))
	})
	var inv *engines.InvalidRequestError
	if err := c.Call(context.Background(), http.MethodGet, "/health", nil); err == nil || errors.As(err, &inv) {
		t.Errorf("Call: %v", err)
	}
	if err := c.GetJSON(context.Background(), "/v1/models", new(any)); err == nil || errors.As(err, &inv) {
		t.Errorf("GetJSON: %v", err)
	}
}
