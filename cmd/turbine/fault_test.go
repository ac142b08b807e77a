package main

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"
)

// enginePID returns the pid of the newest engine process of worker w, and its epoch,
// from the serve log.
func (s *server) enginePID(w string) (pid int, epoch int) {
	for _, line := range strings.Split(s.Logs(), "\n") {
		if !strings.Contains(line, `"engine started"`) {
			continue // decoding every line is slow on a loaded machine under -race
		}
		var rec struct {
			Message string `json:"message"`
			Worker  string `json:"worker"`
			PID     int    `json:"pid"`
			Epoch   int    `json:"epoch"`
		}
		if json.Unmarshal([]byte(line), &rec) == nil && rec.Message == "engine started" && rec.Worker == w {
			pid, epoch = rec.PID, rec.Epoch
		}
	}
	return pid, epoch
}

// TestE2EEngineKilled kills a worker's engine process with SIGKILL: the worker must stop
// routing to it, the router must drop its blocks, the engine must come back, and the
// service must keep answering.
func TestE2EEngineKilled(t *testing.T) {
	s := startServe(t, 2, "--speedup-ratio", "50")
	prompt := longText("marble", 300)
	victim := servedBy(t, s, prompt+" first")
	s.waitFor(10*time.Second, "the victim's blocks in the router's index", func() bool { return s.indexed(victim) > 0 })
	pid, epoch := s.enginePID(victim)
	if pid == 0 {
		t.Fatalf("no engine pid for %s in the log", victim)
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	s.waitFor(10*time.Second, "the router to drop the dead engine's blocks", func() bool { return s.indexed(victim) == 0 })
	// While the engine restarts, requests keep succeeding (on the other worker if need be).
	for i := 0; i < 4; i++ {
		servedBy(t, s, prompt+" during "+strings.Repeat("z", i))
	}
	s.waitFor(30*time.Second, "the engine to be restarted and ready", func() bool {
		_, e := s.enginePID(victim)
		st := s.workerStats(model)[victim]
		return e > epoch && st != nil && st.Ready
	})
	for i := 0; i < 4; i++ {
		servedBy(t, s, longText("quartz", 50)+strings.Repeat("k", i))
	}
	s.waitIdle(t)
}

// freezeEngine stops (SIGSTOP) worker w's engine process and returns its pid; it is
// continued when the test ends.
func (s *server) freezeEngine(t *testing.T, w string) int {
	t.Helper()
	pid, _ := s.enginePID(w)
	if pid == 0 {
		t.Fatalf("no engine pid for %s in the log", w)
	}
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGCONT) })
	return pid
}

// TestE2EEngineFrozen stops (SIGSTOP) a worker's engine: it still holds its port but
// answers nothing. The worker must leave routing so that requests go elsewhere, and come
// back once the engine resumes (SIGCONT).
func TestE2EEngineFrozen(t *testing.T) {
	s := startServe(t, 2, "--speedup-ratio", "50")
	pid := s.freezeEngine(t, "w0")
	s.waitFor(30*time.Second, "the frozen engine's worker to leave routing", func() bool {
		st := s.workerStats(model)["w0"]
		return st != nil && !st.Ready
	})
	for i := 0; i < 4; i++ {
		if w := servedBy(t, s, longText("obsidian", 20)+strings.Repeat("f", i)); w != "w1" {
			t.Fatalf("request %d went to %s while w0's engine is frozen", i, w)
		}
	}
	if err := syscall.Kill(pid, syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	s.waitFor(30*time.Second, "w0 back in routing", func() bool {
		st := s.workerStats(model)["w0"]
		return st != nil && st.Ready
	})
	s.waitIdle(t)
}

// TestE2EAllEnginesDownIs503 freezes the only engine until the model leaves /v1/models:
// requests for it must get 503 with Retry-After (retryable), not 404 (unknown model).
func TestE2EAllEnginesDownIs503(t *testing.T) {
	s := startServe(t, 1, "--speedup-ratio", "50")
	pid := s.freezeEngine(t, "w0")
	s.waitFor(30*time.Second, "the model to leave /v1/models", func() bool {
		resp, err := http.Get(s.url + "/v1/models")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		var list struct {
			Data []any `json:"data"`
		}
		return json.NewDecoder(resp.Body).Decode(&list) == nil && len(list.Data) == 0
	})
	resp, err := s.postJSON(context.Background(), "/v1/chat/completions", map[string]any{
		"model": model, "max_tokens": 2, "messages": []map[string]any{{"role": "user", "content": "hi"}}})
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("status %d (Retry-After %q): %s; want 503 with Retry-After", resp.StatusCode, resp.Header.Get("Retry-After"), body)
	}
	resp, err = http.Post(s.url+"/v1/chat/completions", "application/json",
		strings.NewReader(`{"model":"never-served","messages":[{"role":"user","content":"hi"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound {
		t.Fatalf("a model never served: status %d, want 404", resp.StatusCode)
	}
	if err := syscall.Kill(pid, syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	s.waitFor(30*time.Second, "the model to be served again", func() bool {
		st := s.workerStats(model)["w0"]
		return st != nil && st.Ready
	})
	servedBy(t, s, "hello again")
}

// TestE2EStreamOnFrozenEngineMigrates freezes (SIGSTOP) the engine serving a stream: once
// the worker finds it unresponsive it hands the request back, and the stream finishes on
// the other worker with every token (no client-side timeout needed).
func TestE2EStreamOnFrozenEngineMigrates(t *testing.T) {
	s := startServe(t, 2, "--speedup-ratio", "5")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	const maxTokens = 300
	resp, err := s.postJSON(ctx, "/v1/completions", map[string]any{"model": model, "prompt": "frozen river",
		"max_tokens": maxTokens, "ignore_eos": true, "stream": true, "seed": 3,
		"stream_options": map[string]any{"include_usage": true}})
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	w := resp.Header.Get("X-Turbine-Worker")
	if resp.StatusCode != http.StatusOK || w == "" {
		t.Fatalf("status %d, worker %q", resp.StatusCode, w)
	}
	sc := bufio.NewScanner(resp.Body)
	frozen, finish, completion := false, "", 0
	for sc.Scan() {
		line := strings.TrimPrefix(sc.Text(), "data: ")
		if line == "" || line == "[DONE]" {
			continue
		}
		var ch struct {
			Choices []struct {
				FinishReason *string `json:"finish_reason"`
			} `json:"choices"`
			Usage *struct {
				CompletionTokens int `json:"completion_tokens"`
			} `json:"usage"`
			Error any `json:"error"`
		}
		if err := json.Unmarshal([]byte(line), &ch); err != nil {
			t.Fatalf("bad frame %q: %v", line, err)
		}
		if ch.Error != nil {
			t.Fatalf("stream failed: %s", line)
		}
		if !frozen && len(ch.Choices) > 0 {
			s.freezeEngine(t, w)
			frozen = true
		}
		for _, c := range ch.Choices {
			if c.FinishReason != nil {
				finish = *c.FinishReason
			}
		}
		if ch.Usage != nil {
			completion = ch.Usage.CompletionTokens
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if finish != "length" || completion != maxTokens {
		t.Fatalf("finish %q with %d completion tokens, want length with %d", finish, completion, maxTokens)
	}
	if !strings.Contains(s.Logs(), "handed back for migration") {
		t.Fatalf("the frozen engine's worker did not hand the request back:\n%s", s.Logs())
	}
}
