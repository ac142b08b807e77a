package cluster

import (
	"strings"
	"testing"
)

func TestParseDiscovery(t *testing.T) {
	for _, tc := range []struct {
		in      string
		want    Discovery
		wantErr string // substring of the error; "" for success
	}{
		{in: "", want: Discovery{Kind: DiscoveryLocal}},
		{in: "local", want: Discovery{Kind: DiscoveryLocal}},
		{in: "consul://127.0.0.1:8500", want: Discovery{Kind: DiscoveryConsul, Address: "127.0.0.1:8500"}},
		{in: "consul://consul.service:9000", want: Discovery{Kind: DiscoveryConsul, Address: "consul.service:9000"}},
		{in: "consul://10.0.0.7", want: Discovery{Kind: DiscoveryConsul, Address: "10.0.0.7:8500"}},
		{in: "consul://10.0.0.7/", want: Discovery{Kind: DiscoveryConsul, Address: "10.0.0.7:8500"}},
		{in: "consul://[::1]:8501", want: Discovery{Kind: DiscoveryConsul, Address: "[::1]:8501"}},
		{in: "consul://[::1]", want: Discovery{Kind: DiscoveryConsul, Address: "[::1]:8500"}},
		{in: "Local", wantErr: "unknown scheme"},
		{in: "consul", wantErr: "unknown scheme"},
		{in: "etcd://127.0.0.1:2379", wantErr: "unknown scheme"},
		{in: "http://127.0.0.1:8500", wantErr: "unknown scheme"},
		{in: "consul://", wantErr: "no host"},
		{in: "consul:127.0.0.1:8500", wantErr: "no host"},
		{in: "consul://:8500", wantErr: "no host"},
		{in: "consul://127.0.0.1:", wantErr: "empty port"},
		{in: "consul://127.0.0.1:0", wantErr: "port must be 1-65535"},
		{in: "consul://127.0.0.1:65536", wantErr: "port must be 1-65535"},
		{in: "consul://127.0.0.1:http", wantErr: "not a URL"},
		{in: "consul://user:pw@127.0.0.1", wantErr: "credentials"},
		{in: "consul://127.0.0.1/v1", wantErr: "unexpected path"},
		{in: "consul://127.0.0.1?dc=a", wantErr: "unexpected path"},
	} {
		got, err := ParseDiscovery(tc.in)
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) || !strings.Contains(err.Error(), tc.in) {
				t.Errorf("ParseDiscovery(%q) = %+v, %v; want an error quoting the value and saying %q", tc.in, got, err, tc.wantErr)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("ParseDiscovery(%q) = %+v, %v; want %+v", tc.in, got, err, tc.want)
			continue
		}
		if back, err := ParseDiscovery(got.String()); err != nil || back != got {
			t.Errorf("ParseDiscovery(%q.String() = %q) = %+v, %v; want it back", tc.in, got.String(), back, err)
		}
	}
}
