package pool

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// listSource is a Source whose endpoints a test sets, signalling each change.
type listSource struct {
	mu      sync.Mutex
	eps     []Endpoint
	changed chan struct{}
}

func newListSource(addrs ...string) *listSource {
	s := &listSource{changed: make(chan struct{})}
	s.set(addrs...)
	return s
}

func (s *listSource) set(addrs ...string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.eps = nil
	for _, a := range addrs {
		s.eps = append(s.eps, Endpoint{Address: a})
	}
	close(s.changed)
	s.changed = make(chan struct{})
}

func (s *listSource) Endpoints() []Endpoint {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.eps)
}
func (s *listSource) Ready() bool              { return true }
func (s *listSource) Load(string) (Load, bool) { return Load{}, false }
func (s *listSource) Changed() <-chan struct{} { s.mu.Lock(); defer s.mu.Unlock(); return s.changed }

// engine is a model server's /metrics whose page and status a test switches.
type engine struct {
	srv    *httptest.Server
	page   atomic.Value // []byte
	status atomic.Int32
}

func newEngine(t *testing.T, fixture string) *engine {
	t.Helper()
	e := &engine{}
	e.serve(t, fixture, http.StatusOK)
	e.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != MetricsPath {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "text/plain; version=0.0.4")
		w.WriteHeader(int(e.status.Load()))
		w.Write(e.page.Load().([]byte))
	}))
	t.Cleanup(e.srv.Close)
	return e
}

func (e *engine) serve(t *testing.T, fixture string, status int) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", "metrics", fixture))
	if err != nil {
		t.Fatal(err)
	}
	e.page.Store(b)
	e.status.Store(int32(status))
}

func (e *engine) addr() string { return strings.TrimPrefix(e.srv.URL, "http://") }

// clock is a settable Now.
type clock struct{ ns atomic.Int64 }

func (c *clock) now() time.Time  { return time.Unix(0, c.ns.Load()) }
func (c *clock) set(t time.Time) { c.ns.Store(t.UnixNano()) }
func errorCount(s *Scraper) string {
	var b bytes.Buffer
	s.Metrics().WritePrometheus(&b)
	return b.String()
}

func TestScrapeKeepsLastLoadOnFailure(t *testing.T) {
	e := newEngine(t, "vllm_dp2.txt")
	var clk clock
	t1 := time.Unix(1000, 0)
	clk.set(t1)
	s := NewScraper(newListSource(e.addr()), ScrapeConfig{Now: clk.now})
	if _, ok := s.Load(e.addr()); ok {
		t.Fatal("load before any scrape")
	}
	if err := s.Scrape(context.Background(), e.addr()); err != nil {
		t.Fatal(err)
	}
	want := Load{Waiting: 4, Running: 21, KVUsage: 0.5, At: t1}
	if l, ok := s.Load(e.addr()); !ok || l != want {
		t.Fatalf("load %+v %v, want %+v", l, ok, want)
	}
	series := MetricScrapeErrors + `{endpoint="` + e.addr() + `"}`

	for i, c := range []struct {
		fixture string
		status  int
		err     string
	}{
		{"vllm_dp2.txt", http.StatusServiceUnavailable, "status 503"},
		{"go_runtime_only.txt", http.StatusOK, "neither"},
		{"malformed.txt", http.StatusOK, "pool: scrape"},
	} {
		clk.set(t1.Add(time.Duration(i+1) * time.Second))
		e.serve(t, c.fixture, c.status)
		if err := s.Scrape(context.Background(), e.addr()); err == nil || !strings.Contains(err.Error(), c.err) {
			t.Fatalf("%s/%d: err %v, want %q", c.fixture, c.status, err, c.err)
		}
		if l, ok := s.Load(e.addr()); !ok || l != want {
			t.Fatalf("after a failure: load %+v %v, want the last good one %+v", l, ok, want)
		}
		if !strings.Contains(errorCount(s), series+" "+string(rune('1'+i))) {
			t.Fatalf("after %d failures:\n%s", i+1, errorCount(s))
		}
	}
	if l, _ := s.Load(e.addr()); !l.Stale(clk.now(), 2*time.Second) {
		t.Fatal("a load 3 s old is not stale")
	}

	// A good scrape again replaces it.
	t5 := t1.Add(5 * time.Second)
	clk.set(t5)
	e.serve(t, "vllm_v0.txt", http.StatusOK)
	if err := s.Scrape(context.Background(), e.addr()); err != nil {
		t.Fatal(err)
	}
	if l, _ := s.Load(e.addr()); l != (Load{Waiting: 4, Running: 7, KVUsage: 0.8125, At: t5}) {
		t.Fatalf("load %+v", l)
	}
}

