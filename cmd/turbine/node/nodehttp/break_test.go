package nodehttp

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/turbine-llm/turbine/messages"
)

// TestMetricsHostileEngines: engines that dribble a page and stall, send a page past
// MaxScrapeBytes, answer endless redirects or sit behind an unusable URL, and workers
// whose ids carry quotes and new lines, leave /metrics a 200 page that parses, within
// the scrape timeout plus a margin, with the node's own families and every bad scrape
// counted.
func TestMetricsHostileEngines(t *testing.T) {
	stall := make(chan struct{})
	dribble := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running 1\nvllm:num_req")
		w.(http.Flusher).Flush()
		select {
		case <-stall:
		case <-r.Context().Done():
		}
	}))
	huge := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		line := []byte("# TYPE a gauge\n" + strings.Repeat("a 1\n", 1<<14))
		for sent := 0; sent <= MaxScrapeBytes; sent += len(line) {
			if _, err := w.Write(line); err != nil {
				return
			}
		}
	}))
	var loop *httptest.Server
	loop = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, loop.URL+"/metrics", http.StatusFound)
	}))
	good := engineServer(t, "/metrics", []byte("# TYPE vllm:num_requests_waiting gauge\nvllm:num_requests_waiting 2\n"))
	t.Cleanup(func() { close(stall); dribble.Close(); huge.Close(); loop.Close() })

	workers := []struct{ id, url string }{
		{"dribble", dribble.URL}, {"huge", huge.URL}, {"loop", loop.URL}, {"bad-url", "http://[::1"},
		{"no-scheme", "10.0.0.1:1"}, {"q\"uote\nd", good.URL},
	}
	b := NewBoard()
	var listed []*messages.NodeWorker
	for _, w := range workers {
		listed = append(listed, &messages.NodeWorker{WorkerId: w.id})
	}
	b.Attach(func(context.Context) (*messages.NodeStatus, error) { return &messages.NodeStatus{Workers: listed}, nil })
	for _, w := range workers {
		b.Registered(&messages.WorkerInfo{WorkerId: w.id, Ready: true, EngineUrl: w.url, Card: &messages.ModelCard{Engine: "vllm"}})
	}
	const scrape = 500 * time.Millisecond
	s := New(Config{Node: "n", Board: b, ScrapeTimeout: scrape,
		Own: func(w io.Writer) { _, _ = io.WriteString(w, "# TYPE turbine_node_own gauge\nturbine_node_own 1\n") }})
	start := time.Now()
	code, page := get(t, s, "/metrics")
	if took := time.Since(start); took > scrape+3*time.Second {
		t.Errorf("/metrics took %v with a %v scrape timeout", took, scrape)
	}
	if code != http.StatusOK {
		t.Fatalf("/metrics %d", code)
	}
	fams, err := Parse(bytes.NewReader(page))
	if err != nil {
		t.Fatalf("page does not parse: %v\n%s", err, page)
	}
	if _, ok := fams["turbine_node_own"]; !ok {
		t.Error("the node's own family is missing")
	}
	if _, ok := fams["a"]; ok {
		t.Error("the oversized page was served")
	}
	errs := map[string]float64{}
	for _, m := range fams[MetricScrapeErrors].GetMetric() {
		errs[label(m, WorkerLabel)] = m.GetCounter().GetValue() + m.GetUntyped().GetValue()
	}
	for _, w := range workers {
		want := 1.0
		if w.url == good.URL {
			want = 0
		}
		if got, ok := errs[w.id]; !ok || got != want {
			t.Errorf("scrape errors of %q: %v (present %v), want %v", w.id, got, ok, want)
		}
	}
	var served bool
	for _, m := range fams["vllm:num_requests_waiting"].GetMetric() {
		served = served || label(m, WorkerLabel) == "q\"uote\nd"
	}
	if !served {
		t.Error("the quoted worker's engine page is missing or its label mangled")
	}
}
