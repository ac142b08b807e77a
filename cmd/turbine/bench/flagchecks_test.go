package bench

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/turbine-llm/turbine/engines/mocker"
)

// TestHostModelFileIsCalibrates: --host-model reads only what --calibrate writes: a file
// with a field host.json has not (a misspelled figure, a summary.json) or without one of
// the figures --calibrate always writes (the speedup ratio, the four figures) is refused
// with an error naming the file and what is wrong, not read as a host model of zeros.
func TestHostModelFileIsCalibrates(t *testing.T) {
	dir := t.TempDir()
	const full = `"timer_resolution_ms": 1, "step_overhead_ms": 0.2, "request_overhead_ms": 3, "request_token_overhead_us": 2, "speedup_ratio": 1`
	for _, tc := range []struct {
		name, body string
		want       []string
	}{
		{"empty object", `{}`, []string{"no timer_resolution_ms", "not a host.json of --calibrate"}},
		{"null", `null`, []string{"no timer_resolution_ms"}},
		{"a summary.json", `{"label": "run", "requests": 3, "succeeded": 3}`, []string{`unknown field "label"`}},
		{"misspelled figure", `{"step_overhead": "2ms"}`, []string{`unknown field "step_overhead"`}},
		{"misspelled beside the figures", `{` + full + `, "request_overhead": 4}`, []string{`unknown field "request_overhead"`}},
		{"no speedup ratio", `{"timer_resolution_ms": 1, "step_overhead_ms": 0.2, "request_overhead_ms": 3, "request_token_overhead_us": 2}`,
			[]string{"no speedup_ratio"}},
		{"no token figure", `{"timer_resolution_ms": 1, "step_overhead_ms": 0.2, "request_overhead_ms": 3, "speedup_ratio": 1}`,
			[]string{"no request_token_overhead_us"}},
		{"a null figure", `{"timer_resolution_ms": 1, "step_overhead_ms": null, "request_overhead_ms": 3, "request_token_overhead_us": 2, "speedup_ratio": 1}`,
			[]string{"no step_overhead_ms"}},
		{"speedup ratio 0", `{"timer_resolution_ms": 1, "step_overhead_ms": 0.2, "request_overhead_ms": 3, "request_token_overhead_us": 2, "speedup_ratio": 0}`,
			[]string{"speedup_ratio 0"}},
		{"two objects", `{` + full + `} {}`, []string{"more than one JSON value"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(dir, strings.ReplaceAll(tc.name, " ", "_")+".json")
			if err := os.WriteFile(path, []byte(tc.body), 0o644); err != nil {
				t.Fatal(err)
			}
			args := []string{"--simulate", "--trace", "testdata/mini.jsonl", "--workers", "1", "--max-model-len", "2048",
				"--host-model", path, "--out", t.TempDir()}
			err := Run(context.Background(), args, &bytes.Buffer{}, &bytes.Buffer{})
			if err == nil || !strings.HasPrefix(err.Error(), "--host-model "+path+": ") {
				t.Fatalf("error %v: want one naming --host-model %s", err, path)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %v: want %q in it", err, w)
				}
			}
		})
	}
}

// TestHostFileBounds: HostFile.Host refuses a figure outside the bounds its message
// gives (an hour, a millisecond per token), saying the figure in the file's own unit.
func TestHostFileBounds(t *testing.T) {
	for _, tc := range []struct {
		name string
		hf   HostFile
		want string
	}{
		{"two hours of step overhead", HostFile{StepOverheadMS: 2 * 3600e3}, "step_overhead_ms 2h0m0s: want 0 to 1h0m0s (the file gives 7.2e+06 ms)"},
		{"negative resolution", HostFile{TimerResolutionMS: -0.5}, "timer_resolution_ms -500µs: want 0 to 1h0m0s (the file gives -0.5 ms)"},
		{"years", HostFile{RequestOverheadMS: 1e12}, "request_overhead_ms 1e+12: want a number of 0 to an hour (3.6e+06 ms)"},
		{"token figure of 2 ms", HostFile{RequestTokenOverheadUS: 2000}, "request_token_overhead_us 2ms: want 0 to 1ms (the file gives 2000 µs)"},
		{"token figure of years", HostFile{RequestTokenOverheadUS: 1e18}, "request_token_overhead_us 1e+18: want a number of 0 to a millisecond (1000 µs)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := tc.hf.Host()
			if err == nil || err.Error() != tc.want {
				t.Fatalf("error %v: want %q", err, tc.want)
			}
		})
	}
	h, err := HostFile{TimerResolutionMS: 1, StepOverheadMS: 3600e3, RequestOverheadMS: 3, RequestTokenOverheadUS: 1000}.Host()
	if err != nil || h.StepOverhead != time.Hour || h.RequestTokenOverhead != time.Millisecond {
		t.Fatalf("figures at their bounds: %+v, %v: want them taken", h, err)
	}
}

