package configure

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/turbine-llm/turbine/bench"
	"github.com/turbine-llm/turbine/planner"
)

// smallWorkload is a synthetic workload that a few GPUs serve: 200 prompts of about
// 2,000 tokens at 8 requests/s, 60 output tokens each.
var smallWorkload = []string{"--profile", fixturePath, "--isl", "normal:2000:500", "--osl", "60", "--rate", "8", "--requests", "200"}

// run runs `turbine configure` with args and returns its stdout and stderr.
func run(t *testing.T, args ...string) (string, string, error) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	err := Run(context.Background(), args, &stdout, &stderr)
	return stdout.String(), stderr.String(), err
}

// TestConfigureSmallWorkload runs the whole command on a small synthetic workload: every
// layout of at most 4 GPUs is accounted for, the ranking is consistent with the targets
// and the goodput formula, and the table and the JSON say the same.
func TestConfigureSmallWorkload(t *testing.T) {
	args := append(append([]string{}, smallWorkload...), "--gpus", "4", "--ttft-target", "150", "--itl-target", "8", "--top", "30", "--jobs", "2")
	out, errOut, err := run(t, append(args, "--json")...)
	if err != nil {
		t.Fatalf("%v\n%s", err, errOut)
	}
	var rep Report
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	// 18 layouts of at most 4 GPUs with TP 1, 2 and 4 (planner.EnumerateLayouts).
	total := 0
	for _, n := range rep.Verdicts {
		total += n
	}
	if rep.Layouts != 18 || total != 18 || rep.Evaluated+rep.Verdicts["pruned"]+rep.Verdicts["infeasible"] != 18 {
		t.Fatalf("%d layouts, %d evaluated, verdicts %v", rep.Layouts, rep.Evaluated, rep.Verdicts)
	}
	if !rep.Sample.Whole || rep.Requests != 200 || rep.Best.Rank != 1 || rep.Best.Verdict != planner.VerdictBest || len(rep.Top) != rep.Evaluated {
		t.Fatalf("report %+v", rep)
	}
	if !rep.MeetsTargets {
		t.Fatalf("no layout meets TTFT p90 150 ms and ITL p90 8 ms: %+v", rep.Top)
	}
	bestGoodput := rep.Best.Goodput
	for i, l := range rep.Top {
		if l.Rank != i+1 || l.GPUs > 4 || l.Requests != 200 {
			t.Errorf("line %d: %+v", i, l)
		}
		// goodput = requests on target per second per GPU of the whole (simulated) run.
		if want := float64(l.Met) / l.DurationS / float64(l.GPUs); math.Abs(l.Goodput-want) > 1e-9 {
			t.Errorf("%s: goodput %v, want %v", l.Layout, l.Goodput, want)
		}
		meets := float64(l.TTFT.At) <= 150 && float64(l.ITL.At) <= 8 && l.Failed == 0
		if meets != l.MeetsTargets {
			t.Errorf("%s: TTFT p90 %v, ITL p90 %v: meets %v", l.Layout, l.TTFT.At, l.ITL.At, l.MeetsTargets)
		}
		switch {
		case i == 0:
		case l.MeetsTargets && (l.Verdict != planner.VerdictLowerGoodput || l.Goodput > bestGoodput):
			t.Errorf("%s meets the targets: verdict %s, goodput %v against the best's %v", l.Layout, l.Verdict, l.Goodput, bestGoodput)
		case !l.MeetsTargets && !strings.Contains(l.Verdict.String(), "misses"):
			t.Errorf("%s misses the targets: verdict %s", l.Layout, l.Verdict)
		}
		if i > 0 && rep.Top[i-1].MeetsTargets == l.MeetsTargets && rep.Top[i-1].Goodput < l.Goodput {
			t.Errorf("%s above %s with less goodput", rep.Top[i-1].Layout, l.Layout)
		}
	}

	// The table, of the first three layouts alone: the same ranking (a layout's score
	// does not depend on which others are searched).
	var first3 []string
	for _, l := range rep.Top[:3] {
		first3 = append(first3, l.Layout)
	}
	table, _, err := run(t, append(args, "--layout", strings.Join(first3, ","))...)
	if err != nil {
		t.Fatal(err)
	}
	var order []int
	for _, name := range first3 {
		order = append(order, strings.Index(table, "  "+name+"  "))
	}
	for i := range order {
		if order[i] < 0 || (i > 0 && order[i] < order[i-1]) {
			t.Fatalf("table lacks %s or has it out of order:\n%s", first3[i], table)
		}
	}
	for _, want := range []string{"rank  layout", "goodput req/s/GPU", "best", "why the others lost:"} {
		if !strings.Contains(table, want) {
			t.Errorf("table lacks %q:\n%s", want, table)
		}
	}

	t.Run("deterministic", func(t *testing.T) {
		// Every layout again, one simulation at a time: the same figures.
		again, _, err := run(t, append(args, "--json", "--jobs", "1")...)
		if err != nil {
			t.Fatal(err)
		}
		var rep2 Report
		if err := json.Unmarshal([]byte(again), &rep2); err != nil {
			t.Fatal(err)
		}
		rep.SearchS, rep.WallS, rep2.SearchS, rep2.WallS = 0, 0, 0, 0
		a, _ := json.Marshal(rep)
		b, _ := json.Marshal(rep2)
		if !bytes.Equal(a, b) {
			t.Errorf("two runs (--jobs 2, --jobs 1) differ:\n%s\n%s", a, b)
		}
	})
	t.Run("apply", func(t *testing.T) {
		best := append(args, "--layout", rep.Best.Layout)
		flagsOut, table, err := run(t, append(best, "--apply", "flags")...)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(table, "rank  layout") || !strings.Contains(flagsOut, "best layout "+rep.Best.Layout) ||
			!strings.Contains(flagsOut, "\nturbine node --worker-role ") {
			t.Errorf("--apply flags: stdout\n%s\nstderr\n%s", flagsOut, table)
		}
		helm, _, err := run(t, append(best, "--apply", "helm")...)
		if err != nil || !strings.Contains(helm, "layout: \""+rep.Best.Layout+"\"\npools:\n") {
			t.Errorf("--apply helm: %v\n%s", err, helm)
		}
		js, _, err := run(t, append(best, "--apply", "helm", "--json")...)
		var withApply Report
		if err != nil || json.Unmarshal([]byte(js), &withApply) != nil || withApply.Apply != helm {
			t.Errorf("--apply helm --json: %v, apply %q", err, withApply.Apply)
		}
	})
}

