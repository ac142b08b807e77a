package profile

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	mockcore "github.com/turbine-llm/turbine/engines/mocker"
	"github.com/turbine-llm/turbine/planner"
)

// mockerBin is a mock engine binary built for the tests (testdata/mocker): without the
// race detector, so that it keeps to its timing model as the turbine binary does.
var mockerBin = sync.OnceValues(func() (string, error) {
	dir, err := os.MkdirTemp("", "turbine-profile-test-")
	if err != nil {
		return "", err
	}
	exe := filepath.Join(dir, "mocker")
	out, err := exec.Command("go", "build", "-o", exe, "./testdata/mocker").CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("build testdata/mocker: %v\n%s", err, out)
	}
	return exe, nil
})

func TestMain(m *testing.M) {
	code := m.Run()
	if exe, err := mockerBin(); err == nil {
		os.RemoveAll(filepath.Dir(exe))
	}
	os.Exit(code)
}

// mockExecutable returns the mock engine binary, or skips the test where Go cannot
// build it.
func mockExecutable(t *testing.T) string {
	t.Helper()
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("no go command to build the mock engine with")
	}
	exe, err := mockerBin()
	if err != nil {
		t.Fatal(err)
	}
	return exe
}

// runProfile runs the command with exe as the mock engines' executable.
func runProfile(t *testing.T, exe string, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	var out, errb bytes.Buffer
	err = Run(context.Background(), append([]string{"--mocker-executable", exe}, args...), &out, &errb)
	return out.String(), errb.String(), err
}

// within checks a measured figure against the reference mock engine's: never below it
// (a mock engine never ends a step before its modelled end, and the sweep takes out
// only what the host adds), and above it by no more than the host's timer lengthens a
// step measured at that speedup: a wait rounded up to the next millisecond plus a busy
// machine's wake-up delay (docs/reference.md §7), taken as 2 ms, then 15 %.
func within(t *testing.T, what string, got, ref, speedup float64) {
	t.Helper()
	hi := speedup * (math.Ceil(ref/speedup) + 2) * 1.15
	if got < 0.95*ref || got > hi {
		t.Errorf("%s: %.2f ms, reference %.2f ms: want %.2f to %.2f", what, got, ref, 0.95*ref, hi)
	}
}

