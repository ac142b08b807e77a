package options

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"path"
	"strings"
	"time"

	"github.com/rs/zerolog"

	"github.com/turbine-llm/turbine/gateway"
	"github.com/turbine-llm/turbine/internal/tlsfiles"
)

// The gateway listener's TLS and its admin listener (docs/tls.md). The fields are HTTP's
// (http.go); the members' mutual TLS is Cluster's (cluster.go).

// tlsFlags registers --tls-cert, --tls-key, --admin-host and --admin-port on fs.
func (o *HTTP) tlsFlags(fs *flag.FlagSet) {
	fs.StringVar(&o.TLSCert, "tls-cert", o.TLSCert,
		"PEM `file` of the listener's certificate (then any intermediates): with --tls-key the API (and the admin listener) speaks only HTTPS, "+
			"TLS 1.2 and above; a renewed file is used from the next connection on (docs/tls.md)")
	fs.StringVar(&o.TLSKey, "tls-key", o.TLSKey, "PEM `file` of the private key of --tls-cert (both or neither)")
	fs.StringVar(&o.AdminHost, "admin-host", o.AdminHost, "address the admin listener binds (with --admin-port)")
	fs.IntVar(&o.AdminPort, "admin-port", o.AdminPort,
		"serve /admin/ on a listener of its own on this port, and answer 404 there on the API's (0: no admin listener, /admin/ on the API's port); "+
			"--admin-api-key and the loopback rule apply there as on the API's")
}

// validateTLS checks the TLS and admin listener flags: both TLS files or neither, a pair
// that loads, is valid now and fits a server; an admin port in range, on a named host.
func (o *HTTP) validateTLS() error {
	switch {
	case o.AdminPort < 0 || o.AdminPort > 65535:
		return fmt.Errorf("--admin-port %d: want 0..65535 (0: no admin listener)", o.AdminPort)
	case o.AdminPort > 0 && o.AdminHost == "":
		return errors.New("--admin-host: empty (give the address the admin listener binds)")
	case o.AdminPort > 0 && o.AdminPort == o.Port && o.AdminHost == o.Host:
		return fmt.Errorf("--admin-port %d: the API's --port; give the admin listener a port of its own", o.AdminPort)
	}
	_, err := o.keyPair(time.Now(), nil)
	return err
}

// keyPair loads --tls-cert and --tls-key and checks the certificate at now; nil, nil
// without TLS. Errors name the flags.
func (o *HTTP) keyPair(now time.Time, onReload func(*x509.Certificate, error)) (*tlsfiles.KeyPair, error) {
	switch {
	case o.TLSCert == "" && o.TLSKey == "":
		return nil, nil
	case o.TLSKey == "":
		return nil, fmt.Errorf("--tls-cert %s: --tls-key is missing (give both or neither)", o.TLSCert)
	case o.TLSCert == "":
		return nil, fmt.Errorf("--tls-key %s: --tls-cert is missing (give both or neither)", o.TLSKey)
	}
	kp, err := tlsfiles.LoadKeyPair(o.TLSCert, o.TLSKey, onReload)
	if err != nil {
		return nil, fmt.Errorf("--tls-cert %s --tls-key %s: %w", o.TLSCert, o.TLSKey, err)
	}
	if err := tlsfiles.CheckValidity(kp.Leaf(), now); err != nil {
		return nil, fmt.Errorf("--tls-cert %s: %w", o.TLSCert, err)
	}
	if err := tlsfiles.CheckUsage(kp.Leaf(), x509.ExtKeyUsageServerAuth); err != nil {
		return nil, fmt.Errorf("--tls-cert %s: %w", o.TLSCert, err)
	}
	return kp, nil
}

// serverTLS is the listeners' TLS configuration (nil without --tls-cert): the key pair's
// current certificate on every handshake, TLS 1.2 and above, HTTP/1.1 only (the
// gateway's per-connection write bounds are HTTP/1.1's). Renewals seen on disk are logged.
func (o *HTTP) serverTLS(log zerolog.Logger) (*tls.Config, error) {
	kp, err := o.keyPair(time.Now(), func(leaf *x509.Certificate, err error) {
		if err != nil {
			log.Error().Err(err).Str("tls_cert", o.TLSCert).Msg("TLS certificate changed on disk but does not load: the previous one stays in use")
			return
		}
		log.Info().Str("tls_cert", o.TLSCert).Str("subject", leaf.Subject.CommonName).Time("not_after", leaf.NotAfter).Msg("TLS certificate reloaded")
	})
	if err != nil || kp == nil {
		return nil, err
	}
	leaf := kp.Leaf()
	log.Info().Str("subject", leaf.Subject.CommonName).Strs("dns_names", leaf.DNSNames).Time("not_after", leaf.NotAfter).
		Msg("HTTPS listener certificate loaded")
	return tlsfiles.ServerConfig(kp, nil, "http/1.1"), nil
}

