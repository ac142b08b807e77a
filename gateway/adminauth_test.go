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

// Admin keys of the tests.
const (
	testAdminKey      = "sk-admin-one"
	testAdminKeyOther = "sk-admin-two"
)

// newAdminServer is a test server with the given API and admin keys, logging into log.
func newAdminServer(t *testing.T, b Backend, log *bytes.Buffer, apiKeys, adminKeys []string) *Server {
	t.Helper()
	cfg := Config{
		Now:          func() time.Time { return testTime },
		NewRequestID: func() string { return "generated-id" },
		APIKeys:      apiKeys,
		AdminAPIKeys: adminKeys,
		Logger:       zerolog.New(log),
	}
	s, err := New(cfg, b, fakeOptions(fakePreprocessor{eos: []uint32{fakeEOS}})...)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// Who may use /admin/: with admin keys, a request presenting one (from anywhere), and no
// other; with API keys but no admin key, nobody (403, saying how to enable the routes);
// with no key at all, loopback clients not relayed by a proxy (others 403). /v1/ takes
// the API keys only.
func TestAdminAccess(t *testing.T) {
	const (
		update   = `{"model":"tiny","kv_usage":0.5}`
		local    = "127.0.0.1:40000"
		local6   = "[::1]:40000"
		remote   = "192.0.2.7:40000"
		apiKey   = "Bearer " + testKeyOne
		adminKey = "Bearer " + testAdminKey
	)
	var (
		api   = []string{testKeyOne}
		admin = []string{testAdminKeyOther, testAdminKey}
	)
	for _, tc := range []struct {
		name        string
		apiKeys     []string
		adminKeys   []string
		method      string
		path, body  string
		remote      string
		auth        string
		header      [2]string // one extra request header, when set
		code        int
		errCode     string // the error body's code, for refusals
		wantMessage string // a part of the refusal's message
	}{
		// No key at all: loopback clients only (the default listener is 127.0.0.1).
		{"open, loopback", nil, nil, "POST", "/admin/busy_thresholds", update, local, "", [2]string{}, 200, "", ""},
		{"open, loopback v6", nil, nil, "GET", "/admin/busy_thresholds?model=tiny", "", local6, "", [2]string{}, 200, "", ""},
		{"open, remote", nil, nil, "POST", "/admin/busy_thresholds", update, remote, "", [2]string{}, 403, "admin_forbidden", "--admin-api-key"},
		{"open, remote get", nil, nil, "GET", "/admin/busy_thresholds?model=tiny", "", remote, "", [2]string{}, 403, "admin_forbidden", "loopback"},
		{"open, loopback through a proxy", nil, nil, "POST", "/admin/busy_thresholds", update, local, "", [2]string{"X-Forwarded-For", "198.51.100.4"}, 403, "admin_forbidden", "proxy"},
		{"open, loopback with Forwarded", nil, nil, "POST", "/admin/busy_thresholds", update, local, "", [2]string{"Forwarded", "for=198.51.100.4"}, 403, "admin_forbidden", "proxy"},
		{"open, loopback with X-Real-Ip", nil, nil, "POST", "/admin/busy_thresholds", update, local, "", [2]string{"X-Real-Ip", "198.51.100.4"}, 403, "admin_forbidden", "proxy"},
		{"open, v1 from remote", nil, nil, "GET", "/v1/models", "", remote, "", [2]string{}, 200, "", ""},
		{"open, unknown admin path from remote", nil, nil, "GET", "/admin/nope", "", remote, "", [2]string{}, 403, "admin_forbidden", ""},

		// API keys only: the admin routes are off for every key and every client.
		{"api keys, api key", api, nil, "POST", "/admin/busy_thresholds", update, local, apiKey, [2]string{}, 403, "admin_forbidden", "--admin-api-key"},
		{"api keys, no key", api, nil, "POST", "/admin/busy_thresholds", update, local, "", [2]string{}, 403, "admin_forbidden", "--admin-api-key"},
		{"api keys, remote", api, nil, "GET", "/admin/busy_thresholds?model=tiny", "", remote, apiKey, [2]string{}, 403, "admin_forbidden", "--admin-api-key"},
		{"api keys, v1 still works", api, nil, "GET", "/v1/models", "", remote, apiKey, [2]string{}, 200, "", ""},

		// Admin keys: one of them, from anywhere; nothing else, not even from loopback.
		{"admin keys, admin key", api, admin, "POST", "/admin/busy_thresholds", update, remote, adminKey, [2]string{}, 200, "", ""},
		{"admin keys, other admin key", api, admin, "GET", "/admin/busy_thresholds?model=tiny", "", remote, "Bearer " + testAdminKeyOther, [2]string{}, 200, "", ""},
		{"admin keys, api key", api, admin, "POST", "/admin/busy_thresholds", update, local, apiKey, [2]string{}, 401, "invalid_api_key", "admin"},
		{"admin keys, no key from loopback", api, admin, "POST", "/admin/busy_thresholds", update, local, "", [2]string{}, 401, "invalid_api_key", "admin"},
		{"admin keys, wrong key", api, admin, "POST", "/admin/busy_thresholds", update, remote, "Bearer nope", [2]string{}, 401, "invalid_api_key", "admin"},
		{"admin keys, admin key through a proxy", api, admin, "POST", "/admin/busy_thresholds", update, local, adminKey, [2]string{"X-Forwarded-For", "198.51.100.4"}, 200, "", ""},
		{"admin keys, admin key is no API key", api, admin, "GET", "/v1/models", "", remote, adminKey, [2]string{}, 401, "invalid_api_key", ""},
		{"admin keys, api key on v1", api, admin, "GET", "/v1/models", "", remote, apiKey, [2]string{}, 200, "", ""},
		{"admin keys without api keys, admin key", nil, admin, "POST", "/admin/busy_thresholds", update, remote, adminKey, [2]string{}, 200, "", ""},
		{"admin keys without api keys, no key", nil, admin, "POST", "/admin/busy_thresholds", update, local, "", [2]string{}, 401, "invalid_api_key", "admin"},
		{"admin keys without api keys, v1 open", nil, admin, "GET", "/v1/models", "", remote, "", [2]string{}, 200, "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := &fakeAdmin{fakeBackend: newFakeBackend(finish("Hello", "stop")), st: BusyStatus{Workers: []BusyWorker{}}}
			var log bytes.Buffer
			s := newAdminServer(t, a, &log, tc.apiKeys, tc.adminKeys)
			req := httptest.NewRequest(tc.method, tc.path, strings.NewReader(tc.body))
			req.RemoteAddr, req.Host = tc.remote, "localhost:8000"
			if tc.auth != "" {
				req.Header.Set("Authorization", tc.auth)
			}
			if tc.header[0] != "" {
				req.Header.Set(tc.header[0], tc.header[1])
			}
			rr := httptest.NewRecorder()
			s.ServeHTTP(rr, req)
			if rr.Code != tc.code {
				t.Fatalf("%s %s from %s with Authorization %q: %d %s, want %d", tc.method, tc.path, tc.remote, tc.auth, rr.Code, rr.Body.String(), tc.code)
			}
			if tc.code < 400 {
				return
			}
			if !strings.Contains(rr.Body.String(), `"code":"`+tc.errCode+`"`) || !strings.Contains(rr.Body.String(), tc.wantMessage) {
				t.Errorf("body %s: want code %s and a message with %q", rr.Body.String(), tc.errCode, tc.wantMessage)
			}
			if (rr.Code == http.StatusUnauthorized) != (rr.Header().Get("WWW-Authenticate") == "Bearer") {
				t.Errorf("%d with WWW-Authenticate %q", rr.Code, rr.Header().Get("WWW-Authenticate"))
			}
			if n := len(a.generated()) + len(a.set); n != 0 {
				t.Errorf("a refused request reached the backend (%d calls)", n)
			}
			for _, secret := range []string{testKeyOne, testAdminKey, testAdminKeyOther} {
				if strings.Contains(log.String(), secret) || strings.Contains(rr.Body.String(), secret) {
					t.Errorf("a key appears in the log or the answer: %q %q", log.String(), rr.Body.String())
				}
			}
		})
	}
}

