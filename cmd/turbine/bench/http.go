package bench

import (
	"net/http"
	"time"
)

// newHTTPClient keeps enough idle connections for the run's concurrency, so that
// requests do not pay a new connection each.
func newHTTPClient(timeout time.Duration, concurrency int) *http.Client {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.MaxIdleConnsPerHost = max(concurrency, 256)
	t.MaxIdleConns = t.MaxIdleConnsPerHost
	return &http.Client{Transport: t, Timeout: timeout}
}
