package gateway

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"
)

// Keys of the authenticated test servers.
const (
	testKeyOne = "sk-test-one"
	testKeyTwo = "sk-test-two"
)

// newKeyedServer is newTestServer with Config.APIKeys set to keys, logging into log.
func newKeyedServer(t *testing.T, b Backend, log *bytes.Buffer, keys ...string) *Server {
	t.Helper()
	cfg := Config{
		Now:          func() time.Time { return testTime },
		NewRequestID: func() string { return "generated-id" },
		APIKeys:      keys,
		Logger:       zerolog.New(log),
	}
	s, err := New(cfg, b, fakeOptions(fakePreprocessor{eos: []uint32{fakeEOS}})...)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// serveAuth runs one request through h with the given Authorization header ("" sends
// none) and no X-Request-Id.
func serveAuth(h http.Handler, method, path, body, auth string) *httptest.ResponseRecorder {
	req := httptest.NewRequest(method, path, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	rr := httptest.NewRecorder()
	h.ServeHTTP(rr, req)
	return rr
}

func TestAPIKeyAuthentication(t *testing.T) {
	const (
		right  = "Bearer " + testKeyOne
		second = "Bearer " + testKeyTwo
		chat   = `{"model":"tiny","messages":[{"role":"user","content":"hi"}]}`
		update = `{"model":"tiny","kv_usage":0.5}`
	)
	both := []string{testKeyOne, testKeyTwo}
	for _, tc := range []struct {
		name               string
		keys               []string
		method, path, body string
		auth               string
		code               int
	}{
		// No keys configured: everything open.
		{"open models", nil, "GET", "/v1/models", "", "", 200},
		{"open chat", nil, "POST", chatPath, chat, "", 200},
		// The admin routes answer loopback clients only (httptest's RemoteAddr is not);
		// adminauth_test.go has the admin cases.
		{"open admin from a remote client", nil, "POST", "/admin/busy_thresholds", update, "", 403},
		{"open ignores a header", nil, "GET", "/v1/models", "", "Bearer whatever", 200},

		// Keys configured: /v1/ and /admin/ need one.
		{"right key", both, "GET", "/v1/models", "", right, 200},
		{"second of several keys", both, "GET", "/v1/models", "", second, 200},
		{"one key configured", []string{testKeyTwo}, "GET", "/v1/models", "", second, 200},
		{"key of another server", []string{testKeyTwo}, "GET", "/v1/models", "", right, 401},
		{"scheme case does not matter", both, "GET", "/v1/models", "", "bearer " + testKeyOne, 200},
		{"chat with key", both, "POST", chatPath, chat, right, 200},
		{"completions with key", both, "POST", compPath, `{"model":"tiny","prompt":"x"}`, right, 200},
		{"model with key", both, "GET", "/v1/models/tiny", "", right, 200},
		{"wrong key", both, "GET", "/v1/models", "", "Bearer sk-test-three", 401},
		{"key prefix", both, "GET", "/v1/models", "", "Bearer sk-test-on", 401},
		{"key with a suffix", both, "GET", "/v1/models", "", right + "x", 401},
		{"missing header", both, "GET", "/v1/models", "", "", 401},
		{"basic scheme", both, "GET", "/v1/models", "", "Basic c2stdGVzdC1vbmU6", 401},
		{"basic scheme with the key", both, "GET", "/v1/models", "", "Basic " + testKeyOne, 401},
		{"bearer without key", both, "GET", "/v1/models", "", "Bearer", 401},
		{"bearer with blank key", both, "GET", "/v1/models", "", "Bearer   ", 401},
		{"key without scheme", both, "GET", "/v1/models", "", testKeyOne, 401},
		{"chat without key", both, "POST", chatPath, chat, "", 401},
		{"completions wrong key", both, "POST", compPath, `{"model":"tiny","prompt":"x"}`, "Bearer nope", 401},
		{"wrong method still needs a key", both, "GET", chatPath, "", "", 401},
		{"unknown /v1/ route needs a key", both, "GET", "/v1/nope", "", "", 401},
		{"escaped path", both, "GET", "/%761/models", "", "", 401},
		// API keys do not open the admin routes (Config.AdminAPIKeys does).
		{"admin get without key", both, "GET", "/admin/busy_thresholds?model=tiny", "", "", 403},
		{"admin post wrong key", both, "POST", "/admin/busy_thresholds", update, "Bearer nope", 403},
		{"admin get with key", both, "GET", "/admin/busy_thresholds?model=tiny", "", right, 403},
		{"admin post with key", both, "POST", "/admin/busy_thresholds", update, second, 403},
		// A path that only reaches /admin/ once cleaned is redirected, not served.
		{"dot-dot to admin", both, "POST", "/health/../admin/busy_thresholds", update, "", http.StatusTemporaryRedirect},

		// Probes and scrapers stay open, as in vLLM.
		{"health open", both, "GET", "/health", "", "", 200},
		{"live open", both, "GET", "/live", "", "", 200},
		{"metrics open", both, "GET", "/metrics", "", "", 200},
		{"metrics open with a wrong key", both, "GET", "/metrics", "", "Bearer nope", 200},
		{"other paths answer 404", both, "GET", "/nope", "", "", 404},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := &fakeAdmin{fakeBackend: newFakeBackend(finish("Hello", "stop")), st: BusyStatus{Workers: []BusyWorker{}}}
			var log bytes.Buffer
			s := newKeyedServer(t, a, &log, tc.keys...)
			rr := serveAuth(s, tc.method, tc.path, tc.body, tc.auth)
			if rr.Code != tc.code {
				t.Fatalf("%s %s with Authorization %q: %d %s, want %d", tc.method, tc.path, tc.auth, rr.Code, rr.Body.String(), tc.code)
			}
			if rr.Code == http.StatusUnauthorized || rr.Code == http.StatusForbidden {
				if n := len(a.generated()) + len(a.set); n != 0 {
					t.Errorf("a refused request reached the backend (%d calls)", n)
				}
			}
		})
	}
}

