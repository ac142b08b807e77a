package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/turbine-llm/turbine/cmd/turbine/internal/serveproc"
	"github.com/turbine-llm/turbine/internal/tlsfiles/tlstest"
)

// tlsClient is an HTTPS client that trusts roots.
func tlsClient(roots *x509.CertPool) *http.Client {
	return &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots}}}
}

// fetch does GET url with an optional bearer key and returns the status and body.
func fetch(t *testing.T, c *http.Client, url, key string) (int, string) {
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
	return resp.StatusCode, string(b)
}

// tlsChat sends one chat request through the OpenAI SDK over c.
func tlsChat(s *server, c *http.Client, key string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	client := openai.NewClient(option.WithBaseURL(s.url+"/v1"), option.WithAPIKey(key), option.WithHTTPClient(c),
		option.WithMaxRetries(0))
	resp, err := client.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{
		Model:     model,
		Messages:  []openai.ChatCompletionMessageParamUnion{openai.UserMessage("a question about rivers over TLS")},
		MaxTokens: openai.Int(4),
	})
	if err == nil && resp.Usage.CompletionTokens == 0 {
		err = io.ErrUnexpectedEOF
	}
	return err
}

// keyBody is the base64 body of a PEM file: what a leaked private key would show.
func keyBody(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	return strings.Join(lines[1:len(lines)-1], "")
}

// assertNoSecrets fails when any secret appears in text (a log, a /metrics body).
func assertNoSecrets(t *testing.T, what, text string, secrets map[string]string) {
	t.Helper()
	for name, s := range secrets {
		if s == "" {
			t.Fatalf("secret %s is empty: the check proves nothing", name)
		}
		if strings.Contains(text, s) || strings.Contains(text, s[:min(len(s), 24)]) {
			t.Errorf("%s shows the %s", what, name)
		}
	}
}

func freeTCPPort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// `turbine serve` with --tls-cert/--tls-key and --admin-port: the OpenAI SDK is served
// over HTTPS, a plain HTTP request is refused, /admin/ lives on the admin listener only,
// and neither the logs (at debug level) nor /metrics show a key.
func TestServeHTTPSAdminListenerAndSecrets(t *testing.T) {
	ca := tlstest.NewCA(t, "gateway-ca")
	pair := ca.Issue(t, tlstest.Leaf{Name: "gateway", Hosts: []string{"127.0.0.1", "localhost"}})
	const apiKey, adminKey = "sk-e2e-api-7f3a61c0d2", "sk-e2e-admin-91c2b84e"
	adminPort := freeTCPPort(t)
	s := startTurbine(t, "serve", "turbine serving", "serve", "--port", "0", "--log-format", "json", "--log-level", "debug",
		"--workers", "1", "--heartbeat", "200ms", "--tls-cert", pair.CertFile, "--tls-key", pair.KeyFile,
		"--admin-port", strconv.Itoa(adminPort), "--api-key", apiKey, "--admin-api-key", adminKey)
	if !strings.HasPrefix(s.url, "https://") {
		t.Fatalf("serving at %q, want https", s.url)
	}
	c := tlsClient(ca.Pool())
	if err := tlsChat(s, c, apiKey); err != nil {
		t.Fatalf("chat over HTTPS: %v", err)
	}
	plain := "http://" + strings.TrimPrefix(s.url, "https://")
	if status, body := fetch(t, &http.Client{Timeout: 10 * time.Second}, plain+"/v1/models", apiKey); status != http.StatusBadRequest ||
		!strings.Contains(body, "HTTP request to an HTTPS server") {
		t.Errorf("plain HTTP: %d %q, want 400", status, body)
	}
	if err := tlsChat(s, tlsClient(nil), apiKey); err == nil {
		t.Error("a client without the authority was served")
	}
	admin := "https://127.0.0.1:" + strconv.Itoa(adminPort) + "/admin/busy_thresholds?model=" + model
	if status, body := fetch(t, c, admin, adminKey); status != http.StatusOK {
		t.Errorf("admin listener: %d %s", status, body)
	}
	if status, _ := fetch(t, c, s.url+"/admin/busy_thresholds?model="+model, adminKey); status != http.StatusNotFound {
		t.Errorf("/admin/ on the API's listener: %d, want 404", status)
	}
	status, metrics := fetch(t, c, s.url+"/metrics", "")
	if status != http.StatusOK || serveproc.ReadyWorkers(metrics, model) != 1 {
		t.Fatalf("/metrics: %d, %d ready workers", status, serveproc.ReadyWorkers(metrics, model))
	}
	secrets := map[string]string{"API key": apiKey, "admin key": adminKey, "TLS private key": keyBody(t, pair.KeyFile)}
	assertNoSecrets(t, "/metrics", metrics, secrets)
	s.stop()
	assertNoSecrets(t, "the serve's log", s.Logs(), secrets)
}

