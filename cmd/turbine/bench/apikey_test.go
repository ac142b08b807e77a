package bench

import (
	"bytes"
	"context"
	"errors"
	"github.com/turbine-llm/turbine/cmd/turbine/internal/serveproc"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/turbine-llm/turbine/bench"
)

// unsetEnv removes name from the environment for the test (restored after it).
func unsetEnv(t *testing.T, name string) {
	t.Helper()
	t.Setenv(name, "") // registers the restore
	if err := os.Unsetenv(name); err != nil {
		t.Fatal(err)
	}
}

// authServer answers like completions, but only requests carrying "Authorization: Bearer
// <key>" when key is not empty (401 with OpenAI's error body otherwise, as serve
// --api-key does). It records the Authorization headers it saw.
type authServer struct {
	key  string
	next http.Handler
	mu   sync.Mutex
	seen []string
}

func (a *authServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	auth := r.Header.Get("Authorization")
	a.mu.Lock()
	a.seen = append(a.seen, auth)
	a.mu.Unlock()
	if a.key != "" && auth != "Bearer "+a.key {
		w.Header().Set("WWW-Authenticate", "Bearer")
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusUnauthorized)
		_, _ = w.Write([]byte(`{"error":{"message":"Incorrect API key provided.","type":"invalid_request_error","param":null,"code":"invalid_api_key"}}`))
		return
	}
	a.next.ServeHTTP(w, r)
}

// TestRunAPIKey: the key sent comes from --api-key, else TURBINE_API_KEY's first, else
// OPENAI_API_KEY; --api-key ” sends none.
func TestRunAPIKey(t *testing.T) {
	const unset = "\x00unset"
	for _, tc := range []struct {
		name           string
		openai, turbin string // OPENAI_API_KEY, TURBINE_API_KEY (unset: absent)
		args           []string
		want           string // Authorization header sent; "" none
	}{
		{"none", unset, unset, nil, ""},
		{"OPENAI_API_KEY", "sk-openai", unset, nil, "Bearer sk-openai"},
		{"flag wins over OPENAI_API_KEY", "sk-openai", unset, []string{"--api-key", "sk-flag"}, "Bearer sk-flag"},
		{"TURBINE_API_KEY wins over OPENAI_API_KEY", "sk-openai", "sk-t", nil, "Bearer sk-t"},
		{"first key of TURBINE_API_KEY", unset, " sk-t1 ,sk-t2", nil, "Bearer sk-t1"},
		{"flag wins over TURBINE_API_KEY", "sk-openai", "sk-t", []string{"--api-key", "sk-flag"}, "Bearer sk-flag"},
		{"flag used whole", unset, unset, []string{"--api-key", "sk-a,b"}, "Bearer sk-a,b"},
		{"empty flag sends none", "sk-openai", "sk-t", []string{"--api-key", ""}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for name, v := range map[string]string{"OPENAI_API_KEY": tc.openai, "TURBINE_API_KEY": tc.turbin} {
				if v == unset {
					unsetEnv(t, name)
				} else {
					t.Setenv(name, v)
				}
			}
			a := &authServer{next: completions(t)}
			srv := httptest.NewServer(a)
			defer srv.Close()
			dir := t.TempDir()
			var stdout, stderr bytes.Buffer
			args := append([]string{"--url", srv.URL, "--model", "m", "--isl", "20", "--osl", "2", "--requests", "2",
				"--concurrency", "1", "--progress-interval", "0", "--out", dir}, tc.args...)
			if err := Run(context.Background(), args, &stdout, &stderr); err != nil {
				t.Fatalf("%v\n%s", err, stderr.String())
			}
			if len(a.seen) != 2 || a.seen[0] != tc.want || a.seen[1] != tc.want {
				t.Fatalf("Authorization headers %q, want 2 × %q", a.seen, tc.want)
			}
			if s := readSummary(t, filepath.Join(dir, "summary.json")); s.Succeeded != 2 {
				t.Fatalf("summary %+v: want 2 valid answers", s)
			}
		})
	}
}

// TestRunUnauthorized: a server that refuses the key fails every request with kind
// unauthorized, and the run says why on stderr.
func TestRunUnauthorized(t *testing.T) {
	unsetEnv(t, "TURBINE_API_KEY")
	unsetEnv(t, "OPENAI_API_KEY")
	for _, tc := range []struct {
		name string
		args []string
		hint string
	}{
		{"no key", nil, "the server wants an API key and none was sent: give it with --api-key"},
		{"wrong key", []string{"--api-key", "sk-wrong"}, "the server refused the API key sent"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := &authServer{key: "sk-right", next: completions(t)}
			srv := httptest.NewServer(a)
			defer srv.Close()
			dir := t.TempDir()
			var stdout, stderr bytes.Buffer
			args := append([]string{"--url", srv.URL, "--model", "m", "--isl", "20", "--osl", "2", "--requests", "3",
				"--concurrency", "1", "--progress-interval", "0", "--out", dir}, tc.args...)
			if err := Run(context.Background(), args, &stdout, &stderr); !errors.Is(err, ErrNoSuccess) {
				t.Fatalf("Run: %v, want ErrNoSuccess\n%s", err, stderr.String())
			}
			s := readSummary(t, filepath.Join(dir, "summary.json"))
			if s.Failed != 3 || s.Errors[bench.ErrUnauthorized] != 3 {
				t.Fatalf("summary %+v: want 3 failures of kind %s", s, bench.ErrUnauthorized)
			}
			want := "bench: 3 of 3 requests answered HTTP 401 (unauthorized): " + tc.hint
			if !strings.Contains(stderr.String(), want) || strings.Contains(stderr.String(), "sk-wrong") {
				t.Fatalf("stderr:\n%s\nwant %q and no key", stderr.String(), want)
			}
			if !strings.Contains(stdout.String(), "3 failed (unauthorized 3)") {
				t.Fatalf("stdout:\n%s", stdout.String())
			}
		})
	}
}

// TestCompareLeavesServeOpen: a comparison's own serves do not inherit TURBINE_API_KEY
// (the fake serve, like the real one, would then refuse the benchmark's requests).
func TestCompareLeavesServeOpen(t *testing.T) {
	t.Setenv("TURBINE_API_KEY", "sk-ambient")
	out := t.TempDir()
	var stdout, stderr bytes.Buffer
	args := fakeServeArgs(t, "ok", out, "--modes", "kv", "--ready-timeout", "10s")
	if err := Run(context.Background(), append([]string{"compare"}, args...), &stdout, &stderr); err != nil {
		t.Fatalf("%v\n%s", err, stderr.String())
	}
	if s := readSummary(t, filepath.Join(out, "kv", "summary.json")); s.Succeeded != 8 || s.Failed != 0 {
		t.Fatalf("summary %+v: want 8 valid requests", s)
	}
}

func TestWithoutEnv(t *testing.T) {
	got := serveproc.WithoutEnv([]string{"A=1", "TURBINE_API_KEY=k", "TURBINE_API_KEY_X=2", "B=x=y", "TURBINE_API_KEY="}, "TURBINE_API_KEY")
	if strings.Join(got, " ") != "A=1 TURBINE_API_KEY_X=2 B=x=y" {
		t.Fatalf("got %q", got)
	}
}
