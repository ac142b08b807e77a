package bench

import (
	"strings"
	"testing"
)

// TestLoraLoadBound: the simulated engines' load time is bounded by the time one load
// takes in simulated time (--lora-load-ms over --speedup-ratio): at most a minute, the
// worker's limit on one engine call, so that no load alone runs a waiting request into
// the 2 min stall timeout; the error names both flags and both limits.
func TestLoraLoadBound(t *testing.T) {
	for _, tc := range []struct {
		loadMs, speedup float64
		wantErr         []string // nil: accepted
	}{
		{50, 1, nil},
		{60000, 1, nil},
		{600000, 10, nil}, // ten minutes at ten times the speed: a minute
		{60001, 1, []string{"--lora-load-ms 60001 over --speedup-ratio 1", "a load of 1m0.001s", "at most 1m0s", "2m0s stall timeout"}},
		{3.6e6, 1, []string{"--lora-load-ms 3.6e+06 over --speedup-ratio 1", "a load of 1h0m0s"}},
		{100, 0.001, []string{"--lora-load-ms 100 over --speedup-ratio 0.001", "a load of 1m40s"}},
		{4e6, 1, []string{"--lora-load-ms 4e+06: want 0 to"}},
	} {
		f := DefaultFleet(4)
		f.LoraLoadMs, f.SpeedupRatio = tc.loadMs, tc.speedup
		err := f.validateLora()
		if tc.wantErr == nil {
			if err != nil {
				t.Errorf("%g ms at %g: %v", tc.loadMs, tc.speedup, err)
			}
			continue
		}
		if err == nil {
			t.Errorf("%g ms at %g: accepted", tc.loadMs, tc.speedup)
			continue
		}
		for _, s := range tc.wantErr {
			if !strings.Contains(err.Error(), s) {
				t.Errorf("%g ms at %g: error %q lacks %q", tc.loadMs, tc.speedup, err, s)
			}
		}
	}
}
