package gateway

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// newCORSServer is a server with policy c and API key "k".
func newCORSServer(t *testing.T, c *CORS) *Server {
	t.Helper()
	s, err := New(Config{Now: func() time.Time { return testTime }, NewRequestID: func() string { return "generated-id" },
		APIKeys: []string{"k"}, CORS: c}, newFakeBackend(finish("ok", "stop")), fakeOptions(fakePreprocessor{eos: []uint32{fakeEOS}})...)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestCORS: a browser's preflight is answered without an API key and with the policy's
// headers; the answer to the request itself carries Access-Control-Allow-Origin; an
// origin outside the policy and the admin routes get none; without a policy a preflight
// is an OPTIONS request like any other (405).
func TestCORS(t *testing.T) {
	only := &CORS{AllowedOrigins: []string{"https://app.example"}, AllowedMethods: []string{"post"}, AllowedHeaders: []string{"authorization", "content-type"}}
	for _, tc := range []struct {
		name           string
		policy         *CORS
		method, path   string
		origin         string
		preflight      bool
		auth           string
		wantStatus     int
		wantAllowOrig  string
		wantAllowMeths string
	}{
		{"preflight, any origin", DefaultCORS(), http.MethodOptions, "/v1/chat/completions", "https://x.example", true, "", http.StatusNoContent, "*", "POST"},
		{"request, any origin", DefaultCORS(), http.MethodPost, "/v1/chat/completions", "https://x.example", false, "Bearer k", http.StatusOK, "*", ""},
		{"request without a key still 401, with the header", DefaultCORS(), http.MethodPost, "/v1/chat/completions", "https://x.example", false, "", http.StatusUnauthorized, "*", ""},
		{"preflight of /v1/models", DefaultCORS(), http.MethodOptions, "/v1/models", "https://x.example", true, "", http.StatusNoContent, "*", "POST"},
		{"metrics not cross-origin", DefaultCORS(), http.MethodGet, "/metrics", "https://x.example", false, "", http.StatusOK, "", ""},
		{"admin preflight refused", DefaultCORS(), http.MethodOptions, "/admin/busy_thresholds", "https://x.example", true, "", http.StatusForbidden, "", ""},
		{"lora load preflight refused", DefaultCORS(), http.MethodOptions, "/v1/load_lora_adapter", "https://x.example", true, "", http.StatusForbidden, "", ""},
		{"named origin", only, http.MethodOptions, "/v1/completions", "https://app.example", true, "", http.StatusNoContent, "https://app.example", "POST"},
		{"other origin", only, http.MethodOptions, "/v1/completions", "https://evil.example", true, "", http.StatusNoContent, "", ""},
		{"other origin's request", only, http.MethodPost, "/v1/chat/completions", "https://evil.example", false, "Bearer k", http.StatusOK, "", ""},
		{"no policy", nil, http.MethodOptions, "/v1/chat/completions", "https://x.example", true, "", http.StatusUnauthorized, "", ""},
		{"no policy, with a key", nil, http.MethodOptions, "/v1/chat/completions", "https://x.example", true, "Bearer k", http.StatusMethodNotAllowed, "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newCORSServer(t, tc.policy)
			body := ""
			if tc.method == http.MethodPost {
				body = `{"model":"tiny","max_tokens":2,"messages":[{"role":"user","content":"hi"}]}`
			}
			req := httptest.NewRequest(tc.method, tc.path, strings.NewReader(body))
			req.RemoteAddr = "203.0.113.5:1234" // not loopback: the admin routes refuse it
			req.Header.Set("Origin", tc.origin)
			if tc.preflight {
				req.Header.Set("Access-Control-Request-Method", "POST")
				req.Header.Set("Access-Control-Request-Headers", "authorization,content-type")
			} else {
				req.Header.Set("Content-Type", "application/json")
			}
			if tc.auth != "" {
				req.Header.Set("Authorization", tc.auth)
			}
			rr := httptest.NewRecorder()
			s.ServeHTTP(rr, req)
			h := rr.Header()
			if rr.Code != tc.wantStatus || h.Get("Access-Control-Allow-Origin") != tc.wantAllowOrig ||
				h.Get("Access-Control-Allow-Methods") != tc.wantAllowMeths {
				t.Errorf("got %d, allow-origin %q, allow-methods %q (%s); want %d, %q, %q", rr.Code,
					h.Get("Access-Control-Allow-Origin"), h.Get("Access-Control-Allow-Methods"), rr.Body, tc.wantStatus, tc.wantAllowOrig, tc.wantAllowMeths)
			}
		})
	}
}