func TestAdminDecision(t *testing.T) {
	for _, tc := range []struct {
		adminKeys, apiKeys, presented, local bool
		want                                 string // "" allowed, else the refusal's kind
	}{
		{adminKeys: true, presented: true, want: ""},
		{adminKeys: true, presented: true, apiKeys: true, want: ""},
		{adminKeys: true, local: true, want: "unauthorized"},
		{adminKeys: true, apiKeys: true, local: true, want: "unauthorized"},
		{apiKeys: true, local: true, want: "admin_forbidden"},
		{apiKeys: true, want: "admin_forbidden"},
		{local: true, want: ""},
		{want: "admin_forbidden"},
	} {
		got := ""
		if e := adminDecision(tc.adminKeys, tc.apiKeys, tc.presented, tc.local); e != nil {
			got = e.Kind.String()
		}
		if got != tc.want {
			t.Errorf("admin keys %v, API keys %v, admin key presented %v, loopback %v: %q, want %q",
				tc.adminKeys, tc.apiKeys, tc.presented, tc.local, got, tc.want)
		}
	}
}

func TestLoopbackClient(t *testing.T) {
	for _, tc := range []struct {
		remote string
		header string // a proxy header sent, "" none
		want   bool
	}{
		{"127.0.0.1:1", "", true},
		{"127.9.9.9:1", "", true},
		{"[::1]:1", "", true},
		{"[::ffff:127.0.0.1]:1", "", true},
		{"192.0.2.1:1", "", false},
		{"[2001:db8::1]:1", "", false},
		{"10.0.0.1:1", "", false},
		{"", "", false},
		{"@", "", false},
		{"localhost:1", "", false},
		{"127.0.0.1", "", false},
		{"127.0.0.1:1", "X-Forwarded-For", false},
		{"127.0.0.1:1", "Forwarded", false},
		{"127.0.0.1:1", "X-Real-Ip", false},
	} {
		r := httptest.NewRequest("GET", "/admin/busy_thresholds", nil)
		r.RemoteAddr, r.Host = tc.remote, "127.0.0.1:8000"
		if tc.header != "" {
			r.Header.Set(tc.header, "203.0.113.9")
		}
		if got := loopbackClient(r); got != tc.want {
			t.Errorf("RemoteAddr %q, header %q: %v, want %v", tc.remote, tc.header, got, tc.want)
		}
	}
}

