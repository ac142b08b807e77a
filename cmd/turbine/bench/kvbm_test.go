package bench

import (
	"strings"
	"testing"
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
