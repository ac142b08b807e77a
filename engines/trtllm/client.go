package trtllm

import (
	"context"
	"net/http"

	"github.com/turbine-llm/turbine/engines/internal/enginehttp"
)

// Client talks to one trtllm-serve server. Safe for concurrent use.
type Client struct {
	h *enginehttp.Client
}

// New returns a client for the server at baseURL (e.g. http://127.0.0.1:8000). hc may
// be nil: a client of its own (enginehttp.DefaultPool), without an overall timeout
// (bound calls with their contexts). Errors: a URL that is not absolute http(s).
func New(baseURL string, hc *http.Client) (*Client, error) {
	h, err := enginehttp.New("trtllm", baseURL, hc, errorFrom)
	if err != nil {
		return nil, err
	}
	return &Client{h: h}, nil
}

// Error is an error answer of the server (HTTP status and body), or an error frame in
// the middle of a stream (Status 0).
type Error struct {
	Status  int
	Type    string // e.g. BadRequestError
	Message string
}

func (e *Error) Error() string {
	return enginehttp.ErrorMessage("trtllm", e.Status, e.Type, e.Message)
}

// errorShapes are trtllm-serve's error bodies, in the order they are read: ErrorResponse
// {"object": "error", "message", "type", "param", "code"}, validation failures
// {"error": "<text>"}, an OpenAI-style {"error": {"message", "type"}}, FastAPI's
// {"detail": ...}; anything else is kept as text.
var errorShapes = []enginehttp.Shape{enginehttp.TopLevel, enginehttp.ErrorText, enginehttp.ErrorObject, enginehttp.Detail}

// errorFrom reads an error body into an *Error: a non-200 answer's (with its status), or
// an error frame of a stream (status 0).
func errorFrom(status int, body []byte) error {
	f := enginehttp.DecodeAnswer(status, body, errorShapes...)
	return &Error{Status: status, Type: f.Type, Message: f.Message}
}

// Health returns nil when GET /health answers 200 (503 when the executor failed).
func (c *Client) Health(ctx context.Context) error {
	return c.h.Call(ctx, http.MethodGet, "/health", nil)
}

// Models returns the ids of GET /v1/models.
func (c *Client) Models(ctx context.Context) ([]string, error) {
	list, err := enginehttp.Models[struct {
		ID string `json:"id"`
	}](ctx, c.h)
	if err != nil {
		return nil, err
	}
	ids := make([]string, len(list))
	for i, m := range list {
		ids[i] = m.ID
	}
	return ids, nil
}
