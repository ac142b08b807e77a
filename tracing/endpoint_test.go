package tracing

import (
	"bufio"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"testing"
)

// TestParseEndpoint runs the cases of testdata/endpoints.txt.
func TestParseEndpoint(t *testing.T) {
	f, err := os.Open("testdata/endpoints.txt")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	n := 0
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "#") || strings.TrimSpace(line) == "" {
			continue
		}
		parts := strings.Split(line, "|")
		if len(parts) != 3 {
			t.Fatalf("bad case %q", line)
		}
		in, insecure, want := strings.TrimSpace(parts[0]), strings.TrimSpace(parts[1]) == "true", strings.TrimSpace(parts[2])
		n++
		ep, err := ParseEndpoint(in, insecure)
		if sub, ok := strings.CutPrefix(want, "error: "); ok {
			if err == nil || !errors.Is(err, ErrEndpoint) || !strings.Contains(err.Error(), sub) {
				t.Errorf("ParseEndpoint(%q, %v) = %+v, %v; want an ErrEndpoint saying %q", in, insecure, ep, err, sub)
			}
			continue
		}
		if err != nil {
			t.Errorf("ParseEndpoint(%q, %v): %v", in, insecure, err)
			continue
		}
		got := fmt.Sprintf("%s %s %s %v", ep.Protocol, ep.HostPort, ep.Path, ep.Insecure)
		if strings.Join(strings.Fields(got), " ") != strings.Join(strings.Fields(want), " ") {
			t.Errorf("ParseEndpoint(%q, %v) = %s, want %s", in, insecure, got, want)
		}
	}
	if n < 20 {
		t.Fatalf("only %d cases read", n)
	}
}

func TestResolve(t *testing.T) {
	for _, c := range []struct {
		flag     string
		insecure bool
		env      map[string]string
		want     string // protocol host:port path insecure; "off"; or "error: ..."
	}{
		{"", false, nil, "off"},
		{"http://a:4318", false, map[string]string{EnvEndpoint: "grpc://b:4317"}, "http/protobuf a:4318 /v1/traces true"},
		{"", false, map[string]string{EnvEndpoint: "http://b:4318"}, "http/protobuf b:4318 /v1/traces true"},
		{"", false, map[string]string{EnvEndpoint: "http://b:4317", EnvProtocol: "grpc"}, "grpc b:4317  true"},
		{"", false, map[string]string{EnvEndpoint: "https://b:4317/", EnvProtocol: "grpc"}, "grpc b:4317  false"},
		{"", false, map[string]string{EnvEndpoint: "  "}, "off"},
		{"", false, map[string]string{EnvEndpoint: "ftp://b"}, "error: " + EnvEndpoint},
	} {
		ep, ok, err := Resolve(c.flag, c.insecure, func(k string) string { return c.env[k] })
		var got string
		switch {
		case err != nil:
			got = "error: " + err.Error()
		case !ok:
			got = "off"
		default:
			got = fmt.Sprintf("%s %s %s %v", ep.Protocol, ep.HostPort, ep.Path, ep.Insecure)
		}
		if !strings.HasPrefix(got, c.want) {
			t.Errorf("Resolve(%q, %v, %v) = %q, want %q", c.flag, c.insecure, c.env, got, c.want)
		}
	}
}

// FuzzParseEndpoint: no input panics; an accepted endpoint has a protocol, a host:port
// with a valid port, and an OTLP/HTTP path ending in /v1/traces.
func FuzzParseEndpoint(f *testing.F) {
	for _, s := range []string{"http://127.0.0.1:4318", "https://x/otlp", "grpc://c", "c:4317", "[::1]:1", "http://[::1", "%", ""} {
		f.Add(s, false)
	}
	f.Fuzz(func(t *testing.T, s string, insecure bool) {
		ep, err := ParseEndpoint(s, insecure)
		if err != nil {
			if !errors.Is(err, ErrEndpoint) {
				t.Fatalf("error %v does not wrap ErrEndpoint", err)
			}
			return
		}
		if _, _, err := splitHostPort(ep.HostPort); err != nil {
			t.Fatalf("%q: host:port %q: %v", s, ep.HostPort, err)
		}
		switch ep.Protocol {
		case ProtocolHTTP:
			if !strings.HasSuffix(ep.Path, DefaultHTTPPath) {
				t.Fatalf("%q: path %q", s, ep.Path)
			}
		case ProtocolGRPC:
			if ep.Path != "" || ep.Insecure != insecure {
				t.Fatalf("%q: gRPC endpoint %+v", s, ep)
			}
		default:
			t.Fatalf("%q: no protocol: %+v", s, ep)
		}
	})
}

// splitHostPort is net.SplitHostPort with the port checked (1..65535).
func splitHostPort(hp string) (host string, port int, err error) {
	h, p, err := net.SplitHostPort(hp)
	if err != nil {
		return "", 0, err
	}
	n, err := strconv.Atoi(p)
	if err != nil || n < 1 || n > 65535 {
		return "", 0, fmt.Errorf("port %q: want 1..65535", p)
	}
	return h, n, nil
}
