package options

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"

	"github.com/rs/zerolog"

	"github.com/turbine-llm/turbine/gateway"
)

// HTTP are the OpenAI HTTP listener's flags.
type HTTP struct {
	Host         string
	Port         int
	MaxBodyBytes int64 // largest accepted request body, bytes
	// APIKeys are the keys a client must present as "Authorization: Bearer <key>" on
	// /v1/ (gateway.Config.APIKeys); empty: no authentication. From
	// --api-key, repeatable and comma-separated, or TURBINE_API_KEY (comma-separated).
	APIKeys []string
	// AdminAPIKeys are the keys of /admin/ (gateway.Config.AdminAPIKeys); empty: /admin/
	// answers loopback clients only, or nobody when APIKeys is set. From
	// --admin-api-key or TURBINE_ADMIN_API_KEY, as APIKeys.
	AdminAPIKeys []string
	// StreamWriteTimeout is how long one write of a response may wait for the client to
	// read before the connection is closed and the request cancelled
	// (gateway.Config.StreamWriteTimeout); 0: no limit.
	StreamWriteTimeout time.Duration
	// TrustRequestChatTemplate lets requests bring their own chat template
	// (gateway.Config.TrustRequestChatTemplate; vLLM's flag of that name); false: such a
	// request gets 400.
	TrustRequestChatTemplate bool
	// TLSCert and TLSKey are the PEM files of the listener's certificate (with any
	// intermediates after it) and private key (--tls-cert, --tls-key; both or neither):
	// with them the listeners speak only HTTPS, TLS 1.2 and above (tls.go, docs/tls.md).
	TLSCert, TLSKey string
	// AdminHost and AdminPort are a separate listener for /admin/ (--admin-host,
	// --admin-port); AdminPort 0: none, /admin/ stays on the main listener. With one,
	// /admin/ answers 404 on the main listener (tls.go).
	AdminHost string
	AdminPort int
	// CORS is the cross-origin policy for browser clients (gateway.CORS; vLLM's
	// --allowed-origins, --allowed-methods, --allowed-headers, --allow-credentials).
	CORS gateway.CORS
}

// DefaultHTTP returns 127.0.0.1:8000, a 4 MiB body limit, a 60 s stream write
// timeout, requests' own chat templates refused, no TLS, no admin listener (its host
// 127.0.0.1 once --admin-port is given) and vLLM's CORS policy (any origin, method and
// header; no credentials).
func DefaultHTTP() HTTP {
	return HTTP{Host: "127.0.0.1", Port: 8000, MaxBodyBytes: 4 << 20, StreamWriteTimeout: gateway.DefaultStreamWriteTimeout,
		AdminHost: "127.0.0.1", CORS: *gateway.DefaultCORS()}
}

// Flags registers the HTTP flags on fs.
func (o *HTTP) Flags(fs *flag.FlagSet) {
	fs.StringVar(&o.Host, "host", o.Host, "address the OpenAI HTTP API listens on")
	fs.IntVar(&o.Port, "port", o.Port, "port of the OpenAI HTTP API (0 picks a free one)")
	fs.Int64Var(&o.MaxBodyBytes, "max-body-bytes", o.MaxBodyBytes, "largest accepted HTTP request body in bytes")
	fs.Var(&keyList{keys: &o.APIKeys, fs: fs}, "api-key",
		"require `keys` on /v1/ (\"Authorization: Bearer KEY\"; /health, /live, /metrics stay open; /admin/ takes --admin-api-key): comma-separated, "+
			"the flag repeatable; any one of them is accepted (default: no authentication)")
	fs.Var(&keyList{keys: &o.AdminAPIKeys, fs: fs}, "admin-api-key",
		"require `keys` on /admin/ (\"Authorization: Bearer KEY\"), where --api-key keys are not accepted: comma-separated, the flag repeatable "+
			"(default: /admin/ answers only loopback clients not relayed by a proxy, and nobody when --api-key is set)")
	fs.DurationVar(&o.StreamWriteTimeout, "stream-write-timeout", o.StreamWriteTimeout,
		"close the connection of a client that reads nothing of its response (streamed or not) for this long, and cancel its engine request; "+
			"renewed at every write, so slow generation is not cut, but a client that stalls this long is (0: no limit)")
	fs.BoolVar(&o.TrustRequestChatTemplate, "trust-request-chat-template", o.TrustRequestChatTemplate,
		"render the Jinja chat template a request brings (chat_template, chat_template_kwargs.chat_template) instead of refusing it with 400, "+
			"as vLLM's flag of that name; the template engine bounds neither a template's running time nor its output, "+
			"so one request's template can take all of this process's CPU and memory, or crash it (a deeply nested one overflows the parser's stack): "+
			"trust only clients that may do that")
	fs.Var(listFlag{&o.CORS.AllowedOrigins}, "allowed-origins",
		"origins browser clients may call the API from, as a JSON list (vLLM's form, e.g. '[\"https://app.example\"]') or comma-separated; \"*\": any (not /admin/, which never answers cross-origin)")
	fs.Var(listFlag{&o.CORS.AllowedMethods}, "allowed-methods", "HTTP methods allowed cross-origin, as --allowed-origins; \"*\": any")
	fs.Var(listFlag{&o.CORS.AllowedHeaders}, "allowed-headers", "request headers allowed cross-origin, as --allowed-origins; \"*\": any")
	fs.BoolVar(&o.CORS.AllowCredentials, "allow-credentials", o.CORS.AllowCredentials,
		"let browsers send credentials (cookies, HTTP authentication) cross-origin; needs --allowed-origins naming the origins")
	o.tlsFlags(fs)
}

