package node

import (
	"net"
	"strings"
	"testing"

	"github.com/turbine-llm/turbine/cmd/turbine/internal/options"
)

func TestEngineAdvertiseHost(t *testing.T) {
	for _, tc := range []struct {
		name, engine, member, advertise, want string
	}{
		{"loopback engines", "127.0.0.1", "127.0.0.1", "", "127.0.0.1"},
		{"engines on one address", "10.0.0.5", "0.0.0.0", "10.0.0.9", "10.0.0.5"},
		{"every address, advertised", "0.0.0.0", "0.0.0.0", "10.0.0.9", "10.0.0.9"},
		{"every address, member host", "::", "10.0.0.7", "", "10.0.0.7"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := Options{EngineHost: tc.engine, Cluster: options.Cluster{MemberHost: tc.member, AdvertiseHost: tc.advertise}}
			if got := o.engineAdvertiseHost(); got != tc.want {
				t.Fatalf("engine_url host %q, want %q", got, tc.want)
			}
		})
	}
}

func TestEngineMetricsPath(t *testing.T) {
	for _, tc := range []struct{ engine, dialect, want string }{
		{"vllm", "", "/metrics"}, {"sglang", "", "/metrics"}, {"trtllm", "", "/prometheus/metrics"},
		{"mocker", "", "/metrics"}, {"mocker", "sglang", "/metrics"}, {"mocker", "trtllm", "/prometheus/metrics"},
	} {
		if got := engineMetricsPath(tc.engine, tc.dialect); got != tc.want {
			t.Errorf("engine %s dialect %q: %s, want %s", tc.engine, tc.dialect, got, tc.want)
		}
	}
}

// TestHTTPFlags: --http-port takes -1..65535; -1 serves nothing; --engine-host must not
// be empty; the defaults are 127.0.0.1:9090 and engines on 127.0.0.1.
func TestHTTPFlags(t *testing.T) {
	o := Defaults()
	if o.HTTP.Host != "127.0.0.1" || o.HTTP.Port != 9090 || o.EngineHost != "127.0.0.1" {
		t.Fatalf("defaults %+v engine host %q", o.HTTP, o.EngineHost)
	}
	for _, tc := range []struct {
		port    int
		engine  string
		wantErr bool
	}{{-1, "127.0.0.1", false}, {0, "0.0.0.0", false}, {65535, "127.0.0.1", false}, {-2, "127.0.0.1", true},
		{65536, "127.0.0.1", true}, {9090, "", true}} {
		o := Defaults()
		o.NodeID, o.HTTP.Port, o.EngineHost = "n", tc.port, tc.engine
		if err := o.Validate(); (err != nil) != tc.wantErr {
			t.Errorf("--http-port %d --engine-host %q: %v, want error %v", tc.port, tc.engine, err, tc.wantErr)
		}
	}
	off := options.NodeHTTP{Host: "127.0.0.1", Port: -1}
	if ln, err := off.Listen(); ln != nil || err != nil {
		t.Fatalf("--http-port -1: listener %v, %v; want none", ln, err)
	}
	on := options.NodeHTTP{Host: "127.0.0.1", Port: 0}
	ln, err := on.Listen()
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	taken := options.NodeHTTP{Host: "127.0.0.1", Port: ln.Addr().(*net.TCPAddr).Port}
	if _, err := taken.Listen(); err == nil || !strings.Contains(err.Error(), "--http-port") {
		t.Fatalf("a taken port: %v, want an error naming --http-port", err)
	}
}