// TestConfigurePrunes: with loose targets the smallest layouts meet them and the larger
// ones cannot beat them, so they are pruned, not simulated.
func TestConfigurePrunes(t *testing.T) {
	out, errOut, err := run(t, append(append([]string{}, smallWorkload...), "--gpus", "8", "--ttft-target", "5000", "--itl-target", "500",
		"--top", "2", "--json")...)
	if err != nil {
		t.Fatalf("%v\n%s", err, errOut)
	}
	var rep Report
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatal(err)
	}
	if rep.Best.Layout != "1×TP1" || !rep.MeetsTargets || rep.Verdicts["pruned"] == 0 || rep.Evaluated+rep.Verdicts["pruned"] != 85 {
		t.Fatalf("best %s, meets %v, verdicts %v, %d evaluated", rep.Best.Layout, rep.MeetsTargets, rep.Verdicts, rep.Evaluated)
	}
	if !strings.Contains(errOut, "pruned: their goodput bound is below") {
		t.Errorf("stderr does not say what was pruned:\n%s", errOut)
	}
}

// TestConfigureVerifySim: a prediction from a sample against the whole workload.
func TestConfigureVerifySim(t *testing.T) {
	out, errOut, err := run(t, "--profile", fixturePath, "--isl", "normal:2000:500", "--osl", "60", "--rate", "8", "--requests", "800",
		"--gpus", "2", "--sample", "400", "--sample-windows", "2", "--ttft-target", "300", "--itl-target", "20", "--verify", "sim", "--json")
	if err != nil {
		t.Fatalf("%v\n%s", err, errOut)
	}
	var rep Report
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatal(err)
	}
	v := rep.Verify
	if rep.Sample.Whole || rep.Sample.Windows != 2 || rep.Sample.Requests != 200 || rep.Sample.Warmup != 50 {
		t.Fatalf("sample %+v", rep.Sample)
	}
	if v == nil || v.Mode != "sim" || v.Layout != rep.Best.Layout || v.Requests != 800 || v.Measured.Requests != 800 || v.Predicted.Requests != 400 {
		t.Fatalf("verify %+v", v)
	}
	if v.Predicted.Goodput != rep.Best.Goodput || math.Abs(float64(v.GoodputError)) > 0.2 {
		t.Errorf("predicted %v (best %v), simulated %v, error %v", v.Predicted.Goodput, rep.Best.Goodput, v.Measured.Goodput, v.GoodputError)
	}
	table, _, err := run(t, "--profile", fixturePath, "--isl", "2000", "--osl", "60", "--rate", "8", "--requests", "200", "--gpus", "1", "--verify", "sim")
	if err != nil || !strings.Contains(table, "the search simulated the whole workload") || !strings.Contains(table, "goodput predicted +0.0% from simulated") {
		t.Errorf("%v\n%s", err, table)
	}
}

