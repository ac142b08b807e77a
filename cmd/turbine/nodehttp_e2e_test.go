package main

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/turbine-llm/turbine/cmd/turbine/node/nodehttp"
)

// startNodeHTTP runs `turbine node` with its HTTP port on a free port, on its own
// (local discovery: no frontend, so registrations reach only the node's board), and
// returns it once the port is bound; s.url is the port's base URL.
func startNodeHTTP(t *testing.T, id string, workers int, extra ...string) *server {
	t.Helper()
	args := append([]string{"node", "--node-id", id, "--workers", strconv.Itoa(workers), "--heartbeat", "200ms",
		"--speedup-ratio", "50", "--discovery", "local", "--http-port", "0", "--log-format", "json"}, extra...)
	return startTurbine(t, id, "node HTTP port listening", args...)
}

// getNode GETs path on the node's HTTP port.
func getNode(t *testing.T, s *server, path string) (int, []byte) {
	t.Helper()
	resp, err := http.Get(s.url + path)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	return resp.StatusCode, body
}

func nodeHealth(t *testing.T, s *server) (int, nodehttp.HealthBody) {
	t.Helper()
	code, raw := getNode(t, s, "/health")
	var body nodehttp.HealthBody
	if err := json.Unmarshal(raw, &body); err != nil {
		t.Fatalf("/health %d %s: %v", code, raw, err)
	}
	return code, body
}

// nodeSample returns the value of family's sample of worker (the first, for families
// with more labels) on the node's /metrics, and whether there is one.
func nodeSample(t *testing.T, s *server, family, worker string) (float64, bool) {
	t.Helper()
	code, page := getNode(t, s, "/metrics")
	if code != http.StatusOK {
		t.Fatalf("/metrics %d:\n%s", code, page)
	}
	fams, err := nodehttp.Parse(bytes.NewReader(page))
	if err != nil {
		t.Fatalf("/metrics does not parse: %v", err)
	}
	for _, m := range fams[family].GetMetric() {
		for _, l := range m.GetLabel() {
			if l.GetName() == nodehttp.WorkerLabel && l.GetValue() == worker {
				return m.GetCounter().GetValue() + m.GetGauge().GetValue() + m.GetUntyped().GetValue(), true
			}
		}
	}
	return 0, false
}

// TestE2ENodeHTTP: a node's /live answers at once; /health says starting (503) until
// both mock workers' engines are ready, then healthy (200) with each worker's engine
// URL; /metrics has the engines' vllm:* families once each, with a worker label per
// worker, besides the node's own; an engine killed leaves /metrics at 200 with its
// scrape error counted.
func TestE2ENodeHTTP(t *testing.T) {
	s := startNodeHTTP(t, "nh", 2)
	if code, body := getNode(t, s, "/live"); code != http.StatusOK {
		t.Fatalf("/live at once: %d %s", code, body)
	}
	if code, body := nodeHealth(t, s); code != http.StatusServiceUnavailable || body.Status != nodehttp.StatusStarting {
		t.Fatalf("/health at once: %d %+v, want 503 starting", code, body)
	}
	var health nodehttp.HealthBody
	s.waitFor(60*time.Second, "/health 200", func() bool {
		var code int
		code, health = nodeHealth(t, s)
		return code == http.StatusOK
	})
	if health.Status != nodehttp.StatusHealthy || health.Node != "nh" || len(health.Workers) != 2 {
		t.Fatalf("/health: %+v", health)
	}
	for _, w := range health.Workers {
		if w.State != nodehttp.StateReady || w.EngineURL == "" {
			t.Fatalf("/health worker %+v: want ready with an engine URL", w)
		}
		if code, _ := getNode(t, &server{t: t, url: w.EngineURL}, "/health"); code != http.StatusOK {
			t.Fatalf("engine_url %s of %s: /health %d", w.EngineURL, w.ID, code)
		}
	}
	code, page := getNode(t, s, "/metrics")
	if code != http.StatusOK {
		t.Fatalf("/metrics %d", code)
	}
	if n := bytes.Count(page, []byte("# TYPE vllm:num_requests_running ")); n != 1 {
		t.Errorf("/metrics: %d TYPE lines of vllm:num_requests_running, want 1", n)
	}
	for _, w := range []string{"nh-0", "nh-1"} {
		for _, family := range []string{"vllm:num_requests_running", "vllm:kv_cache_usage_perc", "vllm:prefix_cache_queries_total"} {
			if _, ok := nodeSample(t, s, family, w); !ok {
				t.Errorf("/metrics: no %s{worker=%q}", family, w)
			}
		}
		if v, ok := nodeSample(t, s, nodehttp.MetricScrapeErrors, w); !ok || v != 0 {
			t.Errorf("%s{worker=%q} = %v (present %v), want 0", nodehttp.MetricScrapeErrors, w, v, ok)
		}
	}
	for _, fam := range []string{"go_goroutines", "process_open_fds"} {
		if !bytes.Contains(page, []byte("\n"+fam+" ")) {
			t.Errorf("/metrics: the node's own %s is missing", fam)
		}
	}

	pid, _ := s.enginePID("nh-1")
	if pid == 0 {
		t.Fatal("no engine pid for nh-1 in the log")
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	// Until the worker restarts its engine (after a backoff), scrapes of it fail.
	s.waitFor(20*time.Second, "a counted scrape error of nh-1", func() bool {
		v, _ := nodeSample(t, s, nodehttp.MetricScrapeErrors, "nh-1")
		return v >= 1
	})
	if _, ok := nodeSample(t, s, "vllm:num_requests_running", "nh-0"); !ok {
		t.Error("/metrics lost the healthy worker's families while another engine was down")
	}
}
