package options

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"strings"
	"time"

	pcluster "github.com/asynkron/protoactor-go/cluster"
	"github.com/rs/zerolog"
	"github.com/turbine-llm/turbine/cluster"
)

// Cluster are the membership flags of `turbine frontend` and `turbine node`.
type Cluster struct {
	Discovery     string // "consul://HOST:PORT" or "local"
	ClusterName   string
	MemberHost    string // remoting (gRPC) bind address
	MemberPort    int    // 0 picks a free one
	AdvertiseHost string // what other members dial; default MemberHost

	ConsulToken           string
	ConsulCACert          string
	ConsulClientCert      string
	ConsulClientKey       string
	ConsulTLSServerName   string
	ConsulTLSSkipVerify   bool
	ConsulTTL             time.Duration
	ConsulTTLRefresh      time.Duration
	ConsulDeregisterAfter time.Duration

	// MemberTLSCert, MemberTLSKey, MemberTLSCA: mutual TLS between members' remoting
	// (--member-tls-cert, --member-tls-key, --member-tls-ca; all three or none;
	// cluster.TLS, docs/tls.md).
	MemberTLSCert, MemberTLSKey, MemberTLSCA string
}

// DefaultCluster returns Consul on 127.0.0.1:8500, cluster "turbine", loopback remoting.
func DefaultCluster() Cluster {
	return Cluster{Discovery: "consul://127.0.0.1:8500", ClusterName: "turbine", MemberHost: "127.0.0.1",
		ConsulTTL: 3 * time.Second, ConsulTTLRefresh: time.Second, ConsulDeregisterAfter: time.Minute}
}

// Flags registers the membership flags on fs.
func (o *Cluster) Flags(fs *flag.FlagSet) {
	fs.StringVar(&o.Discovery, "discovery", o.Discovery, "how members find each other: consul://HOST:PORT (a Consul agent) or local (this process only)")
	fs.StringVar(&o.ClusterName, "cluster-name", o.ClusterName, "cluster name (the Consul service name); members of other clusters are ignored")
	fs.StringVar(&o.MemberHost, "member-host", o.MemberHost, "address the member's remoting (gRPC) server binds")
	fs.IntVar(&o.MemberPort, "member-port", o.MemberPort, "port of the member's remoting server (0 picks a free one)")
	fs.StringVar(&o.AdvertiseHost, "advertise-host", o.AdvertiseHost, "address other members dial to reach this one (default --member-host; required when binding 0.0.0.0)")
	fs.StringVar(&o.ConsulToken, "consul-token", o.ConsulToken, "Consul ACL token (default: CONSUL_HTTP_TOKEN)")
	fs.StringVar(&o.ConsulCACert, "consul-cacert", o.ConsulCACert, "CA certificate file for TLS to Consul (turns on https)")
	fs.StringVar(&o.ConsulClientCert, "consul-client-cert", o.ConsulClientCert, "client certificate file for TLS to Consul")
	fs.StringVar(&o.ConsulClientKey, "consul-client-key", o.ConsulClientKey, "client key file for TLS to Consul")
	fs.StringVar(&o.ConsulTLSServerName, "consul-tls-server-name", o.ConsulTLSServerName, "server name expected in Consul's TLS certificate")
	fs.BoolVar(&o.ConsulTLSSkipVerify, "consul-tls-skip-verify", o.ConsulTLSSkipVerify, "do not verify Consul's TLS certificate (testing only)")
	fs.DurationVar(&o.ConsulTTL, "consul-ttl", o.ConsulTTL, "TTL of the member's Consul health check: a member silent this long is critical")
	fs.DurationVar(&o.ConsulTTLRefresh, "consul-ttl-refresh", o.ConsulTTLRefresh, "how often the member refreshes its TTL check (less than --consul-ttl)")
	fs.DurationVar(&o.ConsulDeregisterAfter, "consul-deregister-after", o.ConsulDeregisterAfter, "Consul removes a member critical this long")
	fs.StringVar(&o.MemberTLSCert, "member-tls-cert", o.MemberTLSCert,
		"PEM `file` of this member's certificate for mutual TLS between members (with --member-tls-key and --member-tls-ca): "+
			"presented to the members it dials and to those that dial it, so it needs both serverAuth and clientAuth usages and "+
			"--advertise-host (or --member-host) among its DNS or IP subject alternative names (docs/tls.md)")
	fs.StringVar(&o.MemberTLSKey, "member-tls-key", o.MemberTLSKey, "PEM `file` of the private key of --member-tls-cert")
	fs.StringVar(&o.MemberTLSCA, "member-tls-ca", o.MemberTLSCA,
		"PEM `file` of the authorities that sign members' certificates: a peer whose certificate none of them signed is refused, both ways")
}

