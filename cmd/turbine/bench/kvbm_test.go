package bench

import (
	"flag"
	"io"
	"strings"
	"testing"

	"github.com/turbine-llm/turbine/bench/sim"
)

func TestKvbmFleetConfig(t *testing.T) {
	f := DefaultFleet(2)
	f.NumGPUBlocks, f.BlockSize, f.KVBytesPerToken = 100, 16, 1000
	for _, tc := range []struct {
		name       string
		k          KvbmFleet
		host, disk int64
		nilCfg     bool
		err        string
	}{
		{name: "off", k: KvbmFleet{}, nilCfg: true},
		{name: "default host", k: KvbmFleet{On: true}, host: 4 * 100 * 16 * 1000},
		{name: "given", k: KvbmFleet{On: true, HostBytes: 5, DiskBytes: 7}, host: 5, disk: 7},
		{name: "sizes without --kvbm", k: KvbmFleet{HostBytes: 5}, err: "need --kvbm"},
		{name: "negative host", k: KvbmFleet{On: true, HostBytes: -1}, err: "--kvbm-host-bytes"},
		{name: "negative disk", k: KvbmFleet{On: true, DiskBytes: -1}, err: "--kvbm-disk-bytes"},
	} {
		c, err := tc.k.config(&f)
		switch {
		case tc.err != "":
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%s: error %v, want %q", tc.name, err, tc.err)
			}
		case err != nil:
			t.Errorf("%s: %v", tc.name, err)
		case tc.nilCfg:
			if c != nil {
				t.Errorf("%s: %+v, want none", tc.name, c)
			}
		case c == nil || c.HostBytes != tc.host || c.DiskBytes != tc.disk:
			t.Errorf("%s: %+v, want host %d disk %d", tc.name, c, tc.host, tc.disk)
		}
	}
}

// The block manager's flags read byte counts with units, as serve's and node's do
// (options.Bytes), and --kvbm-remote reaches the simulation's configuration.
func TestKvbmFlags(t *testing.T) {
	f := DefaultFleet(2)
	f.NumGPUBlocks, f.BlockSize, f.KVBytesPerToken = 100, 16, 1000
	for _, tc := range []struct {
		name       string
		args       []string
		host, disk int64
		remote     bool
		err        string
	}{
		{name: "binary units", args: []string{"--kvbm", "--kvbm-host-bytes", "64GiB", "--kvbm-disk-bytes", "640GiB"},
			host: 64 << 30, disk: 640 << 30},
		{name: "decimal unit and plain bytes", args: []string{"--kvbm", "--kvbm-host-bytes", "1.5GB", "--kvbm-disk-bytes", "1048576"},
			host: 1.5e9, disk: 1 << 20},
		{name: "remote", args: []string{"--kvbm", "--kvbm-remote"}, host: 4 * 100 * 16 * 1000, remote: true},
		{name: "remote without --kvbm", args: []string{"--kvbm-remote"}, err: "need --kvbm"},
		{name: "unknown unit", args: []string{"--kvbm", "--kvbm-host-bytes", "64 furlongs"}, err: `invalid value "64 furlongs" for flag -kvbm-host-bytes`},
		{name: "negative", args: []string{"--kvbm", "--kvbm-disk-bytes", "-1"}, err: "-kvbm-disk-bytes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var k KvbmFleet
			fs := flag.NewFlagSet("bench", flag.ContinueOnError)
			fs.SetOutput(io.Discard)
			k.flags(fs)
			err := fs.Parse(tc.args)
			var c *sim.Kvbm
			if err == nil {
				c, err = k.config(&f)
			}
			switch {
			case tc.err != "":
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("error %v, want %q", err, tc.err)
				}
			case err != nil:
				t.Fatal(err)
			case c == nil || c.HostBytes != tc.host || c.DiskBytes != tc.disk || c.Remote != tc.remote:
				t.Fatalf("%+v, want host %d disk %d remote %v", c, tc.host, tc.disk, tc.remote)
			}
		})
	}
}
