package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/turbine-llm/turbine/messages"
)

func TestModels(t *testing.T) {
	b := newFakeBackend()
	s := newTestServer(t, b)
	rr := serve(s, http.MethodGet, "/v1/models", "")
	// entry is a model's entry, with vLLM's fields (TestModelEntries checks them).
	entry := func(id, root string, maxLen int) string {
		perm, _ := json.Marshal([]modelPermission{defaultPermission(id, testTime.Unix())})
		return fmt.Sprintf(`{"id":%q,"object":"model","created":1767323045,"owned_by":"turbine","root":%q,"parent":null,"max_model_len":%d,"permission":%s}`,
			id, root, maxLen, perm)
	}
	want := `{"object":"list","data":[` + entry("tiny", "fake", 128) + `,` + entry("org/big-model", "fake", 4096) + `,` +
		entry("broken-model", "broken", 128) + `]}` + "\n"
	if rr.Code != 200 || rr.Body.String() != want {
		t.Errorf("GET /v1/models: %d %s", rr.Code, rr.Body.String())
	}

	rr = serve(s, http.MethodGet, "/v1/models/org/big-model", "")
	if rr.Code != 200 || !strings.Contains(rr.Body.String(), `"id":"org/big-model"`) {
		t.Errorf("GET /v1/models/org/big-model: %d %s", rr.Code, rr.Body.String())
	}
	for _, path := range []string{"/v1/models/nope", "/v1/models/"} {
		rr = serve(s, http.MethodGet, path, "")
		if rr.Code != 404 || !strings.Contains(rr.Body.String(), `"code":"model_not_found"`) {
			t.Errorf("GET %s: %d %s", path, rr.Code, rr.Body.String())
		}
	}

	b.cards = nil
	rr = serve(s, http.MethodGet, "/v1/models", "")
	if rr.Code != 200 || rr.Body.String() != `{"object":"list","data":[]}`+"\n" {
		t.Errorf("no models: %d %s", rr.Code, rr.Body.String())
	}
	b.modelsErr = errors.New("cluster: no members")
	rr = serve(s, http.MethodGet, "/v1/models", "")
	if rr.Code != http.StatusBadGateway {
		t.Errorf("models error: %d %s", rr.Code, rr.Body.String())
	}
}

func TestHealthAndLive(t *testing.T) {
	b := newFakeBackend()
	s := newTestServer(t, b)
	cases := []struct {
		cards  []*messages.ModelCard
		err    error
		status int
		body   string
	}{
		{b.cards[:1], nil, 200, `{"status":"healthy","models":["tiny"]}`},
		{nil, nil, 503, `{"status":"unhealthy","models":[]}`},
		{nil, errors.New("cluster: no members"), 503, `{"status":"unhealthy","models":[],"error":"cluster: no members"}`},
	}
	for _, c := range cases {
		b.cards, b.modelsErr = c.cards, c.err
		rr := serve(s, http.MethodGet, "/health", "")
		if rr.Code != c.status || strings.TrimSpace(rr.Body.String()) != c.body {
			t.Errorf("health with %d cards, err %v: %d %s", len(c.cards), c.err, rr.Code, rr.Body.String())
		}
		rr = serve(s, http.MethodGet, "/live", "")
		if rr.Code != 200 {
			t.Errorf("live: %d", rr.Code)
		}
	}
}

func TestRoutingErrors(t *testing.T) {
	s := newTestServer(t, newFakeBackend())
	cases := []struct {
		method, path string
		status       int
		code, allow  string
	}{
		{http.MethodGet, "/v1/chat/completions", 405, "method_not_allowed", "POST"},
		{http.MethodPost, "/v1/models", 405, "method_not_allowed", "GET"},
		{http.MethodDelete, "/health", 405, "method_not_allowed", "GET"},
		{http.MethodGet, "/v1/embeddings", 405, "method_not_allowed", "POST"},
		{http.MethodGet, "/nowhere", 404, "unknown_url", ""},
	}
	for _, c := range cases {
		rr := serve(s, c.method, c.path, "")
		var body errorBody
		if err := json.Unmarshal(rr.Body.Bytes(), &body); err != nil {
			t.Fatalf("%s %s: %v", c.method, c.path, err)
		}
		if rr.Code != c.status || body.Error.Code != c.code || rr.Header().Get("Allow") != c.allow {
			t.Errorf("%s %s: %d %s Allow=%q", c.method, c.path, rr.Code, rr.Body.String(), rr.Header().Get("Allow"))
		}
	}
}

func TestRequestIDs(t *testing.T) {
	b := newFakeBackend(finish("ok", "stop"))
	s := newTestServer(t, b)
	cases := []struct{ sent, want string }{
		{"client-id_1.2:3", "client-id_1.2:3"},
		{"", "generated-id"},
		{"has space", "generated-id"},
		{strings.Repeat("a", MaxRequestIDLength+1), "generated-id"},
	}
	for _, c := range cases {
		req := httptest.NewRequest(http.MethodPost, chatPath, strings.NewReader(`{"model":"tiny",`+hiChat+`}`))
		if c.sent != "" {
			req.Header.Set("X-Request-Id", c.sent)
		}
		rr := httptest.NewRecorder()
		s.ServeHTTP(rr, req)
		if got := rr.Header().Get("X-Request-Id"); got != c.want {
			t.Errorf("sent %q: X-Request-Id %q, want %q", c.sent, got, c.want)
		}
		gens := b.generated()
		if g := gens[len(gens)-1]; g.RequestID != c.want {
			t.Errorf("sent %q: Backend request id %q", c.sent, g.RequestID)
		}
		if !strings.Contains(rr.Body.String(), `"id":"chatcmpl-`+c.want+`"`) {
			t.Errorf("sent %q: body %s", c.sent, rr.Body.String())
		}
	}
}

// metricsBackend adds its own families to /metrics.
type metricsBackend struct{ *fakeBackend }

func (metricsBackend) WritePrometheus(ctx context.Context, w io.Writer) {
	fmt.Fprintln(w, `turbine_router_worker_active_blocks{model="tiny",worker="worker-a"} 7`)
}

func TestMetricsIncludeBackendFamilies(t *testing.T) {
	s := newTestServer(t, metricsBackend{newFakeBackend(finish("ok", "stop"))})
	serve(s, http.MethodPost, chatPath, `{"model":"tiny",`+hiChat+`}`)
	body := serve(s, http.MethodGet, "/metrics", "").Body.String()
	if !strings.Contains(body, "turbine_frontend_requests_total{") || !strings.Contains(body, `turbine_router_worker_active_blocks{model="tiny",worker="worker-a"} 7`) {
		t.Errorf("/metrics:\n%s", body)
	}
}
