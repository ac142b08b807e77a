package options

import (
	"flag"
	"io"
	"runtime"
	"strings"
	"testing"

	"github.com/turbine-llm/turbine/gateway"
)

func TestAdmissionFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		err  string // "" means valid
	}{
		{nil, ""},
		{[]string{"--busy-kv-usage", "0.9", "--busy-prefill-tokens", "20000", "--queue-depth", "8", "--queue-timeout", "2s", "--drain-timeout", "0s", "--canary-interval", "0"}, ""},
		{[]string{"--busy-kv-usage", "-0.1"}, "--busy-kv-usage"},
		{[]string{"--busy-kv-usage", "NaN"}, "--busy-kv-usage"},
		{[]string{"--busy-kv-usage", "2"}, "--busy-kv-usage"},
		{[]string{"--busy-kv-usage", "1"}, ""},
		{[]string{"--busy-prefill-tokens", "-1"}, "--busy-prefill-tokens"},
		{[]string{"--queue-depth", "-1"}, "--queue-depth"},
		{[]string{"--max-concurrent-requests", "0"}, ""},
		{[]string{"--max-concurrent-requests", "5000", "--queue-depth", "100"}, ""},
		{[]string{"--max-concurrent-requests", "-1"}, "--max-concurrent-requests"},
		{[]string{"--max-concurrent-requests", "1000001"}, "--max-concurrent-requests"},
		{[]string{"--queue-timeout", "0s"}, "--queue-timeout"},
		{[]string{"--drain-timeout", "-1s"}, "--drain-timeout"},
		{[]string{"--canary-interval", "-1s"}, "--canary-interval"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			a, c := DefaultAdmission(), DefaultCanary()
			fs := flag.NewFlagSet("test", flag.ContinueOnError)
			fs.SetOutput(io.Discard)
			a.Flags(fs)
			c.Flags(fs)
			if err := fs.Parse(tc.args); err != nil {
				t.Fatal(err)
			}
			err := a.Validate()
			if err == nil {
				err = c.Validate()
			}
			if tc.err == "" && err != nil || tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)) {
				t.Fatalf("err = %v, want %q", err, tc.err)
			}
		})
	}
}

// TestDefaultMaxConcurrentRequests: the default bound scales with the CPUs the process
// may use, and reaches the gateway's configuration.
func TestDefaultMaxConcurrentRequests(t *testing.T) {
	a := DefaultAdmission()
	if want := DefaultMaxConcurrentRequestsPerCPU * runtime.GOMAXPROCS(0); a.MaxConcurrent != want {
		t.Errorf("default --max-concurrent-requests %d, want %d", a.MaxConcurrent, want)
	}
	if got := a.Gateway(gateway.Config{}).MaxConcurrentRequests; got != a.MaxConcurrent {
		t.Errorf("gateway bound %d, want %d", got, a.MaxConcurrent)
	}
}
