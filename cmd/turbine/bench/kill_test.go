package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// killArgs is a simulated run of 20 requests at 5 per second on 2 workers (it ends
// after about 4.5 s).
func killArgs(t *testing.T, out string, extra ...string) []string {
	t.Helper()
	return append([]string{"--simulate", "--workers", "2", "--router-mode", "round-robin", "--block-size", "16",
		"--num-gpu-blocks", "256", "--max-model-len", "4096", "--isl", "200", "--osl", "100", "--rate", "5",
		"--requests", "20", "--seed", "3", "--out", out}, extra...)
}

// TestKillAfterTheRun: a kill due after the run's last request ended is reported as not
// done, not as a kill, in the log and in summary.json.
func TestKillAfterTheRun(t *testing.T) {
	out := t.TempDir()
	var stdout, stderr bytes.Buffer
	if err := Run(context.Background(), killArgs(t, out, "--kill-worker", "worker-1@1h", "--kill-worker", "worker-0@1s"), &stdout, &stderr); err != nil {
		t.Fatalf("%v\n%s", err, stderr.String())
	}
	log := stderr.String()
	if strings.Contains(log, "worker-1 at 1h") || !strings.Contains(log, "bench: killed worker-0 at 1s;") ||
		!strings.Contains(log, "worker-1@1h0m0s: the run ended first") {
		t.Errorf("stderr does not tell the kill done from the one the run ended before:\n%s", log)
	}
	if strings.Contains(log, "simulated 3600") {
		t.Errorf("the kill after the run counts as simulated time:\n%s", log)
	}
	raw := readRawSummary(t, filepath.Join(out, "summary.json"))
	var kills []map[string]any
	if err := json.Unmarshal(raw["kills"], &kills); err != nil {
		t.Fatalf("kills %s: %v", raw["kills"], err)
	}
	want := []map[string]any{{"worker": "worker-1", "at_s": 3600.0, "killed": false}, {"worker": "worker-0", "at_s": 1.0, "killed": true}}
	if len(kills) != 2 || !sameJSON(kills[0], want[0]) || !sameJSON(kills[1], want[1]) {
		t.Errorf("kills %s, want %v", raw["kills"], want)
	}
}

// TestKillWorkerNamedTwice: a worker killed twice is refused.
func TestKillWorkerNamedTwice(t *testing.T) {
	for _, kills := range [][]string{
		{"--kill-worker", "worker-1@1s", "--kill-worker", "worker-1@2s"},
		{"--kill-worker", "worker-1@1s,worker-0@1s,worker-1@1s"},
	} {
		err := Run(context.Background(), killArgs(t, t.TempDir(), kills...), &bytes.Buffer{}, &bytes.Buffer{})
		if err == nil || !strings.Contains(err.Error(), "--kill-worker worker-1@") || !strings.Contains(err.Error(), "worker-1 is named twice") {
			t.Errorf("%v: error %v, want one naming worker-1 twice", kills, err)
		}
	}
}

// TestMigrationLimitFlag: --migration-limit (or TURBINE_MIGRATION_LIMIT) sets how many
// times a simulated request moves after its worker's death: 0 fails the killed
// worker's streams, the default moves them; it is refused out of range and without
// --simulate.
func TestMigrationLimitFlag(t *testing.T) {
	errorsOf := func(t *testing.T, extra ...string) map[string]int {
		t.Helper()
		out := t.TempDir()
		var stderr bytes.Buffer
		if err := Run(context.Background(), killArgs(t, out, append([]string{"--kill-worker", "worker-1@1500ms"}, extra...)...), &bytes.Buffer{}, &stderr); err != nil {
			t.Fatalf("%v\n%s", err, stderr.String())
		}
		return readSummary(t, filepath.Join(out, "summary.json")).Errors
	}
	if e := errorsOf(t); len(e) != 0 {
		t.Errorf("default limit: errors %v, want none (the streams migrate)", e)
	}
	if e := errorsOf(t, "--migration-limit", "0"); e["worker_failed"] == 0 {
		t.Errorf("--migration-limit 0: errors %v, want worker_failed", e)
	}
	t.Run("from the environment", func(t *testing.T) {
		t.Setenv("TURBINE_MIGRATION_LIMIT", "0")
		if e := errorsOf(t); e["worker_failed"] == 0 {
			t.Errorf("TURBINE_MIGRATION_LIMIT=0: errors %v, want worker_failed", e)
		}
	})
	for _, tc := range []struct {
		args []string
		want string
	}{
		{killArgs(t, t.TempDir(), "--migration-limit", "-1"), "--migration-limit -1: want 0..100"},
		{[]string{"--url", "http://127.0.0.1:1", "--model", "m", "--rate", "1", "--migration-limit", "1"}, "--migration-limit: only with --simulate"},
	} {
		err := Run(context.Background(), tc.args, &bytes.Buffer{}, &bytes.Buffer{})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: error %v, want one containing %q", tc.args, err, tc.want)
		}
	}
}

// TestSimulatedSummaryRecordsFaults: summary.json of a simulation with kills has the
// kills and the migrations and prefill retries by reason; one without has none of these
// fields.
func TestSimulatedSummaryRecordsFaults(t *testing.T) {
	run := func(t *testing.T, extra ...string) map[string]json.RawMessage {
		t.Helper()
		out := t.TempDir()
		var stderr bytes.Buffer
		if err := Run(context.Background(), killArgs(t, out, extra...), &bytes.Buffer{}, &stderr); err != nil {
			t.Fatalf("%v\n%s", err, stderr.String())
		}
		readSummary(t, filepath.Join(out, "summary.json")) // it reads back
		return readRawSummary(t, filepath.Join(out, "summary.json"))
	}
	plain := run(t)
	for _, k := range []string{"kills", "migrations", "prefill_retries"} {
		if v, ok := plain[k]; ok {
			t.Errorf("without faults: %s = %s, want no such field", k, v)
		}
	}
	killed := run(t, "--kill-worker", "worker-1@1500ms")
	var migrations map[string]int
	if err := json.Unmarshal(killed["migrations"], &migrations); err != nil || migrations["worker_terminated"] < 1 {
		t.Errorf("migrations %s (%v): want worker_terminated counted", killed["migrations"], err)
	}
	if string(killed["kills"]) == "" {
		t.Errorf("no kills field")
	}
	// A prefill worker killed while its engine is busy (prompts of 2000 tokens arriving
	// at 50 per second): its legs are prefilled again elsewhere.
	disagg := run(t, "--prefill-workers", "2", "--max-local-prefill-tokens", "10", "--isl", "2000", "--rate", "50",
		"--kill-worker", "prefill-0@200ms")
	var retries map[string]int
	if err := json.Unmarshal(disagg["prefill_retries"], &retries); err != nil || len(retries) == 0 {
		t.Errorf("prefill_retries %s (%v): want the retries by reason", disagg["prefill_retries"], err)
	}
}

// readRawSummary reads summary.json as its fields.
func readRawSummary(t *testing.T, path string) map[string]json.RawMessage {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(data, &m); err != nil {
		t.Fatal(err)
	}
	return m
}

func sameJSON(a, b any) bool {
	x, _ := json.Marshal(a)
	y, _ := json.Marshal(b)
	return bytes.Equal(x, y)
}