// openAIStream is a stand-in OpenAI streaming /v1/completions endpoint: each output
// token after gap, the usage chunk, [DONE].
func openAIStream(t *testing.T, model string, gap time.Duration) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var b struct {
			Model     string   `json:"model"`
			Prompt    []uint32 `json:"prompt"`
			MaxTokens int      `json:"max_tokens"`
		}
		if r.URL.Path != "/v1/completions" || json.NewDecoder(r.Body).Decode(&b) != nil || b.Model != model {
			http.Error(w, "bad request", http.StatusBadRequest)
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		frame := func(s string) { fmt.Fprintf(w, "data: %s\n\n", s); w.(http.Flusher).Flush() }
		for range b.MaxTokens {
			time.Sleep(gap)
			frame(`{"object":"text_completion","choices":[{"index":0,"text":"x","finish_reason":null}],"usage":null}`)
		}
		frame(fmt.Sprintf(`{"object":"text_completion","choices":[],"usage":{"prompt_tokens":%d,"completion_tokens":%d}}`, len(b.Prompt), b.MaxTokens))
		frame("[DONE]")
	})
}

// TestConfigureVerifyURL replays the workload's first requests against a service at a
// URL and compares with their simulation: here a stand-in that answers each token after
// 1 ms, at speedup 4, so each request's measured mean ITL is about 4 ms of model time.
func TestConfigureVerifyURL(t *testing.T) {
	srv := httptest.NewServer(openAIStream(t, "turbine-mock", time.Millisecond))
	defer srv.Close()
	out, errOut, err := run(t, "--profile", fixturePath, "--isl", "500", "--osl", "5", "--rate", "20", "--requests", "100", "--gpus", "1",
		"--verify", srv.URL, "--verify-requests", "30", "--verify-speedup", "4", "--json")
	if err != nil {
		t.Fatalf("%v\n%s", err, errOut)
	}
	var rep Report
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatal(err)
	}
	v := rep.Verify
	if v == nil || v.Mode != "url" || v.URL != srv.URL || v.Requests != 30 || v.Speedup != 4 || v.Measured.Requests != 30 || v.Measured.Failed != 0 ||
		v.Predicted.Requests != 30 {
		t.Fatalf("verify %+v", v)
	}
	if itl := float64(v.Measured.ITL.P50); !(itl >= 4 && itl < 40) {
		t.Errorf("measured ITL p50 %v ms of model time: want about 4 (1 ms gaps at speedup 4)", itl)
	}
	// The prediction is the simulation of the same 30 requests, not the search's.
	if v.Predicted.Goodput == rep.Best.Goodput && rep.Best.Requests == 30 {
		t.Errorf("prediction %+v is the search's", v.Predicted)
	}

	t.Run("a service that refuses everything", func(t *testing.T) {
		bad := httptest.NewServer(http.NotFoundHandler())
		defer bad.Close()
		_, _, err := run(t, "--profile", fixturePath, "--isl", "500", "--osl", "5", "--rate", "20", "--requests", "50", "--gpus", "1",
			"--verify", bad.URL, "--verify-requests", "5", "--verify-speedup", "100")
		if err == nil || !strings.Contains(err.Error(), "every request failed") {
			t.Fatalf("error %v", err)
		}
	})
}

