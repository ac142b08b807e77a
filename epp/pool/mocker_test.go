package pool

import (
	"bufio"
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/VictoriaMetrics/metrics"

	"github.com/turbine-llm/turbine/engines/mocker"
	mockserver "github.com/turbine-llm/turbine/engines/mocker/server"
	"github.com/turbine-llm/turbine/model"
)

// Turbine's mock engine, in each dialect whose /metrics the picker reads, is scraped
// idle and then while a request runs.
func TestScrapeMockEngine(t *testing.T) {
	metrics.ExposeMetadata(true) // as the mock engine's process does
	t.Cleanup(func() { metrics.ExposeMetadata(false) })
	m, err := model.LoadModel("builtin:cl100k_base")
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range []mockserver.DialectName{mockserver.DialectVLLM, mockserver.DialectSGLang} {
		t.Run(string(d), func(t *testing.T) {
			cfg := mocker.DefaultConfig()
			cfg.BlockSize, cfg.NumGPUBlocks, cfg.MaxModelLen, cfg.Seed = 16, 256, 4096, 1
			s, err := mockserver.New(mockserver.Options{Params: mockserver.Params{Engine: cfg, Dialect: d},
				ServedModelName: "turbine-mock", Model: m})
			if err != nil {
				t.Fatal(err)
			}
			s.Start()
			hs := httptest.NewServer(s.Handler())
			t.Cleanup(func() { hs.Close(); _ = s.Close() })
			addr := strings.TrimPrefix(hs.URL, "http://")
			sc := NewScraper(newListSource(addr), ScrapeConfig{})

			if err := sc.Scrape(context.Background(), addr); err != nil {
				t.Fatalf("idle: %v", err)
			}
			if l, _ := sc.Load(addr); l.Running != 0 || l.Waiting != 0 {
				t.Fatalf("idle load %+v", l)
			}

			// A long streamed request, held open after its first chunk.
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			path, body := "/v1/completions", `{"model":"turbine-mock","prompt":"`+strings.Repeat("hello world ", 200)+`","max_tokens":3000,"ignore_eos":true,"stream":true}`
			if d == mockserver.DialectSGLang {
				path, body = "/generate", `{"text":"`+strings.Repeat("hello world ", 200)+`","sampling_params":{"max_new_tokens":3000,"ignore_eos":true},"stream":true}`
			}
			req, _ := http.NewRequestWithContext(ctx, http.MethodPost, hs.URL+path, strings.NewReader(body))
			req.Header.Set("Content-Type", "application/json")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("status %d", resp.StatusCode)
			}
			if _, err := bufio.NewReader(resp.Body).ReadString('\n'); err != nil {
				t.Fatal(err)
			}
			if err := sc.Scrape(context.Background(), addr); err != nil {
				t.Fatalf("busy: %v", err)
			}
			if l, _ := sc.Load(addr); l.Running+l.Waiting != 1 || l.KVUsage <= 0 {
				t.Fatalf("busy load %+v, want one request holding KV blocks", l)
			}
		})
	}
}
