package sglang

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/turbine-llm/turbine/engines"
	"github.com/turbine-llm/turbine/engines/internal/enginetest"
	"github.com/turbine-llm/turbine/engines/mocker/server"
	"github.com/turbine-llm/turbine/messages"
)

// TestLoraBodies: a request's LoRA adapter is /generate's lora_path (golden bodies in
// testdata/lora_bodies.golden; go test -update rewrites them).
func TestLoraBodies(t *testing.T) {
	enginetest.GoldenBodiesOf(t, "lora_bodies.golden", enginetest.LoraCases(), func(s *messages.SamplingParams) ([]byte, error) {
		r, err := generateRequest("r1", []uint32{1, 2, 3}, s)
		if err != nil {
			return nil, err
		}
		return generateBody(r)
	})
}

// fakeSGLang records each request as "METHOD PATH CONTENT-TYPE BODY" and answers status
// and answer.
func fakeSGLang(t *testing.T, status int, answer string) (*Client, func() []string) {
	t.Helper()
	var mu sync.Mutex
	var lines []string
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		lines = append(lines, fmt.Sprintf("%s %s %s %s", r.Method, r.URL.Path, r.Header.Get("Content-Type"), b))
		mu.Unlock()
		w.WriteHeader(status)
		_, _ = io.WriteString(w, answer)
	}))
	t.Cleanup(hs.Close)
	c, err := New(hs.URL, nil, Options{})
	if err != nil {
		t.Fatal(err)
	}
	return c, func() []string { mu.Lock(); defer mu.Unlock(); return slices.Clone(lines) }
}

// TestLoraRequestBodies: the load and unload requests, against
// testdata/lora_requests.golden (go test -update rewrites it).
func TestLoraRequestBodies(t *testing.T) {
	c, lines := fakeSGLang(t, 200, `{"success":true,"error_message":null,"loaded_adapters":{"sql-lora":"/adapters/sql-lora"}}`)
	ctx := enginetest.Ctx(t)
	if err := c.LoadLora(ctx, "sql-lora", "/adapters/sql-lora"); err != nil {
		t.Fatal(err)
	}
	if err := c.UnloadLora(ctx, "sql-lora"); err != nil {
		t.Fatal(err)
	}
	got := strings.Join(lines(), "\n") + "\n"
	path := filepath.Join("testdata", "lora_requests.golden")
	if *enginetest.UpdateGolden {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if got != string(want) {
		t.Fatalf("requests\n%s\nwant (%s)\n%s", got, path, want)
	}
}

// TestLoraRefusals: SGLang's failed LoRAUpdateOutput (400, or 200 with success false) is
// a refusal of the adapter with its error_message; a missing route and 5xx answers are
// engine errors.
func TestLoraRefusals(t *testing.T) {
	failed := func(msg string) string {
		return fmt.Sprintf(`{"success":false,"error_message":%q,"loaded_adapters":{}}`, msg)
	}
	cases := []struct {
		name        string
		status      int
		answer      string
		wantRefusal bool
		wantText    string
	}{
		{"adapters off", 400, failed("LoRA is not enabled. Please set `--enable-lora` to enable LoRA."), true,
			"LoRA is not enabled. Please set `--enable-lora` to enable LoRA."},
		{"failed with 200", 200, failed("LoRA adapter a is already loaded."), true, "LoRA adapter a is already loaded."},
		{"a validation error", 400, `{"object":"error","message":"lora_name: Field required","type":"Bad Request","param":null,"code":400}`,
			true, "lora_name: Field required"},
		{"no LoRA routes", 404, `{"detail":"Not Found"}`, false, "no LoRA adapter API"},
		{"server failure", 500, "Internal Server Error", false, "engine answered 500"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c, _ := fakeSGLang(t, tc.status, tc.answer)
			ctx := enginetest.Ctx(t)
			for _, err := range []error{c.LoadLora(ctx, "a", "/x"), c.UnloadLora(ctx, "a")} {
				var inv *engines.InvalidRequestError
				refused := errors.As(err, &inv)
				switch {
				case err == nil || refused != tc.wantRefusal:
					t.Fatalf("error %v (refusal %v), want refusal %v", err, refused, tc.wantRefusal)
				case refused && inv.Message != tc.wantText:
					t.Fatalf("refusal %q, want %q", inv.Message, tc.wantText)
				case !refused && !strings.Contains(err.Error(), tc.wantText):
					t.Fatalf("error %q lacks %q", err, tc.wantText)
				}
			}
		})
	}
}

// TestLoraAgainstMockEngine drives the adapter through the mock engine's SGLang dialect:
// loads, requests under each adapter, refusals, an unloaded adapter refused.
func TestLoraAgainstMockEngine(t *testing.T) {
	_, url := enginetest.StartLoraMock(t, server.DialectSGLang, 2)
	e := Connect(url, 16)
	l, ok := e.(engines.LoraLoader)
	if !ok {
		t.Fatalf("%T is no engines.LoraLoader", e)
	}
	ctx := enginetest.Ctx(t)
	dirA, dirB := enginetest.AdapterDir(t, 8), enginetest.AdapterDir(t, 4)
	for name, dir := range map[string]string{"a": dirA, "b": dirB} {
		if err := l.LoadLora(ctx, name, dir); err != nil {
			t.Fatal(err)
		}
	}
	outs := map[string][]uint32{}
	for _, lora := range []string{"", "a", "b"} {
		got, err := enginetest.GenerateIDs(ctx, e, lora)
		if err != nil || len(got) != 8 {
			t.Fatalf("adapter %q: %v %v", lora, got, err)
		}
		outs[lora] = got
	}
	if slices.Equal(outs[""], outs["a"]) || slices.Equal(outs["a"], outs["b"]) || slices.Equal(outs[""], outs["b"]) {
		t.Fatalf("adapters answer alike: %v", outs)
	}
	var inv *engines.InvalidRequestError
	if err := l.LoadLora(ctx, "c", enginetest.AdapterDir(t, 8)); !errors.As(err, &inv) || inv.Status != 400 ||
		!strings.Contains(inv.Message, "Maximum number of loaded LoRA adapters is 2") {
		t.Fatalf("a load past the slots: %v", err)
	}
	if err := l.UnloadLora(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	if _, err := enginetest.GenerateIDs(ctx, e, "a"); !errors.As(err, &inv) || !strings.Contains(inv.Message, "not loaded: a") {
		t.Fatalf("a request with an unloaded adapter: %v", err)
	}
	if err := l.UnloadLora(ctx, "a"); !errors.As(err, &inv) || inv.Status != 400 {
		t.Fatalf("a second unload of a: %v", err)
	}
}
