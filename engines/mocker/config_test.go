package mocker

import (
	"math"
	"strings"
	"testing"
)

// TestSpeedupRatioBound: Validate takes a speedup ratio above 0 and at most
// MaxSpeedupRatio and refuses anything else with the range in its message.
func TestSpeedupRatioBound(t *testing.T) {
	for _, tc := range []struct {
		ratio float64
		ok    bool
	}{
		{1, true}, {1e-3, true}, {MaxSpeedupRatio, true},
		{0, false}, {-1, false}, {math.NaN(), false}, {math.Inf(1), false},
		{MaxSpeedupRatio * (1 + 1e-9), false}, {5e8, false}, {1e12, false},
	} {
		c := DefaultConfig()
		c.SpeedupRatio = tc.ratio
		err := c.Validate()
		if tc.ok != (err == nil) {
			t.Errorf("SpeedupRatio %v: error %v, want ok %v", tc.ratio, err, tc.ok)
			continue
		}
		if err != nil && !strings.Contains(err.Error(), "want above 0 and at most 1e+06") {
			t.Errorf("SpeedupRatio %v: error %v, want the range in it", tc.ratio, err)
		}
	}
}

// TestNumGPUBlocksBound: Validate takes up to MaxNumGPUBlocks KV blocks and refuses more
// with the bound in its message, so that a huge figure is an error, not an allocation
// that panics or takes the machine's memory.
func TestNumGPUBlocksBound(t *testing.T) {
	for _, tc := range []struct {
		blocks int
		ok     bool
	}{{16384, true}, {MaxNumGPUBlocks, true}, {MaxNumGPUBlocks + 1, false}, {1 << 40, false}, {math.MaxInt, false}} {
		c := DefaultConfig()
		c.NumGPUBlocks = tc.blocks
		err := c.Validate()
		if tc.ok != (err == nil) {
			t.Errorf("NumGPUBlocks %d: error %v, want ok %v", tc.blocks, err, tc.ok)
			continue
		}
		if err != nil && !strings.Contains(err.Error(), "--num-gpu-blocks-override") {
			t.Errorf("NumGPUBlocks %d: error %v, want the flag named", tc.blocks, err)
		}
	}
}
