package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
)

// Disaggregated serving end to end: `turbine serve --prefill-workers 1 --decode-workers
// 1` as real processes (a gateway, the router and two mock engines that transfer KV
// blocks to each other over their transfer ports). After every case each engine's
// pinned and active KV blocks, its running and waiting requests and the router's
// tracked requests must return to zero: no fault leaks blocks.

// Prompt sizes, in words of longText (three to five tokens each): a long prompt is far
// above the default 1000-token local prefill limit, a huge one takes a mock prefill of
// about half a second at speed-up 1 (long enough to act while it runs).
const (
	disaggLongWords  = 1200
	disaggHugeWords  = 6000
	disaggShortWords = 20
)

// startDisagg runs serve with the given layout flags and waits for n ready workers.
func startDisagg(t *testing.T, n int, args ...string) *server {
	t.Helper()
	all := append([]string{"serve", "--port", "0", "--log-format", "json", "--heartbeat", "200ms"}, args...)
	s := startTurbine(t, "serve", "turbine serving", all...)
	s.waitReady(model, n)
	return s
}

// enginePort returns the HTTP port of worker w's newest engine, from the serve log.
func (s *server) enginePort(w string) int {
	port := 0
	for _, line := range strings.Split(s.Logs(), "\n") {
		var rec struct {
			Message string `json:"message"`
			Worker  string `json:"worker"`
			Port    int    `json:"port"`
		}
		if json.Unmarshal([]byte(line), &rec) == nil && rec.Message == "engine started" && rec.Worker == w {
			port = rec.Port
		}
	}
	return port
}

// engineLoad is what a mock engine's /metrics says about its KV cache and queue.
type engineLoad struct {
	Pinned, PinnedRequests     float64 // blocks (and prefill legs) kept for a decode leg
	KVUsage                    float64 // fraction of blocks held by requests
	Running, Waiting           float64
	TransfersOK, ReleasedTotal float64
	WaitingReads               float64 // reads waiting for their blocks to be pinned (SGLang rooms)
	ActiveReads                float64 // reads of its blocks under way
}

func (l engineLoad) idle() bool {
	return l.Pinned == 0 && l.PinnedRequests == 0 && l.KVUsage == 0 && l.Running == 0 && l.Waiting == 0
}

// engineLoad scrapes worker w's engine; ok is false when it does not answer. The
// TensorRT-LLM dialect serves Prometheus metrics on /prometheus/metrics (its /metrics is
// JSON iteration stats, without the mock engine's families), the others on /metrics.
func (s *server) engineLoad(w string) (engineLoad, bool) {
	port := s.enginePort(w)
	if port == 0 {
		return engineLoad{}, false
	}
	base := "http://127.0.0.1:" + strconv.Itoa(port)
	resp, err := http.Get(base + "/prometheus/metrics")
	if err == nil && resp.StatusCode == http.StatusNotFound {
		resp.Body.Close()
		resp, err = http.Get(base + "/metrics")
	}
	if err != nil {
		return engineLoad{}, false
	}
	defer resp.Body.Close()
	var l engineLoad
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		name, labels, v, ok := parseMetricLine(sc.Text())
		if !ok {
			continue
		}
		switch name {
		case "turbine_mocker_kv_pinned_blocks":
			l.Pinned = v
		case "turbine_mocker_kv_pinned_requests":
			l.PinnedRequests = v
		case "vllm:kv_cache_usage_perc", "sglang:token_usage":
			l.KVUsage = v
		case "vllm:num_requests_running", "sglang:num_running_reqs":
			l.Running = v
		case "vllm:num_requests_waiting", "sglang:num_queue_reqs":
			l.Waiting = v
		case "turbine_mocker_kv_transfers_total":
			if labels["result"] == "ok" {
				l.TransfersOK = v
			}
		case "turbine_mocker_kv_released_total":
			l.ReleasedTotal += v
		case "turbine_mocker_kv_waiting_reads":
			l.WaitingReads = v
		case "turbine_mocker_kv_active_reads":
			l.ActiveReads = v
		}
	}
	return l, true
}

