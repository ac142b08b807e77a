// Package enginetest holds what the tests of the engine clients (engines/vllm,
// engines/sglang, engines/trtllm) share: the mock engine's real HTTP server in any of its
// dialects, prompts, contexts, fixture files and reading a stream to its end. Only tests
// import it.
package enginetest

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/turbine-llm/turbine/engines/mocker"
	"github.com/turbine-llm/turbine/engines/mocker/server"
	"github.com/turbine-llm/turbine/model"
)

var (
	modelOnce sync.Once
	loaded    *model.Model
	modelErr  error
)

// Model is the builtin cl100k_base tokenizer model, loaded once per test binary.
func Model(t testing.TB) *model.Model {
	t.Helper()
	modelOnce.Do(func() { loaded, modelErr = model.LoadModel("builtin:cl100k_base") })
	if modelErr != nil {
		t.Fatal(modelErr)
	}
	return loaded
}

// MockConfig is the mock engine the client tests run: blocks of 16 tokens, 512 of them,
// a context of 4096 tokens, time running speedup times faster than real time, and the
// generation seed of requests that carry none.
func MockConfig(speedup float64, seed uint64) mocker.Config {
	cfg := mocker.DefaultConfig()
	cfg.BlockSize = 16
	cfg.NumGPUBlocks = 512
	cfg.MaxModelLen = 4096
	cfg.SpeedupRatio = speedup
	cfg.Seed = seed
	return cfg
}

// StartMock starts the mock engine's server with opts (Model defaults to Model(t),
// ServedModelName to "m") behind an httptest server, whose handler is wrap(the server's
// handler) when wrap is not nil. Both stop when the test ends. It returns the server and
// its base URL.
func StartMock(t testing.TB, opts server.Options, wrap func(http.Handler) http.Handler) (*server.Server, string) {
	t.Helper()
	if opts.Model == nil {
		opts.Model = Model(t)
	}
	if opts.ServedModelName == "" {
		opts.ServedModelName = "m"
	}
	srv, err := server.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	srv.Start()
	h := srv.Handler()
	if wrap != nil {
		h = wrap(h)
	}
	hs := httptest.NewServer(h)
	t.Cleanup(func() {
		hs.Close()
		_ = srv.Close()
	})
	return srv, hs.URL
}

// Prompt is n token ids: 500, 501, ...
func Prompt(n int) []uint32 {
	p := make([]uint32, n)
	for i := range p {
		p[i] = uint32(500 + i)
	}
	return p
}

// Ctx is a context that ends after 20 s or with the test.
func Ctx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// ReadFixture returns the contents of testdata/name.
func ReadFixture(t testing.TB, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// Collect reads a stream to its end (io.EOF) and closes it; it returns the chunks and
// the error that ended the stream, nil at io.EOF.
func Collect[C any](recv func() (C, error), closeFn func() error) ([]C, error) {
	defer closeFn()
	var out []C
	for {
		ch, err := recv()
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return out, err
		}
		out = append(out, ch)
	}
}
