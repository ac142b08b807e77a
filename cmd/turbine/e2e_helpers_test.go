package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// turbineBin is the binary built once for the end-to-end tests (empty in -short mode).
var turbineBin string

func TestMain(m *testing.M) {
	code := func() int {
		if !testingShort() {
			dir, err := os.MkdirTemp("", "turbine-e2e-")
			if err != nil {
				fmt.Fprintln(os.Stderr, err)
				return 1
			}
			defer os.RemoveAll(dir)
			turbineBin = filepath.Join(dir, "turbine")
			build := exec.Command("go", "build", "-o", turbineBin, ".")
			build.Stdout, build.Stderr = os.Stderr, os.Stderr
			if err := build.Run(); err != nil {
				fmt.Fprintln(os.Stderr, "build turbine:", err)
				return 1
			}
		}
		return m.Run()
	}()
	os.Exit(code)
}

// testingShort reports -short before flag parsing by testing.M.Run has happened.
func testingShort() bool {
	for _, a := range os.Args[1:] {
		if a == "-test.short" || a == "-test.short=true" {
			return true
		}
	}
	return false
}

// server is a turbine process (serve, frontend or node) started by a test.
type server struct {
	t    testing.TB
	name string
	url  string // the OpenAI API's base URL, for serve and frontend
	cmd  *exec.Cmd
	mu   sync.Mutex
	logs bytes.Buffer
	done chan struct{}
	once sync.Once // stop runs once, whether called by a test or by cleanup
}

// startServe runs `turbine serve --port 0` with args and waits until it serves the model
// with every worker ready (bounded by a deadline, not a sleep).
func startServe(t testing.TB, workers int, args ...string) *server {
	t.Helper()
	all := append([]string{"serve", "--port", "0", "--log-format", "json", "--workers", strconv.Itoa(workers),
		"--heartbeat", "200ms"}, args...)
	s := startTurbine(t, "serve", "turbine serving", all...)
	s.waitReady("turbine-mock", workers)
	return s
}

// startTurbine runs the turbine binary with args and waits (60 s at most) for its JSON
// log line with message ready; that line's "url" field, if any, becomes s.url. The
// process runs in its own process group; cleanup stops it.
func startTurbine(t testing.TB, name, ready string, args ...string) *server {
	t.Helper()
	return startTurbineIn(t, "", name, ready, args...)
}

// startTurbineIn is startTurbine with the process's working directory set to dir ("" is
// the test's own).
func startTurbineIn(t testing.TB, dir, name, ready string, args ...string) *server {
	t.Helper()
	if turbineBin == "" {
		t.Skip("end-to-end test: skipped with -short")
	}
	cmd := exec.Command(turbineBin, args...)
	cmd.Dir = dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	s := &server{t: t, name: name, cmd: cmd, done: make(chan struct{})}
	urlc := make(chan string, 1)
	go func() {
		defer close(s.done)
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		sent := false
		for sc.Scan() {
			line := sc.Text()
			s.mu.Lock()
			s.logs.WriteString(line + "\n")
			s.mu.Unlock()
			var rec struct {
				Message string `json:"message"`
				URL     string `json:"url"`
			}
			if !sent && json.Unmarshal([]byte(line), &rec) == nil && rec.Message == ready {
				urlc <- rec.URL
				sent = true
			}
		}
	}()
	t.Cleanup(s.stop)
	select {
	case s.url = <-urlc:
	case <-s.done:
		t.Fatalf("turbine %s exited before %q:\n%s", name, ready, s.Logs())
	case <-time.After(60 * time.Second):
		t.Fatalf("turbine %s: no %q in 60 s:\n%s", name, ready, s.Logs())
	}
	return s
}

// waitReady waits (60 s at most) until the router of model lists n ready workers.
func (s *server) waitReady(model string, n int) {
	s.t.Helper()
	s.waitFor(60*time.Second, fmt.Sprintf("%d ready workers", n), func() bool {
		ready := 0
		for _, w := range s.workerStats(model) {
			if w.Ready {
				ready++
			}
		}
		return ready == n
	})
}

// kill sends SIGKILL to the turbine process only (its engines die with it through their
// parent-death signal), as a machine or OOM kill would.
func (s *server) kill() {
	_ = s.cmd.Process.Signal(syscall.SIGKILL)
	<-s.done
	_ = s.cmd.Wait()
}

