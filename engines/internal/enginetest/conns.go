package enginetest

import (
	"bytes"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"
)

// Conns counts the connections a test server holds open, from its http.Server's
// ConnState hook: a connection is open from StateNew until StateClosed or StateHijacked.
// Make one with ServeCounted.
type Conns struct {
	mu      sync.Mutex
	open    map[net.Conn]http.ConnState
	changed chan struct{} // closed and replaced at every change of a connection's state
}

// ServeCounted starts an httptest server of h whose connections the returned Conns
// counts. The server stops when the test ends.
func ServeCounted(t testing.TB, h http.Handler) (*httptest.Server, *Conns) {
	t.Helper()
	c := &Conns{open: map[net.Conn]http.ConnState{}, changed: make(chan struct{})}
	hs := httptest.NewUnstartedServer(h)
	hs.Config.ConnState = c.track
	hs.Start()
	t.Cleanup(hs.Close)
	return hs, c
}

func (c *Conns) track(conn net.Conn, s http.ConnState) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if s == http.StateClosed || s == http.StateHijacked {
		delete(c.open, conn)
	} else {
		c.open[conn] = s
	}
	close(c.changed)
	c.changed = make(chan struct{})
}

// Count returns the connections open now, and how many of them are idle (between
// requests).
func (c *Conns) Count() (open, idle int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, s := range c.open {
		if s == http.StateIdle {
			idle++
		}
	}
	return len(c.open), idle
}

// WaitFor returns once cond holds for the connections open and idle, checking at every
// change of a connection's state. It fails the test when cond does not hold within 30
// s, a bound on liveness only: a connection's state changes within milliseconds of what
// causes it, even on a loaded machine.
func (c *Conns) WaitFor(t testing.TB, what string, cond func(open, idle int) bool) {
	t.Helper()
	limit := time.NewTimer(30 * time.Second)
	defer limit.Stop()
	for {
		c.mu.Lock()
		changed := c.changed
		c.mu.Unlock()
		open, idle := c.Count()
		if cond(open, idle) {
			return
		}
		select {
		case <-changed:
		case <-limit.C:
			t.Fatalf("%s: still %d connections open (%d idle) after 30 s", what, open, idle)
		}
	}
}

// Burst holds the requests on path until n of them have arrived, so that n requests
// are in flight at once, each on a connection of its own; then each goes on to h, whose
// answer is sent whole once h returns (its flushes are held), so that the client reads
// the end of the body with its last event and can reuse the connection.
func Burst(n int, path string, h http.Handler) http.Handler {
	var mu sync.Mutex
	arrived := 0
	all := make(chan struct{})
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != path {
			h.ServeHTTP(w, r)
			return
		}
		mu.Lock()
		if arrived++; arrived == n {
			close(all)
		}
		mu.Unlock()
		select {
		case <-all:
		case <-r.Context().Done():
			return
		}
		bw := &bufferedWriter{header: http.Header{}, status: http.StatusOK}
		h.ServeHTTP(bw, r)
		for k, v := range bw.header {
			w.Header()[k] = v
		}
		w.WriteHeader(bw.status)
		_, _ = w.Write(bw.body.Bytes())
	})
}

// bufferedWriter keeps an answer until the handler returns; Flush does nothing.
type bufferedWriter struct {
	header http.Header
	status int
	body   bytes.Buffer
	wrote  bool
}

func (w *bufferedWriter) Header() http.Header { return w.header }

func (w *bufferedWriter) WriteHeader(status int) {
	if !w.wrote {
		w.status, w.wrote = status, true
	}
}

func (w *bufferedWriter) Write(b []byte) (int, error) {
	w.wrote = true
	return w.body.Write(b)
}

func (w *bufferedWriter) Flush() {}