// TestProfileMockEngines runs `turbine profile --quick` on mock engines of 1 and 2 GPUs
// at speedup 2 and checks the profile written: ParseProfile takes it, each entry has the
// mock engine's limits for its size, and each point is the reference model's
// (mocker.PrefillMillis, DecodeMillis ÷ n^0.8) within the host's timer (within); the
// output says the times were multiplied back, and the plot is written.
func TestProfileMockEngines(t *testing.T) {
	dir := t.TempDir()
	out, plot := filepath.Join(dir, "p.json"), filepath.Join(dir, "p.svg")
	if err := os.WriteFile(out, []byte("old"), 0o644); err != nil {
		t.Fatal(err)
	}
	const speedup = 2
	stdout, stderr, err := runProfile(t, mockExecutable(t), "--quick", "--tensor-parallel-sizes", "2,1", "--speedup-ratio", fmt.Sprint(speedup),
		"--num-gpu-blocks", "320", "--max-model-len", "8192", "--contexts", "1024,2048", "--batches", "4,8",
		"--out", out, "--plot", plot, "--force")
	if err != nil {
		t.Fatalf("%v\nstdout:\n%s\nstderr:\n%s", err, stdout, stderr)
	}
	t.Logf("\n%s", stdout)
	data, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	prof, err := planner.ParseProfile(data)
	if err != nil {
		t.Fatalf("ParseProfile: %v\n%s", err, data)
	}
	if prof.Engine != "mocker" || prof.Model != "turbine-mock" || prof.BlockSize != 64 || len(prof.Parallel) != 2 {
		t.Fatalf("profile %s/%s, block size %d, %d entries", prof.Engine, prof.Model, prof.BlockSize, len(prof.Parallel))
	}
	for _, ep := range prof.Parallel {
		n := ep.TensorParallelSize
		if ep.KVBlocks != 320*n || ep.MaxNumSeqs != 256 || len(ep.Prefill) != 2 || len(ep.Decode) != 4 {
			t.Fatalf("TP %d: %d KV blocks, %d seqs, %d prefill and %d decode points: want %d blocks, 256, 2 and 4",
				n, ep.KVBlocks, ep.MaxNumSeqs, len(ep.Prefill), len(ep.Decode), 320*n)
		}
		ref := mockcore.ReferenceTiming{TensorParallelSize: n}
		for _, p := range ep.Prefill {
			within(t, fmt.Sprintf("TP %d TTFT at ISL %d", n, p.ISL), p.TTFTMs, ref.PrefillMillis(p.ISL), speedup)
			if want := float64(p.ISL) / (p.TTFTMs / 1000) / float64(n); math.Abs(p.TokensPerSecPerGPU-want) > 1e-6*want {
				t.Errorf("TP %d ISL %d: %v tokens/s per GPU, want %v", n, p.ISL, p.TokensPerSecPerGPU, want)
			}
		}
		for _, p := range ep.Decode {
			blocks := p.Batch * ceilDiv(p.Context, 64)
			if computed := float64(blocks) / float64(ep.KVBlocks); math.Abs(p.KVUsage-computed) > 0.05 {
				t.Errorf("TP %d context %d batch %d: KV usage %.3f, the batch holds about %.3f", n, p.Context, p.Batch, p.KVUsage, computed)
			}
			within(t, fmt.Sprintf("TP %d ITL at context %d batch %d (KV %.2f)", n, p.Context, p.Batch, p.KVUsage), p.ITLMs,
				ref.DecodeMillis(p.KVUsage, float64(p.Context)), speedup)
		}
	}
	for _, want := range []string{"speedup 2: the mock engines ran 2 times as fast as their timing model", "multiplied by 2", "TP 1:", "TP 2:",
		"KV usage: sampled from the engine's /metrics at 4 decode points", "measured / reference", "host overhead taken out"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("output lacks %q", want)
		}
	}
	svg, err := os.ReadFile(plot)
	if err != nil || !bytes.Contains(svg, []byte("TP 2: ITL against KV usage")) {
		t.Fatalf("plot: %v", err)
	}
}

// startMockProcess starts the mock engine binary with args on a free port and returns
// its base URL once it answers /health; it stops at the end of the test.
func startMockProcess(t *testing.T, args ...string) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	var logs bytes.Buffer
	cmd := exec.Command(mockExecutable(t), append([]string{"mocker", "--port", fmt.Sprint(port)}, args...)...)
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(os.Interrupt)
		<-done
	})
	base := fmt.Sprintf("http://127.0.0.1:%d", port)
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); {
		select {
		case <-done:
			t.Fatalf("mock engine exited:\n%s", logs.String())
		case <-time.After(50 * time.Millisecond):
		}
		if resp, err := http.Get(base + "/health"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return base
			}
		}
	}
	t.Fatal("mock engine not ready")
	return ""
}