// TestLoopbackHost: a loopback client counts as local only when it names the server by
// localhost or a loopback address; a name an attacker's DNS points at 127.0.0.1 (DNS
// rebinding) does not.
func TestLoopbackHost(t *testing.T) {
	for _, tc := range []struct {
		host string
		want bool
	}{
		{"127.0.0.1:8000", true}, {"127.0.0.1", true}, {"127.8.0.1:80", true}, {"localhost:8000", true},
		{"LOCALHOST", true}, {"[::1]:8000", true}, {"::1", true}, {"[::ffff:127.0.0.1]:8000", true},
		{"evil.example:8000", false}, {"evil.example", false}, {"localhost.evil.example:8000", false},
		{"192.0.2.1:8000", false}, {"", false}, {"[::1", false},
	} {
		r := httptest.NewRequest("GET", "/admin/busy_thresholds", nil)
		r.RemoteAddr, r.Host = "127.0.0.1:1234", tc.host
		if got := loopbackClient(r); got != tc.want {
			t.Errorf("Host %q from loopback: local %v, want %v", tc.host, got, tc.want)
		}
	}
}

func TestConfigAdminAPIKeys(t *testing.T) {
	for _, tc := range []struct {
		name string
		keys []string
		err  string
	}{
		{"none", nil, ""},
		{"one", []string{"sk-secret"}, ""},
		{"empty", []string{"sk-secret", ""}, "AdminAPIKeys[1] is empty"},
		{"space", []string{"sk-secret "}, "AdminAPIKeys[0] has white space"},
	} {
		_, err := New(Config{AdminAPIKeys: tc.keys}, newFakeBackend())
		if tc.err == "" && err != nil || tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)) {
			t.Errorf("%s: %v, want %q", tc.name, err, tc.err)
		}
		if err != nil && strings.Contains(err.Error(), "secret") {
			t.Errorf("%s: the error %q shows the key", tc.name, err)
		}
	}
}
