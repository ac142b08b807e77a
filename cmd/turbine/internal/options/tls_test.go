package options

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"flag"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/turbine-llm/turbine/cmd/turbine/internal/cli"
	"github.com/turbine-llm/turbine/gateway"
	"github.com/turbine-llm/turbine/internal/tlsfiles/tlstest"
	"github.com/turbine-llm/turbine/messages"
)

// TestTLSFlags: --tls-cert and --tls-key (both or neither, a pair that loads, is valid
// and fits a server) and --admin-host/--admin-port; errors name the flag.
func TestTLSFlags(t *testing.T) {
	ca := tlstest.NewCA(t, "gateway-ca")
	good := ca.Issue(t, tlstest.Leaf{Name: "gateway", Hosts: []string{"127.0.0.1"}})
	other := ca.Issue(t, tlstest.Leaf{Name: "other"})
	clientOnly := ca.Issue(t, tlstest.Leaf{Name: "client-only", Usages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}})
	expired := ca.Issue(t, tlstest.Leaf{Name: "expired", NotBefore: time.Now().Add(-48 * time.Hour), NotAfter: time.Now().Add(-time.Hour)})
	for _, tc := range []struct {
		name string
		env  map[string]string
		args []string
		err  string
	}{
		{"none", nil, nil, ""},
		{"both", nil, []string{"--tls-cert", good.CertFile, "--tls-key", good.KeyFile}, ""},
		{"environment", map[string]string{"tls-cert": good.CertFile, "tls-key": good.KeyFile}, nil, ""},
		{"certificate only", nil, []string{"--tls-cert", good.CertFile}, "--tls-key is missing"},
		{"key only", nil, []string{"--tls-key", good.KeyFile}, "--tls-cert is missing"},
		{"key of another", nil, []string{"--tls-cert", good.CertFile, "--tls-key", other.KeyFile}, "private key does not match"},
		{"missing file", nil, []string{"--tls-cert", good.CertFile + ".absent", "--tls-key", good.KeyFile}, "--tls-cert " + good.CertFile + ".absent"},
		{"expired", nil, []string{"--tls-cert", expired.CertFile, "--tls-key", expired.KeyFile}, "expired at"},
		{"client usage only", nil, []string{"--tls-cert", clientOnly.CertFile, "--tls-key", clientOnly.KeyFile}, "serverAuth"},
		{"admin listener", nil, []string{"--admin-port", "9100"}, ""},
		{"admin port negative", nil, []string{"--admin-port", "-1"}, "--admin-port -1: want 0..65535"},
		{"admin port too large", nil, []string{"--admin-port", "70000"}, "--admin-port 70000"},
		{"admin port is the API's", nil, []string{"--port", "9100", "--admin-port", "9100"}, "the API's --port"},
		{"admin host empty", nil, []string{"--admin-port", "9100", "--admin-host", ""}, "--admin-host: empty"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for k, v := range tc.env {
				t.Setenv(cli.EnvName(k), v)
			}
			_, err := parseHTTP(t, tc.args)
			if tc.err == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Fatalf("err = %v, want one containing %q", err, tc.err)
			}
		})
	}
}

// busyBackend is a gateway backend with busy thresholds (an admin route) and no models.
type busyBackend struct{}

func (busyBackend) Models(context.Context) ([]*messages.ModelCard, error) { return nil, nil }
func (busyBackend) Generate(context.Context, *gateway.GenerateRequest) (gateway.Stream, error) {
	return nil, gateway.ErrNoWorkers
}
func (busyBackend) SetBusyThresholds(context.Context, string, gateway.BusyUpdate) error { return nil }
func (busyBackend) BusyStatus(_ context.Context, model string) (*gateway.BusyStatus, error) {
	return &gateway.BusyStatus{Model: model}, nil
}

// serveGateway binds o's listeners, serves a gateway with o's keys on them as serve and
// frontend do, and returns the listeners; cleanup stops it all.
func serveGateway(t *testing.T, o HTTP) *Listeners {
	t.Helper()
	if err := o.Validate(); err != nil {
		t.Fatal(err)
	}
	ls, err := o.ListenAll(zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	h, err := gateway.New(o.Gateway(gateway.Config{Logger: zerolog.Nop()}), busyBackend{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- ServeDrained(ctx, ls.Main, ls.ServeAdmin(h, zerolog.Nop()), zerolog.Nop(), nil) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
		ls.Close()
	})
	return ls
}

// freePort is a port free now on 127.0.0.1.
func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

func httpsClient(roots *x509.CertPool) *http.Client {
	return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{RootCAs: roots}, ForceAttemptHTTP2: true}}
}

