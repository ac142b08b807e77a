// Package nodehttp is the HTTP port of `turbine node` (--http-host, --http-port;
// docs/metrics.md): probes and metrics of one machine.
//
//	GET /live     200 {"status":"live"} while the process runs
//	GET /health   200 when the boot workers were started and every worker not stopping
//	              has its engine ready, else 503; JSON HealthBody listing the workers
//	GET /metrics  the node's own metrics, then each local engine's /metrics scraped on
//	              request (concurrently, ScrapeTimeout each) with worker="<id>" added
//
// The pure parts are Merge (one page of families out of the node's own and its
// engines'), Health and WorkerState; Server only asks, scrapes and writes. An engine
// whose scrape fails is left out of the page and counted in
// turbine_node_engine_scrape_errors_total{worker}; the page itself never fails for it.
package nodehttp

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/VictoriaMetrics/metrics"
	dto "github.com/prometheus/client_model/go"
	"github.com/rs/zerolog"
	"github.com/turbine-llm/turbine/internal/promlabel"
)

// Defaults.
const (
	// DefaultScrapeTimeout bounds one engine's /metrics scrape.
	DefaultScrapeTimeout = 2 * time.Second
	// DefaultStatusTimeout bounds the node agent's answer to /health and /metrics.
	DefaultStatusTimeout = 2 * time.Second
	// MaxScrapeBytes is the largest engine page read; a longer one fails its scrape.
	MaxScrapeBytes = 32 << 20
)

// The node's own families about its engines' scrapes (docs/metrics.md).
const (
	MetricScrapeErrors = "turbine_node_engine_scrape_errors_total"    // counter {worker}
	MetricEngineUp     = "turbine_node_engine_up"                     // gauge {worker}: 1 when the last scrape succeeded
	MetricConflicts    = "turbine_node_engine_family_conflicts_total" // counter {worker}: families left out for a type clash
)

// Config configures a Server.
type Config struct {
	// Node is the node's id (turbine node --node-id), shown on /health.
	Node  string
	Board *Board
	// Own writes the node's own metrics in the text format 0.0.4 (the process's
	// VictoriaMetrics sets); nil: none besides the scrape families above.
	Own func(io.Writer)
	// MetricsPath returns the path of the Prometheus exposition of an engine by name
	// (the card's engine); nil: "/metrics" for every engine.
	MetricsPath func(engine string) string
	// Client scrapes the engines (default: a client without proxy).
	Client        *http.Client
	ScrapeTimeout time.Duration // default DefaultScrapeTimeout
	StatusTimeout time.Duration // default DefaultStatusTimeout
	Logger        zerolog.Logger
}

// Server serves /live, /health and /metrics.
type Server struct {
	cfg Config
	mux *http.ServeMux
	set *metrics.Set // the scrape families

	mu     sync.Mutex
	series map[string]bool // workers with scrape series in set
}

// New returns a server for cfg (cfg.Board must be set).
func New(cfg Config) *Server {
	if cfg.ScrapeTimeout <= 0 {
		cfg.ScrapeTimeout = DefaultScrapeTimeout
	}
	if cfg.StatusTimeout <= 0 {
		cfg.StatusTimeout = DefaultStatusTimeout
	}
	if cfg.MetricsPath == nil {
		cfg.MetricsPath = func(string) string { return "/metrics" }
	}
	if cfg.Client == nil {
		cfg.Client = &http.Client{Transport: &http.Transport{Proxy: nil, MaxIdleConnsPerHost: 2, IdleConnTimeout: time.Minute}}
	}
	s := &Server{cfg: cfg, mux: http.NewServeMux(), set: metrics.NewSet(), series: map[string]bool{}}
	s.mux.HandleFunc("GET /live", s.handleLive)
	s.mux.HandleFunc("GET /health", s.handleHealth)
	s.mux.HandleFunc("GET /metrics", s.handleMetrics)
	return s
}

func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.mux.ServeHTTP(w, r) }

func (s *Server) handleLive(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, map[string]string{"status": "live"})
}

func (s *Server) handleHealth(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), s.cfg.StatusTimeout)
	defer cancel()
	booted, workers, err := s.cfg.Board.Workers(ctx)
	code, body := Health(s.cfg.Node, booted, workers)
	if err != nil {
		code, body.Error = http.StatusServiceUnavailable, err.Error()
		if body.Status == StatusHealthy {
			body.Status = StatusUnhealthy
		}
	}
	writeJSON(w, code, body)
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	b, _ := json.Marshal(v) // plain structs and maps: cannot fail
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_, _ = w.Write(append(b, '\n'))
}

