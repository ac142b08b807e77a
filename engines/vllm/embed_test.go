package vllm

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"testing"

	"github.com/turbine-llm/turbine/engines/launcher"
)

// embedServer answers POST /v1/embeddings with status and the fixture file, recording
// the request body.
func embedServer(t *testing.T, status int, fixture string, body *string) *httptest.Server {
	t.Helper()
	answer, err := os.ReadFile(fixture)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		if r.Method != http.MethodPost || r.URL.Path != "/v1/embeddings" {
			t.Errorf("%s %s", r.Method, r.URL.Path)
		}
		*body = string(b)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		_, _ = w.Write(answer)
	}))
	t.Cleanup(srv.Close)
	return srv
}

func TestEngineEmbed(t *testing.T) {
	cases := []struct {
		name     string
		dims     int
		wantBody string
	}{
		{"full size", 0, `{"model":"bge","input":[1,2,3],"encoding_format":"float"}`},
		{"matryoshka", 2, `{"model":"bge","input":[1,2,3],"encoding_format":"float","dimensions":2}`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var body string
			srv := embedServer(t, 200, "testdata/embedding.json", &body)
			e := Connect(srv.URL, EngineOptions{Model: "bge"}).(*Engine)
			v, n, err := e.Embed(context.Background(), "req-1", []uint32{1, 2, 3}, c.dims)
			if err != nil {
				t.Fatal(err)
			}
			if body != c.wantBody || !slices.Equal(v, []float32{0.6, -0.8, 0}) || n != 3 {
				t.Errorf("body %s, vector %v, %d tokens", body, v, n)
			}
		})
	}
}

// A generating vLLM refuses embeddings with a 400, read into an *Error.
func TestEngineEmbedRefused(t *testing.T) {
	var body string
	srv := embedServer(t, 400, "testdata/embedding_error_generate.json", &body)
	_, _, err := Connect(srv.URL, EngineOptions{Model: "bge"}).(*Engine).Embed(context.Background(), "req-1", []uint32{1}, 0)
	var ve *Error
	if !errors.As(err, &ve) || ve.Status != 400 || ve.Message != "The model does not support Embeddings API" {
		t.Fatalf("%v", err)
	}
}

func TestLauncherPooling(t *testing.T) {
	for _, pooling := range []bool{false, true} {
		l, err := NewLauncher(launcher.Spec{ModelPath: "/m", TensorParallelSize: 1, BlockSize: 16, Pooling: pooling})
		if err != nil {
			t.Fatal(err)
		}
		argv, _ := l.Command("127.0.0.1", 8000, "tcp://127.0.0.1:5557")
		i := slices.Index(argv, "--runner")
		if got := i >= 0 && i+1 < len(argv) && argv[i+1] == "pooling"; got != pooling {
			t.Errorf("pooling %v: %v", pooling, argv)
		}
	}
	if _, err := NewLauncher(launcher.Spec{ModelPath: "/m", TensorParallelSize: 1, BlockSize: 16, Pooling: true, Role: launcher.RolePrefill}); err == nil {
		t.Error("a pooling prefill worker was accepted")
	}
}
