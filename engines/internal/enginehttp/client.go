package enginehttp

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/turbine-llm/turbine/tracing"
)

// Bounds on what the client reads of an answer.
const (
	maxErrorBytes   = 64 << 10 // an error answer's body
	maxDiscardBytes = 64 << 10 // a body read only to reuse the connection
	maxJSONBytes    = 16 << 20 // a JSON answer (GetJSON)
	maxMetricsBytes = 64 << 20 // a /metrics scrape
)

// Client sends requests to one engine server. Safe for concurrent use.
type Client struct {
	name     string // prefixes errors: "sglang: ..."
	base     string // scheme://host[:port][/path], without a trailing slash
	hc       *http.Client
	answered func(status int, body []byte) error
}

// New returns a client for the server at baseURL (e.g. http://127.0.0.1:8000). name
// prefixes the client's errors. hc may be nil: NewHTTPClient(DefaultPool()), a client
// of its own without an overall timeout (streams last as long as generation does; bound
// calls with their contexts). answered turns a non-200 answer (its status and up to 64
// KiB of its body) into the error Do returns. Errors: a URL that is not absolute
// http(s).
func New(name, baseURL string, hc *http.Client, answered func(status int, body []byte) error) (*Client, error) {
	u, err := url.Parse(baseURL)
	if err != nil {
		return nil, fmt.Errorf("%s: engine URL %q: %w", name, baseURL, err)
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("%s: engine URL %q: want http://host:port", name, baseURL)
	}
	u.Path = strings.TrimSuffix(u.Path, "/")
	if hc == nil {
		hc = NewHTTPClient(DefaultPool())
	}
	return &Client{name: name, base: u.String(), hc: hc, answered: answered}, nil
}

// Name is the engine name that prefixes the client's errors.
func (c *Client) Name() string { return c.name }

// Do sends a request to path (below the base URL) and returns the response when it is
// 200; the caller closes its body. A non-nil body is sent as application/json; hdr's
// fields are added to the request. Errors: "<name>: <method> <path>: <transport error>",
// or the answered function's error for any other status.
func (c *Client) Do(ctx context.Context, method, path string, body []byte, hdr http.Header) (*http.Response, error) {
	return c.do(ctx, method, path, body, hdr, c.answered)
}

// Submit is Do for a request the caller's client wrote (a generation, an embedding): an
// error answer whose status refuses the request itself (engines.InvalidRequestStatus:
// 400, 422) is the answered function's error wrapped in an *engines.InvalidRequestError
// with the engine's message, which re-sending elsewhere will not mend
// (docs/reference.md §10). Errors: Do's, so wrapped.
func (c *Client) Submit(ctx context.Context, method, path string, body []byte, hdr http.Header) (*http.Response, error) {
	return c.do(ctx, method, path, body, hdr, c.refusedInput)
}

// do is Do with answered in place of the client's answered function.
func (c *Client) do(ctx context.Context, method, path string, body []byte, hdr http.Header,
	answered func(status int, body []byte) error) (*http.Response, error) {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, rd)
	if err != nil {
		return nil, fmt.Errorf("%s: %s %s: %w", c.name, method, path, err)
	}
	for k, v := range hdr {
		req.Header[k] = v
	}
	// The worker's span (worker.generate) as traceparent: vLLM and SGLang continue the
	// trace (docs/tracing.md). Nothing while tracing is off.
	tracing.InjectHeaders(ctx, req.Header)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("%s: %s %s: %w", c.name, method, path, err)
	}
	if resp.StatusCode != http.StatusOK {
		defer resp.Body.Close()
		b, _ := io.ReadAll(io.LimitReader(resp.Body, maxErrorBytes))
		return nil, answered(resp.StatusCode, b)
	}
	return resp, nil
}

// Call sends a request whose answer carries nothing the caller needs; nil when it is
// 200. Errors: Do's.
func (c *Client) Call(ctx context.Context, method, path string, body []byte) error {
	resp, err := c.Do(ctx, method, path, body, nil)
	if err != nil {
		return err
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxDiscardBytes))
	return resp.Body.Close()
}

// GetJSON sends GET path and decodes the answer (up to 16 MiB) into v. Errors: Do's, or
// "<name>: GET <path>: decoding the answer: ...".
func (c *Client) GetJSON(ctx context.Context, path string, v any) error {
	resp, err := c.Do(ctx, http.MethodGet, path, nil, nil)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(io.LimitReader(resp.Body, maxJSONBytes)).Decode(v); err != nil {
		return fmt.Errorf("%s: GET %s: decoding the answer: %w", c.name, path, err)
	}
	return nil
}

// Models returns the data entries of GET /v1/models (OpenAI's model list), each decoded
// as an M. Errors: GetJSON's, or an answer whose object is not "list".
func Models[M any](ctx context.Context, c *Client) ([]M, error) {
	var list struct {
		Object string `json:"object"`
		Data   []M    `json:"data"`
	}
	if err := c.GetJSON(ctx, "/v1/models", &list); err != nil {
		return nil, err
	}
	if list.Object != "list" {
		return nil, fmt.Errorf("%s: GET /v1/models: object %q, want \"list\"", c.name, list.Object)
	}
	return list.Data, nil
}

// Metrics scrapes GET path in Prometheus's text format (up to 64 MiB) and returns the
// metric families by name. Errors: Do's (404 where the server exports no metrics), or
// "<name>: GET <path>: <parse error>".
func (c *Client) Metrics(ctx context.Context, path string) (map[string]*dto.MetricFamily, error) {
	resp, err := c.Do(ctx, http.MethodGet, path, nil, nil)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(io.LimitReader(resp.Body, maxMetricsBytes))
	if err != nil {
		return nil, fmt.Errorf("%s: GET %s: %w", c.name, path, err)
	}
	return fams, nil
}

// MetricValue is a sample's value: a gauge's, a counter's or an untyped one's (0 for
// other kinds).
func MetricValue(m *dto.Metric) float64 {
	switch {
	case m.Gauge != nil:
		return m.Gauge.GetValue()
	case m.Counter != nil:
		return m.Counter.GetValue()
	case m.Untyped != nil:
		return m.Untyped.GetValue()
	}
	return 0
}
