package bench

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
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
			if tc.want == "" && (res.CachedKnown || res.OutputTokens != 2 || len(res.ITL) != 1) {
				t.Fatalf("result %+v: want 2 tokens, one gap, cached_tokens unknown", res)
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
