package gateway

import (
	"bytes"
	"context"
	"flag"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

var rewrite = flag.Bool("rewrite", false, "rewrite the golden files under testdata/")

// testTime is the fixed clock of test servers (created = 1767323045).
var testTime = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

func newTestServer(t *testing.T, b Backend) *Server {
	t.Helper()
	cfg := Config{
		Now:          func() time.Time { return testTime },
		NewRequestID: func() string { return "generated-id" },
	}
	s, err := New(cfg, b, fakeOptions(fakePreprocessor{eos: []uint32{fakeEOS}})...)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// serve runs one request through h in-process with request id "req-1", from a loopback
// client.
func serve(h http.Handler, method, path, body string) *httptest.ResponseRecorder {
	return serveCtx(context.Background(), h, method, path, body)
}

func serveCtx(ctx context.Context, h http.Handler, method, path, body string) *httptest.ResponseRecorder {
	req := httptest.NewRequestWithContext(ctx, method, path, strings.NewReader(body))
	req.RemoteAddr = "127.0.0.1:1234" // a client on this machine (the admin routes answer it)
	req.Host = "127.0.0.1:8000"       // … naming the server by a loopback address
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Request-Id", "req-1")
	rr := httptest.NewRecorder()
	h.ServeHTTP(rr, req)
	return rr
}

// checkGolden compares got with testdata/<name>, rewriting it under -rewrite.
func checkGolden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *rewrite {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run with -rewrite to create it)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s differs from the golden file (run with -rewrite after checking):\n--- got\n%s\n--- want\n%s", path, got, want)
	}
}

func newRecorder() *httptest.ResponseRecorder { return httptest.NewRecorder() }