func TestConfigureBadFlags(t *testing.T) {
	dir := t.TempDir()
	badProfile := filepath.Join(dir, "bad.json")
	if err := os.WriteFile(badProfile, []byte(`{"version": 1, "block_size": 64, "tensor_parallel": []}`), 0o644); err != nil {
		t.Fatal(err)
	}
	fifoTrace := filepath.Join(dir, "fifo.jsonl") // opening it would block until a writer came
	if err := syscall.Mkfifo(fifoTrace, 0o600); err != nil {
		t.Fatal(err)
	}
	emptyTrace := filepath.Join(dir, "empty.jsonl")
	if err := os.WriteFile(emptyTrace, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	w := smallWorkload
	with := func(extra ...string) []string { return append(append([]string{}, w...), extra...) }
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"no profile", []string{"--rate", "1"}, "--profile: required"},
		{"missing profile", []string{"--profile", filepath.Join(dir, "none.json"), "--rate", "1"}, "--profile: profile: open"},
		{"invalid profile", []string{"--profile", badProfile, "--rate", "1"}, "--profile: profile has no tensor_parallel entry"},
		{"positional", with("extra"), `unexpected argument "extra"`},
		{"unknown flag", with("--nonesuch"), "flag provided but not defined: -nonesuch"},
		{"no gpus", with("--gpus", "0"), "--gpus 0"},
		{"ttft target", with("--ttft-target", "-1"), "--ttft-target -1"},
		{"itl target", with("--itl-target", "NaN"), "--itl-target NaN"},
		{"percentile", with("--percentile", "101"), "--percentile 101"},
		{"top", with("--top", "0"), "--top 0"},
		{"jobs", with("--jobs", "0"), "--jobs 0"},
		{"layouts", with("--layouts", "mixed"), `--layouts "mixed"`},
		{"sizes", with("--tensor-parallel-sizes", "1,x"), `--tensor-parallel-sizes "1,x"`},
		{"size not profiled", with("--tensor-parallel-sizes", "3"), "--tensor-parallel-sizes: tensor-parallel size 3 not in the profile (profiled: [1 2 4])"},
		{"layout", with("--layout", "3xTP"), "--layout: layout"},
		{"layout too big", with("--gpus", "2", "--layout", "4xTP1"), "--layout 4×TP1: not a layout of at most --gpus 2"},
		{"apply", with("--apply", "yaml"), `--apply "yaml": want flags or helm`},
		{"verify", with("--verify", "ftp://host"), `--verify "ftp://host"`},
		{"verify speedup", with("--verify-speedup", "0"), "--verify-speedup 0"},
		{"sample", with("--sample", "1", "--sample-windows", "2"), "--sample 1: want at least one request per window"},
		{"router", with("--router-mode", "fastest"), `--router-mode "fastest"`},
		{"no rate", []string{"--profile", fixturePath}, "--rate 0: want a Poisson arrival rate"},
		{"isl", with("--isl", "big"), "--isl:"},
		{"trace and isl", []string{"--profile", fixturePath, "--trace", emptyTrace, "--isl", "10"}, "--isl: only for a synthetic workload"},
		{"limit without trace", with("--limit", "10"), "--limit: only with --trace"},
		{"empty trace", []string{"--profile", fixturePath, "--trace", emptyTrace}, "no request"},
		{"fifo trace", []string{"--profile", fixturePath, "--trace", fifoTrace}, "is not a regular file"},
		{"trace kind", []string{"--profile", fixturePath, "--trace", badProfile}, "want a Mooncake .jsonl or an Azure .csv file"},
		{"context", with("--max-model-len", "1000"), "--max-model-len 1000: request"},
		{"kv bytes", with("--kv-bytes-per-token", "-1"), "--kv-bytes-per-token -1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := run(t, tc.args...)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want one containing %q", err, tc.want)
			}
		})
	}
	t.Run("help", func(t *testing.T) {
		_, errOut, err := run(t, "-h")
		if err != nil || !strings.Contains(errOut, "usage: turbine configure") || !strings.Contains(errOut, "-ttft-target") {
			t.Fatalf("%v\n%s", err, errOut)
		}
	})
	t.Run("environment", func(t *testing.T) {
		t.Setenv("TURBINE_GPUS", "-3")
		if _, _, err := run(t, smallWorkload...); err == nil || !strings.Contains(err.Error(), "--gpus -3") {
			t.Fatalf("error %v", err)
		}
	})
}

