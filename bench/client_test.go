package bench

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestClientDoValid(t *testing.T) {
	srv := httptest.NewServer(openAIStream(t))
	defer srv.Close()
	clock := newTickClock(time.Millisecond)
	c := &Client{URL: srv.URL, Model: "m", Clock: clock}
	res := c.Do(context.Background(), clock.Now(), []uint32{1, 2, 3, 4}, 5)
	if res.Error != "" {
		t.Fatalf("error %s: %s", res.Error, res.Detail)
	}
	// Readings: send, 5 token frames, [DONE].
	if res.TTFT != time.Millisecond || len(res.ITL) != 4 || res.E2E != 6*time.Millisecond {
		t.Fatalf("TTFT %v, %d gaps, E2E %v; want 1ms, 4, 6ms", res.TTFT, len(res.ITL), res.E2E)
	}
	if res.OutputTokens != 5 || res.PromptTokens != 4 || res.CachedTokens != 2 || !res.CachedKnown {
		t.Fatalf("usage %+v, want 5 out, 4 prompt, 2 cached", res)
	}
}

func TestClientDoErrors(t *testing.T) {
	const tok = `{"choices":[{"index":0,"text":"x","finish_reason":null}]}`
	const usage = `{"choices":[],"usage":{"prompt_tokens":2,"completion_tokens":%d}}`
	for _, tc := range []struct {
		name   string
		status int
		frames []string
		want   string
	}{
		{"overloaded", 503, nil, "http_503"},
		{"not data", 200, []string{"garbage"}, ErrSSE},
		{"not json", 200, []string{"data: {"}, ErrSSE},
		{"neither choices nor usage", 200, []string{"data: {}"}, ErrSSE},
		{"error frame", 200, []string{"data: " + tok, `data: {"error":{"message":"boom","type":"server_error","code":"engine_error"}}`, "data: [DONE]"}, "stream_engine_error"},
		{"no done", 200, []string{"data: " + tok, "data: " + fmt.Sprintf(usage, 1)}, ErrNoDone},
		{"no usage", 200, []string{"data: " + tok, "data: [DONE]"}, ErrNoUsage},
		{"too few tokens", 200, []string{"data: " + tok, "data: " + fmt.Sprintf(usage, 1), "data: [DONE]"}, ErrOutputLength},
		{"valid, no cached_tokens", 200, []string{": comment", "event: x", "data: " + tok, "data:" + tok, "data: " + fmt.Sprintf(usage, 2), "data: [DONE]"}, ""},
		// No token-bearing frame: a failure of its own, whatever the usage says.
		{"only usage", 200, []string{"data: " + fmt.Sprintf(usage, 2), "data: [DONE]"}, ErrNoTokens},
		{"only a finish frame", 200, []string{`data: {"choices":[{"index":0,"text":"","finish_reason":"length"}]}`, "data: " + fmt.Sprintf(usage, 2), "data: [DONE]"}, ErrNoTokens},
		{"only done", 200, []string{"data: [DONE]"}, ErrNoTokens},
		// Usage counts that cannot be.
		{"cached above prompt", 200, []string{"data: " + tok, "data: " + tok, `data: {"choices":[],"usage":{"prompt_tokens":2,"completion_tokens":2,"prompt_tokens_details":{"cached_tokens":3}}}`, "data: [DONE]"}, ErrBadUsage},
		{"negative cached", 200, []string{"data: " + tok, "data: " + tok, `data: {"choices":[],"usage":{"prompt_tokens":2,"completion_tokens":2,"prompt_tokens_details":{"cached_tokens":-1}}}`, "data: [DONE]"}, ErrBadUsage},
		{"negative prompt", 200, []string{"data: " + tok, "data: " + tok, `data: {"choices":[],"usage":{"prompt_tokens":-2,"completion_tokens":2}}`, "data: [DONE]"}, ErrBadUsage},
		{"negative completion", 200, []string{"data: " + tok, "data: " + tok, `data: {"choices":[],"usage":{"prompt_tokens":2,"completion_tokens":-2}}`, "data: [DONE]"}, ErrBadUsage},
		{"cached equal to prompt", 200, []string{"data: " + tok, "data: " + tok, `data: {"choices":[],"usage":{"prompt_tokens":2,"completion_tokens":2,"prompt_tokens_details":{"cached_tokens":2}}}`, "data: [DONE]"}, ""},
		// A server's error code becomes a short kind of safe characters.
		{"long error code", 200, []string{`data: {"error":{"message":"boom","code":"` + strings.Repeat("Ab/", 2000) + `"}}`}, "stream_" + strings.Repeat("ab_", 19)},
		{"numeric error code", 200, []string{`data: {"error":{"message":"boom","code":1e300}}`}, "stream_1e_300"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.WriteHeader(tc.status)
				fmt.Fprint(w, strings.Join(tc.frames, "\n\n"))
			}))
			defer srv.Close()
			c := &Client{URL: srv.URL + "/", Model: "m"}
			res := c.Do(context.Background(), time.Now(), []uint32{1, 2}, 2)
			if res.Error != tc.want {
				t.Fatalf("error kind %q (%s), want %q", res.Error, res.Detail, tc.want)
			}
			if tc.want == "" && (res.OutputTokens != 2 || len(res.ITL) != 1 || res.CachedKnown != (tc.name == "cached equal to prompt")) {
				t.Fatalf("result %+v: want 2 tokens, one gap, cached_tokens known only when reported", res)
			}
			if tc.want != "" && res.E2E <= 0 && tc.status == 200 {
				t.Fatalf("result %+v: a failure's E2E is the time to the failure, want > 0", res)
			}
		})
	}
}

