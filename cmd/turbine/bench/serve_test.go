package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// TestCompareRealServe compares two routing modes on two real `turbine serve` processes
// (one worker each, tiny engines, 100× speed) built from this repository: the started
// serves become ready, answer every request with prefix-cache figures, and stop.
func TestCompareRealServe(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs turbine serve: skipped with -short")
	}
	exe := filepath.Join(t.TempDir(), "turbine")
	build := exec.Command("go", "build", "-o", exe, "github.com/turbine-llm/turbine/cmd/turbine")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build turbine: %v\n%s", err, out)
	}
	out := t.TempDir()
	var stdout, stderr bytes.Buffer
	args := []string{"compare", "--serve-executable", exe, "--modes", "kv,cache-aware", "--workers", "1",
		"--trace", "testdata/mini.jsonl", "--concurrency", "2", "--time-scale", "0.01",
		"--block-size", "16", "--num-gpu-blocks", "256", "--max-model-len", "2048", "--speedup-ratio", "100",
		"--ready-timeout", "60s", "--out", out, "--progress-interval", "0"}
	start := time.Now()
	if err := Run(context.Background(), args, &stdout, &stderr); err != nil {
		t.Fatalf("%v\n%s", err, stderr.String())
	}
	t.Logf("two serves started, measured and stopped in %v", time.Since(start).Round(time.Millisecond))
	var cmp Comparison
	b, err := os.ReadFile(filepath.Join(out, "compare.json"))
	if err != nil || json.Unmarshal(b, &cmp) != nil {
		t.Fatalf("compare.json: %v %s", err, b)
	}
	if len(cmp.Rows) != 2 || cmp.HitRateCeiling == nil {
		t.Fatalf("comparison %+v: want 2 rows and the trace's ceiling", cmp)
	}
	for _, r := range cmp.Rows {
		if r.Failed != 0 || r.Succeeded != 3 || r.HitRate == nil || r.TTFTP50 <= 0 {
			t.Fatalf("mode %s: %+v: want 3 valid answers with a hit rate\n%s", r.Mode, r, stderr.String())
		}
	}
	t.Logf("\n%s", stdout.String())
}