// TestProfileURL profiles an engine already running (a mock engine of 2 GPUs at --url):
// its model and context length come from /v1/models, its KV blocks and block size from
// /metrics (vllm:cache_config_info), its KV usage is sampled there; the engine runs as
// it runs (speedup 1 in the profile, its own speedup not known to the command).
//
// What this checks is what the URL path adds: the engine named, the limits read from the
// engine, the points present, per GPU of the size given, with the KV usage sampled and
// growing with the batch. The measured times are plausible, not accurate: a mock engine
// never ends a step before its modelled end, so each is at least the reference model's
// (less 5 %), and at most 3 times it plus 25 ms, which a time scaled by a speedup the
// engine does not run at, another size's figures or a unit error would break, whereas a
// busy host's HTTP and scheduling delays (which this path measures as the engine
// serves, and which the race detector on parallel packages lengthens) do not. Accuracy
// against the reference model, with the host's overhead measured and taken out, is
// TestProfileMockEngines's.
func TestProfileURL(t *testing.T) {
	base := startMockProcess(t, "--served-model-name", "served", "--tensor-parallel-size", "2", "--block-size", "16",
		"--num-gpu-blocks-override", "2000", "--max-model-len", "4096", "--max-num-seqs", "16")
	out := filepath.Join(t.TempDir(), "url.json")
	stdout, stderr, err := runProfile(t, "", "--url", base, "--engine", "mocker", "--quick", "--isl", "256", "--tensor-parallel-size", "2", "--max-num-seqs", "16",
		"--contexts", "512", "--batches", "2,8", "--out", out)
	if err != nil {
		t.Fatalf("%v\n%s\n%s", err, stdout, stderr)
	}
	prof, err := planner.LoadProfile(out)
	if err != nil {
		t.Fatal(err)
	}
	ep := prof.Parallel[0]
	if prof.Engine != "mocker" || prof.Model != "served" || prof.BlockSize != 16 || ep.TensorParallelSize != 2 || ep.KVBlocks != 2000 ||
		ep.MaxNumSeqs != 16 || len(ep.Prefill) != 1 || len(ep.Decode) != 2 {
		t.Fatalf("profile %+v", prof)
	}
	t.Logf("TP 2 entry: %+v", ep)
	ref := mockcore.ReferenceTiming{TensorParallelSize: 2}
	pp := ep.Prefill[0]
	plausible(t, "TTFT at ISL 256", pp.TTFTMs, ref.PrefillMillis(256))
	if want := 256 / (pp.TTFTMs / 1000) / 2; pp.ISL != 256 || math.Abs(pp.TokensPerSecPerGPU-want) > 1e-6*want {
		t.Errorf("prefill point %+v: want ISL 256 at %v tokens/s per GPU (2 GPUs)", pp, want)
	}
	for i, p := range ep.Decode {
		if p.Context != 512 || p.Batch != []int{2, 8}[i] {
			t.Fatalf("decode points %+v: want context 512 at batches 2 and 8", ep.Decode)
		}
		// Sampled: the batch's blocks of 16 tokens over the engine's 2,000.
		if held := float64(p.Batch*ceilDiv(p.Context, 16)) / 2000; !(p.KVUsage > 0.5*held && p.KVUsage < 2*held+0.01) {
			t.Errorf("batch %d: KV usage %.4f, the batch holds about %.4f", p.Batch, p.KVUsage, held)
		}
		plausible(t, fmt.Sprintf("ITL at batch %d", p.Batch), p.ITLMs, ref.DecodeMillis(p.KVUsage, 512))
		if want := float64(p.Batch) / (p.ITLMs / 1000) / 2; math.Abs(p.TokensPerSecPerGPU-want) > 1e-6*want {
			t.Errorf("decode point %+v: want %v tokens/s per GPU (2 GPUs)", p, want)
		}
	}
	if !(ep.Decode[1].KVUsage > ep.Decode[0].KVUsage) {
		t.Errorf("KV usage %v at batch 8, %v at batch 2: want it growing with the batch", ep.Decode[1].KVUsage, ep.Decode[0].KVUsage)
	}
	if !strings.Contains(stdout, "sampled from the engine's /metrics at 2 decode points") || strings.Contains(stdout, "multiplied") {
		t.Fatalf("output:\n%s", stdout)
	}
}

// plausible checks a time measured on a mock engine running at its model's speed as it
// serves: never below the reference (less 5 %), at most 3 times it plus 25 ms (see
// TestProfileURL).
func plausible(t *testing.T, what string, got, ref float64) {
	t.Helper()
	if hi := 3*ref + 25; got < 0.95*ref || got > hi {
		t.Errorf("%s: %.2f ms, reference %.2f ms: want %.2f to %.2f", what, got, ref, 0.95*ref, hi)
	}
}