func (s *Server) handleMetrics(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), s.cfg.StatusTimeout)
	_, workers, err := s.cfg.Board.Workers(ctx)
	cancel()
	if err != nil {
		s.cfg.Logger.Debug().Err(err).Msg("/metrics: no workers to scrape")
	}
	scrapes := s.scrape(r.Context(), workers)
	var own bytes.Buffer
	s.set.WritePrometheus(&own)
	if s.cfg.Own != nil {
		s.cfg.Own(&own)
	}
	w.Header().Set("Content-Type", ContentType)
	ownFams, err := Parse(bytes.NewReader(own.Bytes()))
	if err != nil {
		// Not expected (the process writes its own page): serve it as it is, then the
		// engines' families.
		s.cfg.Logger.Warn().Err(err).Msg("/metrics: the node's own metrics do not parse; served unmerged")
		_, _ = w.Write(own.Bytes())
		ownFams = nil
		own.Reset()
	}
	page := Merge(ownFams, scrapes)
	// Clashes show from the next page on (this one's own families are written).
	for worker, n := range page.Conflicts {
		s.set.GetOrCreateCounter(series(MetricConflicts, worker)).Add(n)
	}
	if err := Write(w, page.Families); err != nil {
		s.cfg.Logger.Debug().Err(err).Msg("/metrics: write failed")
	}
}

// scrape scrapes the engines of workers that have one and are not stopping,
// concurrently, and updates the scrape families; it returns the successful scrapes in
// the order of workers.
func (s *Server) scrape(ctx context.Context, workers []Worker) []Scrape {
	results := make([]*Scrape, len(workers))
	var wg sync.WaitGroup
	for i, w := range workers {
		if w.EngineURL == "" || w.State == StateStopping {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			fams, err := s.scrapeOne(ctx, w)
			if err != nil {
				s.set.GetOrCreateCounter(series(MetricScrapeErrors, w.ID)).Inc()
				s.set.GetOrCreateGauge(series(MetricEngineUp, w.ID), nil).Set(0)
				s.cfg.Logger.Debug().Err(err).Str("worker", w.ID).Msg("engine metrics scrape failed")
				return
			}
			s.set.GetOrCreateCounter(series(MetricScrapeErrors, w.ID))
			s.set.GetOrCreateGauge(series(MetricEngineUp, w.ID), nil).Set(1)
			results[i] = &Scrape{Worker: w.ID, Families: fams}
		}()
	}
	wg.Wait()
	s.forget(workers)
	var out []Scrape
	for _, r := range results {
		if r != nil {
			out = append(out, *r)
		}
	}
	return out
}

func (s *Server) scrapeOne(ctx context.Context, w Worker) (map[string]*dto.MetricFamily, error) {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.ScrapeTimeout)
	defer cancel()
	url := strings.TrimSuffix(w.EngineURL, "/") + s.cfg.MetricsPath(w.Engine)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", ContentType)
	resp, err := s.cfg.Client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, MaxScrapeBytes+1))
	if err != nil {
		return nil, fmt.Errorf("GET %s: %w", url, err)
	}
	if len(body) > MaxScrapeBytes {
		return nil, fmt.Errorf("GET %s: page larger than %d bytes", url, MaxScrapeBytes)
	}
	fams, err := Parse(bytes.NewReader(body))
	if err != nil {
		return nil, fmt.Errorf("GET %s: %w", url, err)
	}
	return fams, nil
}

// forget drops the scrape series of workers no longer listed.
func (s *Server) forget(workers []Worker) {
	s.mu.Lock()
	defer s.mu.Unlock()
	listed := make(map[string]bool, len(workers))
	for _, w := range workers {
		listed[w.ID] = true
		s.series[w.ID] = true
	}
	for id := range s.series {
		if !listed[id] {
			for _, f := range []string{MetricScrapeErrors, MetricEngineUp, MetricConflicts} {
				s.set.UnregisterMetric(series(f, id))
			}
			delete(s.series, id)
		}
	}
}

// series is `family{worker="<id>"}`.
func series(family, worker string) string {
	return family + `{` + WorkerLabel + `="` + promlabel.Escape(worker) + `"}`
}
