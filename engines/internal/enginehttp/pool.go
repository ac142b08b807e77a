package enginehttp

import (
	"net/http"
	"time"
)

// Bounds of the connection pool of the HTTP client toward one engine (DefaultPool).
const (
	// MaxIdleConnsPerEngine: a worker's steady traffic (a few hundred streams at most,
	// each starting when an earlier one ends) reuses a few dozen connections; a burst
	// above it dials new ones, which to an engine on the same machine takes well under a
	// millisecond.
	MaxIdleConnsPerEngine = 64
	// IdleConnTimeout: a connection left unused this long is closed.
	IdleConnTimeout = 30 * time.Second
)

// Pool bounds the connections an engine client keeps open between requests. Those in
// use are not bounded: a stream holds its connection for as long as it runs.
type Pool struct {
	// MaxIdle is the most idle connections kept for the next requests; one freed while
	// that many are idle is closed. 0: MaxIdleConnsPerEngine.
	MaxIdle int
	// IdleTimeout closes a connection left idle this long. 0: IdleConnTimeout.
	IdleTimeout time.Duration
}

// DefaultPool is the pool of every engine client: MaxIdleConnsPerEngine idle
// connections, each closed after IdleConnTimeout.
func DefaultPool() Pool {
	return Pool{MaxIdle: MaxIdleConnsPerEngine, IdleTimeout: IdleConnTimeout}
}

// NewHTTPClient returns an http.Client with a transport of its own, for one engine,
// pooling connections as p says (a field ≤ 0 takes DefaultPool's). It has no overall
// timeout (streams last as long as generation does; bound calls with their contexts),
// no proxy, and no limit on the connections in use.
func NewHTTPClient(p Pool) *http.Client {
	d := DefaultPool()
	if p.MaxIdle <= 0 {
		p.MaxIdle = d.MaxIdle
	}
	if p.IdleTimeout <= 0 {
		p.IdleTimeout = d.IdleTimeout
	}
	return &http.Client{Transport: &http.Transport{
		MaxIdleConns:        p.MaxIdle,
		MaxIdleConnsPerHost: p.MaxIdle,
		MaxConnsPerHost:     0, // unbounded: each stream in flight holds one
		IdleConnTimeout:     p.IdleTimeout,
	}}
}
