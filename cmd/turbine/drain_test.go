package main

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// drainSSE is what one streamed completion delivered.
type drainSSE struct {
	finish string // the finish reason seen, "" when none
	done   bool   // [DONE] arrived
	errs   int    // error frames
	err    error
}

// streamSSE streams a completion; first is closed at the first content frame.
func streamSSE(ctx context.Context, s *server, prompt string, maxTokens int, first chan<- struct{}) drainSSE {
	resp, err := s.postJSON(ctx, "/v1/completions", map[string]any{"model": model, "prompt": prompt,
		"max_tokens": maxTokens, "ignore_eos": true, "stream": true})
	if err != nil {
		return drainSSE{err: err}
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		b, _ := io.ReadAll(resp.Body)
		return drainSSE{err: fmt.Errorf("status %d: %s", resp.StatusCode, b)}
	}
	var r drainSSE
	r.done, r.err = readSSE(resp.Body, func(f sseFrame) {
		if f.Error != nil {
			r.errs++
			return
		}
		if first != nil {
			close(first)
			first = nil
		}
		for _, c := range f.Choices {
			if c.FinishReason != nil {
				r.finish = *c.FinishReason
			}
		}
	})
	return r
}

// TestE2EDrain: streams are running on turbine serve when it gets SIGTERM; they finish
// normally, new requests get 503 with Retry-After, /health says draining while /live
// answers, and the process exits 0.
func TestE2EDrain(t *testing.T) {
	s := startServe(t, 2, "--drain-timeout", "60s")
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	const streams = 4
	results := make(chan drainSSE, streams)
	for i := range streams {
		first := make(chan struct{})
		go func() { results <- streamSSE(ctx, s, longText(fmt.Sprintf("drain%d", i), 20), 300, first) }()
		select {
		case <-first:
		case <-time.After(30 * time.Second):
			t.Fatal("stream did not start within 30 s")
		}
	}
	if err := s.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	// New work is refused while the streams run on.
	s.waitFor(30*time.Second, "/health 503 draining", func() bool {
		resp, err := http.Get(s.url + "/health")
		if err != nil {
			return false
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return resp.StatusCode == 503 && strings.Contains(string(b), "draining")
	})
	if resp, err := http.Get(s.url + "/live"); err != nil || resp.StatusCode != 200 {
		t.Errorf("/live while draining: %v %v", resp, err)
	} else {
		resp.Body.Close()
	}
	if r := completion(ctx, s, "late", 4); r.status != 503 || r.retryAfter == "" {
		t.Errorf("new request while draining: %d Retry-After=%q %v", r.status, r.retryAfter, r.err)
	}
	finished := 0
	for range streams {
		r := <-results
		if r.err != nil || r.finish != "length" || !r.done || r.errs != 0 {
			t.Errorf("stream during drain: %+v", r)
		} else {
			finished++
		}
	}
	select {
	case <-s.done:
	case <-time.After(60 * time.Second):
		t.Fatal("turbine serve did not exit within 60 s of the drain")
	}
	err := s.cmd.Wait()
	t.Logf("drain: streams=%d finished=%d exit=%v", streams, finished, err)
	if err != nil {
		t.Errorf("turbine serve exit: %v", err)
	}
}

// TestE2EClientDisconnects: 500 requests, streaming and not, whose clients go away at
// seeded random points; afterwards every engine runs nothing and the router tracks no
// active request or block.
func TestE2EClientDisconnects(t *testing.T) {
	s := startServe(t, 2, "--speedup-ratio", "5")
	rng := rand.New(rand.NewPCG(7, 11))
	const total, parallel = 500, 16
	type job struct {
		stream bool
		after  time.Duration
	}
	jobs := make(chan job, total)
	for range total {
		jobs <- job{stream: rng.IntN(2) == 0, after: time.Duration(rng.IntN(400)) * time.Millisecond}
	}
	close(jobs)
	var mu sync.Mutex
	var cut, whole, streamed int
	var wg sync.WaitGroup
	for w := range parallel {
		wg.Add(1)
		go func() {
			defer wg.Done()
			i := 0
			for j := range jobs {
				i++
				ctx, cancel := context.WithTimeout(context.Background(), j.after)
				prompt := longText(fmt.Sprintf("gone%d-%d", w, i), 30)
				var err error
				if j.stream {
					err = streamSSE(ctx, s, prompt, 64, nil).err
				} else {
					err = completion(ctx, s, prompt, 64).err
				}
				cancel()
				mu.Lock()
				if err != nil {
					cut++
				} else {
					whole++
				}
				if j.stream {
					streamed++
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	s.waitFor(30*time.Second, "engines idle and no active request in the router", func() bool {
		for _, ws := range s.workerStats(model) {
			if ws.Running != 0 || ws.ActiveRequests != 0 || ws.ActiveBlocks != 0 {
				return false
			}
		}
		return true
	})
	t.Logf("disconnects: requests=%d streaming=%d cut=%d whole=%d; afterwards running=0 active_requests=0 active_blocks=0",
		total, streamed, cut, whole)
	if cut == 0 {
		t.Error("no client went away: the test did not test disconnects")
	}
}