// TestBadFlags: each bad flag is refused before anything starts, naming the flag.
func TestBadFlags(t *testing.T) {
	dir := t.TempDir()
	exists := filepath.Join(dir, "exists.json")
	if err := os.WriteFile(exists, []byte("{}"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--engine", "tgi"}, `--engine "tgi": want one of mocker, vllm, sglang, trtllm`},
		{[]string{"--engine", "vllm"}, "--engine vllm: give its --url"},
		{[]string{"--url", "localhost:8000"}, `--url "localhost:8000": want http://host:port`},
		{[]string{"--url", "http://h:1"}, "--url http://h:1: name its engine with --engine (mocker, vllm, sglang, trtllm)"},
		{[]string{"--url", "http://h:1", "--speedup-ratio", "2"}, "--speedup-ratio 2: only for the mock engines"},
		{[]string{"--url", "http://h:1", "--mocker-profile", "p.json"}, "--mocker-profile: only for the mock engines"},
		{[]string{"--speedup-ratio", "0"}, "--speedup-ratio 0: want above 0"},
		{[]string{"--tensor-parallel-sizes", "1,x"}, `--tensor-parallel-sizes "1,x": "x" is not a positive integer`},
		{[]string{"--tensor-parallel-sizes", "1,65"}, `--tensor-parallel-sizes "1,65": 65: want 1..64`},
		{[]string{"--tensor-parallel-size", "0", "--url", "http://h:1"}, "--tensor-parallel-size 0: want 1..64"},
		{[]string{"--isl", "0"}, `--isl "0": "0" is not a positive integer`},
		{[]string{"--contexts", ","}, `--contexts ",": want at least one value`},
		{[]string{"--repeats", "0"}, "--repeats 0: want at least 1"},
		{[]string{"--decode-tokens", "1"}, "--decode-tokens 1: want at least 2"},
		{[]string{"--max-token-id", "5"}, "--max-token-id 5: want above 1000"},
		{[]string{"--block-size", "-1"}, "--block-size -1"},
		{[]string{"--kv-blocks", "-1"}, "none may be negative"},
		{[]string{"--out", ""}, "--out: empty"},
		{[]string{"--out", exists}, "--out " + exists + ": the file exists; give --force to overwrite it"},
		{[]string{"--out", filepath.Join(dir, "new.json"), "--plot", exists}, "--plot " + exists + ": the file exists"},
		{[]string{"--out", filepath.Join(dir, "same"), "--plot", filepath.Join(dir, "same")}, "the same file as --out"},
		{[]string{"--mocker-profile", filepath.Join(dir, "none.json"), "--out", filepath.Join(dir, "x.json")}, "--mocker-profile " + filepath.Join(dir, "none.json")},
		{[]string{"--timeout", "0"}, "--timeout 0s"},
		{[]string{"stray"}, `unexpected argument "stray"`},
	} {
		_, _, err := runProfile(t, "/bin/false", tc.args...)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: error %v, want %q", tc.args, err, tc.want)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "new.json")); err == nil {
		t.Fatal("a refused run wrote its --out")
	}
}

// TestEngineDoesNotAnswer: an engine at --url that does not answer is an error naming
// the URL, at once.
func TestEngineDoesNotAnswer(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	url := "http://" + l.Addr().String()
	l.Close() // nothing listens there now
	start := time.Now()
	_, _, err = runProfile(t, "", "--url", url, "--engine", "vllm", "--out", filepath.Join(t.TempDir(), "p.json"))
	if err == nil || !strings.Contains(err.Error(), "--url "+url+": the engine does not answer") {
		t.Fatalf("error %v", err)
	}
	if d := time.Since(start); d > answerTimeout {
		t.Fatalf("took %v", d)
	}
}

// TestMockEngineThatExits: a mock engine that exits before it is ready is an error with
// its last lines (here an executable that exits at once).
func TestMockEngineThatExits(t *testing.T) {
	_, _, err := runProfile(t, "/bin/false", "--quick", "--tensor-parallel-sizes", "1",
		"--out", filepath.Join(t.TempDir(), "p.json"), "--ready-timeout", "20s")
	if err == nil || !strings.Contains(err.Error(), "exited before it was ready") {
		t.Fatalf("error %v", err)
	}
}
