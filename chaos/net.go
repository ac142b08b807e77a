package chaos

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"strings"
	"sync"
)

// Subnet is the hosts' network (RFC 2544's benchmarking range: no real host has it).
// The runner's own end is .1 in the root namespace; host i gets .(10+i).
const Subnet = "198.18.0"

// Net is the hosts' network namespaces: one per host, each with an eth0 on a bridge in
// a hub namespace, and a link from the root namespace (where the runner and its client
// live) to the bridge. Traffic stays between these namespaces.
type Net struct {
	prefix string
	hosts  []string
	addr   map[string]string // host -> IPv4
	mu     sync.Mutex
	rules  map[string]HostRules // applied
}

// ns is host's namespace name.
func (n *Net) ns(host string) string { return n.prefix + host }

// Addr is host's IPv4 address.
func (n *Net) Addr(host string) string { return n.addr[host] }

// Addrs maps every host to its address.
func (n *Net) Addrs() map[string]string { return n.addr }

func run(ctx context.Context, stdin string, name string, args ...string) error {
	cmd := exec.CommandContext(ctx, name, args...)
	if stdin != "" {
		cmd.Stdin = strings.NewReader(stdin)
	}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, bytes.TrimSpace(out.Bytes()))
	}
	return nil
}

// NewNet makes the namespaces of hosts (names of at most 8 bytes), removing what a
// crashed earlier run with the same prefix left. It needs root, iproute2 and nft.
func NewNet(ctx context.Context, prefix string, hosts []string) (*Net, error) {
	if len(prefix) > 5 {
		return nil, fmt.Errorf("chaos: namespace prefix %q longer than 5 bytes", prefix)
	}
	for _, tool := range []string{"ip", "nft", "tc"} {
		if _, err := exec.LookPath(tool); err != nil {
			return nil, fmt.Errorf("chaos: %s not found (the rig needs iproute2 and nftables)", tool)
		}
	}
	n := &Net{prefix: prefix, hosts: hosts, addr: map[string]string{}, rules: map[string]HostRules{}}
	n.Close()
	hub := prefix + "hub"
	steps := [][]string{
		{"netns", "add", hub},
		{"-n", hub, "link", "add", "br0", "type", "bridge"},
		{"-n", hub, "link", "set", "br0", "up"},
		{"link", "add", prefix + "root", "type", "veth", "peer", "name", "up0", "netns", hub},
		{"-n", hub, "link", "set", "up0", "master", "br0", "up"},
		{"addr", "add", Subnet + ".1/24", "dev", prefix + "root"},
		{"link", "set", prefix + "root", "up"},
	}
	for i, h := range hosts {
		if len(h) > 8 {
			return nil, fmt.Errorf("chaos: host name %q longer than 8 bytes", h)
		}
		ip := fmt.Sprintf("%s.%d", Subnet, 10+i)
		n.addr[h] = ip
		ns, peer := n.ns(h), fmt.Sprintf("h%d", i)
		steps = append(steps,
			[]string{"netns", "add", ns},
			[]string{"-n", ns, "link", "set", "lo", "up"},
			[]string{"-n", ns, "link", "add", "eth0", "type", "veth", "peer", "name", peer, "netns", hub},
			[]string{"-n", hub, "link", "set", peer, "master", "br0", "up"},
			[]string{"-n", ns, "addr", "add", ip + "/24", "dev", "eth0"},
			[]string{"-n", ns, "link", "set", "eth0", "up"},
		)
	}
	for _, s := range steps {
		if err := run(ctx, "", "ip", s...); err != nil {
			n.Close()
			return nil, fmt.Errorf("chaos: making the hosts' network: %w", err)
		}
	}
	return n, nil
}

// Command is name with args run inside host's namespace.
func (n *Net) Command(host, name string, args ...string) *exec.Cmd {
	return exec.Command("ip", append([]string{"netns", "exec", n.ns(host), name}, args...)...)
}

// Apply sets every host's rules to those the active network events give, changing only
// the hosts whose rules changed.
func (n *Net) Apply(ctx context.Context, active []Event, topo Topology) error {
	want := Rules(active, topo)
	n.mu.Lock()
	defer n.mu.Unlock()
	var errs []string
	for _, h := range n.hosts {
		w, had := want[h], n.rules[h]
		if equalRules(w, had) {
			continue
		}
		rs, err := Ruleset(w, n.addr)
		if err == nil {
			err = run(ctx, rs, "ip", "netns", "exec", n.ns(h), "nft", "-f", "-")
		}
		if err == nil && w.Lossy != had.Lossy {
			if w.Lossy {
				err = run(ctx, "", "ip", "netns", "exec", n.ns(h), "tc", "qdisc", "replace", "dev", "eth0", "root",
					"tbf", "rate", LossyRate, "burst", "32kbit", "latency", "400ms")
			} else {
				err = run(ctx, "", "ip", "netns", "exec", n.ns(h), "tc", "qdisc", "del", "dev", "eth0", "root")
			}
		}
		if err != nil {
			errs = append(errs, err.Error())
			continue
		}
		n.rules[h] = w
	}
	if len(errs) > 0 {
		return fmt.Errorf("chaos: network rules: %s", strings.Join(errs, "; "))
	}
	return nil
}

func equalRules(a, b HostRules) bool {
	return a.Lossy == b.Lossy && strings.Join(a.DropTo, ",") == strings.Join(b.DropTo, ",")
}

// Close deletes the namespaces and the root link (their processes must be gone).
func (n *Net) Close() {
	ctx := context.Background()
	_ = run(ctx, "", "ip", "link", "del", n.prefix+"root")
	for _, h := range n.hosts {
		_ = run(ctx, "", "ip", "netns", "del", n.ns(h))
	}
	_ = run(ctx, "", "ip", "netns", "del", n.prefix+"hub")
}
