package bench

import (
	"bytes"
	"context"
	"path/filepath"
	"strings"
	"testing"
)

// TestKillWorkerFlag: --kill-worker kills a simulated worker (its streams migrate, as
// the summary line says), and is refused with a message naming it when it does not
// parse, names no worker of the fleet, or comes without --simulate.
func TestKillWorkerFlag(t *testing.T) {
	base := []string{"--simulate", "--workers", "2", "--router-mode", "round-robin", "--block-size", "16", "--num-gpu-blocks", "256",
		"--max-model-len", "4096", "--isl", "200", "--osl", "200", "--rate", "50", "--requests", "6", "--seed", "3"}
	t.Run("kills and migrates", func(t *testing.T) {
		out := filepath.Join(t.TempDir(), "out")
		args := append(append([]string(nil), base...), "--out", out, "--kill-worker", "worker-1@150ms")
		var stdout, stderr bytes.Buffer
		if err := Run(context.Background(), args, &stdout, &stderr); err != nil {
			t.Fatalf("%v\n%s", err, stderr.String())
		}
		if s := readSummary(t, filepath.Join(out, "summary.json")); s.Succeeded != 6 {
			t.Fatalf("summary %+v: want the 6 requests answered", s)
		}
		if !strings.Contains(stderr.String(), "bench: killed worker-1 at 150ms; migrations: worker_terminated ") {
			t.Fatalf("stderr does not report the kill and its migrations:\n%s", stderr.String())
		}
	})
	t.Run("from the environment", func(t *testing.T) {
		t.Setenv("TURBINE_KILL_WORKER", "worker-0@1s,worker-7@2s")
		args := append(append([]string(nil), base...), "--out", filepath.Join(t.TempDir(), "out"))
		err := Run(context.Background(), args, &bytes.Buffer{}, &bytes.Buffer{})
		if err == nil || !strings.Contains(err.Error(), `no worker "worker-7"`) {
			t.Fatalf("error %v, want one naming worker-7 from TURBINE_KILL_WORKER", err)
		}
	})
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"no time", append(append([]string(nil), base...), "--kill-worker", "worker-1"), "want WORKER@TIME"},
		{"bad time", append(append([]string(nil), base...), "--kill-worker", "worker-0@1s,worker-1@later"), `time "later"`},
		{"unknown worker", append(append([]string(nil), base...), "--kill-worker", "worker-2@1s"),
			`--kill-worker worker-2@1s: no worker "worker-2" in this fleet (its workers: worker-0 to worker-1)`},
		{"disaggregated names", append(append([]string(nil), base...), "--prefill-workers", "1", "--kill-worker", "worker-0@1s"),
			"its workers: decode-0 to decode-1, prefill-0"},
		{"real run", []string{"--url", "http://127.0.0.1:1", "--model", "m", "--rate", "1", "--kill-worker", "worker-0@1s"},
			"--kill-worker: only with --simulate"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := append(tc.args, "--out", filepath.Join(t.TempDir(), "out"))
			err := Run(context.Background(), args, &bytes.Buffer{}, &bytes.Buffer{})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want one containing %q", err, tc.want)
			}
		})
	}
}