// listFlag is a list flag in vLLM's JSON form (["a", "b"]) or comma-separated; each use
// replaces the list.
type listFlag struct{ v *[]string }

func (f listFlag) String() string {
	if f.v == nil {
		return ""
	}
	b, _ := json.Marshal(*f.v)
	return string(b)
}

func (f listFlag) Set(s string) error {
	s = strings.TrimSpace(s)
	var out []string
	if strings.HasPrefix(s, "[") {
		if err := json.Unmarshal([]byte(s), &out); err != nil {
			return fmt.Errorf("want a JSON list of strings or a comma-separated list: %v", err)
		}
	} else {
		for _, e := range strings.Split(s, ",") {
			if e = strings.TrimSpace(e); e != "" {
				out = append(out, e)
			}
		}
	}
	for _, e := range out {
		if e == "" || strings.ContainsFunc(e, unicode.IsControl) {
			return fmt.Errorf("%q: an empty entry or one with control characters", e)
		}
	}
	*f.v = out
	return nil
}

// Validate checks the HTTP options; errors name the flag.
func (o *HTTP) Validate() error {
	switch {
	case o.Port < 0 || o.Port > 65535:
		return fmt.Errorf("--port %d: want 0..65535", o.Port)
	case o.MaxBodyBytes < 1024:
		return fmt.Errorf("--max-body-bytes %d: must be ≥ 1024", o.MaxBodyBytes)
	case o.StreamWriteTimeout < 0:
		return fmt.Errorf("--stream-write-timeout %v: must be ≥ 0 (0: no limit)", o.StreamWriteTimeout)
	}
	if err := validateKeys("api-key", o.APIKeys); err != nil {
		return err
	}
	if err := o.validateTLS(); err != nil {
		return err
	}
	if len(o.CORS.AllowedOrigins) > 0 && (len(o.CORS.AllowedMethods) == 0 || len(o.CORS.AllowedHeaders) == 0) {
		return fmt.Errorf("--allowed-methods and --allowed-headers: want at least one each (\"*\": any); to turn CORS off, give --allowed-origins '[]'")
	}
	if o.CORS.AllowCredentials && slices.Contains(o.CORS.AllowedOrigins, "*") {
		return fmt.Errorf("--allow-credentials: needs --allowed-origins naming the origins, not \"*\" (browsers refuse credentials with any origin)")
	}
	return validateKeys("admin-api-key", o.AdminAPIKeys)
}

// validateKeys checks the keys of --flag; the errors name the key's position, never the
// key.
func validateKeys(flag string, keys []string) error {
	for i, k := range keys {
		switch {
		case k == "":
			return fmt.Errorf("--%s: key %d of %d is empty (give non-empty keys, comma-separated or with --%s repeated)", flag, i+1, len(keys), flag)
		case strings.ContainsFunc(k, unicode.IsControl):
			return fmt.Errorf("--%s: key %d of %d has a control character (it could not be sent in an Authorization header)", flag, i+1, len(keys))
		}
	}
	return nil
}