// listen binds host:port (errors name the flags) and, with cfg, speaks TLS on it.
func listen(host string, port int, hostFlag, portFlag string, cfg *tls.Config) (net.Listener, error) {
	ln, err := bind(host, port, hostFlag, portFlag)
	if err != nil || cfg == nil {
		return ln, err
	}
	return tls.NewListener(ln, cfg), nil
}

// Listeners are the gateway's bound listeners: Main for the API, Admin for /admin/ with
// --admin-port (nil otherwise). Both speak HTTPS with --tls-cert.
type Listeners struct {
	Main, Admin net.Listener
	TLS         bool

	admin *http.Server // serving Admin once ServeAdmin was called
	done  chan struct{}
}

// ListenAll binds the API's listener and, with --admin-port, the admin listener; errors
// name the flags. Bind them before any slow start, so that a taken port fails at once.
func (o *HTTP) ListenAll(log zerolog.Logger) (*Listeners, error) {
	cfg, err := o.serverTLS(log)
	if err != nil {
		return nil, err
	}
	ls := &Listeners{TLS: cfg != nil}
	if ls.Main, err = listen(o.Host, o.Port, "--host", "--port", cfg); err != nil {
		return nil, err
	}
	if o.AdminPort > 0 {
		if ls.Admin, err = listen(o.AdminHost, o.AdminPort, "--admin-host", "--admin-port", cfg); err != nil {
			ls.Main.Close()
			return nil, err
		}
	}
	return ls, nil
}

// URL is the API's base URL: "https://HOST:PORT" with TLS, "http://HOST:PORT" without.
func (ls *Listeners) URL() string { return ls.scheme() + "://" + ls.Main.Addr().String() }

// AdminURL is the admin listener's base URL, "" without one.
func (ls *Listeners) AdminURL() string {
	if ls.Admin == nil {
		return ""
	}
	return ls.scheme() + "://" + ls.Admin.Addr().String()
}

func (ls *Listeners) scheme() string {
	if ls.TLS {
		return "https"
	}
	return "http"
}

// ServeAdmin serves h's /admin/ routes on the admin listener (until Close) and returns
// the handler for the main listener: h without /admin/. Without an admin listener it
// returns h itself.
func (ls *Listeners) ServeAdmin(h http.Handler, log zerolog.Logger) http.Handler {
	if ls.Admin == nil {
		return h
	}
	ls.admin, ls.done = newHTTPServer(AdminOnly(h, true)), make(chan struct{})
	go func() {
		defer close(ls.done)
		if err := ls.admin.Serve(ls.Admin); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error().Err(err).Msg("admin listener failed")
		}
	}()
	log.Info().Str("admin_url", ls.AdminURL()).Msg("admin routes served on their own listener")
	return AdminOnly(h, false)
}

// Close stops the admin server (5 s for its requests in flight) and closes the listeners.
func (ls *Listeners) Close() {
	if ls.admin != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_ = ls.admin.Shutdown(ctx)
		cancel()
		<-ls.done
	}
	if ls.Admin != nil {
		ls.Admin.Close()
	}
	ls.Main.Close()
}

// AdminOnly splits h between the two listeners: with admin true it serves only the admin
// routes (/admin and below), with admin false everything else; other requests get the
// gateway's 404 for an unknown URL. A path counts as an admin route when it is one before
// or after cleaning (/v1/../admin/x is one), so that the gateway's redirect to the clean
// path cannot carry a request across.
func AdminOnly(h http.Handler, admin bool) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if isAdminPath(r.URL.Path) != admin {
			writeNotFound(w, r)
			return
		}
		h.ServeHTTP(w, r)
	})
}

func isAdminPath(p string) bool {
	under := func(p string) bool { return p == "/admin" || strings.HasPrefix(p, "/admin/") }
	return under(p) || under(path.Clean("/"+p))
}

// writeNotFound answers as the gateway does for a URL it does not serve (its catalogue's
// route_not_found).
func writeNotFound(w http.ResponseWriter, r *http.Request) {
	e := &gateway.APIError{Kind: gateway.KindRouteNotFound,
		Message: fmt.Sprintf("Invalid URL (%s %s).", clip(r.Method), clip(r.URL.Path))}
	body, _ := e.MarshalJSON()
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(e.Status())
	_, _ = w.Write(append(body, '\n'))
}

// clip bounds a request-supplied string quoted in an answer.
func clip(s string) string {
	const limit = 256
	if len(s) > limit {
		return strings.ToValidUTF8(s[:limit], "") + "…"
	}
	return s
}