func (s *server) Logs() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.logs.String()
}

func (s *server) stop() { s.once.Do(s.stopOnce) }

func (s *server) stopOnce() {
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.done:
	case <-time.After(20 * time.Second):
		_ = syscall.Kill(-s.cmd.Process.Pid, syscall.SIGKILL)
		<-s.done
	}
	_ = s.cmd.Wait()
	// Whatever the process left in its group (engines) goes too.
	_ = syscall.Kill(-s.cmd.Process.Pid, syscall.SIGKILL)
	if s.t.Failed() {
		logs := s.Logs()
		if len(logs) > 20000 {
			logs = logs[len(logs)-20000:]
		}
		s.t.Logf("turbine %s logs (tail):\n%s", s.name, logs)
	}
}

// verdict is t whose failures are also repeated after the test's cleanups, so that the
// last lines of a failed test say why even when a cleanup has printed a process's log
// tail after them. It is a testing.TB: pass it to the helpers (servers, clusters) so that
// their failures are repeated too. Make it before the processes it outlives (cleanups run
// last-registered first).
type verdict struct {
	*testing.T
	mu   sync.Mutex
	msgs []string
}

func newVerdict(t *testing.T) *verdict {
	v := &verdict{T: t}
	t.Cleanup(func() {
		v.mu.Lock()
		defer v.mu.Unlock()
		if len(v.msgs) > 0 {
			t.Logf("why %s failed (repeated after the logs):\n  %s", t.Name(), strings.Join(v.msgs, "\n  "))
		}
	})
	return v
}

func (v *verdict) note(format string, args ...any) string {
	msg := fmt.Sprintf(format, args...)
	v.mu.Lock()
	v.msgs = append(v.msgs, msg)
	v.mu.Unlock()
	return msg
}

// Error is t.Error, remembered.
func (v *verdict) Error(args ...any) { v.T.Helper(); v.T.Error(v.note("%s", fmt.Sprint(args...))) }

// Errorf is t.Errorf, remembered.
func (v *verdict) Errorf(format string, args ...any) {
	v.T.Helper()
	v.T.Error(v.note(format, args...))
}

// Fatal is t.Fatal, remembered.
func (v *verdict) Fatal(args ...any) { v.T.Helper(); v.T.Fatal(v.note("%s", fmt.Sprint(args...))) }

// Fatalf is t.Fatalf, remembered.
func (v *verdict) Fatalf(format string, args ...any) {
	v.T.Helper()
	v.T.Fatal(v.note(format, args...))
}

