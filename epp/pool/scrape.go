package pool

import (
	"context"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/VictoriaMetrics/metrics"
)

// ScrapeConfig configures a Scraper; zero fields take the defaults (defaults.go).
type ScrapeConfig struct {
	// Interval between two scrapes of one endpoint (--metrics-interval).
	Interval time.Duration
	// Timeout of one GET /metrics.
	Timeout time.Duration
	// Client does the GETs; nil: a client of its own that keeps connections alive.
	Client *http.Client
	// Metrics receives turbine_epp_scrape_errors_total{endpoint}; nil: a set of the
	// Scraper's own (Scraper.Metrics), which the caller registers or writes.
	Metrics *metrics.Set
	// Skip names endpoints not to scrape (for instance Turbine workers, whose load the
	// router knows); nil: scrape all.
	Skip func(Endpoint) bool
	// Now stamps each Load; nil: time.Now.
	Now func() time.Time
	// OnScrape, when set, is called after each scrape of address with its error (nil on
	// success), from the scraping goroutine.
	OnScrape func(address string, err error)
	// OnReconcile, when set, is called by Run each time it has matched its loops to the
	// source's endpoints, with the addresses it scrapes, sorted.
	OnReconcile func(addresses []string)
}

// Scraper is a Source that adds to another Source's endpoints the load their model
// servers report on /metrics (ParseLoad). Run scrapes each endpoint every Interval on a
// loop of its own; a failed scrape keeps the last Load, whose At then ages (see
// Load.Stale), and counts in turbine_epp_scrape_errors_total. An endpoint that leaves the
// source is forgotten, its error series removed.
//
// The wrapped source is authoritative for the endpoints; the loads are derived and at
// most Interval+Timeout old while scrapes succeed.
type Scraper struct {
	src Source
	cfg ScrapeConfig

	mu    sync.RWMutex
	loads map[string]Load // address → last good scrape
}

var _ Source = (*Scraper)(nil)

// NewScraper wraps src; call Run to start scraping.
func NewScraper(src Source, cfg ScrapeConfig) *Scraper {
	if cfg.Interval <= 0 {
		cfg.Interval = DefaultMetricsInterval
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = DefaultScrapeTimeout
	}
	if cfg.Client == nil {
		tr := http.DefaultTransport.(*http.Transport).Clone()
		tr.MaxIdleConnsPerHost = 2
		cfg.Client = &http.Client{Transport: tr}
	}
	if cfg.Metrics == nil {
		cfg.Metrics = metrics.NewSet()
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Scraper{src: src, cfg: cfg, loads: map[string]Load{}}
}

// Endpoints returns the wrapped source's.
func (s *Scraper) Endpoints() []Endpoint { return s.src.Endpoints() }

// Ready returns the wrapped source's.
func (s *Scraper) Ready() bool { return s.src.Ready() }

// Load returns the last load scraped from address, else the wrapped source's.
func (s *Scraper) Load(address string) (Load, bool) {
	s.mu.RLock()
	l, ok := s.loads[address]
	s.mu.RUnlock()
	if ok {
		return l, true
	}
	return s.src.Load(address)
}

// Changed returns the wrapped source's change channel (see Kubernetes.Changed); nil,
// which never fires, when it has none.
func (s *Scraper) Changed() <-chan struct{} {
	if c, ok := s.src.(interface{ Changed() <-chan struct{} }); ok {
		return c.Changed()
	}
	return nil
}

// Metrics is the set holding turbine_epp_scrape_errors_total.
func (s *Scraper) Metrics() *metrics.Set { return s.cfg.Metrics }

// Run scrapes until ctx ends, following the source's endpoints (on each Interval and on
// each change the source signals), and returns when every loop has stopped.
func (s *Scraper) Run(ctx context.Context) {
	var wg sync.WaitGroup
	workers := map[string]context.CancelFunc{}
	tick := time.NewTicker(s.cfg.Interval)
	defer tick.Stop()
	for {
		changed := s.Changed()
		want := map[string]bool{}
		for _, e := range s.src.Endpoints() {
			if s.cfg.Skip == nil || !s.cfg.Skip(e) {
				want[e.Address] = true
			}
		}
		for addr := range want {
			if _, ok := workers[addr]; !ok {
				wctx, cancel := context.WithCancel(ctx)
				workers[addr] = cancel
				wg.Go(func() { s.loop(wctx, addr) })
			}
		}
		for addr, cancel := range workers {
			if !want[addr] {
				cancel()
				delete(workers, addr)
				s.forget(addr)
			}
		}
		if s.cfg.OnReconcile != nil {
			s.cfg.OnReconcile(slices.Sorted(maps.Keys(workers)))
		}
		select {
		case <-ctx.Done():
			for _, cancel := range workers {
				cancel()
			}
			wg.Wait()
			return
		case <-tick.C:
		case <-changed:
		}
	}
}

// loop scrapes address now and then every Interval until ctx ends.
func (s *Scraper) loop(ctx context.Context, address string) {
	t := time.NewTicker(s.cfg.Interval)
	defer t.Stop()
	for {
		err := s.scrape(ctx, address)
		if ctx.Err() != nil {
			return
		}
		if s.cfg.OnScrape != nil {
			s.cfg.OnScrape(address, err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Scrape fetches address's /metrics once and records the result: the Load on success,
// one more scrape error otherwise. Errors: transport, a status other than 200, or
// ParseLoad's.
func (s *Scraper) Scrape(ctx context.Context, address string) error {
	return s.scrape(ctx, address)
}

func (s *Scraper) scrape(ctx context.Context, address string) error {
	l, err := s.fetch(ctx, address)
	s.mu.Lock()
	defer s.mu.Unlock()
	if ctx.Err() != nil { // forgotten meanwhile: record nothing
		return ctx.Err()
	}
	if err != nil {
		s.cfg.Metrics.GetOrCreateCounter(errorSeries(address)).Inc()
		return err
	}
	s.loads[address] = l
	return nil
}

func (s *Scraper) fetch(ctx context.Context, address string) (Load, error) {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+address+MetricsPath, nil)
	if err != nil {
		return Load{}, fmt.Errorf("pool: scrape %s: %w", address, err)
	}
	req.Header.Set("Accept", "text/plain;version=0.0.4")
	resp, err := s.cfg.Client.Do(req)
	if err != nil {
		return Load{}, fmt.Errorf("pool: scrape %s: %w", address, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return Load{}, fmt.Errorf("pool: scrape %s: status %d", address, resp.StatusCode)
	}
	l, err := ParseLoad(resp.Body, s.cfg.Now())
	if err != nil {
		return Load{}, fmt.Errorf("pool: scrape %s: %w", address, err)
	}
	return l, nil
}

// forget drops address's load and error series.
func (s *Scraper) forget(address string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.loads, address)
	s.cfg.Metrics.UnregisterMetric(errorSeries(address))
}

func errorSeries(address string) string {
	return MetricScrapeErrors + `{endpoint=` + strconv.Quote(address) + `}`
}
