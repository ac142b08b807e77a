package server

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

func TestDialectRegistry(t *testing.T) {
	if _, err := newDialectRegistry(vllmDialect{}, sglangDialect{}, vllmDialect{}); err == nil || !strings.Contains(err.Error(), `"vllm" registered twice`) {
		t.Fatalf("a dialect registered twice: %v", err)
	}
	if got := DialectChoices(); got != "vllm, sglang or trtllm" {
		t.Fatalf("choices %q", got)
	}
	if d, err := ParseDialect("sglang"); err != nil || d != DialectSGLang {
		t.Fatalf("ParseDialect(sglang) = %q, %v", d, err)
	}
}

// TestEveryDialectServes: a server in each registered dialect starts and answers its
// health check.
func TestEveryDialectServes(t *testing.T) {
	for _, name := range Dialects {
		t.Run(string(name), func(t *testing.T) {
			o := testOptions(t)
			o.Dialect = name
			s, err := New(o)
			if err != nil {
				t.Fatal(err)
			}
			s.Start()
			t.Cleanup(func() { _ = s.Close() })
			hs := httptest.NewServer(s.Handler())
			defer hs.Close()
			resp, err := http.Get(hs.URL + "/health")
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("GET /health: %d", resp.StatusCode)
			}
		})
	}
}