// Gateway sets the body limit, keys, stream write timeout and chat-template trust of
// cfg.
func (o *HTTP) Gateway(cfg gateway.Config) gateway.Config {
	cfg.MaxBodyBytes, cfg.APIKeys, cfg.AdminAPIKeys = o.MaxBodyBytes, o.APIKeys, o.AdminAPIKeys
	cfg.StreamWriteTimeout = o.StreamWriteTimeout
	cfg.TrustRequestChatTemplate = o.TrustRequestChatTemplate
	if len(o.CORS.AllowedOrigins) > 0 {
		c := o.CORS
		cfg.CORS = &c
	}
	if o.StreamWriteTimeout == 0 {
		cfg.StreamWriteTimeout = -1 // the gateway's zero means its default
	}
	return cfg
}

// keyList is the value of --api-key and --admin-api-key: comma-separated keys (white
// space around each trimmed), the flag repeatable. As for every flag, the command line
// wins over the environment: the keys of TURBINE_API_KEY (which cli.Parse sets before
// it parses the arguments) are replaced by those of the first --api-key, and further
// --api-key flags add theirs (likewise for --admin-api-key and TURBINE_ADMIN_API_KEY).
// String never shows the keys (flag errors and help print it).
type keyList struct {
	keys *[]string
	fs   *flag.FlagSet // Parsed tells the environment's Set from the command line's
	// from is where the keys held came from: 0 the default, 1 the environment, 2 the
	// command line.
	from int
}

func (v *keyList) String() string {
	if v == nil || v.keys == nil || len(*v.keys) == 0 {
		return ""
	}
	return fmt.Sprintf("(%d keys)", len(*v.keys))
}

func (v *keyList) Set(s string) error {
	from := 1
	if v.fs.Parsed() {
		from = 2
	}
	if from != v.from {
		*v.keys, v.from = nil, from
	}
	for _, k := range strings.Split(s, ",") {
		*v.keys = append(*v.keys, strings.TrimSpace(k))
	}
	return nil
}

// Listen binds the HTTP port; errors name --host and --port. Each accepted connection
// holds at most DefaultUnsentLimit bytes unsent, so that a client that stops reading
// blocks the gateway's writes (and meets --stream-write-timeout) soon. With --tls-cert
// the listener speaks HTTPS (tls.go); it never binds the admin listener: ListenAll does.
func (o *HTTP) Listen() (net.Listener, error) {
	cfg, err := o.serverTLS(zerolog.Nop())
	if err != nil {
		return nil, err
	}
	return listen(o.Host, o.Port, "--host", "--port", cfg)
}

// bind binds host:port; errors name the flags.
func bind(host string, port int, hostFlag, portFlag string) (net.Listener, error) {
	ln, err := net.Listen("tcp", net.JoinHostPort(host, strconv.Itoa(port)))
	if err != nil {
		return nil, fmt.Errorf("%s %s %s %d: %w", hostFlag, host, portFlag, port, err)
	}
	return unsentLimitListener{Listener: ln, limit: DefaultUnsentLimit}, nil
}

// Serve serves handler on ln until ctx ends, then shuts down gracefully (10 s for
// in-flight requests). Bodies must arrive within 60 s (stalled uploads would otherwise
// hold connections forever); there is no whole-response write timeout, since streams
// last as long as generation: the gateway bounds each write instead
// (--stream-write-timeout). It returns nil after a shutdown and the server's error
// otherwise.
func Serve(ctx context.Context, ln net.Listener, handler http.Handler, log zerolog.Logger) error {
	srv := newHTTPServer(handler)
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case <-ctx.Done():
		log.Info().Msg("shutting down")
	case err := <-errc:
		return fmt.Errorf("http server: %w", err)
	}
	shutdownCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_ = srv.Shutdown(shutdownCtx)
	return nil
}

// newHTTPServer is the server of Serve and ServeDrained.
func newHTTPServer(handler http.Handler) *http.Server {
	return &http.Server{Handler: handler, ReadHeaderTimeout: 10 * time.Second, ReadTimeout: 60 * time.Second,
		IdleTimeout: 120 * time.Second}
}
