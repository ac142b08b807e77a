package kvbm

import (
	"bytes"
	"flag"
	"fmt"
	"io"
	"net"
	"strconv"
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
		{[]string{"--node-id", "gpu-7", "--kvbm-host-bytes", "64GiB", "--discovery", "local", "--kvbm-fs-dir", "/lmcache", "--kvbm-fs-bytes", "1TiB"}, ""},
		{[]string{"--kvbm-fs-dir", "/lmcache", "--kvbm-fs-bytes", "0", "--discovery", "local"}, "--kvbm-fs-bytes"},
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

// A taken port fails before the cluster member starts (docs/reference.md §9.5), with one
// prefix naming the flag (the member started, then stopped, and the error read "kvbm:
// resp listener: ...").
func TestRunPortTakenFailsFirst(t *testing.T) {
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	port := taken.Addr().(*net.TCPAddr).Port
	var logs bytes.Buffer
	err = Run(t.Context(), []string{"--node-id", "n", "--discovery", "local", "--kvbm-lm-port", "0",
		"--kvbm-resp-port", strconv.Itoa(port)}, io.Discard, &logs)
	want := fmt.Sprintf("--kvbm-resp-port %d: listen tcp 127.0.0.1:%d: bind: address already in use", port, port)
	if err == nil || !strings.Contains(err.Error(), want) || strings.Contains(err.Error(), "kvbm: resp listener") {
		t.Fatalf("error %v, want one naming %q", err, want)
	}
	if strings.Contains(logs.String(), "member started") {
		t.Fatalf("the cluster member started before the port was bound:\n%s", logs.String())
	}
}
