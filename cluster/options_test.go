package cluster

import (
	"errors"
	"path/filepath"
	"testing"
	"time"
)

func TestConsulOptionsValidate(t *testing.T) {
	pem := filepath.Join("testdata", "placeholder.pem")
	for _, tc := range []struct {
		name       string
		opts       ConsulOptions
		wantOption string // "" for valid
	}{
		{"zero is all defaults", ConsulOptions{}, ""},
		{"explicit", ConsulOptions{TTL: 10 * time.Second, RefreshTTL: 2 * time.Second, DeregisterCritical: time.Minute, RecoveryWindow: 30 * time.Second}, ""},
		{"sub-second TTL", ConsulOptions{TTL: 500 * time.Millisecond, RefreshTTL: 100 * time.Millisecond}, ""},
		{"negative TTL", ConsulOptions{TTL: -time.Second}, "Consul.TTL"},
		{"negative refresh", ConsulOptions{RefreshTTL: -time.Second}, "Consul.RefreshTTL"},
		{"refresh equal to TTL", ConsulOptions{TTL: time.Second, RefreshTTL: time.Second}, "Consul.RefreshTTL"},
		{"default refresh above a short TTL", ConsulOptions{TTL: 500 * time.Millisecond}, "Consul.RefreshTTL"},
		{"deregister below TTL", ConsulOptions{TTL: 5 * time.Second, DeregisterCritical: 4 * time.Second}, "Consul.DeregisterCritical"},
		{"negative recovery window", ConsulOptions{RecoveryWindow: -time.Second}, "Consul.RecoveryWindow"},
		{"CA file", ConsulOptions{CAFile: pem}, ""},
		{"client cert and key", ConsulOptions{CertFile: pem, KeyFile: pem}, ""},
		{"cert without key", ConsulOptions{CertFile: pem}, "Consul.CertFile"},
		{"key without cert", ConsulOptions{KeyFile: pem}, "Consul.CertFile"},
		{"missing CA file", ConsulOptions{CAFile: filepath.Join("testdata", "absent.pem")}, "Consul.CAFile"},
		{"CA file is a directory", ConsulOptions{CAFile: "testdata"}, "Consul.CAFile"},
		{"missing key file", ConsulOptions{CertFile: pem, KeyFile: filepath.Join("testdata", "absent.pem")}, "Consul.KeyFile"},
	} {
		err := tc.opts.Validate()
		var oe *OptionError
		switch {
		case tc.wantOption == "" && err != nil:
			t.Errorf("%s: Validate() = %v, want nil", tc.name, err)
		case tc.wantOption != "" && (!errors.As(err, &oe) || oe.Option != tc.wantOption):
			t.Errorf("%s: Validate() = %v, want an *OptionError naming %s", tc.name, err, tc.wantOption)
		}
	}
}

func TestConsulOptionsDefaultsAndScheme(t *testing.T) {
	o := ConsulOptions{}.withDefaults()
	if o.TTL != DefaultTTL || o.RefreshTTL != DefaultRefreshTTL || o.DeregisterCritical != DefaultDeregisterCritical ||
		o.RecoveryWindow != 2*DefaultTTL+RegisterBackoffMax {
		t.Errorf("defaults = %+v", o)
	}
	if got := (ConsulOptions{TTL: 10 * time.Second}).withDefaults().RecoveryWindow; got != 25*time.Second {
		t.Errorf("recovery window for a 10 s TTL = %s, want 25s", got)
	}
	for _, tc := range []struct {
		opts   ConsulOptions
		scheme string
	}{
		{ConsulOptions{}, "http"},
		{ConsulOptions{Token: "t"}, "http"},
		{ConsulOptions{InsecureSkipVerify: true}, "https"},
		{ConsulOptions{TLSServerName: "consul.internal"}, "https"},
		{ConsulOptions{CAFile: "ca.pem"}, "https"},
	} {
		cfg := tc.opts.apiConfig("127.0.0.1:8500")
		if cfg.Scheme != tc.scheme || cfg.Address != "127.0.0.1:8500" || cfg.Token != tc.opts.Token ||
			cfg.TLSConfig.Address != tc.opts.TLSServerName || cfg.TLSConfig.InsecureSkipVerify != tc.opts.InsecureSkipVerify {
			t.Errorf("apiConfig(%+v) = %+v", tc.opts, cfg)
		}
	}
}

func TestResolveConfig(t *testing.T) {
	for _, tc := range []struct {
		name       string
		cfg        Config
		wantOption string // "" for valid; "discovery" for a discovery error
		check      func(settings) bool
	}{
		{name: "zero", cfg: Config{}, check: func(s settings) bool {
			return s.Name == DefaultName && s.Host == DefaultHost && s.AdvertiseHost == DefaultHost &&
				s.MaxMessageBytes == DefaultMaxMessageBytes && s.discovery.Kind == DiscoveryLocal
		}},
		{name: "consul", cfg: Config{Discovery: "consul://127.0.0.1:8500"}, check: func(s settings) bool {
			return s.discovery == Discovery{Kind: DiscoveryConsul, Address: "127.0.0.1:8500"}
		}},
		{name: "bind all with advertise", cfg: Config{Host: "0.0.0.0", AdvertiseHost: "10.1.2.3"}, check: func(s settings) bool {
			return s.bindHost == "0.0.0.0" && s.AdvertiseHost == "10.1.2.3"
		}},
		{name: "IPv6 host", cfg: Config{Host: "::1"}, check: func(s settings) bool {
			return s.bindHost == "[::1]" && s.AdvertiseHost == "::1"
		}},
		{name: "bind all without advertise", cfg: Config{Host: "0.0.0.0"}, wantOption: "AdvertiseHost"},
		{name: "bind all IPv6 without advertise", cfg: Config{Host: "::"}, wantOption: "AdvertiseHost"},
		{name: "advertise all", cfg: Config{AdvertiseHost: "0.0.0.0"}, wantOption: "AdvertiseHost"},
		{name: "negative port", cfg: Config{Port: -1}, wantOption: "Port"},
		{name: "port too big", cfg: Config{Port: 70000}, wantOption: "Port"},
		{name: "negative message size", cfg: Config{MaxMessageBytes: -1}, wantOption: "MaxMessageBytes"},
		{name: "negative watchdog interval", cfg: Config{WatchdogInterval: -time.Second}, wantOption: "WatchdogInterval"},
		{name: "bad discovery", cfg: Config{Discovery: "zookeeper://x"}, wantOption: "discovery"},
		{name: "consul options checked", cfg: Config{Discovery: "consul://h", Consul: ConsulOptions{TTL: -1}}, wantOption: "Consul.TTL"},
		{name: "consul options ignored for local", cfg: Config{Consul: ConsulOptions{TTL: -1}}, check: func(settings) bool { return true }},
	} {
		s, err := resolve(tc.cfg)
		var oe *OptionError
		switch {
		case tc.wantOption == "discovery":
			if err == nil || errors.As(err, &oe) {
				t.Errorf("%s: resolve() = %v, want a discovery error", tc.name, err)
			}
		case tc.wantOption != "":
			if !errors.As(err, &oe) || oe.Option != tc.wantOption {
				t.Errorf("%s: resolve() = %v, want an *OptionError naming %s", tc.name, err, tc.wantOption)
			}
		case err != nil:
			t.Errorf("%s: resolve() = %v", tc.name, err)
		case !tc.check(s):
			t.Errorf("%s: resolve() = %+v", tc.name, s)
		}
	}
}
