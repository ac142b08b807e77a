package tracing

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
)

// Protocol is the OTLP transport an endpoint is reached over.
type Protocol int8

const (
	// ProtocolHTTP is OTLP/HTTP with protobuf bodies (POST <path>, default /v1/traces).
	ProtocolHTTP Protocol = iota + 1
	// ProtocolGRPC is OTLP/gRPC (TraceService/Export).
	ProtocolGRPC
)

// String is the protocol's name as OTEL_EXPORTER_OTLP_PROTOCOL spells it.
func (p Protocol) String() string {
	switch p {
	case ProtocolHTTP:
		return "http/protobuf"
	case ProtocolGRPC:
		return "grpc"
	}
	return "unknown"
}

// Default ports and path of OTLP receivers.
const (
	DefaultGRPCPort = 4317
	DefaultHTTPPort = 4318
	DefaultHTTPPath = "/v1/traces"
)

// Endpoint is where spans are exported, parsed from --otlp-endpoint (ParseEndpoint).
type Endpoint struct {
	Protocol Protocol
	// HostPort is host:port (a port is always present).
	HostPort string
	// Path is the URL path spans are POSTed to (OTLP/HTTP only): the URL's path with
	// /v1/traces appended unless it already ends so.
	Path string
	// Insecure: plaintext (http://, or gRPC with --otlp-insecure); else TLS with the
	// system's roots.
	Insecure bool
}

// ErrEndpoint is the error of an endpoint ParseEndpoint refuses (wrapped with detail).
var ErrEndpoint = errors.New("tracing: invalid OTLP endpoint")

// ParseEndpoint reads an --otlp-endpoint value:
//
//	http://host[:port][/path]   OTLP/HTTP, plaintext (port 4318 when absent)
//	https://host[:port][/path]  OTLP/HTTP over TLS (port 4318 when absent)
//	grpc://host[:port]          OTLP/gRPC (port 4317 when absent)
//	host:port                   OTLP/gRPC
//
// OTLP/HTTP posts to path with /v1/traces appended (the OpenTelemetry convention for a
// base URL) unless path already ends with /v1/traces. gRPC is TLS unless insecure is
// set (--otlp-insecure); for OTLP/HTTP the scheme decides, and insecure with https:// is
// refused as contradictory. Errors wrap ErrEndpoint: an empty value, an unknown scheme,
// no host, a bad port, user info, a query or fragment, a path on gRPC.
func ParseEndpoint(s string, insecure bool) (Endpoint, error) {
	bad := func(format string, a ...any) (Endpoint, error) {
		return Endpoint{}, fmt.Errorf("%w %q: %s", ErrEndpoint, s, fmt.Sprintf(format, a...))
	}
	if s == "" {
		return bad("empty")
	}
	if strings.ContainsAny(s, " \t\r\n") {
		return bad("contains white space")
	}
	if !strings.Contains(s, "://") {
		// host:port, gRPC as the OpenTelemetry Collector's own examples write it.
		host, port, err := net.SplitHostPort(s)
		if err != nil {
			return bad("want http://host:port, https://host:port, grpc://host:port or host:port")
		}
		hp, err := hostPort(host, port, DefaultGRPCPort)
		if err != nil {
			return bad("%v", err)
		}
		return Endpoint{Protocol: ProtocolGRPC, HostPort: hp, Insecure: insecure}, nil
	}
	u, err := url.Parse(s)
	if err != nil {
		return bad("%v", err)
	}
	switch {
	case u.User != nil:
		return bad("user info is not supported (put credentials in OTEL_EXPORTER_OTLP_HEADERS)")
	case u.RawQuery != "" || u.ForceQuery || u.Fragment != "":
		return bad("a query or fragment is not supported")
	case u.Opaque != "":
		return bad("want scheme://host:port")
	}
	hp, err := hostPort(u.Hostname(), u.Port(), DefaultHTTPPort)
	if err != nil {
		return bad("%v", err)
	}
	switch strings.ToLower(u.Scheme) {
	case "http", "https":
		tls := strings.EqualFold(u.Scheme, "https")
		if tls && insecure {
			return bad("--otlp-insecure with an https:// endpoint: use http:// for plaintext")
		}
		path := strings.TrimRight(u.EscapedPath(), "/")
		if !strings.HasSuffix(path, DefaultHTTPPath) {
			path += DefaultHTTPPath
		}
		return Endpoint{Protocol: ProtocolHTTP, HostPort: hp, Path: path, Insecure: !tls}, nil
	case "grpc":
		if p := strings.TrimRight(u.EscapedPath(), "/"); p != "" {
			return bad("an OTLP/gRPC endpoint has no path")
		}
		if u.Port() == "" {
			hp = net.JoinHostPort(u.Hostname(), strconv.Itoa(DefaultGRPCPort))
		}
		return Endpoint{Protocol: ProtocolGRPC, HostPort: hp, Insecure: insecure}, nil
	}
	return bad("unknown scheme %q (want http, https or grpc)", u.Scheme)
}

