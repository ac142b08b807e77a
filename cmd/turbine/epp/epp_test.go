package epp

import (
	"strings"
	"testing"
)

// TestValidate: errors name the flag.
func TestValidate(t *testing.T) {
	for _, tc := range []struct {
		name string
		set  func(*Options)
		want string // "" valid
	}{
		{"static", func(o *Options) { o.Endpoints = "10.0.0.1:8000" }, ""},
		{"pool", func(o *Options) { o.PoolName = "p" }, ""},
		{"neither", func(o *Options) {}, "--pool-name or --endpoints"},
		{"both", func(o *Options) { o.PoolName, o.Endpoints = "p", "10.0.0.1:8000" }, "--pool-name or --endpoints"},
		{"bad endpoints", func(o *Options) { o.Endpoints = "nope" }, "--endpoints"},
		{"port", func(o *Options) { o.Endpoints, o.GRPCPort = "10.0.0.1:8000", 0 }, "--grpc-port"},
		{"fallbacks", func(o *Options) { o.Endpoints, o.Fallbacks = "10.0.0.1:8000", -1 }, "--fallback-endpoints"},
		{"cert without tls", func(o *Options) { o.Endpoints, o.CertPath, o.SecureServing = "10.0.0.1:8000", "/x", false }, "--cert-path"},
	} {
		o := Defaults()
		tc.set(&o)
		err := o.Validate()
		if (err == nil) != (tc.want == "") || (err != nil && !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("%s: %v, want %q", tc.name, err, tc.want)
		}
	}
}
