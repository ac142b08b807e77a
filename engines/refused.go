package engines

import (
	"net/http"
	"strings"
)

// Refused is an adapter's own refusal of a request before it reaches the engine (a
// field the engine has no parameter for, which the frontend refuses first; this is the
// second guard), as the *InvalidRequestError the engine would answer: status 400, the
// message err's text less the adapter's "<name>: " prefix, err wrapped. Like an engine's
// refusal, it is never re-sent to another worker (docs/reference.md §10).
func Refused(name string, err error) error {
	return &InvalidRequestError{Status: http.StatusBadRequest, Message: strings.TrimPrefix(err.Error(), name+": "), Err: err}
}

// DisplayName is how messages to clients name the engine a model card names ("vllm",
// "sglang", "trtllm", "mocker"): "vLLM", "SGLang", "TensorRT-LLM", "the mock engine";
// another name as it is.
func DisplayName(engine string) string {
	if n := displayNames[engine]; n != "" {
		return n
	}
	return engine
}
