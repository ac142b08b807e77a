package gateway

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"net/http"
	"strconv"
	"time"

	"github.com/turbine-llm/turbine/model"
)

// The Anthropic Messages API (docs/reference.md §17), for clients written against
// Anthropic's SDKs:
//
//	POST /v1/messages               a message, streaming (SSE with event names) or not
//	POST /v1/messages/count_tokens  {"input_tokens": N}: the prompt's length in tokens
//
// The request is translated into a chat request (anthropic_request.go) and generated as
// one; the answer is rendered as Anthropic's message (anthropic_answer.go). Errors have
// Anthropic's shape, {"type": "error", "error": {"type", "message"}, "request_id"}, with
// the catalogue's status; the error type follows the status as Anthropic's does
// (anthropicErrorType). The anthropic-version and anthropic-beta headers are accepted and
// ignored; with API keys, "x-api-key: KEY" is accepted as well as "Authorization: Bearer
// KEY" (presentsAPIKeyHeader).

// anthropicAPI renders the Messages API's answers and errors.
type anthropicAPI struct{}

var messagesAPI api = anthropicAPI{}

func (anthropicAPI) endpoint() string { return endpointMessages }

func (anthropicAPI) writeError(w http.ResponseWriter, e *APIError, retryAfter time.Duration) {
	writeAnthropicError(w, e, retryAfter)
}

func (anthropicAPI) answer(i answerInfo) answer {
	return &anthropicAnswer{id: "msg_" + i.ID, model: i.Model, promptTokens: i.PromptTokens, callBlock: map[int]int{}}
}

// anthropicErrorBody is Anthropic's error body; the data of a stream's `error` event has
// the same shape without request_id.
type anthropicErrorBody struct {
	Type      string               `json:"type"` // "error"
	Error     anthropicErrorObject `json:"error"`
	RequestID string               `json:"request_id,omitempty"`
}

type anthropicErrorObject struct {
	Type    string `json:"type"`
	Message string `json:"message"`
}

// anthropicErrorType is the error type Anthropic gives a status: 400 (and the other
// 4xx it lists none for) invalid_request_error, 401 authentication_error, 403
// permission_error, 404 not_found_error, 413 request_too_large, 429 rate_limit_error,
// 503 overloaded_error (Anthropic answers overload with 529; the status stays the
// catalogue's), 504 timeout_error, other 5xx api_error.
func anthropicErrorType(status int) string {
	switch {
	case status == http.StatusUnauthorized:
		return "authentication_error"
	case status == http.StatusForbidden:
		return "permission_error"
	case status == http.StatusNotFound:
		return "not_found_error"
	case status == http.StatusRequestEntityTooLarge:
		return "request_too_large"
	case status == http.StatusTooManyRequests:
		return "rate_limit_error"
	case status == http.StatusServiceUnavailable:
		return "overloaded_error"
	case status == http.StatusGatewayTimeout:
		return "timeout_error"
	case status >= 500:
		return "api_error"
	}
	return "invalid_request_error"
}

func anthropicError(e *APIError) anthropicErrorBody {
	return anthropicErrorBody{Type: "error", Error: anthropicErrorObject{Type: anthropicErrorType(e.Status()), Message: e.Message}}
}

// writeAnthropicError writes e in Anthropic's shape with its catalogue status (and
// Retry-After where the catalogue says so); request_id is the response's X-Request-Id.
func writeAnthropicError(w http.ResponseWriter, e *APIError, retryAfter time.Duration) {
	ent := e.Kind.Entry()
	h := w.Header()
	h.Set("Content-Type", "application/json")
	if ent.RetryAfter {
		h.Set("Retry-After", strconv.Itoa(max(1, int(retryAfter.Round(time.Second)/time.Second))))
	}
	body := anthropicError(e)
	body.RequestID = h.Get("X-Request-Id")
	w.WriteHeader(ent.Status)
	b, _ := encodeJSON(body)
	_, _ = w.Write(append(b, '\n'))
}

