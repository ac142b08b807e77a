package cluster

import (
	"fmt"
	"net"
	"net/url"
	"strconv"
)

// Discovery kinds.
const (
	DiscoveryLocal  = "local"  // in-process provider: the members of this process see each other
	DiscoveryConsul = "consul" // a Consul agent's HTTP API
)

// Discovery is a parsed Config.Discovery.
type Discovery struct {
	// Kind is DiscoveryLocal or DiscoveryConsul.
	Kind string
	// Address is the Consul agent's HTTP API, "HOST:PORT" (empty for local).
	Address string
}

// String gives the form ParseDiscovery reads.
func (d Discovery) String() string {
	if d.Kind == DiscoveryConsul {
		return "consul://" + d.Address
	}
	return d.Kind
}

// ParseDiscovery reads "local" (also the empty string) or "consul://HOST[:PORT]" (port
// 8500 when absent; an IPv6 host in brackets). Anything else — another scheme, a path, a
// query, credentials, a bad port — is an error that quotes the value.
func ParseDiscovery(s string) (Discovery, error) {
	if s == "" || s == DiscoveryLocal {
		return Discovery{Kind: DiscoveryLocal}, nil
	}
	bad := func(why string) (Discovery, error) {
		return Discovery{}, fmt.Errorf(`cluster: discovery %q: %s (want "local" or "consul://HOST[:PORT]")`, s, why)
	}
	u, err := url.Parse(s)
	if err != nil {
		return bad("not a URL")
	}
	switch {
	case u.Scheme != DiscoveryConsul:
		return bad("unknown scheme")
	case u.Opaque != "" || u.Host == "":
		return bad("no host")
	case u.User != nil:
		return bad("credentials belong in the Consul token, not the address")
	case u.Path != "" && u.Path != "/", u.RawQuery != "", u.Fragment != "":
		return bad("unexpected path, query or fragment")
	}
	host, port := u.Hostname(), u.Port()
	if host == "" {
		return bad("no host")
	}
	if port == "" {
		if u.Host[len(u.Host)-1] == ':' {
			return bad("empty port")
		}
		port = strconv.Itoa(DefaultConsulPort)
	}
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
		return bad("port must be 1-65535")
	}
	return Discovery{Kind: DiscoveryConsul, Address: net.JoinHostPort(host, port)}, nil
}