func TestClientDoConnect(t *testing.T) {
	srv := httptest.NewServer(http.NotFoundHandler())
	url := srv.URL
	srv.Close()
	res := (&Client{URL: url, Model: "m"}).Do(context.Background(), time.Now(), []uint32{1}, 1)
	if res.Error != ErrConnect {
		t.Fatalf("error kind %q, want %q", res.Error, ErrConnect)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	res = (&Client{URL: url, Model: "m"}).Do(ctx, time.Now(), []uint32{1}, 1)
	if res.Error != ErrCanceled {
		t.Fatalf("error kind %q, want %q", res.Error, ErrCanceled)
	}
}

// TestClientNoTokensNotInLatencies: answers without a token are failures, so their zero
// TTFT never enters the report's latencies.
func TestClientNoTokensNotInLatencies(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":1,\"completion_tokens\":1}}\n\ndata: [DONE]\n\n")
	}))
	defer srv.Close()
	reqs, err := Synthetic(3, 4, 1, 16, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	out := (&Runner{Client: &Client{URL: srv.URL, Model: "m"}, Concurrency: 1, BlockTokens: 16}).Run(context.Background(), reqs)
	s := Summarize(out)
	if s.Succeeded != 0 || s.Errors[ErrNoTokens] != 3 || s.TTFT.Count != 0 || len(s.TTFTCDF) != 0 {
		t.Fatalf("summary %+v: want 3 no_tokens failures and no TTFT sample", s)
	}
}

// TestClientChatNoTokens: a chat stream of the role chunk and usage only has no token.
func TestClientChatNoTokens(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, `data: {"choices":[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}]}`+"\n\n"+
			`data: {"choices":[{"index":0,"delta":{},"finish_reason":"length"}]}`+"\n\n"+
			`data: {"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":2}}`+"\n\ndata: [DONE]\n\n")
	}))
	defer srv.Close()
	res := (&Client{URL: srv.URL, Model: "m"}).DoChat(context.Background(), time.Now(), "a b", 2)
	if res.Error != ErrNoTokens || res.TTFT != 0 {
		t.Fatalf("error kind %q, TTFT %v; want %q", res.Error, res.TTFT, ErrNoTokens)
	}
}

