package grafana

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/turbine-llm/turbine/deploy/grafana/dashboard"
)

// wantFiles are the dashboards docs/grafana.md lists.
var wantFiles = []string{
	"turbine-disagg.json", "turbine-fleet.json", "turbine-kvbm.json",
	"turbine-planner.json", "turbine-router.json", "turbine-workers.json",
}

func loadAll(t *testing.T) map[string]*dashboard.Dashboard {
	t.Helper()
	paths, err := filepath.Glob("*.json")
	if err != nil {
		t.Fatal(err)
	}
	ds := map[string]*dashboard.Dashboard{}
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		if !json.Valid(b) {
			t.Errorf("%s: not valid JSON", p)
			continue
		}
		d, err := dashboard.Parse(b)
		if err != nil {
			t.Errorf("%s: %v", p, err)
			continue
		}
		ds[p] = d
	}
	return ds
}

func TestDashboardsWellFormed(t *testing.T) {
	ds := loadAll(t)
	var got []string
	for f := range ds {
		got = append(got, f)
	}
	sort.Strings(got)
	if !slices.Equal(got, wantFiles) {
		t.Errorf("dashboards %v, want %v", got, wantFiles)
	}
	for _, dup := range dashboard.UniqueUIDs(ds) {
		t.Errorf("duplicate %s", dup)
	}
	for f, d := range ds {
		for _, p := range dashboard.Check(d) {
			t.Errorf("%s: %s", f, p)
		}
		if len(dashboard.Uses(d)) == 0 {
			t.Errorf("%s: no query reads a metric", f)
		}
	}
}

// TestQueriesUseExportedMetrics starts a real turbine serve with every feature the
// dashboards cover (disaggregation, the planner, the KV block manager), causes the
// events whose families appear only once they happen (a queued and a refused request,
// a client that leaves, remote prefill legs), and checks that every metric every query
// reads is a family of its /metrics (listed with # TYPE).
func TestQueriesUseExportedMetrics(t *testing.T) {
	ds := loadAll(t)
	bin := turbineBinary(t)
	base := startServe(t, bin)

	cl := &http.Client{Timeout: 20 * time.Second}
	// A stream that holds the only request slot (--max-concurrent-requests 1) ...
	ctx, cancel := context.WithCancel(t.Context())
	hold := openStream(t, ctx, base)
	// ... so that this one waits in the queue (queued_requests_total, queue_depth) and
	// is refused when --queue-timeout passes (rejected_requests_total).
	if code := complete(t, cl, base, "a request that waits", 4); code != http.StatusServiceUnavailable {
		t.Errorf("request behind a held slot: status %d, want 503", code)
	}
	// The held stream's client leaves (cancelled_requests_total).
	cancel()
	hold.Close()
	// Remote prefill legs (--max-local-prefill-tokens 0): prefill_leg_seconds,
	// kv_transfer_wait_seconds; and the request histograms.
	for i := range 3 {
		if code := complete(t, cl, base, fmt.Sprintf("request %d shares this prefix with the others of the test", i), 8); code != http.StatusOK {
			t.Fatalf("request %d: status %d", i, code)
		}
	}

	need := map[string]bool{}
	for _, d := range ds {
		for _, u := range dashboard.Uses(d) {
			need[u.Series] = true
		}
	}
	var fams map[string]string
	deadline := time.Now().Add(20 * time.Second)
	for {
		fams = scrapeFamilies(t, cl, base+"/metrics")
		missing := 0
		for s := range need {
			if _, ok := dashboard.Resolve(s, fams); !ok {
				missing++
			}
		}
		// The cancelled stream is counted when the gateway sees its client gone:
		// scrape again until every family is there or the deadline passes.
		if missing == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	files := make([]string, 0, len(ds))
	for f := range ds {
		files = append(files, f)
	}
	sort.Strings(files)
	for _, f := range files {
		for _, u := range dashboard.Uses(ds[f]) {
			if _, ok := dashboard.Resolve(u.Series, fams); !ok {
				t.Errorf("%s: panel %q target %s: %s is not exported by turbine serve's /metrics", f, u.Panel, u.RefID, u.Series)
			}
		}
	}
}

// turbineBinary builds ./cmd/turbine into the test's temp dir, or returns $TURBINE_BIN.
func turbineBinary(t *testing.T) string {
	t.Helper()
	if b := os.Getenv("TURBINE_BIN"); b != "" {
		return b
	}
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("go not on PATH and TURBINE_BIN not set: cannot build turbine")
	}
	out := filepath.Join(t.TempDir(), "turbine")
	cmd := exec.Command(goBin, "build", "-o", out, "./cmd/turbine")
	cmd.Dir = filepath.Join("..", "..")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/turbine: %v\n%s", err, b)
	}
	return out
}

