package options

import (
	"flag"
	"fmt"
	"net"
	"strconv"
)

// NodeHTTP are the flags of `turbine node`'s HTTP port: /live, /health and /metrics
// (docs/metrics.md).
type NodeHTTP struct {
	Host string
	Port int // 0 picks a free one; -1 turns the port off
}

// DefaultNodeHTTP returns 127.0.0.1:9090.
func DefaultNodeHTTP() NodeHTTP { return NodeHTTP{Host: "127.0.0.1", Port: 9090} }

// Flags registers --http-host and --http-port on fs.
func (o *NodeHTTP) Flags(fs *flag.FlagSet) {
	fs.StringVar(&o.Host, "http-host", o.Host, "address the node's HTTP port (/live, /health, /metrics) listens on (0.0.0.0 for probes and scrapes from other hosts)")
	fs.IntVar(&o.Port, "http-port", o.Port, "port of the node's /live, /health and /metrics (0 picks a free one; -1 turns it off)")
}

// Validate checks the options; errors name the flag.
func (o *NodeHTTP) Validate() error {
	if o.Port < -1 || o.Port > 65535 {
		return fmt.Errorf("--http-port %d: want 0..65535, or -1 for none", o.Port)
	}
	return nil
}

// Listen binds the port (before the node joins the cluster, so that a taken port fails
// at once); nil without error when --http-port is -1. Errors name the flags.
func (o *NodeHTTP) Listen() (net.Listener, error) {
	if o.Port < 0 {
		return nil, nil
	}
	ln, err := net.Listen("tcp", net.JoinHostPort(o.Host, strconv.Itoa(o.Port)))
	if err != nil {
		return nil, fmt.Errorf("--http-host %s --http-port %d: %w", o.Host, o.Port, err)
	}
	return ln, nil
}
