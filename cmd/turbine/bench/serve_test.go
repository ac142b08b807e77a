package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"github.com/turbine-llm/turbine/cmd/turbine/internal/serveproc"
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

// TestStartServeExited: a serve that exits before logging "turbine serving" is an error
// naming the executable and how it ended (status 0 too, not Wait's nil error), with its
// last log lines.
func TestStartServeExited(t *testing.T) {
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Skip("no sh")
	}
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"status 0", []string{"-c", "exit 0"}, "serve " + sh + ` exited with status 0 before logging "turbine serving"`},
		{"status 3", []string{"-c", "echo engine failed >&2; exit 3"},
			"serve " + sh + " exited with status 3 before logging \"turbine serving\"; serve's last log lines:\n  engine failed"},
		{"killed", []string{"-c", "kill -KILL $$"}, "serve " + sh + ` was killed by signal: killed before logging "turbine serving"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := serveproc.Start(context.Background(), sh, tc.args, "m", 1, time.Minute)
			if err == nil {
				_ = s.Stop()
				t.Fatal("no error")
			}
			if err.Error() != tc.want {
				t.Fatalf("error %q, want %q", err, tc.want)
			}
		})
	}
}

// TestCompareServeExecutableExits: bench compare with a --serve-executable that exits at
// once names it and its status 0.
func TestCompareServeExecutableExits(t *testing.T) {
	exe, err := exec.LookPath("true")
	if err != nil {
		t.Skip("no true")
	}
	args := []string{"compare", "--serve-executable", exe, "--modes", "kv", "--isl", "40", "--osl", "3", "--requests", "2",
		"--concurrency", "1", "--out", t.TempDir(), "--progress-interval", "0"}
	err = Run(context.Background(), args, &bytes.Buffer{}, &bytes.Buffer{})
	if want := "mode kv: serve " + exe + ` exited with status 0 before logging "turbine serving"`; err == nil || err.Error() != want {
		t.Fatalf("error %v, want %q", err, want)
	}
}
