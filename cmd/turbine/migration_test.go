package main

import (
	"context"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// Request migration end to end: a streaming request whose engine is killed mid-stream
// goes on on another worker with the prompt plus the tokens produced so far. The mock
// engine's next token is a function of the seed and every token before it, so the
// migrated stream must give exactly the text of an undisturbed run.

const (
	migRequests  = 200
	migMaxTokens = 1200
)

// streamResult is what a client saw of one streaming completion.
type streamResult struct {
	worker     string // X-Turbine-Worker: the worker it started on
	text       string
	finish     string
	completion int    // usage.completion_tokens
	prompt     int    // usage.prompt_tokens
	errFrame   string // the JSON error frame's error.code, "" when none
	done       bool   // [DONE] seen
	transport  string // a transport failure, "" when none
	took       time.Duration
}

// streamCompletion runs one streaming completion; first is called with the worker it
// started on once the first text arrives.
func streamCompletion(ctx context.Context, s *server, i, maxTokens int, first func(worker string)) streamResult {
	start := time.Now()
	resp, err := s.postJSONRetried(ctx, "/v1/completions", map[string]any{
		"model": model, "prompt": fmt.Sprintf("request %d: %s", i, longText("basalt"+strconv.Itoa(i%7), 20)),
		"max_tokens": maxTokens, "ignore_eos": true, "seed": 1234, "stream": true,
		"stream_options": map[string]any{"include_usage": true},
	})
	if err != nil {
		return streamResult{transport: err.Error()}
	}
	defer resp.Body.Close()
	r := streamResult{worker: resp.Header.Get("X-Turbine-Worker")}
	if resp.StatusCode != http.StatusOK {
		r.transport = "status " + resp.Status
		return r
	}
	var text strings.Builder
	done, err := readSSE(resp.Body, func(f sseFrame) {
		switch {
		case f.Error != nil:
			r.errFrame = f.Error.Code
		case f.Usage != nil && len(f.Choices) == 0:
			r.prompt, r.completion = f.Usage.PromptTokens, f.Usage.CompletionTokens
		}
		for _, c := range f.Choices {
			if c.Text != "" && text.Len() == 0 && first != nil {
				first(r.worker)
			}
			text.WriteString(c.Text)
			if c.FinishReason != nil {
				r.finish = *c.FinishReason
			}
		}
	})
	r.done = done
	if err != nil {
		r.transport = err.Error()
	}
	r.text, r.took = text.String(), time.Since(start)
	return r
}

// runStreams runs migRequests concurrent streams of migMaxTokens; once half of them have
// their first text (or failed), during is called, when not nil, with the number of
// streams streaming from each worker by then: early enough that the fault lands
// mid-stream even when a loaded machine is slow to start all of them.
func runStreams(t testing.TB, s *server, during func(started map[string]int)) []streamResult {
	t.Helper()
	return runStreamsN(t, s, migRequests, migMaxTokens, 45*time.Second, during)
}

// runStreamsN is runStreams with n streams of maxTokens each, all within limit.
func runStreamsN(t testing.TB, s *server, n, maxTokens int, limit time.Duration, during func(started map[string]int)) []streamResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	out := make([]streamResult, n)
	t0 := time.Now()
	var wg, firsts sync.WaitGroup
	firsts.Add(n / 2)
	var started atomic.Int64
	var mu sync.Mutex
	on := map[string]int{} // streams with text, by the worker they started on
	for i := range out {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var once sync.Once
			first := func(worker string) {
				once.Do(func() {
					if worker != "" {
						mu.Lock()
						on[worker]++
						mu.Unlock()
					}
					if started.Add(1) <= int64(n/2) {
						firsts.Done()
					}
				})
			}
			out[i] = streamCompletion(ctx, s, i, maxTokens, first)
			first("") // a stream that failed before any text
		}()
	}
	if during != nil {
		firsts.Wait()
		t.Logf("half the streams started after %v", time.Since(t0))
		mu.Lock()
		snapshot := maps.Clone(on)
		mu.Unlock()
		during(snapshot)
	}
	wg.Wait()
	return out
}

// mostStarted is the worker the most of the started streams run on: the one whose
// failure hits the most streams mid-way. It reads nothing from the server, which a
// loaded machine may be slow to answer while the streams run.
func mostStarted(t testing.TB, started map[string]int) string {
	t.Helper()
	best := ""
	for id, n := range started {
		if best == "" || n > started[best] || (n == started[best] && id < best) {
			best = id
		}
	}
	if best == "" {
		t.Fatal("no stream started on any worker")
	}
	return best
}