// TestSpeedupRatioBoundIsTheEngines: the simulation's --speedup-ratio bound ends where
// the mock engine's does, so that what a simulation takes a serve takes too.
func TestSpeedupRatioBoundIsTheEngines(t *testing.T) {
	base := []string{"--simulate", "--trace", "testdata/mini.jsonl", "--workers", "1", "--max-model-len", "2048"}
	err := Run(context.Background(), append(base, "--speedup-ratio", "1e12", "--out", t.TempDir()), &bytes.Buffer{}, &bytes.Buffer{})
	if err == nil || !strings.Contains(err.Error(), "--speedup-ratio 1e+12: want 0.001 to 1e+06") {
		t.Fatalf("error %v: want --speedup-ratio 1e+12 refused with the range", err)
	}
	f := DefaultFleet(1)
	f.SpeedupRatio = mocker.MaxSpeedupRatio
	if err := f.validate([]string{f.RouterMode}, "--router-mode"); err != nil {
		t.Fatalf("the mock engine's largest speedup ratio: %v", err)
	}
	f.SpeedupRatio = mocker.MaxSpeedupRatio * (1 + 1e-9)
	if err := f.validate([]string{f.RouterMode}, "--router-mode"); err == nil {
		t.Fatal("a speedup ratio above the mock engine's largest: taken")
	}
}

// TestSimulateTimeoutBound: --timeout beyond a simulation's virtual time is refused
// where the flags are checked, naming the flag and its range.
func TestSimulateTimeoutBound(t *testing.T) {
	args := []string{"--simulate", "--trace", "testdata/mini.jsonl", "--workers", "1", "--max-model-len", "2048",
		"--timeout", "2562047h", "--out", t.TempDir()}
	err := Run(context.Background(), args, &bytes.Buffer{}, &bytes.Buffer{})
	if err == nil || !strings.HasPrefix(err.Error(), "--timeout 2562047h0m0s: want above 0 and at most 876000h0m0s") {
		t.Fatalf("error %v: want --timeout refused with its range", err)
	}
	cmp := []string{"compare", "--simulate", "--trace", "testdata/mini.jsonl", "--workers", "1", "--max-model-len", "2048",
		"--modes", "kv", "--timeout", "2562047h", "--out", t.TempDir()}
	if err := Run(context.Background(), cmp, &bytes.Buffer{}, &bytes.Buffer{}); err == nil || !strings.HasPrefix(err.Error(), "--timeout 2562047h0m0s") {
		t.Fatalf("compare: error %v: want --timeout refused", err)
	}
}

// TestSimulateOnlyFlagsFromTheEnvironment: a simulation's own flags are refused on a
// real run when their variables set them, as on the command line; serve's variables
// (TURBINE_WORKERS, set for a serve in the same shell) are not.
func TestSimulateOnlyFlagsFromTheEnvironment(t *testing.T) {
	real := []string{"--model", "m", "--url", "http://127.0.0.1:1", "--requests", "1", "--rate", "1"}
	for _, tc := range []struct{ env, value string }{
		{"TURBINE_KILL_WORKER", "worker-0@1s"},
		{"TURBINE_HOST_MODEL", "host.json"},
		{"TURBINE_STEP_OVERHEAD", "1ms"},
		{"TURBINE_REQUEST_TOKEN_OVERHEAD", "1us"},
	} {
		t.Run(tc.env, func(t *testing.T) {
			t.Setenv(tc.env, tc.value)
			err := Run(context.Background(), append(append([]string{}, real...), "--out", t.TempDir()), &bytes.Buffer{}, &bytes.Buffer{})
			want := tc.env + "=" + tc.value + ": only with --simulate"
			if err == nil || !strings.HasPrefix(err.Error(), want) {
				t.Fatalf("error %v: want %q", err, want)
			}
		})
	}
	t.Run("serve's variable", func(t *testing.T) {
		t.Setenv("TURBINE_WORKERS", "4")
		err := Run(context.Background(), append(append([]string{}, real...), "--out", t.TempDir()), &bytes.Buffer{}, &bytes.Buffer{})
		if err == nil || strings.Contains(err.Error(), "only with --simulate") {
			t.Fatalf("error %v: want the run to go on to --url (and find no server there)", err)
		}
	})
}

// TestKillWorkerMessages: --kill-worker's value appears in the errors about it, and a
// value that does not parse is an error of its own, without the whole -h.
func TestKillWorkerMessages(t *testing.T) {
	var stderr bytes.Buffer
	err := Run(context.Background(), []string{"--calibrate", "--model", "m", "--kill-worker", "w@1s"}, &bytes.Buffer{}, &stderr)
	if err == nil || !strings.Contains(err.Error(), "--kill-worker w@1s: not with --calibrate") {
		t.Fatalf("error %v: want --kill-worker w@1s named", err)
	}
	stderr.Reset()
	args := []string{"--simulate", "--trace", "testdata/mini.jsonl", "--workers", "1", "--max-model-len", "2048",
		"--kill-worker", "worker-0@soon", "--out", t.TempDir()}
	err = Run(context.Background(), args, &bytes.Buffer{}, &stderr)
	if err == nil || !strings.HasPrefix(err.Error(), `--kill-worker worker-0@soon: "worker-0@soon": time "soon"`) {
		t.Fatalf("error %v: want the bad value named", err)
	}
	if strings.Contains(stderr.String(), "usage:") || strings.Contains(stderr.String(), "-block-tokens") {
		t.Errorf("stderr has the flags' help:\n%s", stderr.String())
	}
}