// TestConfigureInfeasible: engines whose KV cache cannot hold the context length are not
// simulated, and say why.
func TestConfigureInfeasible(t *testing.T) {
	p := fixtureProfile()
	p.Parallel[0].KVBlocks = 100 // TP 1: 6,400 tokens of KV cache
	dir := t.TempDir()
	path := filepath.Join(dir, "p.json")
	var buf bytes.Buffer
	if err := p.Encode(&buf); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	out, errOut, err := run(t, "--profile", path, "--isl", "1000", "--osl", "20", "--rate", "4", "--requests", "50", "--gpus", "2",
		"--max-model-len", "8192", "--json")
	if err != nil {
		t.Fatalf("%v\n%s", err, errOut)
	}
	var rep Report
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatal(err)
	}
	// Of 1×TP1, 2×TP1, 1×TP2, 1P×TP1+1D×TP1 only 1×TP2 has no TP 1 engine.
	if rep.Verdicts["infeasible"] != 3 || rep.Best.Layout != "1×TP2" || rep.Evaluated != 1 {
		t.Fatalf("verdicts %v, best %s", rep.Verdicts, rep.Best.Layout)
	}
	_, _, err = run(t, "--profile", path, "--isl", "1000", "--osl", "20", "--rate", "4", "--requests", "50", "--gpus", "1", "--max-model-len", "8192")
	if err == nil || !strings.Contains(err.Error(), "no layout of at most 1 GPU can serve the workload: TP1 engines: --max-model-len 8192 exceeds the KV cache") {
		t.Fatalf("error %v", err)
	}
}

func TestSampleWindows(t *testing.T) {
	reqs := make([]bench.Request, 100)
	for i := range reqs {
		reqs[i].Arrival = time.Duration(i) * time.Second
	}
	first := func(w window) int { return int(w.reqs[0].Arrival / time.Second) }
	for _, tc := range []struct {
		sample, windows int
		want            [][3]int // per window: first request, warm-up, scored
	}{
		{0, 4, [][3]int{{0, 0, 100}}},
		{100, 4, [][3]int{{0, 0, 100}}},
		{40, 4, [][3]int{{0, 2, 10}, {29, 2, 10}, {58, 2, 10}, {88, 2, 10}}}, // starts 2, 31, 60, 90
		{40, 2, [][3]int{{0, 5, 20}, {75, 5, 20}}},                           // starts 5, 80
		{20, 1, [][3]int{{0, 5, 20}}},
		{1, 4, [][3]int{{0, 0, 100}}},  // under one request per window: the whole workload
		{99, 1, [][3]int{{0, 0, 100}}}, // no room for the warm-up
	} {
		ws := sampleWindows(reqs, tc.sample, tc.windows)
		var got [][3]int
		for _, w := range ws {
			got = append(got, [3]int{first(w), w.warm, len(w.reqs) - w.warm})
		}
		if fmt.Sprint(got) != fmt.Sprint(tc.want) {
			t.Errorf("sample %d in %d windows: %v, want %v", tc.sample, tc.windows, got, tc.want)
		}
		if whole(ws, len(reqs)) != (len(tc.want) == 1 && tc.want[0][2] == 100) {
			t.Errorf("sample %d: whole %v", tc.sample, whole(ws, len(reqs)))
		}
	}
	// The tail: the last scored answer after the last scored arrival.
	w := window{reqs: reqs[:3], warm: 1}
	results := []bench.Result{{Start: 0, E2E: 50 * time.Second}, {Start: time.Second, E2E: 5 * time.Second}, {Start: 2 * time.Second, E2E: time.Second}}
	if got := tail(w, results); got != 4*time.Second {
		t.Errorf("tail %v, want 4 s (the warm-up's late answer does not count)", got)
	}
}
