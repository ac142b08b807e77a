package gateway

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/turbine-llm/turbine/messages"
)

func TestClipName(t *testing.T) {
	long := strings.Repeat("m", maxEchoedNameBytes+44)
	euro := strings.Repeat("€", 100) // 3 bytes each: 300 bytes
	for _, tc := range []struct {
		name, in, want string
	}{
		{"empty", "", ""},
		{"short", "org/model", "org/model"},
		{"at the limit", long[:maxEchoedNameBytes], long[:maxEchoedNameBytes]},
		{"one byte over", long[:maxEchoedNameBytes+1], long[:maxEchoedNameBytes] + "… (257 bytes)"},
		{"long", long, long[:maxEchoedNameBytes] + "… (300 bytes)"},
		// 85 whole runes are 255 bytes: the cut never splits a rune.
		{"multi-byte", euro, euro[:255] + "… (300 bytes)"},
		{"invalid UTF-8 kept short", "a\xffb", "a\xffb"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := clipName(tc.in)
			if got != tc.want {
				t.Errorf("clipName(%d bytes) = %q, want %q", len(tc.in), got, tc.want)
			}
			if utf8.ValidString(tc.in) && !utf8.ValidString(got) {
				t.Errorf("clipName(%d bytes) = %q is not valid UTF-8", len(tc.in), got)
			}
		})
	}
}

// recentBackend remembers every model as served a moment ago (RecentModels).
type recentBackend struct{ *fakeBackend }

func (recentBackend) Recent(string) bool { return true }

// A request-supplied model name is echoed at most maxEchoedNameBytes long, in the
// answer and in the log line, and never becomes a metric label.
func TestLongModelNameIsClipped(t *testing.T) {
	huge := strings.Repeat("x", 1<<20)
	const bound = 2048 // far above a clipped name, far below the name
	for _, tc := range []struct {
		name         string
		backend      func() Backend
		method, path string
		body         string
		code         int
	}{
		{"chat", func() Backend { return newFakeBackend() }, "POST", chatPath, `{"model":"` + huge + `",` + hiChat + `}`, 404},
		{"completions", func() Backend { return newFakeBackend() }, "POST", compPath, `{"model":"` + huge + `","prompt":"hi"}`, 404},
		{"models/{id}", func() Backend { return newFakeBackend() }, "GET", "/v1/models/" + huge, "", 404},
		{"recently served", func() Backend { return recentBackend{newFakeBackend()} }, "POST", compPath, `{"model":"` + huge + `","prompt":"hi"}`, 503},
		{"models unreachable", func() Backend {
			b := newFakeBackend()
			b.modelsErr = errors.New("catalog unreachable")
			return b
		}, "POST", compPath, `{"model":"` + huge + `","prompt":"hi"}`, 502},
		{"admin set", func() Backend { return &fakeAdmin{fakeBackend: newFakeBackend()} }, "POST", "/admin/busy_thresholds", `{"model":"` + huge + `","kv_usage":0.5}`, 404},
		{"admin get", func() Backend { return &fakeAdmin{fakeBackend: newFakeBackend()} }, "GET", "/admin/busy_thresholds?model=" + huge, "", 404},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var log bytes.Buffer
			s := newKeyedServer(t, tc.backend(), &log)
			req := httptest.NewRequest(tc.method, tc.path, strings.NewReader(tc.body))
			req.RemoteAddr, req.Host = "127.0.0.1:1234", "127.0.0.1:8000"
			rr := httptest.NewRecorder()
			s.ServeHTTP(rr, req)
			if rr.Code != tc.code {
				t.Fatalf("%d %.300s, want %d", rr.Code, rr.Body.String(), tc.code)
			}
			if n := rr.Body.Len(); n > bound {
				t.Errorf("the answer has %d bytes: the model name is echoed whole", n)
			}
			if !strings.Contains(rr.Body.String(), "… (1048576 bytes)") {
				t.Errorf("answer %.400s: want the clipped name with its length", rr.Body.String())
			}
			if n := log.Len(); n > bound {
				t.Errorf("the log has %d bytes: the model name is logged whole", n)
			}
			var m strings.Builder
			s.Metrics().WritePrometheus(&m)
			if strings.Contains(m.String(), "xxxxxxxx") {
				t.Errorf("the unknown model name became a metric label")
			}
		})
	}
}

// The message of an unknown model keeps OpenAI's wording.
func TestModelNotFoundMessage(t *testing.T) {
	rr := serve(newTestServer(t, newFakeBackend()), http.MethodPost, compPath, `{"model":"nope","prompt":"hi"}`)
	want := `{"error":{"message":"The model ` + "`nope`" + ` does not exist.","type":"invalid_request_error","param":"model","code":"model_not_found"}}` + "\n"
	if rr.Code != 404 || rr.Body.String() != want {
		t.Errorf("got %d %s, want 404 %s", rr.Code, rr.Body.String(), want)
	}
}

// Paths and methods that routing errors repeat are clipped too.
func TestLongPathAndMethodAreClipped(t *testing.T) {
	s := newTestServer(t, &fakeAdmin{fakeBackend: newFakeBackend()})
	long := strings.Repeat("p", 100_000)
	for _, tc := range []struct {
		name, method, path string
		code               int
	}{
		{"unknown route", "GET", "/" + long, 404},
		{"unknown route and method", strings.Repeat("M", 100_000), "/" + long, 404},
		{"method not allowed", strings.Repeat("M", 100_000), "/v1/models", 405},
		{"admin method not allowed", strings.Repeat("M", 100_000), "/admin/busy_thresholds", 405},
		{"long model path, method not allowed", "POST", "/v1/models/" + long, 405},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rr := serve(s, tc.method, tc.path, "")
			if rr.Code != tc.code || rr.Body.Len() > 2048 || !strings.Contains(rr.Body.String(), "… (1000") {
				t.Errorf("%d, %d bytes: %.300s; want %d with the clipped name", rr.Code, rr.Body.Len(), rr.Body.String(), tc.code)
			}
		})
	}
}

// lateCatalog lists no model, as a Catalog grain just moved to another member does
// until the workers register with it again, but remembers "tiny" (RecentCards).
type lateCatalog struct{ *fakeBackend }

func (b lateCatalog) Models(context.Context) ([]*messages.ModelCard, error) { return nil, nil }
func (b lateCatalog) Recent(name string) bool                               { return name == "tiny" }
func (b lateCatalog) RecentCard(name string) *messages.ModelCard {
	if name == "tiny" {
		return b.cards[0]
	}
	return nil
}

// A model the catalog listed a moment ago and does not now is served with its recent
// card (the router decides), not refused with 503; another model is still unknown.
func TestRecentCardServes(t *testing.T) {
	b := lateCatalog{newFakeBackend(finish("Hello", "stop"))}
	s := newTestServer(t, b)
	rr := serve(s, "POST", compPath, `{"model":"tiny","prompt":"hi"}`)
	if rr.Code != 200 || len(b.requests) != 1 || b.requests[0].Model != "tiny" {
		t.Fatalf("recent model: %d %s, %d requests generated", rr.Code, rr.Body.String(), len(b.requests))
	}
	if rr := serve(s, "POST", compPath, `{"model":"other","prompt":"hi"}`); rr.Code != 404 {
		t.Errorf("unknown model: %d %s", rr.Code, rr.Body.String())
	}
}
