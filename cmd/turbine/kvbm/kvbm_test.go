package kvbm

import (
	"flag"
	"strings"
	"testing"
)

// TestFlags: `turbine kvbm` parses its flags, has no --kvbm, and Validate names the flag
// that is wrong.
func TestFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		err  string
	}{
		{[]string{"--node-id", "gpu-7", "--kvbm-host-bytes", "64GiB", "--discovery", "local"}, ""},
		{[]string{"--node-id", "", "--discovery", "local"}, "--node-id"},
		{[]string{"--kvbm-resp-port", "-1", "--kvbm-lm-port", "-1", "--discovery", "local"}, "no engine could reach"},
		{[]string{"--kvbm-policy", "lru", "--discovery", "local"}, "--kvbm-policy"},
		{[]string{"--discovery", "nope://x"}, "--discovery"},
	} {
		o := Defaults()
		fs := flag.NewFlagSet("kvbm", flag.ContinueOnError)
		flags(&o, fs)
		if fs.Lookup("kvbm") != nil {
			t.Fatal("turbine kvbm has a --kvbm flag")
		}
		if err := fs.Parse(tc.args); err != nil {
			t.Fatalf("%v: %v", tc.args, err)
		}
		err := o.Validate()
		if tc.err == "" && err != nil || tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)) {
			t.Errorf("%v: %v, want %q", tc.args, err, tc.err)
		}
		if tc.err == "" && (o.NodeID != "gpu-7" || o.HostBytes != 64<<30) {
			t.Errorf("%v parsed as %+v", tc.args, o)
		}
	}
}
