package gateway

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// metricValue returns the value of one series in s's /metrics text ("" when absent).
func metricValue(s *Server, series string) string {
	var b strings.Builder
	s.Metrics().WritePrometheus(&b)
	for _, line := range strings.Split(b.String(), "\n") {
		if v, ok := strings.CutPrefix(line, series+" "); ok {
			return v
		}
	}
	return ""
}

// TestClientDisconnectInProcess cancels the request context while the engine is still
// generating: the handler must stop, close the Stream and count a cancellation.
func TestClientDisconnectInProcess(t *testing.T) {
	for _, stream := range []bool{true, false} {
		t.Run(fmt.Sprintf("stream=%v", stream), func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			b := newFakeBackend(tokens("Hel"), step{before: cancel, block: true}, finish("lo", "stop"))
			s := newTestServer(t, b)
			body := fmt.Sprintf(`{"model":"tiny","stream":%v,%s}`, stream, hiChat)
			rr := serveCtx(ctx, s, http.MethodPost, chatPath, body)
			b.checkClosed(t)
			if stream && strings.Contains(rr.Body.String(), "[DONE]") {
				t.Errorf("a cancelled stream went on to [DONE]: %s", rr.Body.String())
			}
			if b.streams[0].next != 2 {
				t.Errorf("Recv consumed %d steps after the client left", b.streams[0].next)
			}
			if v := metricValue(s, `turbine_frontend_cancelled_requests_total{model="tiny",endpoint="chat_completions"}`); v != "1" {
				t.Errorf("cancellations = %q, want 1", v)
			}
			typ := "unary"
			if stream {
				typ = "stream"
			}
			if v := metricValue(s, `turbine_frontend_requests_total{model="tiny",endpoint="chat_completions",request_type="`+typ+`",status="499"}`); v != "1" {
				t.Errorf("requests{status=499} = %q, want 1", v)
			}
			if v := metricValue(s, `turbine_frontend_inflight_requests{model="tiny"}`); v != "0" {
				t.Errorf("in-flight = %q after the request", v)
			}
		})
	}
}

// TestClientDisconnectDuringGenerate: the client leaves while the request is routed.
func TestClientDisconnectDuringGenerate(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	b := newFakeBackend()
	b.genErr = context.Canceled
	s := newTestServer(t, b)
	serveCtx(ctx, s, http.MethodPost, chatPath, `{"model":"tiny",`+hiChat+`}`)
	if v := metricValue(s, `turbine_frontend_cancelled_requests_total{model="tiny",endpoint="chat_completions"}`); v != "1" {
		t.Errorf("cancellations = %q, want 1", v)
	}
}

// TestClientDisconnectOverHTTP runs a real HTTP server: the client reads the first
// content frame and hangs up; the engine's stream must be closed.
func TestClientDisconnectOverHTTP(t *testing.T) {
	for _, poll := range []bool{false, true} {
		t.Run(map[bool]string{false: "stream", true: "chunk poller"}[poll], func(t *testing.T) { clientDisconnectOverHTTP(t, poll) })
	}
}

// clientDisconnectOverHTTP: the client reads the first chunk's frame while the engine
// produces nothing more (a ChunkPoller's frame is flushed before Recv waits), then hangs
// up; the Stream must be closed.
func clientDisconnectOverHTTP(t *testing.T, poll bool) {
	b := newFakeBackend(tokens("Hel"), step{block: true})
	b.poll = poll
	s := newTestServer(t, b)
	srv := httptest.NewServer(s)
	defer srv.Close()

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL+chatPath,
		strings.NewReader(`{"model":"tiny","stream":true,`+hiChat+`}`))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if resp.Header.Get("X-Turbine-Worker") != "worker-a" {
		t.Errorf("X-Turbine-Worker %q", resp.Header.Get("X-Turbine-Worker"))
	}
	rd := bufio.NewReader(resp.Body)
	for {
		line, err := rd.ReadString('\n')
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(line, `"content":"Hel"`) {
			break
		}
	}
	cancel()
	resp.Body.Close()
	b.mu.Lock()
	st := b.streams[0]
	b.mu.Unlock()
	select {
	case <-st.closed:
	case <-time.After(10 * time.Second):
		t.Fatal("the Stream was not closed after the client hung up")
	}
}

// TestEveryPathCloses runs every way a request can end, streaming or not, and checks
// that each Generate is matched by a Close.
func TestEveryPathCloses(t *testing.T) {
	endings := map[string][]step{
		"finish":        {tokens("a"), finish("b", "stop")},
		"length":        {finish("ab", "length")},
		"stop string":   {tokens("STOP"), finish("x", "stop")},
		"eos":           {chunk([]uint32{fakeEOS}, "", ""), finish("x", "stop")},
		"engine error":  {chunk(nil, "error", "boom")},
		"abort":         {chunk(nil, "abort", "")},
		"recv error":    {{err: errors.New("transport")}},
		"early eof":     {tokens("a")},
		"busy mid-way":  {{err: ErrAllBusy}},
		"immediate eof": {},
	}
	for name, steps := range endings {
		for _, stream := range []bool{true, false} {
			b := newFakeBackend(steps...)
			s := newTestServer(t, b)
			body := fmt.Sprintf(`{"model":"tiny","stream":%v,"stop":"STOP",%s}`, stream, hiChat)
			serve(s, http.MethodPost, chatPath, body)
			if len(b.streams) != 1 {
				t.Fatalf("%s: %d streams", name, len(b.streams))
			}
			t.Run(fmt.Sprintf("%s/stream=%v", name, stream), b.checkClosed)
			if v := metricValue(s, `turbine_frontend_inflight_requests{model="tiny"}`); v != "0" {
				t.Errorf("%s: in-flight = %q after the request", name, v)
			}
		}
	}
}

