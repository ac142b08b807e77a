package epp

import (
	"encoding/json"
	"fmt"
	"strconv"
	"time"
)

// Kind is why the EPP answered a request itself instead of picking an endpoint: one row
// of the catalogue below (docs/epp.md, "Errors").
type Kind int

// The kinds of immediate responses.
const (
	KindBadRequest Kind = iota + 1 // 400: the body is not an OpenAI request the EPP can read
	KindNotFound                   // 404: no endpoint serves the model
	KindBusy                       // 429: the router finds every worker busy; Retry-After
	KindInternal                   // 500: the EPP failed
	KindNoEndpoint                 // 503: no ready endpoint (none in the pool, none in the subset hint)
	KindTooLarge                   // 413: the request body is larger than the EPP buffers
	KindUpstream                   // a status and body given by the Turbine gateway's validation
)

// catalogue is the one table of kinds: HTTP status, OpenAI error type and code.
var catalogue = map[Kind]struct {
	status     int
	typ, code  string
	retryAfter bool
}{
	KindBadRequest: {400, "invalid_request_error", "invalid_request", false},
	KindNotFound:   {404, "invalid_request_error", "model_not_found", false},
	KindBusy:       {429, "rate_limit_error", "all_busy", true},
	KindInternal:   {500, "internal_error", "internal_error", false},
	KindNoEndpoint: {503, "service_unavailable", "no_ready_endpoint", true},
	KindTooLarge:   {413, "invalid_request_error", "request_too_large", false},
}

// Error is an immediate response: the EPP answers the client itself.
type Error struct {
	Kind    Kind
	Message string
	// Status and Body are set for KindUpstream: the answer the gateway's own validation
	// gave (an OpenAI-shaped error body), sent unchanged.
	Status int
	Body   []byte
}

func (e *Error) Error() string { return fmt.Sprintf("epp: %d: %s", e.HTTPStatus(), e.Message) }

// newError returns an Error of kind with a formatted message.
func newError(k Kind, format string, args ...any) *Error {
	return &Error{Kind: k, Message: fmt.Sprintf(format, args...)}
}

// HTTPStatus is the status the client gets.
func (e *Error) HTTPStatus() int {
	if e.Kind == KindUpstream {
		return e.Status
	}
	return catalogue[e.Kind].status
}

// RetryAfter reports whether the answer carries Retry-After.
func (e *Error) RetryAfter() bool {
	if e.Kind == KindUpstream {
		return e.Status == 429 || e.Status == 503
	}
	return catalogue[e.Kind].retryAfter
}

// JSON is the answer's body: {"error": {"message", "type", "param", "code"}}.
func (e *Error) JSON() []byte {
	if e.Kind == KindUpstream {
		return e.Body
	}
	c := catalogue[e.Kind]
	b, _ := json.Marshal(map[string]any{"error": map[string]any{"message": e.Message, "type": c.typ, "param": nil, "code": c.code}})
	return b
}

// retryAfterValue is the Retry-After header's value for d, in whole seconds (at least 1).
func retryAfterValue(d time.Duration) string {
	s := int64((d + time.Second - 1) / time.Second)
	return strconv.FormatInt(max(s, 1), 10)
}