func TestScrapeTimeout(t *testing.T) {
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-release:
		}
	}))
	defer srv.Close()
	defer close(release)
	addr := strings.TrimPrefix(srv.URL, "http://")
	s := NewScraper(newListSource(addr), ScrapeConfig{Timeout: 20 * time.Millisecond})
	err := s.Scrape(context.Background(), addr)
	if err == nil || !strings.Contains(err.Error(), "deadline exceeded") {
		t.Fatalf("err %v, want a deadline", err)
	}
	if !strings.Contains(errorCount(s), `endpoint="`+addr+`"} 1`) {
		t.Fatalf("timeout not counted:\n%s", errorCount(s))
	}
}

func TestRunFollowsEndpoints(t *testing.T) {
	a, b := newEngine(t, "vllm_dp2.txt"), newEngine(t, "sglang_single.txt")
	b.serve(t, "sglang_single.txt", http.StatusInternalServerError) // b fails first
	src := newListSource(a.addr(), b.addr())
	type scrape struct {
		addr string
		err  error
	}
	scrapes := make(chan scrape, 64)
	reconciled := make(chan []string, 64)
	s := NewScraper(src, ScrapeConfig{
		Interval:    time.Hour, // only the first scrape of each loop happens in this test
		OnScrape:    func(addr string, err error) { scrapes <- scrape{addr, err} },
		OnReconcile: func(addrs []string) { reconciled <- addrs },
		Skip:        func(e Endpoint) bool { return strings.HasSuffix(e.Address, ":1") },
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { s.Run(ctx); close(done) }()

	next := func() scrape {
		select {
		case sc := <-scrapes:
			return sc
		case <-time.After(10 * time.Second):
			t.Fatal("no scrape")
		}
		return scrape{}
	}
	got := map[string]error{}
	for range 2 {
		sc := next()
		got[sc.addr] = sc.err
	}
	if got[a.addr()] != nil || got[b.addr()] == nil {
		t.Fatalf("first scrapes: %v", got)
	}
	if _, ok := s.Load(a.addr()); !ok {
		t.Fatal("no load for a")
	}
	if _, ok := s.Load(b.addr()); ok {
		t.Fatal("a load for b, which failed")
	}
	if !strings.Contains(errorCount(s), `endpoint="`+b.addr()+`"} 1`) {
		t.Fatalf("b's failure not counted:\n%s", errorCount(s))
	}

	// b leaves the pool (and a skipped endpoint comes): its load and error series go.
	<-reconciled
	src.set(a.addr(), "10.0.0.1:1")
	for {
		select {
		case addrs := <-reconciled:
			if !slices.Equal(addrs, []string{a.addr()}) {
				continue
			}
		case <-time.After(10 * time.Second):
			t.Fatal("no reconcile")
		}
		break
	}
	if strings.Contains(errorCount(s), b.addr()) {
		t.Fatalf("b's series kept:\n%s", errorCount(s))
	}
	// b comes back, now healthy: a new loop scrapes it at once.
	b.serve(t, "sglang_single.txt", http.StatusOK)
	src.set(a.addr(), b.addr())
	if sc := next(); sc.addr != b.addr() || sc.err != nil {
		t.Fatalf("scrape %+v, want b's, good", sc)
	}
	if l, ok := s.Load(b.addr()); !ok || l.Running != 24 {
		t.Fatalf("b's load %+v %v", l, ok)
	}
	cancel()
	<-done
}

func splitAddr(t *testing.T, addr string) (string, int) {
	t.Helper()
	i := strings.LastIndexByte(addr, ':')
	var port int
	for _, r := range addr[i+1:] {
		port = port*10 + int(r-'0')
	}
	return addr[:i], port
}
