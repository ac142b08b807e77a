package gateway

import (
	"context"
	"fmt"
	"net/http"
	"regexp"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/VictoriaMetrics/metrics"
)

// testClock is a clock the test moves (from the engine's scripted steps).
type testClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *testClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *testClock) advance(d time.Duration) func() {
	return func() {
		c.mu.Lock()
		c.now = c.now.Add(d)
		c.mu.Unlock()
	}
}

func newClockedServer(t *testing.T, b Backend, clk *testClock) *Server {
	t.Helper()
	s, err := New(Config{Now: clk.Now}, b, fakeOptions(fakePreprocessor{eos: []uint32{fakeEOS}})...)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestLatencyMetrics drives the clock from the engine script: first token 200 ms after
// arrival, then a 3-token chunk 30 ms later (ITL 10 ms per token).
func TestLatencyMetrics(t *testing.T) {
	clk := &testClock{now: testTime}
	b := newFakeBackend(
		step{before: clk.advance(200 * time.Millisecond), chunk: tokens("H").chunk},
		step{before: clk.advance(30 * time.Millisecond), chunk: finish("ey!", "stop").chunk},
	)
	s := newClockedServer(t, b, clk)
	rr := serve(s, http.MethodPost, chatPath, `{"model":"tiny","stream":true,`+hiChat+`}`)
	if rr.Code != 200 {
		t.Fatal(rr.Body.String())
	}
	want := map[string]string{
		`turbine_frontend_time_to_first_token_seconds_sum{model="tiny"}`:                                               "0.2",
		`turbine_frontend_time_to_first_token_seconds_count{model="tiny"}`:                                             "1",
		`turbine_frontend_inter_token_latency_seconds_count{model="tiny"}`:                                             "3",
		`turbine_frontend_inter_token_latency_seconds_bucket{model="tiny",le="0.008"}`:                                 "0",
		`turbine_frontend_inter_token_latency_seconds_bucket{model="tiny",le="0.016"}`:                                 "3",
		`turbine_frontend_request_duration_seconds_sum{model="tiny",endpoint="chat_completions"}`:                      "0.23",
		`turbine_frontend_output_sequence_tokens_sum{model="tiny"}`:                                                    "4",
		`turbine_frontend_input_sequence_tokens_sum{model="tiny"}`:                                                     "21",
		`turbine_frontend_cached_tokens_sum{model="tiny"}`:                                                             "2",
		`turbine_frontend_requests_total{model="tiny",endpoint="chat_completions",request_type="stream",status="200"}`: "1",
		`turbine_frontend_inflight_requests{model="tiny"}`:                                                             "0",
	}
	for series, v := range want {
		if got := metricValue(s, series); !closeTo(got, v) {
			t.Errorf("%s = %q, want %s", series, got, v)
		}
	}
}

func closeTo(got, want string) bool {
	var g, w float64
	if _, err := fmt.Sscan(got, &g); err != nil {
		return false
	}
	fmt.Sscan(want, &w)
	return g > w-1e-9 && g < w+1e-9
}

// TestMetricFamiliesGolden runs one request of each outcome and compares the metric
// family names /metrics exposes with testdata/metrics_families.golden (names users graph
// must not change by accident).
func TestMetricFamiliesGolden(t *testing.T) {
	b := newFakeBackend(tokens("Hel"), finish("lo", "stop"))
	s := newTestServer(t, b)
	serve(s, http.MethodPost, chatPath, `{"model":"tiny","stream":true,`+hiChat+`}`)
	serve(s, http.MethodPost, compPath, `{"model":"tiny","prompt":"x"}`)
	serve(s, http.MethodPost, chatPath, `{"model":"tiny"}`)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	serveCtx(ctx, s, http.MethodPost, chatPath, `{"model":"tiny",`+hiChat+`}`)
	b.genErr = ErrAllBusy
	serve(s, http.MethodPost, chatPath, `{"model":"tiny",`+hiChat+`}`)

	rr := serve(s, http.MethodGet, "/metrics", "")
	if rr.Code != 200 || !strings.HasPrefix(rr.Header().Get("Content-Type"), "text/plain") {
		t.Fatalf("GET /metrics: %d %v", rr.Code, rr.Header())
	}
	text := rr.Body.String()
	if got := metricValue(s, `turbine_frontend_rejected_requests_total{model="tiny",reason="all_workers_busy"}`); got != "1" {
		t.Errorf("rejections = %q, want 1", got)
	}
	if got := metricValue(s, `turbine_frontend_requests_total{model="",endpoint="chat_completions",request_type="unary",status="400"}`); got != "1" {
		t.Errorf("400s = %q, want 1\n%s", got, text)
	}
	fam := regexp.MustCompile(`^([a-z_]+?)(_bucket|_sum|_count)?[{ ]`)
	seen := map[string]bool{}
	for _, line := range strings.Split(text, "\n") {
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		m := fam.FindStringSubmatch(line)
		if m == nil {
			t.Fatalf("unparsable metrics line %q", line)
		}
		name := m[1]
		if m[2] != "" && !strings.Contains(text, name+"_bucket") {
			name += m[2] // a counter named *_count or *_sum, not a histogram part
		}
		// The runtime's and the process's own families depend on the metrics library and
		// the platform: checked by name below, kept out of the golden list.
		if strings.HasPrefix(name, "go_") || strings.HasPrefix(name, "process_") {
			seen["(process) "+name] = true
			continue
		}
		seen[name] = true
	}
	for _, want := range []string{"go_goroutines", "process_open_fds", "process_resident_memory_bytes"} {
		if !seen["(process) "+want] {
			t.Errorf("/metrics has no %s", want)
		}
	}
	for n := range seen {
		if strings.HasPrefix(n, "(process) ") {
			delete(seen, n)
		}
	}
	names := make([]string, 0, len(seen))
	for n := range seen {
		names = append(names, n)
	}
	sort.Strings(names)
	checkGolden(t, "metrics_families.golden", []byte(strings.Join(names, "\n")+"\n"))
}

func TestLabelEscaping(t *testing.T) {
	got := name("m", "model", `a"b\c`+"\n")
	if want := `m{model="a\"b\\c\n"}`; got != want {
		t.Errorf("got %s want %s", got, want)
	}
}

// TestMetricsIncludeProcessDefaultSet: /metrics also writes the families recorded in the
// process's default set, such as the refusals of workers running in the same process
// (`turbine serve`): turbine_worker_model_refused_total.
func TestMetricsIncludeProcessDefaultSet(t *testing.T) {
	series := `turbine_worker_model_refused_total{model="gateway-test-model",reason="model type \"WordLevel\" is not supported"}`
	metrics.GetOrCreateCounter(series).Inc()
	t.Cleanup(func() { metrics.UnregisterMetric(series) })
	s := newTestServer(t, newFakeBackend())
	rr := serve(s, http.MethodGet, "/metrics", "")
	if rr.Code != 200 {
		t.Fatalf("GET /metrics: %d", rr.Code)
	}
	if !strings.Contains(rr.Body.String(), series+" 1\n") {
		t.Errorf("/metrics lacks %s 1:\n%s", series, rr.Body.String())
	}
}
