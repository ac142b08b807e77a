package chaos

import (
	"fmt"
	"slices"
	"strings"
)

// HostRules is one host's network state: the hosts its packets to are dropped, and
// whether its link is lossy.
type HostRules struct {
	DropTo []string // host names, sorted
	Lossy  bool
}

// Rules is every host's rules while the network events active are in force (events
// overlap: a pair stays cut while any event cuts it).
func Rules(active []Event, topo Topology) map[string]HostRules {
	drop := map[string]map[string]bool{}
	cut := func(from, to string) {
		if from == to {
			return
		}
		if drop[from] == nil {
			drop[from] = map[string]bool{}
		}
		drop[from][to] = true
	}
	both := func(a, b string) { cut(a, b); cut(b, a) }
	out := map[string]HostRules{}
	for _, e := range active {
		switch e.Kind {
		case IsolateNode:
			for _, f := range topo.Frontends {
				both(e.Target, f)
			}
		case IsolateConsul:
			both(e.Target, topo.Consul)
		case Split, SplitKeepConsul:
			a, b := topo.Halves()
			for _, x := range a {
				if e.Kind == SplitKeepConsul && x == topo.Consul {
					continue
				}
				for _, y := range b {
					both(x, y)
				}
			}
		case DropOneWay:
			cut(e.Target, e.Peer)
		case Lossy:
			r := out[e.Target]
			r.Lossy = true
			out[e.Target] = r
		}
	}
	for from, tos := range drop {
		r := out[from]
		for to := range tos {
			r.DropTo = append(r.DropTo, to)
		}
		slices.Sort(r.DropTo)
		out[from] = r
	}
	return out
}

// LossPercent is the share of a lossy link's packets dropped.
const LossPercent = 5

// LossyRate is a lossy link's cap, in tc's units (the kernel here has no netem for a
// fixed delay: docs/chaos.md).
const LossyRate = "2mbit"

// Ruleset renders r as an nftables ruleset for the host's own namespace (`nft -f -`):
// its table is deleted and written again whole, so applying it twice is harmless. addr
// maps host names to IPv4 addresses.
func Ruleset(r HostRules, addr map[string]string) (string, error) {
	var b strings.Builder
	b.WriteString("table ip turbine_chaos\ndelete table ip turbine_chaos\n")
	b.WriteString("table ip turbine_chaos {\n\tchain out {\n\t\ttype filter hook output priority 0; policy accept;\n")
	for _, h := range r.DropTo {
		ip, ok := addr[h]
		if !ok {
			return "", fmt.Errorf("chaos: no address for host %q", h)
		}
		fmt.Fprintf(&b, "\t\tip daddr %s drop\n", ip)
	}
	if r.Lossy {
		fmt.Fprintf(&b, "\t\toifname \"eth0\" numgen random mod 100 < %d drop\n", LossPercent)
	}
	b.WriteString("\t}\n}\n")
	return b.String(), nil
}
