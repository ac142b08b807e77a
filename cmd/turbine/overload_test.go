package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// setBusy posts busy thresholds to the admin endpoint and returns its answer.
func setBusy(t *testing.T, s *server, body map[string]any) map[string]any {
	t.Helper()
	resp, err := s.postJSON(context.Background(), "/admin/busy_thresholds", body)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 {
		t.Fatalf("POST /admin/busy_thresholds: %d %s", resp.StatusCode, b)
	}
	var out map[string]any
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	return out
}

// outcome is one request of a load run.
type outcome struct {
	status     int
	retryAfter string
	latency    time.Duration
	err        error
}

// completion runs one non-streaming completion and reports its outcome.
func completion(ctx context.Context, s *server, prompt string, maxTokens int) outcome {
	start := time.Now()
	resp, err := s.postJSON(ctx, "/v1/completions", map[string]any{"model": model, "prompt": prompt,
		"max_tokens": maxTokens, "ignore_eos": true})
	if err != nil {
		return outcome{err: err, latency: time.Since(start)}
	}
	defer resp.Body.Close()
	_, err = io.ReadAll(resp.Body)
	return outcome{status: resp.StatusCode, retryAfter: resp.Header.Get("Retry-After"), latency: time.Since(start), err: err}
}

// TestE2EOverload: two workers whose busy thresholds (set through the admin endpoint)
// let each hold about one request; 32 clients send 256 requests. Those that find both
// workers busy get 503 with Retry-After at once; none times out or fails otherwise; once
// the load drops, requests succeed again.
func TestE2EOverload(t *testing.T) {
	s := startServe(t, 2, "--speedup-ratio", "10")
	// 300-token prompts fill 5 of 16384 blocks: more than 0.0001 of them, so one request
	// in flight makes its worker busy.
	got := setBusy(t, s, map[string]any{"model": model, "kv_usage": 0.0001})
	if got["kv_usage"] != 0.0001 {
		t.Fatalf("thresholds after POST: %v", got)
	}
	const clients, total = 32, 256
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	results := make(chan outcome, total)
	var wg sync.WaitGroup
	jobs := make(chan int, total)
	for i := range total {
		jobs <- i
	}
	close(jobs)
	for range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range jobs {
				results <- completion(ctx, s, longText(fmt.Sprintf("load%d", i), 100), 32)
			}
		}()
	}
	wg.Wait()
	close(results)

	var completed, rejected, errs int
	var rejections []time.Duration
	for r := range results {
		switch {
		case r.err != nil:
			errs++
			t.Errorf("request failed: %v", r.err)
		case r.status == 200:
			completed++
		case r.status == 503:
			rejected++
			rejections = append(rejections, r.latency)
			if r.retryAfter == "" {
				t.Error("503 without Retry-After")
			}
		default:
			errs++
			t.Errorf("unexpected status %d", r.status)
		}
	}
	slices.Sort(rejections)
	p99 := time.Duration(0)
	if n := len(rejections); n > 0 {
		p99 = rejections[min(n-1, n*99/100)]
	}
	t.Logf("overload: requests=%d completed=%d rejected=%d errors=%d p99_rejection_latency=%v",
		total, completed, rejected, errs, p99)
	if rejected == 0 || completed == 0 {
		t.Errorf("want both completions and rejections above capacity, got %d and %d", completed, rejected)
	}
	if p99 > 5*time.Second { // a sanity bound, not a speed claim
		t.Errorf("p99 of 503 answers %v: rejection waited for something", p99)
	}

	// The load drops: one request at a time fits, every one succeeds.
	s.waitFor(30*time.Second, "no active requests", func() bool {
		for _, w := range s.workerStats(model) {
			if w.ActiveRequests != 0 {
				return false
			}
		}
		return true
	})
	for i := range 8 {
		if r := completion(ctx, s, longText(fmt.Sprintf("calm%d", i), 100), 8); r.err != nil || r.status != 200 {
			t.Fatalf("after the load dropped: %d %v", r.status, r.err)
		}
	}
	// Thresholds off again through the admin endpoint, and GET shows them.
	setBusy(t, s, map[string]any{"model": model, "kv_usage": 0})
	resp, err := http.Get(s.url + "/admin/busy_thresholds?model=" + model)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(string(b), `"kv_usage":0,`) {
		t.Errorf("GET /admin/busy_thresholds: %d %s", resp.StatusCode, b)
	}
}