// hostPort joins host and port, def when port is empty. Errors: no host, a host that is
// neither an IP address nor a DNS name, a port that is not 1..65535.
func hostPort(host, port string, def int) (string, error) {
	if host == "" {
		return "", errors.New("no host")
	}
	if !validHost(host) {
		return "", fmt.Errorf("host %q: want an IP address or a DNS name", host)
	}
	if port == "" {
		return net.JoinHostPort(host, strconv.Itoa(def)), nil
	}
	n, err := strconv.Atoi(port)
	if err != nil || n < 1 || n > 65535 || strconv.Itoa(n) != port {
		return "", fmt.Errorf("port %q: want 1..65535", port)
	}
	return net.JoinHostPort(host, port), nil
}

// validHost reports whether host is an IP address (IPv6 with an optional zone) or a DNS
// name: letters, digits, '-', '_' and '.', at most 253 bytes.
func validHost(host string) bool {
	if _, err := netip.ParseAddr(host); err == nil {
		return true
	}
	if len(host) > 253 {
		return false
	}
	for _, c := range host {
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '-', c == '_', c == '.':
		default:
			return false
		}
	}
	return true
}

// The standard environment variables read when --otlp-endpoint is not given.
const (
	EnvEndpoint    = "OTEL_EXPORTER_OTLP_ENDPOINT"
	EnvProtocol    = "OTEL_EXPORTER_OTLP_PROTOCOL"
	EnvServiceName = "OTEL_SERVICE_NAME"
)

// Resolve returns the endpoint to export to: ParseEndpoint(flag, insecure) when flag
// (--otlp-endpoint) is set, else getenv(OTEL_EXPORTER_OTLP_ENDPOINT) parsed the same way;
// ok is false when neither is set (tracing off). An endpoint from the environment
// follows OTEL_EXPORTER_OTLP_PROTOCOL as OpenTelemetry's SDKs do: with "grpc",
// http://host:port is OTLP/gRPC in plaintext and https://host:port OTLP/gRPC over TLS.
// Errors: ParseEndpoint's, naming the variable when the value came from it.
func Resolve(flag string, insecure bool, getenv func(string) string) (ep Endpoint, ok bool, err error) {
	if flag != "" {
		ep, err = ParseEndpoint(flag, insecure)
		return ep, err == nil, err
	}
	v := strings.TrimSpace(getenv(EnvEndpoint))
	if v == "" {
		return Endpoint{}, false, nil
	}
	if strings.TrimSpace(getenv(EnvProtocol)) == "grpc" {
		if rest, found := strings.CutPrefix(v, "http://"); found {
			v, insecure = "grpc://"+strings.TrimRight(rest, "/"), true
		} else if rest, found := strings.CutPrefix(v, "https://"); found {
			v = "grpc://" + strings.TrimRight(rest, "/")
		}
	}
	if ep, err = ParseEndpoint(v, insecure); err != nil {
		return Endpoint{}, false, fmt.Errorf("%s: %w", EnvEndpoint, err)
	}
	return ep, true, nil
}
