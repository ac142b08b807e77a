package options

import (
	"strings"
	"testing"

	"github.com/turbine-llm/turbine/engines/mocker"
)

// TestEngineSpeedupRatioBound: serve and node refuse a --speedup-ratio the mock engines
// would refuse at their start, naming the flag and the mock engine's range.
func TestEngineSpeedupRatioBound(t *testing.T) {
	for _, tc := range []struct {
		ratio float64
		want  string
	}{
		{1e12, "--speedup-ratio 1e+12: want above 0 and at most 1e+06"},
		{5e8, "--speedup-ratio 5e+08: want above 0 and at most 1e+06"},
		{0, "--speedup-ratio 0: want above 0 and at most 1e+06"},
		{-1, "--speedup-ratio -1: want above 0 and at most 1e+06"},
		{mocker.MaxSpeedupRatio, ""},
		{1e-4, ""},
	} {
		o := DefaultEngine()
		o.SpeedupRatio = tc.ratio
		err := o.Validate()
		if (tc.want == "") != (err == nil) || err != nil && !strings.HasPrefix(err.Error(), tc.want) {
			t.Errorf("--speedup-ratio %v: error %v, want %q", tc.ratio, err, tc.want)
		}
	}
}
