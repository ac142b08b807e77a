package configure

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"testing"
)

// mooncakeTrace is the Mooncake conversation trace beside the repository
// (../shared/data; docs/reference.md §19).
var mooncakeTrace = filepath.Join("..", "..", "..", "..", "shared", "data", "mooncake_fast25_conversation_trace.jsonl")

// TestConfigureMooncake8GPUs is the configurator's proof: `turbine configure` on the
// Mooncake conversation trace at 8 GPUs (the fixture profile's TP 1, 2 and 4; the
// planner's default targets, TTFT and ITL p90 500 and 50 ms) predicts its best layout's
// goodput from a sample within 10 % of a simulation of that layout on the whole trace.
// It simulates every layout of at most 8 GPUs on 2,500 requests each: minutes of CPU, so
// it runs neither under -short nor under the race detector.
func TestConfigureMooncake8GPUs(t *testing.T) {
	switch {
	case testing.Short():
		t.Skip("simulates 85 layouts on the Mooncake trace (minutes); not under -short")
	case raceEnabled:
		t.Skip("simulates 85 layouts on the Mooncake trace, ten times slower under the race detector: go test -run TestConfigureMooncake8GPUs ./cmd/turbine/configure/")
	}
	if _, err := os.Stat(mooncakeTrace); err != nil {
		t.Skip("../shared/data (the production traces) is not beside the repository")
	}
	out, errOut, err := run(t, "--profile", fixturePath, "--trace", mooncakeTrace, "--max-model-len", "131072", "--gpus", "8",
		"--verify", "sim", "--json")
	if err != nil {
		t.Fatalf("%v\n%s", err, errOut)
	}
	var rep Report
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatal(err)
	}
	v := rep.Verify
	if v == nil || v.Layout != rep.Best.Layout || v.Measured.Requests != 12031 || rep.Layouts != 85 {
		t.Fatalf("report %+v, verify %+v", rep, v)
	}
	for _, l := range rep.Top {
		t.Logf("%d %-16s %d GPUs  TTFT p50/p90 %6.0f / %6.0f ms  ITL p50/p90 %5.2f / %5.2f ms  on target %5.1f%%  goodput %.4f  %s %s",
			l.Rank, l.Layout, l.GPUs, float64(l.TTFT.P50), float64(l.TTFT.At), float64(l.ITL.P50), float64(l.ITL.At), 100*l.Attainment,
			l.Goodput, l.Verdict, l.Reason)
	}
	t.Logf("verdicts %v; search %.0f s, %d of %d layouts simulated", rep.Verdicts, rep.SearchS, rep.Evaluated, rep.Layouts)
	t.Logf("best %s: predicted goodput %.4f (on target %.1f%%, TTFT p90 %.0f ms), whole trace simulated %.4f (%.1f%%, %.0f ms): %+.1f%%",
		v.Layout, v.Predicted.Goodput, 100*v.Predicted.Attainment, float64(v.Predicted.TTFT.At), v.Measured.Goodput,
		100*v.Measured.Attainment, float64(v.Measured.TTFT.At), 100*float64(v.GoodputError))
	if e := float64(v.GoodputError); math.IsNaN(e) || math.Abs(e) > 0.10 {
		t.Errorf("best layout %s: predicted goodput %.4f, simulated on the whole trace %.4f: off by %+.1f%%, want within 10%%",
			v.Layout, v.Predicted.Goodput, v.Measured.Goodput, 100*e)
	}
}
