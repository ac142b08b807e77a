package configure

import (
	"encoding/json"
	"math"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestConfigureVerifyServe runs the turbine binary's `configure --verify serve`: it
// starts `turbine serve` with the best layout's flags (mock engines playing the profile),
// replays the workload's first requests against it and compares with their simulation.
// It builds the binary first, so not under -short.
func TestConfigureVerifyServe(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the turbine binary and starts turbine serve; not under -short")
	}
	bin := filepath.Join(t.TempDir(), "turbine")
	if out, err := exec.Command("go", "build", "-o", bin, "..").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	prof, err := filepath.Abs(fixturePath)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "configure", "--profile", prof, "--isl", "500", "--osl", "20", "--rate", "10", "--requests", "60",
		"--gpus", "2", "--layouts", "aggregated", "--verify", "serve", "--verify-requests", "40", "--verify-speedup", "4", "--json")
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%v\n%s", err, stderr.String())
	}
	var rep Report
	if err := json.Unmarshal(out, &rep); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	v := rep.Verify
	if v == nil || v.Mode != "serve" || v.Layout != rep.Best.Layout || v.Requests != 40 || v.Measured.Requests != 40 || v.Measured.Failed != 0 ||
		!strings.HasPrefix(v.Note, "turbine serve --workers ") || !strings.Contains(v.Note, "--mocker-profile "+prof) {
		t.Fatalf("verify %+v\n%s", v, stderr.String())
	}
	// Real processes are slower than the model, never faster: measured TTFT at least the
	// predicted less a little rounding, and a finite comparison.
	if float64(v.Measured.TTFT.P50) < 0.9*float64(v.Predicted.TTFT.P50) || math.IsNaN(float64(v.GoodputError)) {
		t.Errorf("predicted %+v, measured %+v", v.Predicted, v.Measured)
	}
	t.Logf("%s: predicted TTFT p50 %.1f ms, goodput %.3f; measured TTFT p50 %.1f ms, goodput %.3f (%+.1f%%)", v.Layout,
		float64(v.Predicted.TTFT.P50), v.Predicted.Goodput, float64(v.Measured.TTFT.P50), v.Measured.Goodput, 100*float64(v.GoodputError))
}