// flushCounter is a ResponseRecorder that counts the flushes of the answer.
type flushCounter struct {
	*httptest.ResponseRecorder
	flushes int
}

func (f *flushCounter) Flush() { f.flushes++; f.ResponseRecorder.Flush() }

// TestStreamFramesFlushedTogether: the frames of chunks a ChunkPoller has ready at once
// leave in one flush, and the answer is byte for byte the one a plain Stream gets, which
// flushes every frame.
func TestStreamFramesFlushedTogether(t *testing.T) {
	steps := []step{tokens("a"), tokens("b"), tokens("c"), tokens("d"), finish("e", "stop")}
	answer := func(path, body string, poll bool) (string, int) {
		b := newFakeBackend(steps...)
		b.poll = poll
		s := newTestServer(t, b)
		req := httptest.NewRequest(http.MethodPost, path, strings.NewReader(body))
		req.Header.Set("X-Request-Id", "req-1")
		w := &flushCounter{ResponseRecorder: httptest.NewRecorder()}
		s.ServeHTTP(w, req)
		if w.Code != http.StatusOK {
			t.Fatalf("poll %v: %d %s", poll, w.Code, w.Body)
		}
		b.checkClosed(t)
		return w.Body.String(), w.flushes
	}
	plain, plainFlushes := answer(chatPath, `{"model":"tiny","stream":true,`+hiChat+`}`, false)
	polled, polledFlushes := answer(chatPath, `{"model":"tiny","stream":true,`+hiChat+`}`, true)
	if polled != plain {
		t.Errorf("a ChunkPoller's answer differs:\n%s\nfrom a Stream's:\n%s", polled, plain)
	}
	frames := strings.Count(plain, "data: ")
	// A Stream: the headers, then every frame. A ChunkPoller: the headers, the role
	// frame, then the four ready chunks' frames with the finishing chunk's, then [DONE].
	if plainFlushes != frames+1 || polledFlushes != 4 {
		t.Errorf("flushes: %d for a Stream, %d for a ChunkPoller, of %d frames; want %d and 4",
			plainFlushes, polledFlushes, frames, frames+1)
	}
	t.Logf("%d frames: %d flushes for a Stream, %d for a ChunkPoller", frames, plainFlushes, polledFlushes)
	// The APIs whose frames are named events: the ready chunks' deltas leave together.
	for _, api := range []struct{ path, body string }{
		{"/v1/responses", `{"model":"tiny","stream":true,"input":"hi"}`},
		{anthMessagesPath, `{"model":"tiny","stream":true,"max_tokens":20,"messages":[{"role":"user","content":"hi"}]}`},
	} {
		plain, plainFlushes := answer(api.path, api.body, false)
		polled, polledFlushes := answer(api.path, api.body, true)
		if polled != plain {
			t.Errorf("%s: a ChunkPoller's answer differs:\n%s\nfrom a Stream's:\n%s", api.path, polled, plain)
		}
		if frames := strings.Count(plain, "data: "); plainFlushes != frames+1 || polledFlushes > plainFlushes-3 {
			t.Errorf("%s: flushes: %d for a Stream, %d for a ChunkPoller, of %d frames; want %d and the four deltas in one",
				api.path, plainFlushes, polledFlushes, frames, frames+1)
		}
	}
}

// cancelOnWrite is a ResponseRecorder that calls cancel once a write contains mark.
type cancelOnWrite struct {
	*httptest.ResponseRecorder
	mark   string
	cancel context.CancelFunc
}

func (c *cancelOnWrite) Write(b []byte) (int, error) {
	if strings.Contains(string(b), c.mark) {
		c.cancel()
	}
	return c.ResponseRecorder.Write(b)
}

// TestStreamStopsWhenTheClientLeaves: a client gone while chunks are still ready (a
// ChunkPoller with a backlog) ends the stream at the next chunk, as with a plain Stream:
// the rest are not written, nor [DONE], and the stream is closed.
func TestStreamStopsWhenTheClientLeaves(t *testing.T) {
	for _, poll := range []bool{false, true} {
		b := newFakeBackend(tokens("a"), tokens("b"), tokens("c"), tokens("d"), finish("e", "stop"))
		b.poll = poll
		s := newTestServer(t, b)
		ctx, cancel := context.WithCancel(context.Background())
		req := httptest.NewRequestWithContext(ctx, http.MethodPost, chatPath, strings.NewReader(`{"model":"tiny","stream":true,`+hiChat+`}`))
		w := &cancelOnWrite{ResponseRecorder: httptest.NewRecorder(), mark: `"content":"a"`, cancel: cancel}
		s.ServeHTTP(w, req)
		cancel()
		if body := w.Body.String(); !strings.Contains(body, `"content":"a"`) || strings.Contains(body, `"content":"b"`) || strings.Contains(body, "[DONE]") {
			t.Errorf("poll %v: the stream went on after its client left:\n%s", poll, body)
		}
		b.checkClosed(t)
	}
}
