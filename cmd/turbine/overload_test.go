package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
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