// TestSeveralAuthorizationHeaders: two Authorization headers are refused, whichever
// comes first, even when one carries a right key.
func TestSeveralAuthorizationHeaders(t *testing.T) {
	a := &fakeAdmin{fakeBackend: newFakeBackend(finish("Hello", "stop")), st: BusyStatus{Workers: []BusyWorker{}}}
	s := newKeyedServer(t, a, &bytes.Buffer{}, testKeyOne, testKeyTwo)
	for _, pair := range [][2]string{{"Bearer " + testKeyOne, "Bearer nope"}, {"Bearer nope", "Bearer " + testKeyOne},
		{"Bearer " + testKeyOne, "Bearer " + testKeyTwo}} {
		req := httptest.NewRequest(http.MethodGet, "/v1/models", nil)
		req.Header.Add("Authorization", pair[0])
		req.Header.Add("Authorization", pair[1])
		rr := httptest.NewRecorder()
		s.ServeHTTP(rr, req)
		if rr.Code != http.StatusUnauthorized {
			t.Errorf("Authorization %q then %q: %d, want 401", pair[0], pair[1], rr.Code)
		}
	}
}

// TestUnauthorizedAnswer checks the 401's body, headers, metrics and log line.
func TestUnauthorizedAnswer(t *testing.T) {
	const presented = "sk-presented-wrong-key"
	for _, tc := range []struct {
		name, method, path, body string
		requestID                string // sent as X-Request-Id; "" sends none
		wantID                   string
		counted                  string // the requests_total series it adds to; "" none
	}{
		{"chat", "POST", chatPath, `{"model":"tiny","stream":true}`, "req-1", "req-1",
			`turbine_frontend_requests_total{model="",endpoint="chat_completions",request_type="unary",status="401"}`},
		{"completions", "POST", compPath, `{"model":"tiny","prompt":"x"}`, "", "generated-id",
			`turbine_frontend_requests_total{model="",endpoint="completions",request_type="unary",status="401"}`},
		{"models", "GET", "/v1/models", "", "req-2", "req-2", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var log bytes.Buffer
			s := newKeyedServer(t, &fakeAdmin{fakeBackend: newFakeBackend()}, &log, testKeyOne, testKeyTwo)
			req := httptest.NewRequest(tc.method, tc.path, strings.NewReader(tc.body))
			req.Header.Set("Authorization", "Bearer "+presented)
			if tc.requestID != "" {
				req.Header.Set("X-Request-Id", tc.requestID)
			}
			rr := httptest.NewRecorder()
			s.ServeHTTP(rr, req)

			want := `{"error":{"message":"Incorrect API key provided.","type":"invalid_request_error","param":null,"code":"invalid_api_key"}}` + "\n"
			if rr.Code != http.StatusUnauthorized || rr.Body.String() != want {
				t.Errorf("got %d %s, want 401 %s", rr.Code, rr.Body.String(), want)
			}
			h := rr.Header()
			if h.Get("WWW-Authenticate") != "Bearer" || h.Get("Content-Type") != "application/json" ||
				h.Get("X-Request-Id") != tc.wantID || h.Get("Retry-After") != "" {
				t.Errorf("headers %v: want WWW-Authenticate Bearer, JSON, X-Request-Id %s, no Retry-After", h, tc.wantID)
			}
			if tc.counted != "" {
				if got := metricValue(s, tc.counted); got != "1" {
					t.Errorf("%s = %q, want 1", tc.counted, got)
				}
				if !strings.Contains(log.String(), `"status":401`) || !strings.Contains(log.String(), `"error_kind":"unauthorized"`) {
					t.Errorf("log %q: want one request line with status 401", log.String())
				}
			} else if log.Len() != 0 {
				t.Errorf("log %q: want none for a non-generation route", log.String())
			}
			for _, secret := range []string{presented, testKeyOne, testKeyTwo} {
				if strings.Contains(log.String(), secret) || strings.Contains(rr.Body.String(), secret) {
					t.Errorf("a key appears in the log or the answer: %q %q", log.String(), rr.Body.String())
				}
			}
		})
	}
}

func TestConfigAPIKeys(t *testing.T) {
	for _, tc := range []struct {
		name string
		keys []string
		err  string // "" valid
	}{
		{"none", nil, ""},
		{"empty list", []string{}, ""},
		{"one", []string{"sk-secret"}, ""},
		{"several", []string{"sk-secret", "other"}, ""},
		{"empty key", []string{""}, "APIKeys[0] is empty"},
		{"empty among others", []string{"sk-secret", ""}, "APIKeys[1] is empty"},
		{"leading space", []string{" sk-secret"}, "APIKeys[0] has white space"},
		{"trailing newline", []string{"sk-secret\n"}, "APIKeys[0] has white space"},
		{"control character", []string{"sk-\x00secret"}, "APIKeys[0] has white space at an end or a control character"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := New(Config{APIKeys: tc.keys}, newFakeBackend())
			if tc.err == "" {
				if err != nil {
					t.Fatalf("New: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Fatalf("New: %v, want an error containing %q", err, tc.err)
			}
			if strings.Contains(err.Error(), "secret") {
				t.Errorf("the error %q shows the key", err)
			}
		})
	}
}
