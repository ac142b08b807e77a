package sglang

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/turbine-llm/turbine/engines/launcher"
)

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
	for _, c := range []struct {
		dims     int
		wantBody string
	}{
		{0, `{"input":[1,2,3],"encoding_format":"float"}`},
		{2, `{"input":[1,2,3],"encoding_format":"float","dimensions":2}`},
	} {
		var body string
		srv := embedServer(t, 200, "testdata/embedding.json", &body)
		e, ok := Connect(srv.URL, 16).(*Engine)
		if !ok {
			t.Fatalf("Connect: %T", Connect(srv.URL, 16))
		}
		v, n, err := e.Embed(context.Background(), "req-1", []uint32{1, 2, 3}, c.dims)
		if err != nil {
			t.Fatal(err)
		}
		if body != c.wantBody || !slices.Equal(v, []float32{0.6, -0.8, 0}) || n != 3 {
			t.Errorf("dims %d: body %s, vector %v, %d tokens", c.dims, body, v, n)
		}
	}
}

// SGLang's OpenAI routes answer errors as an ErrorResponse at the top level.
func TestEngineEmbedRefused(t *testing.T) {
	var body string
	srv := embedServer(t, 400, "testdata/embedding_error.json", &body)
	_, _, err := Connect(srv.URL, 16).(*Engine).Embed(context.Background(), "req-1", []uint32{1}, 2)
	var se *Error
	if !errors.As(err, &se) || se.Status != 400 || !strings.Contains(se.Message, "does not support matryoshka") {
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
		if got := slices.Contains(argv, "--is-embedding"); got != pooling {
			t.Errorf("pooling %v: %v", pooling, argv)
		}
	}
}