// get does GET url with an optional bearer key; it returns the status and body.
func get(t *testing.T, c *http.Client, url, key string) (int, string, *http.Response) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), resp
}

// With --tls-cert the listener speaks only HTTPS, TLS 1.2 and above, HTTP/1.1: a client
// that trusts the authority is served; a plain HTTP request gets Go's 400; a client that
// does not trust the authority, and one limited to TLS 1.1, fail their handshakes.
func TestHTTPSListener(t *testing.T) {
	ca := tlstest.NewCA(t, "gateway-ca")
	pair := ca.Issue(t, tlstest.Leaf{Name: "gateway", Hosts: []string{"127.0.0.1", "localhost"}})
	o := DefaultHTTP()
	o.Port, o.TLSCert, o.TLSKey = 0, pair.CertFile, pair.KeyFile
	ls := serveGateway(t, o)
	if !strings.HasPrefix(ls.URL(), "https://127.0.0.1:") || ls.AdminURL() != "" {
		t.Fatalf("URL %q, admin URL %q", ls.URL(), ls.AdminURL())
	}
	status, body, resp := get(t, httpsClient(ca.Pool()), ls.URL()+"/v1/models", "")
	if status != http.StatusOK || !strings.Contains(body, `"data"`) {
		t.Fatalf("HTTPS /v1/models: %d %s", status, body)
	}
	if resp.Proto != "HTTP/1.1" || resp.TLS == nil || resp.TLS.Version < tls.VersionTLS12 {
		t.Errorf("proto %s, TLS %+v: want HTTP/1.1 over TLS 1.2+", resp.Proto, resp.TLS)
	}

	plainURL := "http://" + strings.TrimPrefix(ls.URL(), "https://")
	status, body, _ = get(t, &http.Client{Timeout: 10 * time.Second}, plainURL+"/v1/models", "")
	if status != http.StatusBadRequest || !strings.Contains(body, "Client sent an HTTP request to an HTTPS server") {
		t.Errorf("plain HTTP: %d %q, want 400 and Go's message", status, body)
	}

	if _, err := httpsClient(nil).Get(ls.URL() + "/v1/models"); err == nil {
		t.Error("a client without the authority was served")
	} else if ua := (x509.UnknownAuthorityError{}); !errors.As(err, &ua) {
		t.Errorf("a client without the authority: %v, want an unknown authority", err)
	}
	old := httpsClient(ca.Pool())
	old.Transport.(*http.Transport).TLSClientConfig.MaxVersion = tls.VersionTLS11
	if _, err := old.Get(ls.URL() + "/v1/models"); err == nil || !strings.Contains(err.Error(), "version") {
		t.Errorf("a TLS 1.1 client: %v, want a protocol version failure", err)
	}
}

// With --admin-port, /admin/ is served only on the admin listener (404 on the API's,
// even through a path that cleans to it), with the same keys; the API is not served on
// the admin listener. Without it, /admin/ stays on the API's listener.
func TestAdminListener(t *testing.T) {
	ca := tlstest.NewCA(t, "gateway-ca")
	pair := ca.Issue(t, tlstest.Leaf{Name: "gateway", Hosts: []string{"127.0.0.1"}})
	const apiKey, adminKey = "sk-api-1", "sk-admin-1"
	type want struct {
		listener, path, key string
		status              int
	}
	for _, tc := range []struct {
		name  string
		tls   bool
		admin bool
		wants []want
	}{
		{"separate", false, true, []want{
			{"admin", "/admin/busy_thresholds?model=m", adminKey, 200},
			{"admin", "/admin/busy_thresholds?model=m", "", 401},
			{"admin", "/admin/busy_thresholds?model=m", apiKey, 401},
			{"admin", "/v1/models", apiKey, 404},
			{"admin", "/health", "", 404},
			{"main", "/admin/busy_thresholds?model=m", adminKey, 404},
			{"main", "/v1/../admin/busy_thresholds?model=m", adminKey, 404},
			{"main", "/v1/models", apiKey, 200},
			{"main", "/v1/models", "", 401},
		}},
		{"separate with TLS", true, true, []want{
			{"admin", "/admin/busy_thresholds?model=m", adminKey, 200},
			{"main", "/admin/busy_thresholds?model=m", adminKey, 404},
			{"main", "/v1/models", apiKey, 200},
		}},
		{"together", false, false, []want{
			{"main", "/admin/busy_thresholds?model=m", adminKey, 200},
			{"main", "/v1/models", apiKey, 200},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := DefaultHTTP()
			o.Port, o.APIKeys, o.AdminAPIKeys = 0, []string{apiKey}, []string{adminKey}
			if tc.admin {
				o.AdminPort = freePort(t)
			}
			client := &http.Client{Timeout: 10 * time.Second, CheckRedirect: func(*http.Request, []*http.Request) error {
				return http.ErrUseLastResponse
			}}
			if tc.tls {
				o.TLSCert, o.TLSKey = pair.CertFile, pair.KeyFile
				client.Transport = &http.Transport{TLSClientConfig: &tls.Config{RootCAs: ca.Pool()}}
			}
			ls := serveGateway(t, o)
			if tc.admin && ls.AdminURL() != ls.scheme()+"://127.0.0.1:"+strconv.Itoa(o.AdminPort) {
				t.Fatalf("admin URL %q", ls.AdminURL())
			}
			for _, w := range tc.wants {
				base := ls.URL()
				if w.listener == "admin" {
					base = ls.AdminURL()
				}
				status, body, _ := get(t, client, base+w.path, w.key)
				if status != w.status {
					t.Errorf("%s %s (key %q): %d %s, want %d", w.listener, w.path, w.key, status, body, w.status)
					continue
				}
				if status == http.StatusNotFound {
					var e struct {
						Error struct{ Code string } `json:"error"`
					}
					if json.Unmarshal([]byte(body), &e) != nil || e.Error.Code != "unknown_url" {
						t.Errorf("%s %s: 404 body %s, want the gateway's unknown_url", w.listener, w.path, body)
					}
				}
			}
		})
	}
}

