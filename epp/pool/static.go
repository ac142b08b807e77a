package pool

import (
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"strings"
)

// Static is a fixed list of endpoints (--endpoints), for a picker that does not run on
// Kubernetes. It is always Ready and knows no load; wrap it in a Scraper for that.
type Static struct {
	eps []Endpoint
}

var _ Source = (*Static)(nil)

// NewStatic parses list with ParseEndpoints.
func NewStatic(list string) (*Static, error) {
	eps, err := ParseEndpoints(list)
	if err != nil {
		return nil, err
	}
	return &Static{eps: eps}, nil
}

// ParseEndpoints parses a comma-separated list of "ip:port" (IPv6 as "[ip]:port";
// spaces around items are ignored) into endpoints sorted by Address, addresses written
// in canonical form. Hosts must be IP literals: a gateway's ORIGINAL_DST cluster dials
// the address the picker returns as is. Errors: an empty list, an item that is not
// ip:port, a port outside 1..65535, a duplicate.
func ParseEndpoints(list string) ([]Endpoint, error) {
	var eps []Endpoint
	seen := map[string]bool{}
	for item := range strings.SplitSeq(list, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		addr, err := canonicalAddress(item)
		if err != nil {
			return nil, fmt.Errorf("pool: --endpoints: %w", err)
		}
		if seen[addr] {
			return nil, fmt.Errorf("pool: --endpoints: %s listed twice", addr)
		}
		seen[addr] = true
		eps = append(eps, Endpoint{Address: addr})
	}
	if len(eps) == 0 {
		return nil, fmt.Errorf("pool: --endpoints: no endpoint in %q", list)
	}
	slices.SortFunc(eps, func(a, b Endpoint) int { return strings.Compare(a.Address, b.Address) })
	return eps, nil
}

// canonicalAddress checks that s is ip:port and writes it canonically.
func canonicalAddress(s string) (string, error) {
	host, port, err := net.SplitHostPort(s)
	if err != nil {
		return "", fmt.Errorf("%q: %w", s, err)
	}
	ip, err := netip.ParseAddr(host)
	if err != nil || ip.Zone() != "" {
		return "", fmt.Errorf("%q: host %q is not an IP address", s, host)
	}
	n, err := strconv.Atoi(port)
	if err != nil || n < 1 || n > 65535 {
		return "", fmt.Errorf("%q: port %q is not in 1..65535", s, port)
	}
	return netip.AddrPortFrom(ip.Unmap(), uint16(n)).String(), nil
}

// Endpoints returns a copy of the list.
func (s *Static) Endpoints() []Endpoint { return slices.Clone(s.eps) }

// Ready is always true.
func (s *Static) Ready() bool { return true }

// Load knows nothing: ok is false.
func (s *Static) Load(string) (Load, bool) { return Load{}, false }