// checkIdle waits (30 s at most, far below the engines' 480 s transfer timeout) until
// every engine of workers has no pinned or active blocks and no request, and the router
// tracks no request.
func (s *server) checkIdle(t *testing.T, workers ...string) {
	t.Helper()
	var last string
	deadline := time.Now().Add(30 * time.Second)
	for {
		idle := true
		var states []string
		for _, w := range workers {
			l, ok := s.engineLoad(w)
			idle = idle && ok && l.idle()
			states = append(states, fmt.Sprintf("%s: %+v (answered %v)", w, l, ok))
		}
		for id, st := range s.workerStats(model) {
			idle = idle && st.ActiveRequests == 0 && st.ActiveBlocks == 0 && st.PrefillToks == 0
			states = append(states, fmt.Sprintf("router %s: %+v", id, *st))
		}
		if idle {
			return
		}
		last = strings.Join(states, "; ")
		if time.Now().After(deadline) {
			t.Fatalf("blocks or requests left after 30 s: %s", last)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// decisions reads turbine_frontend_disagg_decisions_total by decision.
func (s *server) decisions(t *testing.T) map[string]float64 {
	t.Helper()
	return s.counterBy(t, "turbine_frontend_disagg_decisions_total", "decision")
}

// counterBy sums a metric family of /metrics by one label.
func (s *server) counterBy(t testing.TB, family, label string) map[string]float64 {
	t.Helper()
	resp, err := http.Get(s.url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		name, labels, v, ok := parseMetricLine(sc.Text())
		if ok && name == family && labels["model"] == model {
			out[labels[label]] += v
		}
	}
	return out
}

// turbineExt is the response's `turbine` extension object.
type turbineExt struct {
	WorkerID        string `json:"worker_id"`
	Disagg          string `json:"disagg"`
	PrefillWorkerID string `json:"prefill_worker_id"`
	DecodeWorkerID  string `json:"decode_worker_id"`
}

// disaggResult is one non-streaming completion's outcome.
type disaggResult struct {
	status         int
	header         http.Header
	text, finish   string
	completionToks int
	turbine        turbineExt
	body           string
}

// complete runs a non-streaming completion of prompt with the `turbine` object asked for.
func complete(t *testing.T, s *server, prompt string, maxTokens int) disaggResult {
	t.Helper()
	c, err := tryComplete(s, prompt, maxTokens)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// tryComplete is complete without a testing.T (for other goroutines).
func tryComplete(s *server, prompt string, maxTokens int) (disaggResult, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	resp, err := s.postJSON(ctx, "/v1/completions", map[string]any{"model": model, "prompt": prompt,
		"max_tokens": maxTokens, "ignore_eos": true, "seed": 7, "turbine": map[string]any{"return_worker": true}})
	if err != nil {
		return disaggResult{}, err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	c := disaggResult{status: resp.StatusCode, header: resp.Header, body: string(body)}
	if resp.StatusCode != http.StatusOK {
		return c, nil
	}
	var v struct {
		Choices []struct {
			Text         string `json:"text"`
			FinishReason string `json:"finish_reason"`
		} `json:"choices"`
		Usage struct {
			CompletionTokens int `json:"completion_tokens"`
		} `json:"usage"`
		Turbine turbineExt `json:"turbine"`
	}
	if err := json.Unmarshal(body, &v); err != nil || len(v.Choices) != 1 {
		return c, fmt.Errorf("body %s: %v", body, err)
	}
	c.text, c.finish, c.completionToks, c.turbine = v.Choices[0].Text, v.Choices[0].FinishReason, v.Usage.CompletionTokens, v.Turbine
	return c, nil
}

// streamUntil runs a streaming completion of prompt and leaves (closes the connection)
// once leave says so, polled every 10 ms and after every frame; it returns the text
// frames received before leaving.
func streamUntil(t *testing.T, s *server, prompt string, maxTokens int, leave func(frames int) bool) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	resp, err := s.postJSON(ctx, "/v1/completions", map[string]any{"model": model, "prompt": prompt,
		"max_tokens": maxTokens, "ignore_eos": true, "stream": true})
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %s", resp.Status)
	}
	frames := make(chan string, 4096)
	go func() {
		defer close(frames)
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			if d, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
				frames <- d
			}
		}
	}()
	n := 0
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for !leave(n) {
		select {
		case f, ok := <-frames:
			if !ok || f == "[DONE]" {
				t.Fatalf("the stream ended before the client left (%d frames)", n)
			}
			n++
		case <-tick.C:
		case <-ctx.Done():
			t.Fatal("the client never left")
		}
	}
	cancel() // the client goes away: the connection closes
	return n
}

// streamed is what a client saw of one streaming completion.
type streamed struct {
	worker, text, finish string
	completion           int
	done                 bool
	errFrame             string
}

// streamAll runs a streaming completion of prompt (seeded, EOS ignored, usage asked for)
// to its end; at is called after each text frame with the worker the stream started on
// (X-Turbine-Worker) and the number of frames received so far.
func streamAll(t *testing.T, s *server, prompt string, maxTokens int, at func(worker string, frames int)) streamed {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	resp, err := s.postJSON(ctx, "/v1/completions", map[string]any{"model": model, "prompt": prompt,
		"max_tokens": maxTokens, "ignore_eos": true, "seed": 11, "stream": true,
		"stream_options": map[string]any{"include_usage": true}})
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %s", resp.Status)
	}
	r := streamed{worker: resp.Header.Get("X-Turbine-Worker")}
	var text strings.Builder
	frames := 0
	done, err := readSSE(resp.Body, func(f sseFrame) {
		if f.Error != nil {
			r.errFrame = f.Error.Code
		}
		if f.Usage != nil && len(f.Choices) == 0 {
			r.completion = f.Usage.CompletionTokens
		}
		for _, c := range f.Choices {
			text.WriteString(c.Text)
			if c.FinishReason != nil {
				r.finish = *c.FinishReason
			}
			frames++
			if at != nil {
				at(r.worker, frames)
			}
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	r.done = done
	r.text = text.String()
	return r
}

// TestE2EDisaggDecodeEngineKilled: the engine of the decode worker serving a stream is
// killed mid-stream; the request migrates (routed again: prompt plus the tokens so far,
// perhaps with a new prefill leg) and the client gets exactly the text of an undisturbed
// run. Afterwards nothing is left pinned or active anywhere.
func TestE2EDisaggDecodeEngineKilled(t *testing.T) {
	s := startDisagg(t, 3, "--prefill-workers", "1", "--decode-workers", "2", "--speedup-ratio", "1")
	prompt := longText("andesite", disaggLongWords)
	const maxTokens = 400
	got := streamAll(t, s, prompt, maxTokens, func(victim string, frames int) {
		if frames != 20 {
			return
		}
		pid, _ := s.enginePID(victim)
		if pid == 0 {
			t.Fatalf("no engine pid for the decode worker %q", victim)
		}
		if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
	})
	t.Logf("stream started on %s", got.worker)
	if got.errFrame != "" || !got.done || got.finish != "length" || got.completion != maxTokens {
		t.Fatalf("after the decode engine died: %+v", got)
	}
	if m := s.migrations(t); m["engine_error"]+m["worker_terminated"]+m["stalled"] == 0 {
		t.Fatalf("no migration counted: %v", m)
	}
	s.waitReady(model, 3)
	want := streamAll(t, s, prompt, maxTokens, nil)
	if got.text != want.text {
		t.Fatalf("the migrated stream's text differs from an undisturbed run's (%d vs %d bytes)", len(got.text), len(want.text))
	}
	s.checkIdle(t, "p0", "d0", "d1")
}

func TestE2EDisagg(t *testing.T) {
	s := startDisagg(t, 2, "--prefill-workers", "1", "--decode-workers", "1", "--speedup-ratio", "1")
	workers := []string{"p0", "d0"}
	s.checkIdle(t, workers...)
	longPrompt := longText("basalt", disaggLongWords)

	t.Run("long prompt goes remote, then is cached on the decode worker", func(t *testing.T) {
		before := s.decisions(t)
		c := complete(t, s, longPrompt, 16)
		if c.status != http.StatusOK || c.finish != "length" || c.completionToks != 16 {
			t.Fatalf("status %d finish %q tokens %d: %s", c.status, c.finish, c.completionToks, c.body)
		}
		want := turbineExt{WorkerID: "d0", Disagg: "remote", PrefillWorkerID: "p0", DecodeWorkerID: "d0"}
		if c.turbine != want || c.header.Get("X-Turbine-Disagg") != "remote" || c.header.Get("X-Turbine-Prefill-Worker") != "p0" {
			t.Fatalf("turbine object %+v, headers %v; want %+v", c.turbine, c.header, want)
		}
		if after := s.decisions(t); after["remote"] != before["remote"]+1 {
			t.Fatalf("decisions %v after %v: want one more remote", after, before)
		}
		if l, _ := s.engineLoad("d0"); l.TransfersOK == 0 {
			t.Fatalf("the decode engine read no KV blocks from the prefill engine: %+v", l)
		}
		s.checkIdle(t, workers...)
		// The transferred prompt is in the decode worker's prefix cache now: the same
		// prompt is short to prefill there, and gives the same text.
		s.waitFor(10*time.Second, "the decode worker's blocks in the router", func() bool {
			st := s.workerStats(model)["d0"]
			return st != nil && st.IndexedBlocks >= 16
		})
		again := complete(t, s, longPrompt, 16)
		if again.turbine.Disagg != "local_short_prefill" || again.text != c.text {
			t.Fatalf("the same prompt again: %+v, text equal %v; want local_short_prefill and the same text", again.turbine, again.text == c.text)
		}
		s.checkIdle(t, workers...)
	})

	t.Run("short prompt stays local", func(t *testing.T) {
		c := complete(t, s, longText("pumice", disaggShortWords), 8)
		if c.status != http.StatusOK || c.turbine.Disagg != "local_short_prefill" || c.turbine.PrefillWorkerID != "" ||
			c.header.Get("X-Turbine-Disagg") != "local_short_prefill" || c.completionToks != 8 {
			t.Fatalf("status %d, turbine %+v, headers %v: %s", c.status, c.turbine, c.header, c.body)
		}
		if d := s.decisions(t); d["local_short_prefill"] < 2 {
			t.Fatalf("decisions %v", d)
		}
		s.checkIdle(t, workers...)
	})

	t.Run("OpenAI SDK streaming", func(t *testing.T) {
		c := openai.NewClient(option.WithBaseURL(s.url+"/v1"), option.WithAPIKey("unused"), option.WithMaxRetries(0))
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		stream := c.Chat.Completions.NewStreaming(ctx, openai.ChatCompletionNewParams{
			Model:         model,
			Messages:      []openai.ChatCompletionMessageParamUnion{openai.UserMessage(longText("obsidian", disaggLongWords))},
			MaxTokens:     openai.Int(24),
			StreamOptions: openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)},
		}, option.WithJSONSet("turbine", map[string]any{"return_worker": true}), option.WithJSONSet("ignore_eos", true))
		var text strings.Builder
		finish, ext := "", ""
		var usage openai.CompletionUsage
		for stream.Next() {
			ch := stream.Current()
			for _, choice := range ch.Choices {
				text.WriteString(choice.Delta.Content)
				if choice.FinishReason != "" {
					finish = choice.FinishReason
				}
			}
			if f, ok := ch.JSON.ExtraFields["turbine"]; ok && f.Raw() != "" && f.Raw() != "null" {
				ext = f.Raw()
			}
			if ch.Usage.TotalTokens > 0 {
				usage = ch.Usage
			}
		}
		if err := stream.Err(); err != nil {
			t.Fatal(err)
		}
		var got turbineExt
		if err := json.Unmarshal([]byte(ext), &got); err != nil || got.Disagg != "remote" || got.PrefillWorkerID != "p0" {
			t.Fatalf("turbine object on the finishing chunk: %q (%v); want a remote decision", ext, err)
		}
		if text.Len() == 0 || finish != "length" || usage.CompletionTokens != 24 {
			t.Fatalf("text %q, finish %q, usage %+v", text.String(), finish, usage)
		}
		s.checkIdle(t, workers...)
	})

	t.Run("client gone during the prefill leg", func(t *testing.T) {
		streamUntil(t, s, longText("granite", disaggHugeWords), 64, func(int) bool {
			p, _ := s.engineLoad("p0")
			d, _ := s.engineLoad("d0")
			return p.Running > 0 && d.Running == 0
		})
		s.checkIdle(t, workers...)
	})

	t.Run("client gone once the prefill leg pinned its blocks", func(t *testing.T) {
		frames := streamUntil(t, s, longText("quartz", disaggHugeWords), 64, func(int) bool {
			p, _ := s.engineLoad("p0")
			return p.Pinned > 0
		})
		t.Logf("left after %d frames, once the prefill engine pinned the prompt's blocks", frames)
		s.checkIdle(t, workers...)
	})

	t.Run("client gone during decode", func(t *testing.T) {
		streamUntil(t, s, longText("schist", disaggLongWords), 4000, func(frames int) bool { return frames >= 10 })
		s.checkIdle(t, workers...)
	})

	t.Run("prefill engine killed during the prefill leg", func(t *testing.T) {
		prompt := longText("marble", disaggHugeWords)
		type result struct {
			c   disaggResult
			err error
		}
		done := make(chan result, 1)
		go func() { c, err := tryComplete(s, prompt, 16); done <- result{c, err} }()
		s.waitFor(30*time.Second, "the prefill leg to run", func() bool {
			p, _ := s.engineLoad("p0")
			return p.Running > 0
		})
		pid, _ := s.enginePID("p0")
		if pid == 0 {
			t.Fatal("no engine pid for p0 in the log")
		}
		if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		r := <-done
		if r.err != nil {
			t.Fatal(r.err)
		}
		c := r.c
		if c.status != http.StatusOK || c.finish != "length" || c.completionToks != 16 || c.turbine.WorkerID != "d0" {
			t.Fatalf("after the prefill engine died: status %d, finish %q, tokens %d, turbine %+v: %s",
				c.status, c.finish, c.completionToks, c.turbine, c.body)
		}
		t.Logf("completed with decision %q (prefill worker %q)", c.turbine.Disagg, c.turbine.PrefillWorkerID)
		if r := s.counterBy(t, "turbine_frontend_prefill_retries_total", "reason"); r["engine_error"]+r["worker_terminated"]+r["stalled"] == 0 {
			t.Fatalf("no prefill retry counted: %v", r)
		}
		// The engine restarts; then everything is idle again.
		s.waitReady(model, 2)
		s.checkIdle(t, workers...)
	})
}

// TestE2EDisaggPrefillEngineLost: the prefill engine dies (SIGKILL) or freezes
// (SIGSTOP) after the prefill leg, while the decode engine reads the prompt's KV blocks
// from it (slowed to seconds), or, in SGLang's dialect, while the prefill leg still
// runs and the decode engine waits for the room; in each mock dialect. The decode engine's KV load fails (at
// once, or after its 10 s read timeout), the request's prefill is retried and, with no
// other prefill worker, the decode worker prefills it alone: the client gets 200 with
// the text of an undisturbed run, the decode worker is not blamed (no migration), and
// afterwards nothing is pinned or active anywhere.
func TestE2EDisaggPrefillEngineLost(t *testing.T) {
	type fault struct {
		name  string
		sig   syscall.Signal
		when  func(s *server) bool // the moment to signal the prefill engine
		seed  string               // the prompt's first word (one token: longText's count fits the context)
		words int                  // of the prompt
	}
	reading := func(s *server) bool { l, _ := s.engineLoad("p0"); return l.ActiveReads > 0 }
	roomWait := func(s *server) bool { l, _ := s.engineLoad("p0"); return l.Running > 0 && l.WaitingReads > 0 }
	for _, tc := range []struct {
		dialect string
		faults  []fault
	}{
		{"vllm", []fault{{"killed during the KV read", syscall.SIGKILL, reading, "chert", disaggLongWords},
			{"frozen during the KV read", syscall.SIGSTOP, reading, "flint", disaggLongWords}}},
		// A huge prompt's prefill leg is long enough to freeze its engine while it runs.
		{"sglang", []fault{{"killed during the KV read", syscall.SIGKILL, reading, "jasper", disaggLongWords},
			{"frozen during the prefill leg", syscall.SIGSTOP, roomWait, "tuff", disaggHugeWords}}},
		{"trtllm", []fault{{"killed during the KV read", syscall.SIGKILL, reading, "agate", disaggLongWords}}},
	} {
		t.Run(tc.dialect, func(t *testing.T) {
			// 4 KiB of KV per token at 4 MB/s: a prompt of about 5,000 tokens takes
			// about 5 s to read.
			s := startDisagg(t, 2, "--prefill-workers", "1", "--decode-workers", "1", "--speedup-ratio", "1",
				"--mocker-dialect", tc.dialect, "--kv-bytes-per-token", "4096", "--kv-transfer-bandwidth", "4e6")
			workers := []string{"p0", "d0"}
			for i, f := range tc.faults {
				t.Run(f.name, func(t *testing.T) {
					prompt := longText(f.seed, f.words)
					type result struct {
						c   disaggResult
						err error
					}
					done := make(chan result, 1)
					go func() { c, err := tryComplete(s, prompt, 16); done <- result{c, err} }()
					s.waitFor(30*time.Second, "the moment to signal the prefill engine", func() bool { return f.when(s) })
					pid, _ := s.enginePID("p0")
					if pid == 0 {
						t.Fatal("no engine pid for p0 in the log")
					}
					if err := syscall.Kill(pid, f.sig); err != nil {
						t.Fatal(err)
					}
					var r result
					select {
					case r = <-done:
					case <-time.After(50 * time.Second):
						_ = syscall.Kill(pid, syscall.SIGCONT)
						t.Fatal("no answer within 50 s of the prefill engine's fault")
					}
					if f.sig == syscall.SIGSTOP {
						if err := syscall.Kill(pid, syscall.SIGCONT); err != nil {
							t.Fatal(err)
						}
					}
					if r.err != nil {
						t.Fatal(r.err)
					}
					c := r.c
					if c.status != http.StatusOK || c.finish != "length" || c.completionToks != 16 || c.turbine.WorkerID != "d0" ||
						c.turbine.Disagg != "local_no_prefill_workers" || c.header.Get("X-Turbine-Worker") != "d0" ||
						c.header.Get("X-Turbine-Disagg") != "local_no_prefill_workers" || c.header.Get("X-Turbine-Prefill-Worker") != "" {
						t.Fatalf("after the prefill engine's fault: status %d, finish %q, tokens %d, turbine %+v, headers %v: %s",
							c.status, c.finish, c.completionToks, c.turbine, c.header, c.body)
					}
					if m := s.migrations(t); m["engine_error"]+m["worker_terminated"]+m["stalled"] != 0 {
						t.Fatalf("migrations %v: the decode worker was blamed for the prefill engine's fault", m)
					}
					if r := s.counterBy(t, "turbine_frontend_prefill_retries_total", "reason"); r["kv_transfer"]+r["engine_error"]+r["stalled"] < float64(i+1) {
						t.Fatalf("prefill retries %v, want %d", r, i+1)
					}
					s.waitReady(model, 2)
					want := complete(t, s, prompt, 16)
					if want.status != http.StatusOK || c.text != want.text {
						t.Fatalf("text %q, an undisturbed run's %q (status %d)", c.text, want.text, want.status)
					}
					s.checkIdle(t, workers...)
				})
			}
		})
	}
}

// TestE2EDisaggSGLang: with mock engines in SGLang's dialect the prefill worker
// registers its engine's bootstrap address (picked at the engine's start), so a long
// prompt goes remote with both legs sent at once: while the prefill leg computes the
// room's blocks, the decode engine already waits to read them. A client that leaves
// during the prefill leg leaves nothing pinned or running.
func TestE2EDisaggSGLang(t *testing.T) {
	s := startDisagg(t, 2, "--prefill-workers", "1", "--decode-workers", "1", "--speedup-ratio", "1", "--mocker-dialect", "sglang")
	workers := []string{"p0", "d0"}
	s.checkIdle(t, workers...)

	t.Run("long prompt goes remote with both legs at once", func(t *testing.T) {
		type result struct {
			c   disaggResult
			err error
		}
		done := make(chan result, 1)
		go func() { c, err := tryComplete(s, longText("gneiss", disaggHugeWords), 16); done <- result{c, err} }()
		// Sent one after the other, the decode leg would reach the decode engine only
		// once the prefill leg had pinned the room's blocks: no read would wait for them.
		s.waitFor(30*time.Second, "the decode engine to wait for the room while the prefill leg runs", func() bool {
			p, _ := s.engineLoad("p0")
			return p.Running > 0 && p.WaitingReads == 1
		})
		r := <-done
		if r.err != nil {
			t.Fatal(r.err)
		}
		c := r.c
		want := turbineExt{WorkerID: "d0", Disagg: "remote", PrefillWorkerID: "p0", DecodeWorkerID: "d0"}
		if c.status != http.StatusOK || c.finish != "length" || c.completionToks != 16 || c.turbine != want {
			t.Fatalf("status %d finish %q tokens %d turbine %+v: %s; want %+v", c.status, c.finish, c.completionToks, c.turbine, c.body, want)
		}
		if l, _ := s.engineLoad("d0"); l.TransfersOK != 1 {
			t.Fatalf("the decode engine read %v rooms from the prefill engine, want 1: %+v", l.TransfersOK, l)
		}
		s.checkIdle(t, workers...)
	})

	t.Run("client gone during the prefill leg", func(t *testing.T) {
		streamUntil(t, s, longText("gabbro", disaggHugeWords), 64, func(int) bool {
			p, _ := s.engineLoad("p0")
			return p.Running > 0
		})
		s.checkIdle(t, workers...)
	})
}

// TestE2EDisaggNoPrefillWorker: with decode workers only, requests are served
// aggregated on them (decision local_no_prefill_workers); with --enforce-disagg a
// request that would need a prefill worker is answered 503, while a short one is still
// served by its decode worker.
func TestE2EDisaggNoPrefillWorker(t *testing.T) {
	for _, enforce := range []bool{false, true} {
		t.Run(fmt.Sprintf("enforce=%v", enforce), func(t *testing.T) {
			args := []string{"--decode-workers", "1", "--speedup-ratio", "5"}
			if enforce {
				args = append(args, "--enforce-disagg")
			}
			s := startDisagg(t, 1, args...)
			c := complete(t, s, longText("slate", disaggLongWords), 8)
			switch {
			case enforce && c.status != http.StatusServiceUnavailable:
				t.Fatalf("enforced without a prefill worker: status %d, want 503: %s", c.status, c.body)
			case enforce && (!strings.Contains(c.body, "prefill worker") || c.header.Get("Retry-After") == ""):
				t.Fatalf("503 body %s headers %v: want one naming the missing prefill worker, with Retry-After", c.body, c.header)
			case !enforce && (c.status != http.StatusOK || c.turbine.Disagg != "local_no_prefill_workers" || c.completionToks != 8):
				t.Fatalf("status %d, turbine %+v: want the decode worker to serve it alone: %s", c.status, c.turbine, c.body)
			}
			short := complete(t, s, longText("shale", disaggShortWords), 4)
			if short.status != http.StatusOK || short.turbine.Disagg != "local_short_prefill" {
				t.Fatalf("short prompt: status %d, turbine %+v: %s", short.status, short.turbine, short.body)
			}
			s.checkIdle(t, "d0")
		})
	}
}

// TestE2EDisaggNoDecodeWorker: with the only decode worker out of routing (its engine
// frozen), a request is served whole by the prefill worker (decision aggregated), unless
// --enforce-disagg keeps prefill workers to prefill legs: then it is answered 503.
func TestE2EDisaggNoDecodeWorker(t *testing.T) {
	for _, enforce := range []bool{false, true} {
		t.Run(fmt.Sprintf("enforce=%v", enforce), func(t *testing.T) {
			args := []string{"--prefill-workers", "1", "--decode-workers", "1", "--speedup-ratio", "5"}
			if enforce {
				args = append(args, "--enforce-disagg")
			}
			s := startDisagg(t, 2, args...)
			pid, _ := s.enginePID("d0")
			if pid == 0 {
				t.Fatal("no engine pid for d0 in the log")
			}
			if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
				t.Fatal(err)
			}
			cont := func() { _ = syscall.Kill(pid, syscall.SIGCONT) }
			defer cont()
			s.waitFor(30*time.Second, "d0 out of routing", func() bool {
				st := s.workerStats(model)["d0"]
				return st != nil && !st.Ready
			})
			c := complete(t, s, longText("slate", disaggLongWords), 8)
			switch {
			case enforce && (c.status != http.StatusServiceUnavailable || c.header.Get("X-Turbine-Worker") != ""):
				t.Fatalf("enforced without a decode worker: status %d, headers %v, want 503: %s", c.status, c.header, c.body)
			case !enforce && (c.status != http.StatusOK || c.turbine.Disagg != "aggregated" || c.turbine.WorkerID != "p0" ||
				c.header.Get("X-Turbine-Disagg") != "aggregated" || c.header.Get("X-Turbine-Worker") != "p0"):
				t.Fatalf("without a decode worker: status %d, turbine %+v, headers %v: want p0 to serve it whole: %s",
					c.status, c.turbine, c.header, c.body)
			}
			cont()
			s.waitReady(model, 2)
			s.checkIdle(t, "p0", "d0")
		})
	}
}