// TestMemberTLSFlags: --member-tls-cert, --member-tls-key, --member-tls-ca reach
// cluster.Config.TLS; all three or none, and errors name the flag at fault.
func TestMemberTLSFlags(t *testing.T) {
	ca := tlstest.NewCA(t, "members")
	m := ca.Issue(t, tlstest.Leaf{Name: "member", Hosts: []string{"127.0.0.1"}})
	serverOnly := ca.Issue(t, tlstest.Leaf{Name: "server-only", Usages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}})
	all := []string{"--member-tls-cert", m.CertFile, "--member-tls-key", m.KeyFile, "--member-tls-ca", ca.CertFile}
	for _, tc := range []struct {
		name string
		args []string
		err  string
	}{
		{"none", nil, ""},
		{"all three", all, ""},
		{"no CA", all[:4], "--member-tls-ca \"\": mutual TLS between members needs --member-tls-cert, --member-tls-key and --member-tls-ca"},
		{"CA only", all[4:], "--member-tls-cert \"\""},
		{"CA is the key", []string{"--member-tls-cert", m.CertFile, "--member-tls-key", m.KeyFile, "--member-tls-ca", m.KeyFile},
			"--member-tls-ca " + m.KeyFile + ": tlsfiles: no PEM CERTIFICATE block"},
		{"server usage only", []string{"--member-tls-cert", serverOnly.CertFile, "--member-tls-key", serverOnly.KeyFile, "--member-tls-ca", ca.CertFile},
			"--member-tls-cert " + serverOnly.CertFile + ": tlsfiles: certificate \"server-only\" lacks the extended key usage clientAuth"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := DefaultCluster()
			fs := flag.NewFlagSet("test", flag.ContinueOnError)
			fs.SetOutput(io.Discard)
			o.Flags(fs)
			if _, err := cli.ParseCommand(fs, tc.args); err != nil {
				t.Fatal(err)
			}
			err := o.Validate()
			if tc.err == "" {
				if err != nil {
					t.Fatal(err)
				}
				got := o.Config(nil, zerolog.Nop()).TLS
				if len(tc.args) > 0 && (got.CertFile != m.CertFile || got.KeyFile != m.KeyFile || got.CAFile != ca.CertFile) {
					t.Errorf("cluster TLS %+v", got)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Fatalf("err = %v, want one containing %q", err, tc.err)
			}
		})
	}
}

func TestIsAdminPath(t *testing.T) {
	for p, want := range map[string]bool{
		"/admin": true, "/admin/": true, "/admin/kvbm": true, "/v1/../admin/kvbm": true, "//admin/kvbm": true,
		"/admin/../v1/models": true, "/administrator": false, "/v1/models": false, "/": false, "": false,
	} {
		if got := isAdminPath(p); got != want {
			t.Errorf("isAdminPath(%q) = %v, want %v", p, got, want)
		}
	}
}
