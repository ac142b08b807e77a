package gateway

import (
	"strings"
	"testing"
	"time"
)

// A request that runs past Config.RequestTimeout is answered 504 (or, streaming, one
// error frame and [DONE]), its stream closed so that the engine request is cancelled, and
// it is counted as an error of kind timeout.
func TestRequestTimeout(t *testing.T) {
	for _, tc := range []struct {
		name, body string
		check      func(t *testing.T, code int, body string)
	}{
		{"non-streaming", `{"model":"tiny","prompt":"hi","max_tokens":8}`, func(t *testing.T, code int, body string) {
			if code != 504 || !strings.Contains(body, `"code":"request_timeout"`) {
				t.Fatalf("status %d, body %s; want 504 request_timeout", code, body)
			}
		}},
		{"streaming", `{"model":"tiny","prompt":"hi","max_tokens":8,"stream":true}`, func(t *testing.T, code int, body string) {
			if code != 200 || strings.Count(body, `"code":"request_timeout"`) != 1 || !strings.HasSuffix(strings.TrimSpace(body), "data: [DONE]") {
				t.Fatalf("status %d, body %s; want one request_timeout frame then [DONE]", code, body)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := newFakeBackend(tokens("Hel"), step{block: true})
			cfg := Config{Now: func() time.Time { return testTime }, NewRequestID: func() string { return "id" },
				RequestTimeout: 20 * time.Millisecond}
			s, err := New(cfg, b, fakeOptions(fakePreprocessor{eos: []uint32{fakeEOS}})...)
			if err != nil {
				t.Fatal(err)
			}
			rr := serve(s, "POST", "/v1/completions", tc.body)
			tc.check(t, rr.Code, rr.Body.String())
			b.checkClosed(t)
			var m strings.Builder
			s.Metrics().WritePrometheus(&m)
			if !strings.Contains(m.String(), `status="504"`) {
				t.Fatalf("no timeout counted in /metrics:\n%s", m.String())
			}
		})
	}
}

func TestRequestTimeoutRejectsNegative(t *testing.T) {
	if _, err := New(Config{RequestTimeout: -time.Second}, newFakeBackend()); err == nil ||
		!strings.Contains(err.Error(), "RequestTimeout") {
		t.Fatalf("negative RequestTimeout: %v", err)
	}
}