// TestE2EQueue: with --queue-depth the same overload waits instead: every request of a
// load the queue can hold completes.
func TestE2EQueue(t *testing.T) {
	s := startServe(t, 2, "--speedup-ratio", "10", "--busy-kv-usage", "0.0001", "--queue-depth", "64", "--queue-timeout", "60s")
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	const total = 24
	results := make(chan outcome, total)
	for i := range total {
		go func() { results <- completion(ctx, s, longText(fmt.Sprintf("queue%d", i), 100), 16) }()
	}
	completed := 0
	for range total {
		if r := <-results; r.err != nil || r.status != 200 {
			t.Errorf("queued request: %d %v", r.status, r.err)
		} else {
			completed++
		}
	}
	m := metricsText(t, s)
	t.Logf("queue: requests=%d completed=%d %s", total, completed, grepLine(m, "turbine_frontend_queued_requests_total"))
	if !strings.Contains(m, "turbine_frontend_queued_requests_total") {
		t.Error("no request was queued: the load did not exceed the capacity")
	}
}

func metricsText(t *testing.T, s *server) string {
	t.Helper()
	resp, err := http.Get(s.url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

func grepLine(text, prefix string) string {
	for _, l := range strings.Split(text, "\n") {
		if strings.HasPrefix(l, prefix) {
			return l
		}
	}
	return ""
}

// TestE2ESaturation: a frontend (serve with one CPU: the default bound is 128 concurrent
// requests) gets 400 long streams at once. Every one is either answered (200 and its
// first tokens) or refused with 503 server_overloaded, Retry-After and an OpenAI error
// body naming the bound; none fails with 502 or hangs. The answered streams are held
// open until every request has its answer's header, so at most the bound are answered
// and each refusal came without waiting for a slot to free (a server that queued them
// would never complete the burst). The refusals are counted in /metrics, and once the
// streams are closed every slot comes back. The serve process starts with a soft
// open-file limit of 256, below what 400 connections need: it must raise its own limit
// to the hard one (the Go runtime does so at start).
func TestE2ESaturation(t *testing.T) {
	t.Setenv("GOMAXPROCS", "1") // for serve, started below; this process is unaffected
	var s *server
	withSoftOpenFileLimit(t, 256, func() { s = startServe(t, 2, "--speedup-ratio", "10") })
	checkOpenFileLimitRaised(t, s)

	const streams, bound = 400, 128
	ctx, cancel := context.WithTimeout(context.Background(), 150*time.Second)
	defer cancel()
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: streams}}
	defer client.CloseIdleConnections()
	type result struct {
		status     int
		retryAfter string
		body       string
		latency    time.Duration // to the response header
		tokens     bool          // a 200 stream's first token arrived
		err        error
	}
	results := make(chan result, streams)
	start, allAnswered := make(chan struct{}), make(chan struct{})
	var headers sync.WaitGroup
	headers.Add(streams)
	go func() { headers.Wait(); close(allAnswered) }()
	for i := range streams {
		go func() {
			var r result
			headerDone := sync.OnceFunc(headers.Done)
			defer func() { headerDone(); results <- r }()
			// Long enough (about a minute at this speed) to outlast the burst: the
			// stream is closed once every request has its header.
			body, _ := json.Marshal(map[string]any{"model": model, "prompt": fmt.Sprintf("saturation %d", i),
				"max_tokens": 30000, "ignore_eos": true, "stream": true})
			req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.url+"/v1/completions", bytes.NewReader(body))
			if err != nil {
				r.err = err
				return
			}
			req.Header.Set("Content-Type", "application/json")
			<-start
			sent := time.Now()
			resp, err := client.Do(req)
			if err != nil {
				r.err = err
				return
			}
			defer resp.Body.Close()
			r.status, r.retryAfter, r.latency = resp.StatusCode, resp.Header.Get("Retry-After"), time.Since(sent)
			headerDone()
			if resp.StatusCode != http.StatusOK {
				b, _ := io.ReadAll(resp.Body)
				r.body = string(b)
				return
			}
			r.tokens, r.err = firstTokens(resp.Body)
			select {
			case <-allAnswered:
			case <-ctx.Done():
			}
		}()
	}
	close(start)

	var answered, refused int
	var refusals []time.Duration
	for range streams {
		r := <-results
		switch {
		case r.err != nil:
			t.Errorf("request failed: %v", r.err)
		case r.status == http.StatusOK && r.tokens:
			answered++
		case r.status == http.StatusOK:
			t.Error("a 200 stream without tokens")
		case r.status == http.StatusServiceUnavailable:
			refused++
			refusals = append(refusals, r.latency)
			var e struct {
				Error struct{ Message, Type, Code string } `json:"error"`
			}
			if err := json.Unmarshal([]byte(r.body), &e); err != nil || e.Error.Code != "server_overloaded" ||
				e.Error.Type != "server_error" || !strings.Contains(e.Error.Message, fmt.Sprintf("limit of %d concurrent", bound)) {
				t.Errorf("503 body %s: want server_overloaded naming the bound %d", r.body, bound)
			}
			if r.retryAfter == "" {
				t.Error("503 without Retry-After")
			}
		default:
			t.Errorf("status %d: %s", r.status, r.body)
		}
	}
	slices.Sort(refusals)
	p99 := time.Duration(0)
	if n := len(refusals); n > 0 {
		p99 = refusals[min(n-1, n*99/100)]
	}
	t.Logf("saturation: streams=%d answered=%d refused=%d p99_refusal=%v", streams, answered, refused, p99)
	if answered == 0 || answered > bound || answered+refused != streams {
		t.Errorf("answered %d and refused %d of %d streams: want 1 to %d answered, the rest refused", answered, refused, streams, bound)
	}
	if p99 > 30*time.Second { // a sanity bound only: a refusal waits for nothing
		t.Errorf("p99 of the 503 answers %v: refusals waited for something", p99)
	}
	m := metricsText(t, s)
	if want := fmt.Sprintf(`turbine_frontend_rejected_requests_total{model="",reason="server_overloaded"} %d`, refused); refused > 0 &&
		!strings.Contains(m, want) {
		t.Errorf("metrics lack %q: %s", want, grepLine(m, "turbine_frontend_rejected_requests_total"))
	}
	// The streams are closed: every slot comes back, and a request runs.
	s.waitFor(60*time.Second, "no request in flight", func() bool {
		return strings.Contains(metricsText(t, s), `turbine_frontend_inflight_requests{model="turbine-mock"} 0`)
	})
	if r := completion(ctx, s, "after the burst", 4); r.err != nil || r.status != 200 {
		t.Fatalf("after the burst: %d %v", r.status, r.err)
	}
}

