package nodehttp

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/turbine-llm/turbine/messages"
)

// engineServer serves body on path (404 elsewhere).
func engineServer(t *testing.T, path string, body []byte) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != path {
			http.NotFound(w, r)
			return
		}
		_, _ = w.Write(body)
	}))
	t.Cleanup(srv.Close)
	return srv
}

func get(t *testing.T, h http.Handler, path string) (int, []byte) {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
	return rec.Code, rec.Body.Bytes()
}

// TestServerMetrics: engines are scraped on their own paths and re-exported with their
// worker's label after the node's own families; an engine that fails (an error status,
// a malformed page, no answer within the scrape timeout, nobody listening) is left out
// and counted, and the page is still 200.
func TestServerMetrics(t *testing.T) {
	vllm, _ := os.ReadFile(filepath.Join("testdata", "merge", "vllm-two-workers", "gpu-7-0.txt"))
	good := engineServer(t, "/metrics", vllm)
	trt := engineServer(t, "/prometheus/metrics", []byte("# TYPE trtllm_kv_cache_hit_rate gauge\ntrtllm_kv_cache_hit_rate 0.5\n"))
	bad := engineServer(t, "/metrics", []byte("vllm:broken{ 1\n"))
	hang := make(chan struct{})
	slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-hang:
		case <-r.Context().Done():
		}
	}))
	t.Cleanup(func() { close(hang); slow.Close() })
	gone := httptest.NewServer(http.NotFoundHandler())
	goneURL := gone.URL
	gone.Close()

	workers := []struct{ id, url, engine string }{
		{"n-0", good.URL, "vllm"}, {"n-1", trt.URL, "trtllm"}, {"n-2", bad.URL, "vllm"},
		{"n-3", slow.URL, "vllm"}, {"n-4", goneURL, "sglang"}, {"n-5", "", "vllm"},
	}
	b := NewBoard()
	var listed []*messages.NodeWorker
	for _, w := range workers {
		listed = append(listed, &messages.NodeWorker{WorkerId: w.id})
		b.Registered(&messages.WorkerInfo{WorkerId: w.id, Ready: true, EngineUrl: w.url, Card: &messages.ModelCard{Engine: w.engine}})
	}
	b.Attach(func(context.Context) (*messages.NodeStatus, error) { return &messages.NodeStatus{Workers: listed}, nil })
	for _, w := range workers {
		b.Registered(&messages.WorkerInfo{WorkerId: w.id, Ready: true, EngineUrl: w.url, Card: &messages.ModelCard{Engine: w.engine}})
	}
	s := New(Config{Node: "n", Board: b, ScrapeTimeout: 300 * time.Millisecond,
		Own: func(w io.Writer) { _, _ = io.WriteString(w, "# TYPE turbine_node_own gauge\nturbine_node_own 1\n") },
		MetricsPath: func(engine string) string {
			if engine == "trtllm" {
				return "/prometheus/metrics"
			}
			return "/metrics"
		}})
	start := time.Now()
	code, page := get(t, s, "/metrics")
	if code != http.StatusOK {
		t.Fatalf("/metrics %d", code)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("/metrics took %v: scrapes not bounded by the timeout", took)
	}
	fams, err := Parse(bytes.NewReader(page))
	if err != nil {
		t.Fatalf("page does not parse: %v\n%s", err, page)
	}
	value := func(family, worker string) (float64, bool) {
		for _, m := range fams[family].GetMetric() {
			if label(m, WorkerLabel) == worker {
				return m.GetCounter().GetValue() + m.GetGauge().GetValue() + m.GetUntyped().GetValue(), true
			}
		}
		return 0, false
	}
	for _, c := range []struct {
		family, worker string
		want           float64
	}{
		{"vllm:num_requests_running", "n-0", 3},
		{"trtllm_kv_cache_hit_rate", "n-1", 0.5},
		{"turbine_node_own", "", 1},
		{MetricScrapeErrors, "n-0", 0}, {MetricScrapeErrors, "n-1", 0},
		{MetricScrapeErrors, "n-2", 1}, {MetricScrapeErrors, "n-3", 1}, {MetricScrapeErrors, "n-4", 1},
		{MetricEngineUp, "n-0", 1}, {MetricEngineUp, "n-3", 0},
	} {
		if got, ok := value(c.family, c.worker); !ok || got != c.want {
			t.Errorf("%s{worker=%q} = %v (present %v), want %v", c.family, c.worker, got, ok, c.want)
		}
	}
	if _, ok := value(MetricScrapeErrors, "n-5"); ok {
		t.Error("a worker without an engine URL was scraped")
	}
	if _, ok := fams["vllm:broken"]; ok {
		t.Error("the malformed page's family was served")
	}
	// A worker that leaves the agent's list leaves the page.
	listed = listed[:1]
	_, page = get(t, s, "/metrics")
	if bytes.Contains(page, []byte(`worker="n-2"`)) {
		t.Errorf("series of a worker that left:\n%s", page)
	}
}

func TestServerProbes(t *testing.T) {
	b := NewBoard()
	s := New(Config{Node: "gpu-7", Board: b})
	if code, body := get(t, s, "/live"); code != http.StatusOK || !bytes.Contains(body, []byte(`"live"`)) {
		t.Fatalf("/live %d %s", code, body)
	}
	health := func() (int, HealthBody) {
		code, raw := get(t, s, "/health")
		var body HealthBody
		if err := json.Unmarshal(raw, &body); err != nil {
			t.Fatalf("/health body %s: %v", raw, err)
		}
		return code, body
	}
	if code, body := health(); code != http.StatusServiceUnavailable || body.Status != StatusStarting || body.Error == "" {
		t.Fatalf("/health before the agent: %d %+v", code, body)
	}
	b.Attach(func(context.Context) (*messages.NodeStatus, error) {
		return &messages.NodeStatus{Workers: []*messages.NodeWorker{{WorkerId: "gpu-7-0", Model: "m"}}}, nil
	})
	b.Booted()
	if code, body := health(); code != http.StatusServiceUnavailable || body.Status != StatusStarting || body.Workers[0].State != StateStarting {
		t.Fatalf("/health with a starting worker: %d %+v", code, body)
	}
	b.Registered(&messages.WorkerInfo{WorkerId: "gpu-7-0", Ready: true, EngineUrl: "http://10.0.0.7:41000"})
	code, body := health()
	if code != http.StatusOK || body.Status != StatusHealthy || body.Node != "gpu-7" || body.Workers[0].EngineURL != "http://10.0.0.7:41000" {
		t.Fatalf("/health ready: %d %+v", code, body)
	}
	if code, _ := get(t, s, "/admin"); code != http.StatusNotFound {
		t.Fatalf("/admin %d, want 404", code)
	}
}
