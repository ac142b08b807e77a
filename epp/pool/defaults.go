package pool

import "time"

// Defaults of the pool's discovery and scraping (docs/epp.md, "Endpoints and pods"). The
// command's flags take their defaults from here.
const (
	// DefaultMetricsInterval is how often each endpoint's /metrics is scraped
	// (--metrics-interval). The Gateway API Inference Extension's picker refreshes every
	// 50 ms because the scraped gauges are its only view of load; Turbine's router counts
	// the requests it routes itself, so the scrape only corrects for traffic it did not
	// see, and 250 ms keeps a 64-pod pool at 256 scrapes a second.
	DefaultMetricsInterval = 250 * time.Millisecond
	// DefaultScrapeTimeout bounds one GET /metrics. Each endpoint is scraped by its own
	// loop, so a slow endpoint delays only itself.
	DefaultScrapeTimeout = time.Second
	// DefaultStaleAfter is the age past which a Load should no longer be trusted (the
	// Inference Extension's metrics staleness threshold).
	DefaultStaleAfter = 2 * time.Second
	// MetricsPath is where model servers expose Prometheus' text format.
	MetricsPath = "/metrics"
	// MaxMetricsBytes caps the /metrics page read from one endpoint.
	MaxMetricsBytes = 16 << 20
	// MaxTargetPorts is the most targetPorts an InferencePool may list.
	MaxTargetPorts = 8
)

// MetricScrapeErrors counts failed scrapes of one endpoint's /metrics (label endpoint,
// "ip:port"). The series goes away with the endpoint.
const MetricScrapeErrors = "turbine_epp_scrape_errors_total"

// Stale reports whether l, scraped at l.At, is older than maxAge at now.
func (l Load) Stale(now time.Time, maxAge time.Duration) bool {
	return now.Sub(l.At) > maxAge
}
