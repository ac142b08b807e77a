package launcher

import (
	"fmt"
	"sync"
	"testing"

	"github.com/turbine-llm/turbine/engines"
	"github.com/turbine-llm/turbine/engines/internal/enginehttp"
	"github.com/turbine-llm/turbine/engines/internal/enginetest"
	"github.com/turbine-llm/turbine/engines/mocker/server"
	"github.com/turbine-llm/turbine/messages"
)

// TestEngineClientsBoundIdleConnections: after a burst of streams twice the idle bound,
// each dialect's engine client keeps at most the bound of connections open to its
// engine; the others are closed as their streams end.
func TestEngineClientsBoundIdleConnections(t *testing.T) {
	bound := enginehttp.MaxIdleConnsPerEngine
	n := 2 * bound
	for _, tc := range []struct {
		dialect string
		server  server.Dialect
		path    string
	}{
		{"", server.DialectVLLM, "/v1/completions"},
		{EngineSGLang, server.DialectSGLang, "/generate"},
		{EngineTRTLLM, server.DialectTRTLLM, "/v1/completions"},
	} {
		t.Run(string(tc.server), func(t *testing.T) {
			cfg := enginetest.MockConfig(1000, 1)
			cfg.NumGPUBlocks = 4 * n
			srv, err := server.New(server.Options{Engine: cfg, Dialect: tc.server, ServedModelName: "m", Model: enginetest.Model(t)})
			if err != nil {
				t.Fatal(err)
			}
			srv.Start()
			t.Cleanup(func() { _ = srv.Close() })
			hs, conns := enginetest.ServeCounted(t, enginetest.Burst(n, tc.path, srv.Handler()))
			e := (&Mocker{Model: "m", BlockSize: 16, Dialect: tc.dialect}).Connect(hs.URL)
			ctx := enginetest.Ctx(t)
			errs := make(chan error, n)
			var wg sync.WaitGroup
			for i := range n {
				wg.Add(1)
				go func() {
					defer wg.Done()
					prompt := enginetest.Prompt(16)
					prompt[0] = uint32(1000 + i)
					errs <- e.Generate(ctx, fmt.Sprintf("r%d", i), prompt, &messages.SamplingParams{MaxTokens: 2, IgnoreEos: true},
						func(engines.Chunk) error { return nil })
				}()
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				if err != nil {
					t.Fatalf("Generate: %v", err)
				}
			}
			conns.WaitFor(t, fmt.Sprintf("after a burst of %d streams", n), func(open, _ int) bool { return open <= bound })
		})
	}
}