// TestClusterDisaggScaling: an xPyD cluster of separate processes (Consul, a frontend,
// one prefill node and one decode node) whose pools change while it serves: a second
// prefill node joins and the first leaves (drained), a decode node is replaced the same
// way, and with the last prefill node gone serving falls back to the decode workers —
// the router adapts each time without a restart.
func TestClusterDisaggScaling(t *testing.T) {
	c := newLocalCluster(t)
	fe := c.frontend("frontend")
	pre1 := c.node("pre-1", 1, "--worker-role", "prefill")
	dec1 := c.node("dec-1", 1, "--worker-role", "decode")
	fe.waitReady(model, 2)
	// remote sends a long prompt (new each time) and returns its turbine object.
	n := 0
	remote := func(what string) turbineExt {
		t.Helper()
		n++
		r := complete(t, fe, longText(fmt.Sprintf("%s%d", what, n), disaggLongWords), 4)
		if r.status != http.StatusOK || r.completionToks != 4 {
			t.Fatalf("%s: status %d: %s", what, r.status, r.body)
		}
		return r.turbine
	}
	leave := func(s *server, prefix string) {
		t.Helper()
		if err := s.cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		fe.waitFor(20*time.Second, prefix+"'s worker to leave routing", func() bool { return len(workersOn(fe, prefix)) == 0 })
	}
	if got := remote("first"); got.Disagg != "remote" || !strings.HasPrefix(got.PrefillWorkerID, "pre-1-") ||
		!strings.HasPrefix(got.DecodeWorkerID, "dec-1-") {
		t.Fatalf("1P1D: %+v", got)
	}

	pre2 := c.node("pre-2", 1, "--worker-role", "prefill")
	fe.waitReady(model, 3)
	leave(pre1, "pre-1")
	if got := remote("prefill-replaced"); got.Disagg != "remote" || !strings.HasPrefix(got.PrefillWorkerID, "pre-2-") {
		t.Fatalf("after pre-1 left: %+v, want pre-2 to prefill", got)
	}

	c.node("dec-2", 1, "--worker-role", "decode")
	fe.waitReady(model, 3)
	leave(dec1, "dec-1")
	if got := remote("decode-replaced"); got.Disagg != "remote" || !strings.HasPrefix(got.DecodeWorkerID, "dec-2-") {
		t.Fatalf("after dec-1 left: %+v, want dec-2 to decode", got)
	}

	for _, s := range []*server{pre1, dec1} {
		select {
		case <-s.done:
		case <-time.After(30 * time.Second):
			t.Fatalf("%s did not exit after draining", s.name)
		}
	}
	// The last prefill node goes: the decode worker prefills alone.
	leave(pre2, "pre-2")
	if got := remote("no-prefill"); got.Disagg != "local_no_prefill_workers" || !strings.HasPrefix(got.DecodeWorkerID, "dec-2-") {
		t.Fatalf("without prefill workers: %+v, want the decode worker alone", got)
	}
	if d := fe.decisions(t); d["remote"] != 3 || d["local_no_prefill_workers"] != 1 {
		t.Fatalf("decisions %v: want 3 remote, 1 local_no_prefill_workers", d)
	}
}