// Validate checks the membership options; errors name the flag.
func (o *Cluster) Validate() error {
	if _, err := cluster.ParseDiscovery(o.Discovery); err != nil {
		return fmt.Errorf("--discovery: %w", err)
	}
	switch {
	case o.ClusterName == "":
		return errors.New("--cluster-name: empty")
	case o.MemberPort < 0 || o.MemberPort > 65535:
		return fmt.Errorf("--member-port %d: want 0..65535", o.MemberPort)
	case (o.MemberHost == "0.0.0.0" || o.MemberHost == "::") && o.AdvertiseHost == "":
		return fmt.Errorf("--member-host %s binds every address: set --advertise-host to the one other members dial", o.MemberHost)
	case o.ConsulTTL <= 0:
		return fmt.Errorf("--consul-ttl %v: must be > 0", o.ConsulTTL)
	case o.ConsulTTLRefresh <= 0:
		return fmt.Errorf("--consul-ttl-refresh %v: must be > 0", o.ConsulTTLRefresh)
	}
	cfg := o.Config(nil, zerolog.Nop())
	err := cfg.Consul.Validate()
	if err == nil {
		err = cfg.TLS.Validate(time.Now())
	}
	var oe *cluster.OptionError
	if errors.As(err, &oe) {
		if f, ok := consulFlags[oe.Option]; ok {
			return fmt.Errorf("%s %v: %s", f, oe.Value, renameOptions(oe.Reason))
		}
	}
	return err
}

// consulFlags names the flag of each cluster.ConsulOptions field, for errors.
var consulFlags = map[string]string{
	"Consul.TTL": "--consul-ttl", "Consul.RefreshTTL": "--consul-ttl-refresh",
	"Consul.DeregisterCritical": "--consul-deregister-after", "Consul.CAFile": "--consul-cacert",
	"Consul.CertFile": "--consul-client-cert", "Consul.KeyFile": "--consul-client-key",
	"TLS.CertFile": "--member-tls-cert", "TLS.KeyFile": "--member-tls-key", "TLS.CAFile": "--member-tls-ca",
}

// renameOptions rewrites option names inside a reason into flag names.
func renameOptions(reason string) string {
	for opt, f := range consulFlags {
		reason = strings.ReplaceAll(reason, opt, f)
	}
	return reason
}

// Config returns the member configuration hosting kinds.
func (o *Cluster) Config(kinds []*pcluster.Kind, log zerolog.Logger) cluster.Config {
	return cluster.Config{
		Name: o.ClusterName, Host: o.MemberHost, Port: o.MemberPort, AdvertiseHost: o.AdvertiseHost,
		Discovery: o.Discovery, Kinds: kinds, Logger: log,
		Consul: cluster.ConsulOptions{
			Token: o.ConsulToken, CAFile: o.ConsulCACert, CertFile: o.ConsulClientCert, KeyFile: o.ConsulClientKey,
			TLSServerName: o.ConsulTLSServerName, InsecureSkipVerify: o.ConsulTLSSkipVerify,
			TTL: o.ConsulTTL, RefreshTTL: o.ConsulTTLRefresh, DeregisterCritical: o.ConsulDeregisterAfter,
		},
		TLS: cluster.TLS{CertFile: o.MemberTLSCert, KeyFile: o.MemberTLSKey, CAFile: o.MemberTLSCA},
	}
}

// RunMember runs a cluster member for as long as ctx lives. It starts a member from cfg
// and calls run with a context that ends when ctx does or when the member is lost (the
// cluster dropped or blocked it: protoactor never lets that id back in,
// docs/actor-library.md §2). A lost member is stopped and replaced by a new one with a
// fresh id, and run is called again with it. A failure of the first start is returned at
// once; later start failures retry with capped backoff (1 s doubling to 30 s). RunMember
// returns nil when ctx ends, or run's error when run fails on its own.
func RunMember(ctx context.Context, cfg cluster.Config, log zerolog.Logger,
	run func(ctx context.Context, m *cluster.Member) error) error {
	delay := time.Second
	for started := false; ctx.Err() == nil; started = true {
		m, err := cluster.Start(cfg)
		if err != nil && !started {
			// The first start fails on configuration (a taken --member-port, a bad
			// address): say so and exit rather than retry what cannot work.
			return err
		}
		if err != nil {
			log.Error().Err(err).Dur("retry_in", delay).Msg("cluster member did not start")
			select {
			case <-ctx.Done():
				return nil
			case <-time.After(delay):
			}
			delay = min(2*delay, 30*time.Second)
			continue
		}
		delay = time.Second
		runCtx, cancel := context.WithCancel(ctx)
		go func() {
			select {
			case <-m.Lost():
				cancel()
			case <-runCtx.Done():
			}
		}()
		err = run(runCtx, m)
		cancel()
		m.Stop()
		switch {
		case ctx.Err() != nil:
			return nil
		case isLost(m):
			log.Warn().Str("member", m.ID()).Msg("cluster member lost: starting a new one with a fresh id")
		case err != nil:
			return err
		default:
			return nil
		}
	}
	return nil
}

func isLost(m *cluster.Member) bool {
	select {
	case <-m.Lost():
		return true
	default:
		return false
	}
}