// firstTokens reads a streaming completion until its first frame with text: ok is
// false when the stream ended, or sent an error frame, before one.
func firstTokens(body io.Reader) (ok bool, err error) {
	sc := bufio.NewScanner(body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		data, isData := strings.CutPrefix(sc.Text(), "data: ")
		if !isData || data == "[DONE]" {
			continue
		}
		var f sseFrame
		if err := json.Unmarshal([]byte(data), &f); err != nil {
			return false, fmt.Errorf("bad frame %q: %w", data, err)
		}
		if f.Error != nil {
			return false, fmt.Errorf("error frame %s", data)
		}
		if len(f.Choices) > 0 && f.Choices[0].Text != "" {
			return true, nil
		}
	}
	return false, sc.Err()
}

// withSoftOpenFileLimit runs start (which starts a process) with this process's soft
// RLIMIT_NOFILE lowered to soft, so that the child inherits it; the limit is restored
// before it returns. Skipped where the hard limit leaves no room above soft.
func withSoftOpenFileLimit(t *testing.T, soft uint64, start func()) {
	t.Helper()
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		t.Fatal(err)
	}
	if lim.Max < 4*soft {
		t.Skipf("hard open-file limit %d: too low to test raising a soft limit of %d", lim.Max, soft)
	}
	low := lim
	low.Cur = soft
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &low); err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
			t.Fatal(err)
		}
	}()
	start()
}

// checkOpenFileLimitRaised checks, where /proc tells, that the process of s runs with
// its soft open-file limit raised to the hard limit (the Go runtime sets it one below).
func checkOpenFileLimitRaised(t *testing.T, s *server) {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/limits", s.cmd.Process.Pid))
	if err != nil {
		t.Logf("open-file limit not checked: %v", err)
		return
	}
	limit := func(v string) uint64 {
		if v == "unlimited" {
			return math.MaxUint64
		}
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			t.Fatalf("open-file limit %q: %v", v, err)
		}
		return n
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) >= 5 && strings.HasPrefix(line, "Max open files") {
			if soft, hard := limit(f[3]), limit(f[4]); soft < hard-1 {
				t.Errorf("serve's open-file limit: soft %d, hard %d; want the soft limit raised to the hard one", soft, hard)
			}
			return
		}
	}
	t.Errorf("no open-file line in /proc/%d/limits", s.cmd.Process.Pid)
}