func TestCORSCredentialsNeedNamedOrigins(t *testing.T) {
	_, err := New(Config{CORS: &CORS{AllowedOrigins: []string{"*"}, AllowCredentials: true}}, newFakeBackend())
	if err == nil || !strings.Contains(err.Error(), "credentials") {
		t.Fatalf("New with credentials and any origin: %v", err)
	}
}

// TestAdminRefusesCrossOriginRequests: a browser's request for another site's page (a
// plain-text POST needs no preflight) is refused 403 by the admin routes, even from
// loopback and whatever the CORS policy; the same page's own requests, and programs
// (no Origin, no Sec-Fetch-Site), are served.
func TestAdminRefusesCrossOriginRequests(t *testing.T) {
	const crossSite, notLocal = "another site's page", "naming the server as localhost"
	for _, tc := range []struct {
		name       string
		host       string
		origin     string
		fetchSite  string
		path       string
		wantStatus int
		wantMsg    string
	}{
		{"program", "127.0.0.1:8000", "", "", "/admin/busy_thresholds", 404, "no busy thresholds"},
		{"other site by Origin", "127.0.0.1:8000", "http://evil.example", "", "/admin/busy_thresholds", 403, crossSite},
		{"other site by Sec-Fetch-Site", "127.0.0.1:8000", "http://evil.example", "cross-site", "/admin/busy_thresholds", 403, crossSite},
		{"same site, other port", "127.0.0.1:8000", "http://127.0.0.1:3000", "same-site", "/admin/busy_thresholds", 403, crossSite},
		{"opaque origin", "127.0.0.1:8000", "null", "", "/admin/busy_thresholds", 403, crossSite},
		{"lora load from another site", "127.0.0.1:8000", "http://evil.example", "cross-site", "/v1/load_lora_adapter", 403, crossSite},
		{"own page", "127.0.0.1:8000", "http://127.0.0.1:8000", "same-origin", "/admin/busy_thresholds", 404, "no busy thresholds"},
		{"own page, older browser", "localhost:8000", "http://localhost:8000", "", "/admin/busy_thresholds", 404, "no busy thresholds"},
		{"typed address", "127.0.0.1:8000", "", "none", "/admin/busy_thresholds", 404, "no busy thresholds"},
		// DNS rebinding: the attacker's name now points at 127.0.0.1, so to the browser
		// the page's requests are same-origin.
		{"rebound name", "evil.example:8000", "http://evil.example:8000", "same-origin", "/admin/busy_thresholds", 403, notLocal},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, policy := range []*CORS{nil, DefaultCORS()} {
				s, err := New(Config{Now: func() time.Time { return testTime }, CORS: policy}, newFakeBackend(),
					fakeOptions(fakePreprocessor{eos: []uint32{fakeEOS}})...)
				if err != nil {
					t.Fatal(err)
				}
				req := httptest.NewRequest(http.MethodPost, tc.path, strings.NewReader(`{"model":"tiny","kv_usage":0.5}`))
				req.RemoteAddr, req.Host = "127.0.0.1:1234", tc.host // loopback: served without a key
				req.Header.Set("Content-Type", "text/plain")
				if tc.origin != "" {
					req.Header.Set("Origin", tc.origin)
				}
				if tc.fetchSite != "" {
					req.Header.Set("Sec-Fetch-Site", tc.fetchSite)
				}
				rr := httptest.NewRecorder()
				s.ServeHTTP(rr, req)
				if rr.Code != tc.wantStatus || !strings.Contains(rr.Body.String(), tc.wantMsg) {
					t.Errorf("policy %v: got %d %s; want %d with %q", policy != nil, rr.Code, rr.Body, tc.wantStatus, tc.wantMsg)
				}
			}
		})
	}
}
