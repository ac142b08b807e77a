package main

import (
	"context"
	"io"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestE2EEngineLossWithoutAnotherWorkerIs503: the only engine dies while a whole-answer
// request and a stream run on it, and its worker restarts it. Until it is back neither
// request can be moved to another worker: that is a request that cannot be routed now,
// answered 503 with Retry-After (the stream, whose 200 is sent, ends with a
// no_live_workers error frame), not a worker failure (502 backend_unavailable). Once the
// engine is back, requests succeed and the router tracks nothing.
func TestE2EEngineLossWithoutAnotherWorkerIs503(t *testing.T) {
	s := startServe(t, 1, "--speedup-ratio", "1")
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	whole := make(chan outcome, 1)
	go func() { whole <- completion(ctx, s, longText("ember", 20), 2000) }()
	type streamed struct {
		status  int
		errCode string
		done    bool
		err     error
	}
	first := make(chan struct{})
	stream := make(chan streamed, 1)
	go func() {
		var r streamed
		defer func() { stream <- r }()
		signal := first // this goroutine's own copy: the test reads first while it runs
		resp, err := s.postJSON(ctx, "/v1/completions", map[string]any{"model": model,
			"prompt": longText("cinder", 20), "max_tokens": 2000, "ignore_eos": true, "stream": true})
		if err != nil {
			r.err = err
			return
		}
		defer resp.Body.Close()
		if r.status = resp.StatusCode; r.status != 200 {
			_, _ = io.Copy(io.Discard, resp.Body)
			return
		}
		r.done, r.err = readSSE(resp.Body, func(f sseFrame) {
			if f.Error != nil {
				r.errCode = f.Error.Code
			} else if signal != nil {
				close(signal)
				signal = nil
			}
		})
	}()
	select {
	case <-first:
	case <-ctx.Done():
		t.Fatal("the stream sent no token")
	}
	s.waitFor(30*time.Second, "both requests routed to w0", func() bool {
		st := s.workerStats(model)["w0"]
		return st != nil && st.ActiveRequests == 2
	})
	pid, epoch := s.enginePID("w0")
	if pid == 0 {
		t.Fatal("no engine pid for w0 in the log")
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	w := <-whole
	if w.err != nil || w.status != 503 || w.retryAfter == "" {
		t.Errorf("whole answer after its only engine died: status %d, Retry-After %q, %v; want 503 with Retry-After",
			w.status, w.retryAfter, w.err)
	}
	r := <-stream
	if r.err != nil || r.status != 200 || r.errCode != "no_live_workers" || !r.done {
		t.Errorf("stream after its only engine died: %+v; want a no_live_workers error frame, then [DONE]", r)
	}
	s.waitFor(60*time.Second, "the engine restarted and ready", func() bool {
		_, e := s.enginePID("w0")
		st := s.workerStats(model)["w0"]
		return e > epoch && st != nil && st.Ready
	})
	if w := servedBy(t, s, longText("ash", 10)); w != "w0" {
		t.Fatalf("served by %q after the restart, want w0", w)
	}
	s.waitIdle(t)
	if logs := s.Logs(); !strings.Contains(logs, "request not migrated: it could not be routed again") {
		t.Errorf("no log line for the requests that could not be migrated")
	}
}
