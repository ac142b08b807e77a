package enginehttp

import (
	"context"
	"errors"
	"net/http"
	"testing"

	"github.com/turbine-llm/turbine/engines"
)

// An embeddings answer whose status refuses the input (400, 422) is an
// *engines.InvalidRequestError carrying the engine's own message, wrapping what the
// engine's client decoded; any other error status is that decoded error alone.
func TestEmbedInvalidRequest(t *testing.T) {
	for _, tc := range []struct {
		name    string
		status  int
		body    string
		invalid bool
		msg     string
	}{
		{"vLLM 400", 400, `{"error":{"message":"This model's maximum context length is 512 tokens.","type":"BadRequestError","param":null,"code":400}}`,
			true, "This model's maximum context length is 512 tokens."},
		{"SGLang 400", 400, `{"object":"error","message":"Input is too long.","type":"BadRequestError","param":null,"code":400}`,
			true, "Input is too long."},
		{"trtllm-serve 400", 400, `{"error":"input: too long"}`, true, "input: too long"},
		{"FastAPI 422", 422, `{"detail":"input: field required"}`, true, "input: field required"},
		{"empty 400", 400, ``, true, "Bad Request"},
		{"500", 500, `{"error":{"message":"CUDA out of memory","type":"InternalServerError"}}`, false, ""},
		{"404 model name", 404, `{"error":{"message":"The model ` + "`x`" + ` does not exist.","type":"NotFoundError"}}`, false, ""},
		{"429", 429, `{"error":{"message":"too many requests"}}`, false, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := testClient(t, func(w http.ResponseWriter, r *http.Request) {
				w.WriteHeader(tc.status)
				_, _ = w.Write([]byte(tc.body))
			})
			_, _, err := c.Embed(context.Background(), EmbeddingRequest{Input: []uint32{1, 2}})
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
