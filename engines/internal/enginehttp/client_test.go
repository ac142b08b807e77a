package enginehttp

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// answerErr is what the test clients' answered function returns.
type answerErr struct {
	status int
	body   string
}

func (e *answerErr) Error() string { return fmt.Sprintf("answered %d: %s", e.status, e.body) }

func testClient(t *testing.T, h http.HandlerFunc) *Client {
	t.Helper()
	hs := httptest.NewServer(h)
	t.Cleanup(hs.Close)
	c, err := New("eng", hs.URL+"/base/", nil, func(status int, body []byte) error {
		return &answerErr{status, string(body)}
	})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestNewRefusesURLs(t *testing.T) {
	for _, u := range []string{"", "127.0.0.1:8000", "ftp://h:1", "http://", "http://h:1/%zz"} {
		if _, err := New("eng", u, nil, nil); err == nil || !strings.HasPrefix(err.Error(), "eng: engine URL") {
			t.Errorf("New(%q): %v", u, err)
		}
	}
}

func TestDo(t *testing.T) {
	c := testClient(t, func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		switch r.URL.Path {
		case "/base/echo":
			fmt.Fprintf(w, "%s %s ct=%q x=%q", r.Method, b, r.Header.Get("Content-Type"), r.Header.Get("X-Request-Id"))
		case "/base/big-error":
			w.WriteHeader(http.StatusBadRequest)
			_, _ = w.Write([]byte(strings.Repeat("e", 100<<10)))
		default:
			w.WriteHeader(http.StatusNotFound)
			_, _ = w.Write([]byte(`{"detail":"Not Found"}`))
		}
	})
	ctx := context.Background()
	resp, err := c.Do(ctx, http.MethodPost, "/echo", []byte(`{}`), http.Header{"X-Request-Id": {"r1"}})
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(b) != `POST {} ct="application/json" x="r1"` {
		t.Fatalf("echo %s", b)
	}
	resp, err = c.Do(ctx, http.MethodGet, "/echo", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	b, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(b) != `GET  ct="" x=""` {
		t.Fatalf("echo %s", b)
	}
	var ae *answerErr
	if err := c.Call(ctx, http.MethodGet, "/nope", nil); !errors.As(err, &ae) || ae.status != 404 || ae.body != `{"detail":"Not Found"}` {
		t.Fatalf("404: %v", err)
	}
	if err := c.Call(ctx, http.MethodGet, "/big-error", nil); !errors.As(err, &ae) || len(ae.body) != 64<<10 {
		t.Fatalf("error bodies are read up to 64 KiB: %d bytes", len(ae.body))
	}
	if err := c.Call(ctx, http.MethodGet, "/echo", nil); err != nil {
		t.Fatal(err)
	}
	dead, _ := New("eng", "http://127.0.0.1:1", nil, nil)
	if err := dead.Call(ctx, http.MethodGet, "/health", nil); err == nil || !strings.HasPrefix(err.Error(), "eng: GET /health: ") {
		t.Fatalf("transport error: %v", err)
	}
}

func TestGetJSONModelsAndMetrics(t *testing.T) {
	answers := map[string]string{
		"/base/v1/models":     `{"object":"list","data":[{"id":"a"},{"id":"b"}]}`,
		"/base/bad/v1/models": `{"object":"model"}`,
		"/base/metrics":       "# TYPE x gauge\nx{rank=\"0\"} 2\nc_total 5\n",
		"/base/bad-metric":    "x{ 1\n",
		"/base/not-json":      "<html>",
	}
	c := testClient(t, func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, answers[r.URL.Path]) })
	ctx := context.Background()
	ms, err := Models[struct{ ID string }](ctx, c)
	if err != nil || len(ms) != 2 || ms[0].ID != "a" || ms[1].ID != "b" {
		t.Fatalf("models %+v %v", ms, err)
	}
	var v map[string]any
	if err := c.GetJSON(ctx, "/not-json", &v); err == nil || !strings.HasPrefix(err.Error(), "eng: GET /not-json: decoding the answer: ") {
		t.Fatalf("GetJSON: %v", err)
	}
	fams, err := c.Metrics(ctx, "/metrics")
	if err != nil || MetricValue(fams["x"].Metric[0]) != 2 || MetricValue(fams["c_total"].Metric[0]) != 5 {
		t.Fatalf("metrics %v %v", fams, err)
	}
	if _, err := c.Metrics(ctx, "/bad-metric"); err == nil || !strings.HasPrefix(err.Error(), "eng: GET /bad-metric: ") {
		t.Fatalf("Metrics: %v", err)
	}
	bad, _ := New("eng", c.base+"/bad", nil, nil)
	if _, err := Models[struct{}](ctx, bad); err == nil || !strings.Contains(err.Error(), `object "model", want "list"`) {
		t.Fatalf("Models: %v", err)
	}
}
