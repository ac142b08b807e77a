package sglang

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// Options tunes a Client to how its server was started.
type Options struct {
	// IncrementalOutput: the server runs with --incremental-streaming-output, so each
	// streamed chunk's output_ids holds only its new tokens. False (SGLang's default):
	// output_ids are cumulative.
	IncrementalOutput bool
	// AbortTimeout bounds the POST /abort_request a stream sends when it is closed or
	// cancelled before it finished (default 5 s).
	AbortTimeout time.Duration
	// HealthPath is the readiness probe (default /health).
	HealthPath string
}

const defaultAbortTimeout = 5 * time.Second

// Client talks to one SGLang server. Safe for concurrent use.
type Client struct {
	base *url.URL
	hc   *http.Client
	opts Options
}

// New returns a client for the server at baseURL (e.g. http://127.0.0.1:30000). hc may
// be nil (no overall timeout: bound calls with their contexts). Errors: a URL that is
// not absolute http(s).
func New(baseURL string, hc *http.Client, opts Options) (*Client, error) {
	u, err := url.Parse(baseURL)
	if err != nil {
		return nil, fmt.Errorf("sglang: engine URL %q: %w", baseURL, err)
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("sglang: engine URL %q: want http://host:port", baseURL)
	}
	u.Path = strings.TrimSuffix(u.Path, "/")
	if hc == nil {
		hc = &http.Client{Transport: http.DefaultTransport}
	}
	if opts.AbortTimeout <= 0 {
		opts.AbortTimeout = defaultAbortTimeout
	}
	if opts.HealthPath == "" {
		opts.HealthPath = "/health"
	}
	return &Client{base: u, hc: hc, opts: opts}, nil
}

// Error is an error answer of the server (HTTP status and body), or an error frame in
// the middle of a stream (Status 0).
type Error struct {
	Status  int
	Type    string // the body's type, when it has one (e.g. "Bad Request")
	Message string
}

func (e *Error) Error() string {
	s := "sglang: engine answered"
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
func (c *Client) do(ctx context.Context, method, path string, body []byte) (*http.Response, error) {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.url(path), rd)
	if err != nil {
		return nil, fmt.Errorf("sglang: %s %s: %w", method, path, err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("sglang: %s %s: %w", method, path, err)
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

// errorBody decodes SGLang's error shapes: {"error": {"message"}} (ValueError answers
// and stream error frames), {"object": "error", "message", "type", "code"}
// (ErrorResponse) and FastAPI's {"detail": ...}; anything else is kept as text.
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
		case len(body.Error) > 0 && json.Unmarshal(body.Error, &inner) == nil && inner.Message != "":
			e.Message, e.Type = inner.Message, inner.Type
			return e
		case len(body.Error) > 0 && json.Unmarshal(body.Error, &s) == nil:
			e.Message = s
			return e
		case body.Message != "":
			e.Message, e.Type = body.Message, body.Type
			return e
		case body.Detail != nil:
			e.Message = fmt.Sprint(body.Detail)
			return e
		}
	}
	e.Message = strings.TrimSpace(string(b))
	return e
}

// Health returns nil when the readiness probe (GET /health by default) answers 200.
// SGLang answers 503 while it starts or when its probe generation gets no answer.
func (c *Client) Health(ctx context.Context) error {
	resp, err := c.do(ctx, http.MethodGet, c.opts.HealthPath, nil)
	if err != nil {
		return err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.Body.Close()
}

// ModelInfo is the answer of GET /get_model_info.
type ModelInfo struct {
	ModelPath     string `json:"model_path"`
	TokenizerPath string `json:"tokenizer_path"`
	IsGeneration  bool   `json:"is_generation"`
	WeightVersion string `json:"weight_version"`
}

// ModelInfo returns the served model's paths and kind.
func (c *Client) ModelInfo(ctx context.Context) (ModelInfo, error) {
	resp, err := c.do(ctx, http.MethodGet, "/get_model_info", nil)
	if err != nil {
		return ModelInfo{}, err
	}
	defer resp.Body.Close()
	var mi ModelInfo
	if err := json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&mi); err != nil {
		return ModelInfo{}, fmt.Errorf("sglang: GET /get_model_info: decoding the answer: %w", err)
	}
	return mi, nil
}

// Abort asks the server to abort request rid (POST /abort_request). SGLang answers 200
// whether or not it still knows rid.
func (c *Client) Abort(ctx context.Context, rid string) error {
	if rid == "" {
		return fmt.Errorf("sglang: abort without a request id")
	}
	b, err := json.Marshal(struct {
		RID      string `json:"rid"`
		AbortAll bool   `json:"abort_all"`
	}{RID: rid})
	if err != nil {
		return err
	}
	resp, err := c.do(ctx, http.MethodPost, "/abort_request", b)
	if err != nil {
		return err
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	return resp.Body.Close()
}
