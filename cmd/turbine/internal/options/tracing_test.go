package options

import (
	"context"
	"flag"
	"strings"
	"testing"

	"github.com/rs/zerolog"
	"github.com/turbine-llm/turbine/tracing"
)

// TestTracingFlags: the flags parse into Tracing, and Validate's errors name the flag
// (or the environment variable) that is wrong.
func TestTracingFlags(t *testing.T) {
	for _, c := range []struct {
		args []string
		env  map[string]string
		want string // "" valid; else a substring of the error
	}{
		{nil, nil, ""},
		{[]string{"--otlp-endpoint", "http://127.0.0.1:4318", "--trace-sample-ratio", "0.25"}, nil, ""},
		{[]string{"--otlp-endpoint", "collector:4317", "--otlp-insecure"}, nil, ""},
		{[]string{"--trace-sample-ratio", "1.5"}, nil, "--trace-sample-ratio 1.5"},
		{[]string{"--trace-sample-ratio", "NaN"}, nil, "--trace-sample-ratio NaN"},
		{[]string{"--otlp-endpoint", "ftp://x"}, nil, "--otlp-endpoint"},
		{[]string{"--otlp-endpoint", "https://x", "--otlp-insecure"}, nil, "--otlp-insecure with an https://"},
		{nil, map[string]string{tracing.EnvEndpoint: "ftp://x"}, tracing.EnvEndpoint},
		{nil, map[string]string{tracing.EnvEndpoint: "http://x:4318"}, ""},
	} {
		o := DefaultTracing()
		o.getenv = func(k string) string { return c.env[k] }
		fs := flag.NewFlagSet("t", flag.ContinueOnError)
		o.Flags(fs)
		if err := fs.Parse(c.args); err != nil {
			t.Fatal(err)
		}
		err := o.Validate()
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%v %v: %v", c.args, c.env, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%v %v: error %v, want one naming %q", c.args, c.env, err, c.want)
		}
	}
}

// TestTracingStartOff: without an endpoint Start turns nothing on.
func TestTracingStartOff(t *testing.T) {
	o := DefaultTracing()
	o.getenv = func(string) string { return "" }
	stop, err := o.Start(context.Background(), tracing.ServiceServe, zerolog.Nop())
	if err != nil || tracing.Enabled() {
		t.Fatalf("Start without an endpoint: %v, tracing on %v", err, tracing.Enabled())
	}
	stop()
}