// anthropicOnly answers methods other than POST with an Anthropic-shaped 405.
func anthropicOnly(h http.HandlerFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			w.Header().Set("Allow", http.MethodPost)
			writeAnthropicError(w, newError(KindMethodNotAllowed, "", "Method %s is not allowed on %s (use POST).", clipName(r.Method), clipName(r.URL.Path)), 0)
			return
		}
		h(w, r)
	})
}

// handleMessages serves POST /v1/messages.
func (s *Server) handleMessages(w http.ResponseWriter, r *http.Request) {
	s.handleAPI(w, r, messagesAPI, func(ctx context.Context, rec *requestRecord, body []byte) (*prepared, *APIError) {
		req, aerr := parseMessagesRequest(body, false)
		if aerr != nil {
			return nil, aerr
		}
		rec.stream = req.Stream
		return s.prepareChat(ctx, rec.id, req)
	})
}

// messageTokensCount is count_tokens' answer.
type messageTokensCount struct {
	InputTokens int `json:"input_tokens"`
}

// handleCountTokens serves POST /v1/messages/count_tokens: the body of a message request
// without max_tokens, answered with the length in tokens of the prompt it renders (the
// same template and tokenizer as /v1/messages, so the count is the message's
// input_tokens before prefix caching). The prompt is not checked against the context
// length, and the request is not counted in the generation metrics; like a generation it
// is refused while the server drains and holds one of Config.MaxConcurrentRequests while
// it runs (rendering and tokenizing a large prompt costs CPU).
func (s *Server) handleCountTokens(w http.ResponseWriter, r *http.Request) {
	if s.draining.Load() {
		writeAnthropicError(w, draining(), s.cfg.RetryAfter)
		return
	}
	t, aerr := s.admitRequest()
	if aerr != nil {
		writeAnthropicError(w, aerr, s.cfg.RetryAfter)
		return
	}
	defer t.release()
	body, aerr := s.readBody(w, r)
	if aerr != nil {
		writeAnthropicError(w, aerr, s.cfg.RetryAfter)
		return
	}
	req, aerr := parseMessagesRequest(body, true)
	if aerr != nil {
		writeAnthropicError(w, aerr, s.cfg.RetryAfter)
		return
	}
	n, aerr := s.countPromptTokens(r.Context(), req)
	if aerr != nil {
		writeAnthropicError(w, aerr, s.cfg.RetryAfter)
		return
	}
	writeJSON(w, http.StatusOK, messageTokensCount{InputTokens: n})
}

// countPromptTokens renders req's prompt with its model's chat template, as prepareChat
// does, and returns its length in tokens.
func (s *Server) countPromptTokens(ctx context.Context, req *chatRequest) (int, *APIError) {
	card, aerr := s.lookupModel(ctx, req.Model)
	if aerr != nil {
		return 0, aerr
	}
	pre, aerr := s.loadModel(card)
	if aerr != nil {
		return 0, aerr
	}
	prompt, err := pre.RenderChat(model.ChatTemplateInput{
		Messages:            req.Messages,
		Tools:               req.Tools,
		AddGenerationPrompt: req.AddGenerationPrompt,
		Kwargs:              templateKwargs(req),
	})
	if err != nil {
		return 0, &APIError{Kind: KindInvalidValue, Param: "messages", Message: "The chat template could not be applied to the messages: " + err.Error(), Cause: err}
	}
	return len(pre.Tokenizer().Encode(prompt)), nil
}

// presentsAPIKeyHeader reports whether r presents one of the keys whose SHA-256 digests
// are digests as "x-api-key: <key>", Anthropic's header, compared as presentsKey
// compares a bearer token. A request with several x-api-key headers is refused.
func presentsAPIKeyHeader(r *http.Request, digests [][sha256.Size]byte) bool {
	keys := r.Header.Values("X-Api-Key")
	if len(keys) != 1 || keys[0] == "" {
		return false
	}
	d := sha256.Sum256([]byte(keys[0]))
	match := 0
	for i := range digests {
		match |= subtle.ConstantTimeCompare(d[:], digests[i][:])
	}
	return match == 1
}
