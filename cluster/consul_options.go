package cluster

import (
	"fmt"
	"os"
	"time"

	"github.com/hashicorp/consul/api"
)

// ConsulOptions configure the Consul provider. A zero field takes its default
// (defaults.go).
type ConsulOptions struct {
	// Token is the ACL token sent with every request (empty: CONSUL_HTTP_TOKEN, else the
	// agent's default token).
	Token string
	// CAFile verifies the agent's certificate (PEM; empty: the system roots). CertFile and
	// KeyFile are a client certificate and its key (PEM), both or neither. TLSServerName
	// is the name expected in the agent's certificate (default: the host).
	// InsecureSkipVerify accepts any certificate (tests only). Any of these set makes the
	// provider speak HTTPS to the agent.
	CAFile, CertFile, KeyFile string
	TLSServerName             string
	InsecureSkipVerify        bool
	// TTL of the member's health check (default 3 s); RefreshTTL, how often the member
	// refreshes it (default 1 s, less than TTL).
	TTL        time.Duration
	RefreshTTL time.Duration
	// DeregisterCritical is Consul's DeregisterCriticalServiceAfter: Consul removes a
	// registration whose check stayed critical this long (default 60 s, at least TTL;
	// Consul reaps at most once a minute).
	DeregisterCritical time.Duration
	// RecoveryWindow: after a Consul outage or lost registrations, members missing from
	// Consul's answers are kept this long before they count as gone (default 2×TTL plus
	// the longest registration backoff, 5 s).
	RecoveryWindow time.Duration
}

// TLS reports whether any TLS setting is present (the provider then uses https).
func (o ConsulOptions) TLS() bool {
	return o.CAFile != "" || o.CertFile != "" || o.KeyFile != "" || o.TLSServerName != "" || o.InsecureSkipVerify
}

// OptionError is a configuration value that is wrong. Option names the field as Go code
// spells it from Config, e.g. "Consul.TTL", so that a command can map it to its flag.
type OptionError struct {
	Option string
	Value  any
	Reason string
}

func (e *OptionError) Error() string {
	return fmt.Sprintf("cluster: %s = %v: %s", e.Option, e.Value, e.Reason)
}

// withDefaults returns o with its zero fields set to the defaults.
func (o ConsulOptions) withDefaults() ConsulOptions {
	if o.TTL == 0 {
		o.TTL = DefaultTTL
	}
	if o.RefreshTTL == 0 {
		o.RefreshTTL = DefaultRefreshTTL
	}
	if o.DeregisterCritical == 0 {
		o.DeregisterCritical = DefaultDeregisterCritical
	}
	if o.RecoveryWindow == 0 {
		o.RecoveryWindow = DefaultRecoveryWindow(o.TTL)
	}
	return o
}

// Validate checks the options after defaults are applied; the error (an *OptionError)
// names the first wrong field. TLS files must exist.
func (o ConsulOptions) Validate() error {
	o = o.withDefaults()
	switch {
	case o.TTL < 0:
		return &OptionError{"Consul.TTL", o.TTL, "must be positive"}
	case o.RefreshTTL < 0:
		return &OptionError{"Consul.RefreshTTL", o.RefreshTTL, "must be positive"}
	case o.RefreshTTL >= o.TTL:
		return &OptionError{"Consul.RefreshTTL", o.RefreshTTL, fmt.Sprintf("must be less than Consul.TTL (%s)", o.TTL)}
	case o.DeregisterCritical < o.TTL:
		return &OptionError{"Consul.DeregisterCritical", o.DeregisterCritical,
			fmt.Sprintf("must be at least Consul.TTL (%s)", o.TTL)}
	case o.RecoveryWindow < 0:
		return &OptionError{"Consul.RecoveryWindow", o.RecoveryWindow, "must not be negative"}
	}
	return o.validateTLS()
}

func (o ConsulOptions) validateTLS() error {
	if (o.CertFile == "") != (o.KeyFile == "") {
		return &OptionError{"Consul.CertFile", o.CertFile, "a client certificate needs both Consul.CertFile and Consul.KeyFile"}
	}
	for _, f := range []struct{ name, path string }{
		{"Consul.CAFile", o.CAFile}, {"Consul.CertFile", o.CertFile}, {"Consul.KeyFile", o.KeyFile},
	} {
		if f.path == "" {
			continue
		}
		if st, err := os.Stat(f.path); err != nil {
			return &OptionError{f.name, f.path, err.Error()}
		} else if st.IsDir() {
			return &OptionError{f.name, f.path, "is a directory, want a PEM file"}
		}
	}
	return nil
}

// apiConfig is the Consul client configuration for the agent at address ("HOST:PORT").
// Settings left empty here fall back, as in every Consul client, to the CONSUL_HTTP_TOKEN,
// CONSUL_CACERT, CONSUL_CLIENT_CERT, CONSUL_CLIENT_KEY and CONSUL_TLS_SERVER_NAME variables.
func (o ConsulOptions) apiConfig(address string) *api.Config {
	cfg := &api.Config{Address: address, Scheme: "http", Token: o.Token}
	if o.TLS() {
		cfg.Scheme = "https"
		cfg.TLSConfig = api.TLSConfig{
			Address:            o.TLSServerName,
			CAFile:             o.CAFile,
			CertFile:           o.CertFile,
			KeyFile:            o.KeyFile,
			InsecureSkipVerify: o.InsecureSkipVerify,
		}
	}
	return cfg
}
