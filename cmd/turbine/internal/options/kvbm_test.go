package options

import (
	"errors"
	"flag"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"
	kvbmactor "github.com/turbine-llm/turbine/actors/kvbm"
)

// TestParseBytes: decimal and binary units, spaces, case; errors for the rest.
func TestParseBytes(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want Bytes
		err  bool
	}{
		{"1048576", 1 << 20, false}, {"4GiB", 4 << 30, false}, {"512 MiB", 512 << 20, false}, {"10GB", 10e9, false},
		{"1.5GiB", 3 << 29, false}, {"2tib", 2 << 40, false}, {"64k", 64e3, false}, {"0", 0, false}, {"7B", 7, false},
		{"", 0, true}, {"GiB", 0, true}, {"4 GiBs", 0, true}, {"-1", 0, true}, {"1.5", 0, true}, {"0.1B", 0, true},
		{"9999999999TiB", 0, true}, {"99999999999999999999", 0, true}, {"1..5GB", 0, true},
	} {
		got, err := ParseBytes(tc.in)
		if (err != nil) != tc.err || (!tc.err && got != tc.want) {
			t.Errorf("ParseBytes(%q) = %d, %v; want %d (error %v)", tc.in, got, err, tc.want, tc.err)
		}
	}
	for _, b := range []Bytes{4 << 30, 512 << 20, 1000, 3 << 29} {
		if back, err := ParseBytes(b.String()); err != nil || back != b {
			t.Errorf("%d renders %q, reads back %d, %v", b, b.String(), back, err)
		}
	}
}

// FuzzParseBytes: any string is refused or gives a count ≥ 0 that its rendering reads
// back as.
func FuzzParseBytes(f *testing.F) {
	for _, s := range []string{"4GiB", "512 MiB", "1.5GB", "0", "-3", "1e9"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		b, err := ParseBytes(s)
		if err != nil {
			return
		}
		if b < 0 {
			t.Fatalf("ParseBytes(%q) = %d < 0", s, b)
		}
		if back, err := ParseBytes(b.String()); err != nil || back != b {
			t.Fatalf("ParseBytes(%q) = %d renders %q, which reads back %d, %v", s, b, b.String(), back, err)
		}
	})
}

// TestKvbmFlags: the flags parse into the options, and Validate names the flag wrong.
func TestKvbmFlags(t *testing.T) {
	for _, tc := range []struct {
		args  []string
		err   string // "" valid
		check func(Kvbm) bool
	}{
		{nil, "", func(o Kvbm) bool { return !o.Enabled && o.HostBytes == 4<<30 && o.RESPPort == 6380 && o.LMPort == 6381 }},
		{[]string{"--kvbm", "--kvbm-host-bytes", "512MiB", "--kvbm-disk-dir", "/d", "--kvbm-disk-bytes", "1TiB", "--kvbm-policy", "reuse", "--kvbm-resp-port", "0", "--kvbm-lm-port", "-1"}, "",
			func(o Kvbm) bool {
				return o.Enabled && o.HostBytes == 512<<20 && o.DiskBytes == 1<<40 && o.Policy == "reuse" && o.RESPPort == 0 && o.LMPort == -1
			}},
		{[]string{"--kvbm-host-bytes", "0"}, "--kvbm-host-bytes", nil},
		{[]string{"--kvbm-host-bytes", "100"}, "--kvbm-host-bytes 100: must be at least 1MiB", nil},
		{[]string{"--kvbm-host-bytes", "1MiB"}, "", nil},
		{[]string{"--kvbm-disk-bytes", "1GiB"}, "--kvbm-disk-bytes 1GiB needs --kvbm-disk-dir", nil},
		{[]string{"--kvbm-disk-dir", "/d", "--kvbm-disk-bytes", "0"}, "--kvbm-disk-bytes", nil},
		{[]string{"--kvbm-resp-port", "70000"}, "--kvbm-resp-port", nil},
		{[]string{"--kvbm-lm-port", "-2"}, "--kvbm-lm-port", nil},
		{[]string{"--kvbm-lm-port", "6380"}, "both 6380", nil},
		{[]string{"--kvbm-policy", "promote"}, "--kvbm-policy", nil},
		{[]string{"--kvbm", "--kvbm-external"}, "choose one", nil},
		{[]string{"--kvbm-external", "--kvbm-resp-port", "-1", "--kvbm-lm-port", "0"}, "--kvbm-external", nil},
		{[]string{"--kvbm", "--kvbm-fs-dir", "/lm", "--kvbm-fs-bytes", "2GiB", "--kvbm-fs-scan-interval", "250ms"}, "",
			func(o Kvbm) bool {
				cfg := o.ManagerConfig("n", nil, zerolog.Nop())
				return o.FSDir == "/lm" && cfg.FS != nil && cfg.FS.Dir == "/lm" && cfg.FS.MaxBytes == 2<<30 && cfg.FS.Interval == 250*time.Millisecond
			}},
		{[]string{"--kvbm"}, "", func(o Kvbm) bool {
			return o.FSBytes == 64<<30 && o.FSScanInterval == 5*time.Second && o.ManagerConfig("n", nil, zerolog.Nop()).FS == nil
		}},
		{[]string{"--kvbm-fs-dir", "/lm"}, "--kvbm-fs-dir needs --kvbm", nil},
		{[]string{"--kvbm", "--kvbm-fs-dir", "/lm", "--kvbm-fs-bytes", "0"}, "--kvbm-fs-bytes", nil},
		{[]string{"--kvbm", "--kvbm-fs-dir", "/lm", "--kvbm-fs-scan-interval", "0s"}, "--kvbm-fs-scan-interval", nil},
		{[]string{"--kvbm", "--kvbm-fs-dir", "/d/", "--kvbm-disk-dir", "/d"}, "--kvbm-fs-dir and --kvbm-disk-dir", nil},
	} {
		o := DefaultKvbm()
		fs := flag.NewFlagSet("t", flag.ContinueOnError)
		o.Flags(fs, true, true)
		if err := fs.Parse(tc.args); err != nil {
			t.Fatalf("%v: %v", tc.args, err)
		}
		err := o.Validate()
		switch {
		case tc.err == "" && err != nil:
			t.Errorf("%v: %v", tc.args, err)
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
			t.Errorf("%v: error %v, want one naming %s", tc.args, err, tc.err)
		case tc.check != nil && !tc.check(o):
			t.Errorf("%v parsed as %+v", tc.args, o)
		}
	}
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	o := DefaultKvbm()
	o.Flags(fs, true, true)
	if err := fs.Parse([]string{"--kvbm-host-bytes", "lots"}); err == nil {
		t.Error("--kvbm-host-bytes lots accepted")
	}
}