// TestClientTransportKinds: a time limit is a timeout (before the answer or while it is
// read, from the client's Timeout or the context's deadline), an SSE line over
// MaxFrameBytes is frame_too_large, and each failure's E2E covers the wait.
func TestClientTransportKinds(t *testing.T) {
	release := make(chan struct{})
	defer close(release)
	serve := func(mode string) *httptest.Server {
		return httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			io.Copy(io.Discard, r.Body) // then r.Context ends when the client leaves
			switch mode {
			case "stall-head":
			case "stall-body":
				fmt.Fprint(w, "data: {\"choices\":[{\"index\":0,\"text\":\"x\",\"finish_reason\":null}]}\n\n")
				w.(http.Flusher).Flush()
			case "huge":
				fmt.Fprint(w, "data: ")
				w.Write(bytes.Repeat([]byte("x"), MaxFrameBytes+1))
				fmt.Fprint(w, "\n\ndata: [DONE]\n\n")
				return
			}
			select { // until the client gives up, or the test ends
			case <-r.Context().Done():
			case <-release:
			}
		}))
	}
	const limit = 50 * time.Millisecond
	deadline := func() context.Context {
		ctx, cancel := context.WithTimeout(context.Background(), limit)
		t.Cleanup(cancel)
		return ctx
	}
	for _, tc := range []struct {
		name    string
		mode    string
		timeout time.Duration // the client's
		ctx     func() context.Context
		want    string
	}{
		{"client timeout before the answer", "stall-head", limit, context.Background, ErrTimeout},
		{"client timeout while reading", "stall-body", limit, context.Background, ErrTimeout},
		{"deadline before the answer", "stall-head", 0, deadline, ErrTimeout},
		{"deadline while reading", "stall-body", 0, deadline, ErrTimeout},
		{"line over 16 MiB", "huge", 0, context.Background, ErrFrameTooLarge},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := serve(tc.mode)
			defer srv.Close()
			clock := &sendClock{}
			c := &Client{URL: srv.URL, Model: "m", HTTP: &http.Client{Timeout: tc.timeout}, Clock: clock}
			ctx := tc.ctx()
			res := c.Do(ctx, time.Now(), []uint32{1}, 1)
			if res.Error != tc.want {
				t.Fatalf("error kind %q (%s), want %q", res.Error, res.Detail, tc.want)
			}
			if tc.want != ErrTimeout {
				return
			}
			// The failure is measured once the limit has passed: the client's Timeout
			// runs from within the send, a deadline from before it (ctx was made first).
			start := clock.start()
			end := start.Add(limit)
			if d, ok := ctx.Deadline(); ok {
				end = d
			}
			if failed := start.Add(res.E2E); failed.Before(end) {
				t.Fatalf("E2E %v: the failure measured %v before the limit's end", res.E2E, end.Sub(failed))
			}
		})
	}
}

// sendClock is the wall clock; it keeps its first reading, a Client's send start.
type sendClock struct {
	WallClock
	mu    sync.Mutex
	first time.Time
}

func (c *sendClock) Now() time.Time {
	now := time.Now()
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.first.IsZero() {
		c.first = now
	}
	return now
}

func (c *sendClock) start() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.first
}

// TestRunAllTimedOut: a run whose requests all time out lasts until the last failure.
func TestRunAllTimedOut(t *testing.T) {
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body) // then r.Context ends when the client leaves
		select {
		case <-r.Context().Done():
		case <-release:
		}
	}))
	defer srv.Close()
	defer close(release)
	const limit = 30 * time.Millisecond
	reqs, err := Synthetic(2, 4, 1, 16, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	r := &Runner{Client: &Client{URL: srv.URL, Model: "m", HTTP: &http.Client{Timeout: limit}}, Concurrency: 1, BlockTokens: 16}
	s := Summarize(r.Run(context.Background(), reqs))
	if s.Errors[ErrTimeout] != 2 || s.DurationS < 2*limit.Seconds() {
		t.Fatalf("errors %v over %v s; want 2 timeouts over at least %v s", s.Errors, s.DurationS, 2*limit.Seconds())
	}
}

func TestErrorKind(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"stream_engine_error", "stream_engine_error"},
		{"", "error"},
		{"stream_Bad Request/{x}", "stream_bad_request__x_"},
		{"stream_a.b-c_9", "stream_a.b-c_9"},
		{"stream_é", "stream___"},
		{strings.Repeat("a", 5000), strings.Repeat("a", MaxErrorKind)},
	} {
		if got := ErrorKind(tc.in); got != tc.want {
			t.Errorf("ErrorKind(%.20q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}