// migrations is turbine_frontend_migrations_total of the test model by reason, from /metrics.
func (s *server) migrations(t testing.TB) map[string]float64 {
	t.Helper()
	return s.counterBy(t, "turbine_frontend_migrations_total", "reason")
}

func TestE2EMigration(t *testing.T) {
	for _, limit := range []int{3, 0} {
		t.Run("limit="+strconv.Itoa(limit), func(tt *testing.T) {
			t := newVerdict(tt)
			// At the reference speed an engine takes about 8 s for its streams' 1,200 tokens,
			// so it is still generating when it is killed even if a loaded machine reads the
			// streams slowly (at 5× the engines finished first and buffered frames hid the kill).
			s := startServe(t, 3, "--speedup-ratio", "1", "--migration-limit", strconv.Itoa(limit))
			base := runStreams(t, s, nil)
			for i, r := range base {
				if r.transport != "" || r.errFrame != "" || !r.done || r.finish != "length" || r.completion != migMaxTokens {
					t.Fatalf("undisturbed request %d: %+v", i, r)
				}
			}
			var ds []time.Duration
			for _, r := range base {
				ds = append(ds, r.took)
			}
			slices.Sort(ds)
			t.Logf("undisturbed durations %v .. %v", ds[0], ds[len(ds)-1])
			victim := ""
			got := runStreams(t, s, func(started map[string]int) {
				victim = mostStarted(t, started)
				pid, _ := s.enginePID(victim)
				if pid == 0 {
					t.Errorf("no engine pid for %s in the log", victim)
					return
				}
				if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
					t.Error(err)
				}
			})
			checkMigrated(t, s, limit, victim, base, got)
		})
	}
}

// checkMigrated compares the disturbed run with the undisturbed one and prints the
// summary line.
func checkMigrated(t testing.TB, s *server, limit int, victim string, base, got []streamResult) {
	t.Helper()
	var completed, lost, duplicated, errs, affected int
	var extra []time.Duration
	for i, r := range got {
		want := base[i]
		switch {
		case r.transport != "":
			errs++
			// Without migration, a request whose engine died before its first token is
			// answered 502 (an OpenAI error body: nothing was streamed yet).
			if limit > 0 || r.worker != victim || r.transport != "status 502 Bad Gateway" {
				t.Errorf("request %d (started on %s): %s", i, r.worker, r.transport)
			}
		case r.errFrame != "":
			errs++
			if limit > 0 || r.worker != victim || r.errFrame != "backend_unavailable" {
				t.Errorf("request %d (started on %s): error frame %q", i, r.worker, r.errFrame)
			}
			if !r.done {
				t.Errorf("request %d: error frame without [DONE]", i)
			}
			if !strings.HasPrefix(want.text, r.text) {
				t.Errorf("request %d: failed stream's text is not a prefix of the undisturbed text", i)
			}
		case r.text == want.text && r.done && r.finish == "length" && r.completion == want.completion && r.prompt == want.prompt:
			completed++
			extra = append(extra, r.took-want.took)
		default:
			if len(r.text) < len(want.text) {
				lost++
			} else {
				duplicated++
			}
			t.Errorf("request %d (started on %s): text differs from the undisturbed run (%d vs %d bytes; finish %q, usage %d+%d vs %d+%d)",
				i, r.worker, len(r.text), len(want.text), r.finish, r.prompt, r.completion, want.prompt, want.completion)
		}
		if r.worker == victim {
			affected++
		}
	}
	m := s.migrations(t)
	migrated := m["engine_error"] + m["worker_terminated"] + m["stalled"]
	slices.Sort(extra)
	var p99 time.Duration
	if len(extra) > 0 {
		p99 = extra[min(len(extra)-1, len(extra)*99/100)]
	}
	t.Logf("migration limit %d: requests %d, completed %d, migrated %.0f, lost %d, duplicated %d, errors %d, on the killed worker %d, p99 extra latency %v",
		limit, len(got), completed, migrated, lost, duplicated, errs, affected, p99)
	if affected == 0 {
		t.Fatalf("no stream started on the killed worker %s", victim)
	}
	if limit > 0 {
		if completed != len(got) || migrated == 0 {
			t.Errorf("with migration: %d of %d completed, %.0f migrated (%v)", completed, len(got), migrated, m)
		}
		return
	}
	if migrated != 0 || errs == 0 || completed+errs != len(got) {
		t.Errorf("with migration disabled: %.0f migrated, %d errors, %d completed of %d", migrated, errs, completed, len(got))
	}
}
