package server

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/turbine-llm/turbine/engines/mocker/kvtransfer"
)

// TestPrefillClientGone: a prefill leg whose client leaves once the engine finished it,
// before the answer that names its pinned blocks was written, releases the blocks at
// once (reason client_gone), whether the client left before they were pinned or
// between the pin and the answer; nothing is left for the 480 s transfer timeout.
func TestPrefillClientGone(t *testing.T) {
	prompt := promptIDs(40)
	for _, tc := range []struct {
		dialect DialectName
		body    string
	}{
		{DialectVLLM, prefillBody(prompt, false)},
		{DialectVLLM, prefillBody(prompt, true)},
		{DialectTRTLLM, fmt.Sprintf(`{"model":"turbine-mock","prompt":%s,"max_tokens":1,"detokenize":false,`+
			`"disaggregated_params":{"request_type":"context_only"}}`, jsonIDs(prompt))},
		{DialectTRTLLM, fmt.Sprintf(`{"model":"turbine-mock","prompt":%s,"max_tokens":1,"detokenize":false,"stream":true,`+
			`"disaggregated_params":{"request_type":"context_only"}}`, jsonIDs(prompt))},
	} {
		for _, point := range []string{hookPrefillFinished, hookPrefillPinned} {
			name := fmt.Sprintf("%s/stream=%v/%s", tc.dialect, strings.Contains(tc.body, `"stream":true`), point)
			t.Run(name, func(t *testing.T) {
				o := disaggOptions(t, RolePrefill)
				o.Dialect = tc.dialect
				s, err := New(o)
				if err != nil {
					t.Fatal(err)
				}
				reached := make(chan struct{})
				var once sync.Once
				s.testHook = func(ctx context.Context, at string) {
					if at != point {
						return
					}
					once.Do(func() { close(reached) })
					select { // the client leaves now
					case <-ctx.Done():
					case <-time.After(10 * time.Second):
					}
				}
				e := startEngineServer(t, s)
				ctx, cancel := context.WithCancel(context.Background())
				defer cancel()
				done := make(chan string, 1)
				go func() {
					req, _ := http.NewRequestWithContext(ctx, http.MethodPost, e.url+"/v1/completions", strings.NewReader(tc.body))
					req.Header.Set("Content-Type", "application/json")
					resp, err := http.DefaultClient.Do(req)
					if err != nil {
						done <- ""
						return
					}
					b, _ := io.ReadAll(resp.Body)
					resp.Body.Close()
					done <- string(b)
				}()
				select {
				case <-reached:
				case <-time.After(10 * time.Second):
					t.Fatal("the prefill leg did not finish within 10 s")
				}
				cancel()
				if b := <-done; strings.Contains(b, "remote_block_ids") || strings.Contains(b, "encoded_opaque_state") {
					t.Fatalf("the client that left got the answer %s", b)
				}
				waitUntil(t, "the client_gone release", func() bool {
					return s.TransferStats().Released[kvtransfer.ReasonClientGone] == 1
				})
				waitIdle(t, e)
				var m strings.Builder
				s.metrics.WritePrometheus(&m)
				if !strings.Contains(m.String(), `turbine_mocker_kv_released_total{reason="client_gone"} 1`+"\n") {
					t.Fatalf("the metrics lack the client_gone release:\n%s", m.String())
				}
			})
		}
	}
}

// startEngineServer serves s (not started yet) over HTTP until the test ends.
func startEngineServer(t *testing.T, s *Server) engine {
	t.Helper()
	s.Start()
	hs := httptest.NewServer(s.Handler())
	t.Cleanup(func() {
		hs.Close()
		_ = s.Close()
	})
	return engine{s, hs.URL}
}