// startServe starts turbine serve on free ports and returns its base URL once it logs
// "turbine serving".
func startServe(t *testing.T, bin string) string {
	t.Helper()
	cmd := exec.Command(bin, "serve", "--port", "0",
		"--prefill-workers", "1", "--decode-workers", "1", "--max-local-prefill-tokens", "0",
		"--planner", "load", "--gpu-budget", "4",
		"--kvbm", "--kvbm-resp-port", "0", "--kvbm-lm-port", "0",
		"--max-concurrent-requests", "1", "--queue-depth", "1", "--queue-timeout", "300ms",
		"--speedup-ratio", "10", "--drain-timeout", "1s")
	// TURBINE_<FLAG> variables of the caller's environment would change the flags.
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "TURBINE_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout = cmd.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	t.Cleanup(func() {
		_ = cmd.Process.Signal(os.Interrupt)
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
	})
	url := make(chan string, 1)
	var tail []string
	go func() {
		defer close(done)
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		sent := false
		for sc.Scan() {
			line := sc.Text()
			if !sent {
				tail = append(tail, line)
				var rec struct{ Message, URL string }
				if json.Unmarshal([]byte(line), &rec) == nil && rec.Message == "turbine serving" && rec.URL != "" {
					url <- rec.URL
					sent = true
				}
			}
		}
		_ = cmd.Wait()
		if !sent {
			close(url)
		}
	}()
	select {
	case u, ok := <-url:
		if !ok {
			t.Fatalf("turbine serve exited before serving:\n%s", strings.Join(tail, "\n"))
		}
		return u
	case <-time.After(60 * time.Second):
		t.Fatalf("turbine serve not serving after 60 s")
	}
	return ""
}

func complete(t *testing.T, cl *http.Client, base, prompt string, maxTokens int) int {
	t.Helper()
	body := fmt.Sprintf(`{"model":"turbine-mock","prompt":%q,"max_tokens":%d}`, prompt, maxTokens)
	resp, err := cl.Post(base+"/v1/completions", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

// openStream starts a long stream and returns once its first chunk arrived.
func openStream(t *testing.T, ctx context.Context, base string) io.Closer {
	t.Helper()
	body := `{"model":"turbine-mock","prompt":"a long stream","max_tokens":30000,"ignore_eos":true,"stream":true}`
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/v1/completions", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("stream: status %d", resp.StatusCode)
	}
	br := bufio.NewReader(resp.Body)
	if _, err := br.ReadString('\n'); err != nil {
		t.Fatalf("stream: %v", err)
	}
	return resp.Body
}

// scrapeFamilies returns the families of a /metrics page and their types.
func scrapeFamilies(t *testing.T, cl *http.Client, url string) map[string]string {
	t.Helper()
	resp, err := cl.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	p := expfmt.NewTextParser(model.UTF8Validation)
	mfs, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("%s: %v", url, err)
	}
	out := make(map[string]string, len(mfs))
	for name, mf := range mfs {
		out[name] = strings.ToLower(mf.GetType().String())
	}
	return out
}
