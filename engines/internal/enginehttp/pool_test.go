package enginehttp

import (
	"fmt"
	"io"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/turbine-llm/turbine/engines/internal/enginetest"
)

// TestNewHTTPClientPool: after a burst of n streams, each on a connection of its own,
// the client keeps the pool's MaxIdle connections open to the engine and closes the
// others; IdleTimeout then closes those it kept.
func TestNewHTTPClientPool(t *testing.T) {
	const n, maxIdle = 16, 4
	for _, tc := range []struct {
		name     string
		idle     time.Duration
		wantOpen int
	}{
		{"bounded", time.Hour, maxIdle},
		{"idle timeout", 20 * time.Millisecond, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "text/event-stream")
				_, _ = io.WriteString(w, "data: {\"tok\":1}\n\ndata: [DONE]\n\n")
			})
			hs, conns := enginetest.ServeCounted(t, enginetest.Burst(n, "/stream", h))
			c, err := New("eng", hs.URL, NewHTTPClient(Pool{MaxIdle: maxIdle, IdleTimeout: tc.idle}), nil)
			if err != nil {
				t.Fatal(err)
			}
			ctx := enginetest.Ctx(t)
			errs := make(chan error, n)
			var wg sync.WaitGroup
			for range n {
				wg.Add(1)
				go func() {
					defer wg.Done()
					errs <- readStream(c.Stream(ctx, http.MethodPost, "/stream", []byte(`{}`), nil, 1<<10))
				}()
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				if err != nil {
					t.Fatal(err)
				}
			}
			conns.WaitFor(t, fmt.Sprintf("after a burst of %d streams", n), func(open, idle int) bool {
				return open == tc.wantOpen && idle == open
			})
		})
	}
}

// readStream reads a stream up to its [DONE] event and closes it.
func readStream(st *Stream, err error) error {
	if err != nil {
		return err
	}
	defer st.Close()
	for {
		data, err := st.Event()
		if err != nil {
			return err
		}
		if string(data) == "[DONE]" {
			return nil
		}
	}
}

// TestDefaultPool: a client New makes without one, and NewHTTPClient of a zero Pool,
// have the default pool, no limit on the connections in use, and no proxy.
func TestDefaultPool(t *testing.T) {
	dflt, _ := New("eng", "http://127.0.0.1:1", nil, nil)
	for name, hc := range map[string]*http.Client{"New(nil)": dflt.hc, "NewHTTPClient(Pool{})": NewHTTPClient(Pool{})} {
		tr, ok := hc.Transport.(*http.Transport)
		if !ok || tr == http.DefaultTransport {
			t.Fatalf("%s: want a transport of its own", name)
		}
		if tr.MaxIdleConnsPerHost != MaxIdleConnsPerEngine || tr.MaxIdleConns != MaxIdleConnsPerEngine ||
			tr.IdleConnTimeout != IdleConnTimeout || tr.MaxConnsPerHost != 0 || tr.Proxy != nil || hc.Timeout != 0 {
			t.Fatalf("%s: idle %d (%d per host), idle timeout %v, in use %d, proxy %v, timeout %v; want %d, %v, unbounded, none, none",
				name, tr.MaxIdleConns, tr.MaxIdleConnsPerHost, tr.IdleConnTimeout, tr.MaxConnsPerHost, tr.Proxy != nil, hc.Timeout,
				MaxIdleConnsPerEngine, IdleConnTimeout)
		}
	}
}