// TestKvbmEndpoints: a block manager on its own is reached on loopback when it binds every
// address; real engines get lm:// when served, else resp://.
func TestKvbmEndpoints(t *testing.T) {
	o := DefaultKvbm()
	o.Host = "0.0.0.0"
	e := o.ExternalEndpoints()
	if e.RESP != "resp://127.0.0.1:6380" || e.LM != "lm://127.0.0.1:6381" {
		t.Fatalf("endpoints %+v", e)
	}
	if k := o.LauncherKVBM(e); k == nil || k.RemoteURL != e.LM || k.ChunkSize != LMCacheChunkSize || k.LocalCPU {
		t.Fatalf("launcher KVBM %+v", k)
	}
	if k := o.LauncherKVBM(Endpoints{RESP: e.RESP}); k == nil || k.RemoteURL != e.RESP {
		t.Fatalf("launcher KVBM without lm:// %+v", k)
	}
	if k := o.LauncherKVBM(Endpoints{}); k != nil {
		t.Fatalf("launcher KVBM without a block manager %+v", k)
	}
}

// Bind binds the listeners before the member joins; a taken port is an error naming the
// flag and the address, and nothing stays bound.
func TestKvbmBind(t *testing.T) {
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	port := taken.Addr().(*net.TCPAddr).Port
	for _, tc := range []struct {
		resp, lm int
		err      string
	}{
		{0, 0, ""},
		{port, 0, fmt.Sprintf("--kvbm-host 127.0.0.1 --kvbm-resp-port %d: listen tcp 127.0.0.1:%d: bind: address already in use", port, port)},
		{0, port, fmt.Sprintf("--kvbm-lm-port %d: listen tcp", port)},
	} {
		o := DefaultKvbm()
		o.RESPPort, o.LMPort = tc.resp, tc.lm
		cfg := o.ManagerConfig("n", nil, zerolog.Nop())
		release, err := o.Bind(&cfg)
		if tc.err == "" {
			if err != nil {
				t.Fatalf("%+v: %v", tc, err)
			}
			for _, l := range cfg.Listeners {
				if l.Ln == nil {
					t.Errorf("%s not bound", l.Scheme)
				}
			}
			release()
			continue
		}
		if err == nil || !strings.Contains(err.Error(), tc.err) {
			t.Errorf("%+v: error %v, want %q", tc, err, tc.err)
		}
		for _, l := range cfg.Listeners { // the other port was released
			if l.Ln != nil {
				if ln, err := net.Listen("tcp", l.Ln.Addr().String()); err != nil {
					t.Errorf("%s still bound after the error: %v", l.Scheme, err)
				} else {
					_ = ln.Close()
				}
			}
		}
	}
}

// OpenError names --kvbm-disk-dir once, without the store's prefixes.
func TestKvbmOpenError(t *testing.T) {
	o := DefaultKvbm()
	o.DiskDir, o.DiskBytes = "/etc/passwd", 1<<30
	cfg := o.ManagerConfig("n", nil, zerolog.Nop())
	cfg.Listeners = nil
	_, err := kvbmactor.Open(cfg)
	got := o.OpenError(err)
	if want := "--kvbm-disk-dir /etc/passwd: not a directory"; got == nil || got.Error() != want {
		t.Fatalf("error %v, want %q", got, want)
	}
	if other := errors.New("x"); o.OpenError(other) != other {
		t.Fatal("another error was rewritten")
	}
}
