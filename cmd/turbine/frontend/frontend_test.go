package frontend

import (
	"context"
	"io"
	"strings"
	"testing"
)

func TestRunRejectsBadFlags(t *testing.T) {
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"--discovery", "etcd://x"}, "--discovery"},
		{[]string{"--discovery", "consul://host:notaport"}, "--discovery"},
		{[]string{"--member-host", "0.0.0.0"}, "--advertise-host"},
		{[]string{"--member-port", "70000"}, "--member-port"},
		{[]string{"--cluster-name", ""}, "--cluster-name"},
		{[]string{"--consul-ttl", "0s"}, "consul-ttl"},
		{[]string{"--consul-ttl", "2s", "--consul-ttl-refresh", "3s"}, "consul-ttl"},
		{[]string{"--router-mode", "fastest"}, "--router-mode"},
		{[]string{"--port", "-1"}, "--port"},
		{[]string{"stray"}, "unexpected argument"},
		{[]string{"--max-local-prefill-tokens", "-1"}, "--max-local-prefill-tokens"},
		{[]string{"--max-prefill-queue-tokens", "-2"}, "--max-prefill-queue-tokens"},
		{[]string{"--enforce-disagg=maybe"}, "enforce-disagg"},
		{[]string{"--planner-reports", "always"}, "--planner-reports"},
		{[]string{"--planner-report-interval", "1ns"}, "--planner-report-interval"},
	}
	for _, tc := range tests {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			err := Run(context.Background(), tc.args, io.Discard, io.Discard)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want one naming %s", err, tc.want)
			}
		})
	}
}

func TestDefaultsAreValid(t *testing.T) {
	o := Defaults()
	if err := o.Validate(); err != nil {
		t.Fatal(err)
	}
	if o.Discovery != "consul://127.0.0.1:8500" || o.Port != 8000 || o.ClusterName != "turbine" {
		t.Fatalf("defaults changed: %+v", o)
	}
}