// A frontend and a node with mutual TLS between members (and a Consul token) serve the
// OpenAI SDK over HTTPS; a node whose certificate another authority signed registers in
// Consul but reaches no router: its worker never serves. Neither the frontend's log nor
// its /metrics show the Consul token or the API key.
func TestClusterMemberMutualTLS(t *testing.T) {
	lc := newLocalCluster(t)
	ca := tlstest.NewCA(t, "members-ca")
	other := tlstest.NewCA(t, "strangers-ca")
	loopback := []string{"127.0.0.1", "localhost"}
	const apiKey, token = "sk-e2e-api-c4d19e2f", "3f9c1a7e-consul-token-e2e-b6d2"
	memberTLS := func(p tlstest.Pair, caFile string) []string {
		return []string{"--member-tls-cert", p.CertFile, "--member-tls-key", p.KeyFile, "--member-tls-ca", caFile}
	}
	fePair := ca.Issue(t, tlstest.Leaf{Name: "frontend", Hosts: loopback})
	feArgs := append([]string{"frontend", "--port", "0", "--log-level", "debug", "--consul-token", token, "--api-key", apiKey,
		"--tls-cert", fePair.CertFile, "--tls-key", fePair.KeyFile}, lc.clusterArgs()...)
	fe := startTurbine(t, "frontend", "turbine frontend serving", append(feArgs, memberTLS(fePair, ca.CertFile)...)...)
	node := func(id string, p tlstest.Pair) *server {
		args := append([]string{"node", "--node-id", id, "--workers", "1", "--heartbeat", "200ms", "--speedup-ratio", "50",
			"--http-port", "0", "--consul-token", token}, lc.clusterArgs()...)
		return startTurbine(t, id, "node agent joined the cluster", append(args, memberTLS(p, ca.CertFile)...)...)
	}
	node("tls-a", ca.Issue(t, tlstest.Leaf{Name: "tls-a", Hosts: loopback}))
	c := tlsClient(ca.Pool())
	readyWorkers := func() int {
		status, body := fetch(t, c, fe.url+"/metrics", "")
		if status != http.StatusOK {
			t.Fatalf("/metrics: %d", status)
		}
		return serveproc.ReadyWorkers(body, model)
	}
	fe.waitFor(60*time.Second, "the mutual-TLS node's worker ready", func() bool { return readyWorkers() == 1 })
	if err := tlsChat(fe, c, apiKey); err != nil {
		t.Fatalf("chat through the mutual-TLS cluster: %v", err)
	}

	node("tls-stranger", other.Issue(t, tlstest.Leaf{Name: "tls-stranger", Hosts: loopback}))
	// The stranger's worker tries to reach the router: the frontend refuses each handshake.
	fe.waitFor(30*time.Second, "the frontend refusing the stranger's certificate", func() bool {
		l := fe.Logs()
		return strings.Contains(l, "member TLS handshake failed") && strings.Contains(l, "unknown authority")
	})
	if n := readyWorkers(); n != 1 {
		t.Fatalf("%d ready workers with the stranger up, want only the mutual-TLS node's", n)
	}
	if err := tlsChat(fe, c, apiKey); err != nil {
		t.Fatalf("chat with the stranger up: %v", err)
	}
	_, metrics := fetch(t, c, fe.url+"/metrics", "")
	secrets := map[string]string{"API key": apiKey, "Consul token": token, "TLS private key": keyBody(t, fePair.KeyFile)}
	assertNoSecrets(t, "the frontend's /metrics", metrics, secrets)
	fe.stop()
	assertNoSecrets(t, "the frontend's log", fe.Logs(), secrets)
}