// waitFor polls cond every 20 ms until it holds or the deadline passes.
func (s *server) waitFor(limit time.Duration, what string, cond func() bool) {
	s.t.Helper()
	deadline := time.Now().Add(limit)
	for !cond() {
		if time.Now().After(deadline) {
			s.t.Fatalf("timed out after %v waiting for %s", limit, what)
		}
		select {
		case <-s.done:
			s.t.Fatalf("turbine %s exited while waiting for %s", s.name, what)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// workerStat is one worker's line of the router's statistics, read from /metrics.
type workerStat struct {
	Ready                     bool
	IndexedBlocks             float64
	ActiveBlocks, PrefillToks float64
	Running, ActiveRequests   float64
}

// workerStats reads the per-worker gauges of /metrics for model, keyed by worker id.
func (s *server) workerStats(model string) map[string]*workerStat {
	return s.workerStatsWithin(model, time.Minute)
}

// workerStatsWithin is workerStats with a limit on the scrape (nil when it is passed).
func (s *server) workerStatsWithin(model string, limit time.Duration) map[string]*workerStat {
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.url+"/metrics", nil)
	if err != nil {
		return nil
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	out := map[string]*workerStat{}
	for _, line := range strings.Split(string(body), "\n") {
		name, labels, value, ok := parseMetricLine(line)
		// The router's per-worker series only: the frontend's per-worker counters (cached
		// tokens) outlive a worker that left routing.
		if !ok || labels["model"] != model || labels["worker"] == "" || !strings.HasPrefix(name, "turbine_router_worker_") {
			continue
		}
		w := out[labels["worker"]]
		if w == nil {
			w = &workerStat{}
			out[labels["worker"]] = w
		}
		switch name {
		case "turbine_router_worker_ready":
			w.Ready = value == 1
		case "turbine_router_worker_indexed_blocks":
			w.IndexedBlocks = value
		case "turbine_router_worker_active_decode_blocks":
			w.ActiveBlocks = value
		case "turbine_router_worker_active_prefill_tokens":
			w.PrefillToks = value
		case "turbine_router_worker_engine_running":
			w.Running = value
		case "turbine_router_worker_active_requests":
			w.ActiveRequests = value
		}
	}
	return out
}

// parseMetricLine parses `name{k="v",...} value` (enough for our own gauges).
func parseMetricLine(line string) (string, map[string]string, float64, bool) {
	if line == "" || line[0] == '#' {
		return "", nil, 0, false
	}
	sp := strings.LastIndexByte(line, ' ')
	if sp < 0 {
		return "", nil, 0, false
	}
	v, err := strconv.ParseFloat(line[sp+1:], 64)
	if err != nil {
		return "", nil, 0, false
	}
	head := line[:sp]
	labels := map[string]string{}
	name := head
	if i := strings.IndexByte(head, '{'); i >= 0 && strings.HasSuffix(head, "}") {
		name = head[:i]
		for _, kv := range strings.Split(head[i+1:len(head)-1], ",") {
			k, val, ok := strings.Cut(kv, "=")
			if ok {
				labels[k] = strings.Trim(val, `"`)
			}
		}
	}
	return name, labels, v, true
}

// postJSON posts body to path and returns the response (caller closes).
func (s *server) postJSON(ctx context.Context, path string, body any) (*http.Response, error) {
	b, err := json.Marshal(body)
	if err != nil {
		return nil, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.url+path, bytes.NewReader(b))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	return http.DefaultClient.Do(req)
}

// postJSONRetried is postJSON retried, at most twice, as the OpenAI SDKs retry: when the
// connection closed before any response, or the answer is 429 or 503 (nothing was
// streamed). A loaded machine can keep a client from writing its request headers within
// the server's ReadHeaderTimeout (10 s), and the server then closes the connection
// unanswered; a worker whose heartbeat is late is briefly out of the router. Neither
// request reached an engine, so sending it again duplicates nothing.
func (s *server) postJSONRetried(ctx context.Context, path string, body any) (*http.Response, error) {
	for try := 0; ; try++ {
		resp, err := s.postJSON(ctx, path, body)
		retry := err != nil && unanswered(err) ||
			err == nil && (resp.StatusCode == http.StatusServiceUnavailable || resp.StatusCode == http.StatusTooManyRequests)
		if !retry || try == 2 || ctx.Err() != nil {
			return resp, err
		}
		if resp != nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(time.Duration(try+1) * 500 * time.Millisecond):
		}
	}
}

// unanswered reports whether err is a connection closed before any response byte.
func unanswered(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		strings.Contains(err.Error(), "server closed idle connection")
}

// sseFrame is one data frame of a streaming /v1/completions answer (OpenAI wire format):
// a text chunk, the usage chunk (no choices), or an error frame.
type sseFrame struct {
	Choices []struct {
		Text         string  `json:"text"`
		FinishReason *string `json:"finish_reason"`
	} `json:"choices"`
	Usage *struct {
		PromptTokens     int `json:"prompt_tokens"`
		CompletionTokens int `json:"completion_tokens"`
	} `json:"usage"`
	Error *struct {
		Code string `json:"code"`
	} `json:"error"`
}

// readSSE reads a streaming completion's body and calls frame for each data frame, until
// [DONE] (done is true) or the end of the body. Lines that are not "data: " lines are
// skipped. Errors: a frame that is not JSON (it is quoted), or the body's read error.
func readSSE(body io.Reader, frame func(sseFrame)) (done bool, err error) {
	sc := bufio.NewScanner(body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		data, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok {
			continue
		}
		if data == "[DONE]" {
			return true, nil
		}
		var f sseFrame
		if err := json.Unmarshal([]byte(data), &f); err != nil {
			return false, fmt.Errorf("bad frame %q: %w", data, err)
		}
		frame(f)
	}
	return false, sc.Err()
}
