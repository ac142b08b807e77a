package trtllm

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
)

// Client talks to one trtllm-serve server. Safe for concurrent use.
type Client struct {
	base *url.URL
	hc   *http.Client
}

// New returns a client for the server at baseURL (e.g. http://127.0.0.1:8000). hc may
// be nil (no overall timeout: bound calls with their contexts). Errors: a URL that is
// not absolute http(s).
func New(baseURL string, hc *http.Client) (*Client, error) {
	u, err := url.Parse(baseURL)
	if err != nil {
		return nil, fmt.Errorf("trtllm: engine URL %q: %w", baseURL, err)
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("trtllm: engine URL %q: want http://host:port", baseURL)
	}
	u.Path = strings.TrimSuffix(u.Path, "/")
	if hc == nil {
		hc = &http.Client{Transport: http.DefaultTransport}
	}
	return &Client{base: u, hc: hc}, nil
}

// Error is an error answer of the server (HTTP status and body), or an error frame in
// the middle of a stream (Status 0).
type Error struct {
	Status  int
	Type    string // e.g. BadRequestError
	Message string
}

func (e *Error) Error() string {
	s := "trtllm: engine answered"
	if e.Status != 0 {
		s += fmt.Sprintf(" %d", e.Status)
	} else {
		s += " an error frame"
	}
	if e.Type != "" {
		s += " " + e.Type
	}
	return s + ": " + e.Message
}

func (c *Client) url(path string) string { return c.base.String() + path }

// do sends a request and returns the response when it is 200; any other status is an
// *Error.
func (c *Client) do(ctx context.Context, method, path string, body []byte, hdr http.Header) (*http.Response, error) {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.url(path), rd)
	if err != nil {
		return nil, fmt.Errorf("trtllm: %s %s: %w", method, path, err)
	}
	for k, v := range hdr {
		req.Header[k] = v
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("trtllm: %s %s: %w", method, path, err)
	}
	if resp.StatusCode != http.StatusOK {
		defer resp.Body.Close()
		return nil, errorFrom(resp)
	}
	return resp, nil
}

// errorFrom reads a non-200 answer into an *Error.
func errorFrom(resp *http.Response) error {
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	e := errorBody(b)
	e.Status = resp.StatusCode
	if e.Message == "" {
		e.Message = http.StatusText(resp.StatusCode)
	}
	return e
}

// errorBody decodes trtllm-serve's error shapes: ErrorResponse {"object": "error",
// "message", "type", "param", "code"}, validation failures {"error": "<text>"}, an
// OpenAI-style {"error": {"message", "type"}}, FastAPI's {"detail": ...}; anything else
// is kept as text.
func errorBody(b []byte) *Error {
	var body struct {
		Error   json.RawMessage `json:"error"`
		Message string          `json:"message"`
		Type    string          `json:"type"`
		Detail  any             `json:"detail"`
	}
	e := &Error{}
	if err := json.Unmarshal(b, &body); err == nil {
		var inner struct {
			Message string `json:"message"`
			Type    string `json:"type"`
		}
		var s string
		switch {
		case body.Message != "":
			e.Message, e.Type = body.Message, body.Type
			return e
		case len(body.Error) > 0 && json.Unmarshal(body.Error, &s) == nil:
			e.Message = s
			return e
		case len(body.Error) > 0 && json.Unmarshal(body.Error, &inner) == nil && inner.Message != "":
			e.Message, e.Type = inner.Message, inner.Type
			return e
		case body.Detail != nil:
			e.Message = fmt.Sprint(body.Detail)
			return e
		}
	}
	e.Message = strings.TrimSpace(string(b))
	return e
}

// Health returns nil when GET /health answers 200 (503 when the executor failed).
func (c *Client) Health(ctx context.Context) error {
	resp, err := c.do(ctx, http.MethodGet, "/health", nil, nil)
	if err != nil {
		return err
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	return resp.Body.Close()
}

// Models returns the ids of GET /v1/models.
func (c *Client) Models(ctx context.Context) ([]string, error) {
	resp, err := c.do(ctx, http.MethodGet, "/v1/models", nil, nil)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var list struct {
		Object string `json:"object"`
		Data   []struct {
			ID string `json:"id"`
		} `json:"data"`
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&list); err != nil {
		return nil, fmt.Errorf("trtllm: GET /v1/models: decoding the answer: %w", err)
	}
	if list.Object != "list" {
		return nil, fmt.Errorf("trtllm: GET /v1/models: object %q, want \"list\"", list.Object)
	}
	ids := make([]string, len(list.Data))
	for i, m := range list.Data {
		ids[i] = m.ID
	}
	return ids, nil
}
