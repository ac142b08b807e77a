package gateway

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/turbine-llm/turbine/messages"
)

// Bounds of the slow-reader tests: generous upper limits on waits for events, far above
// the short write timeout the tests configure (never timing assertions).
const (
	testWriteTimeout = 200 * time.Millisecond
	eventBound       = 30 * time.Second
)

// openedBackend is a fakeBackend that hands every stream it opens to opened.
type openedBackend struct {
	*fakeBackend
	opened chan *fakeStream
}

func (b *openedBackend) Generate(ctx context.Context, req *GenerateRequest) (Stream, error) {
	st, err := b.fakeBackend.Generate(ctx, req)
	if err == nil {
		b.opened <- st.(*fakeStream)
	}
	return st, err
}

// endlessBackend answers every request with a stream of chunks that never finishes: an
// engine generating for as long as its request is not cancelled. closed is closed when
// the first stream is closed (the engine request cancelled).
type endlessBackend struct {
	*fakeBackend
	chunk  []uint32
	closed chan struct{}
	once   sync.Once
}

func newEndlessBackend() *endlessBackend {
	return &endlessBackend{fakeBackend: newFakeBackend(), chunk: toks(strings.Repeat("abcdefgh", 128)), closed: make(chan struct{})}
}

func (b *endlessBackend) Generate(context.Context, *GenerateRequest) (Stream, error) {
	return endlessStream{b}, nil
}

type endlessStream struct{ b *endlessBackend }

func (s endlessStream) Recv(ctx context.Context) (*messages.TokenChunk, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return &messages.TokenChunk{TokenIds: s.b.chunk}, nil
}

func (s endlessStream) WorkerID() string { return "worker-a" }
func (s endlessStream) Close()           { s.b.once.Do(func() { close(s.b.closed) }) }

// newWriteTimeoutServer serves s over real TCP with small send buffers; closed gets a
// value each time the server closes a connection.
func newWriteTimeoutServer(t *testing.T, s *Server) (srv *httptest.Server, closed <-chan struct{}) {
	t.Helper()
	c := make(chan struct{}, 16)
	srv = httptest.NewUnstartedServer(s)
	srv.Listener = sendBuffers{srv.Listener, 4096} // a stalled client blocks writes after a few KiB, not after megabytes
	srv.Config.ConnState = func(_ net.Conn, st http.ConnState) {
		if st == http.StateClosed {
			c <- struct{}{}
		}
	}
	srv.Start()
	t.Cleanup(srv.Close)
	return srv, c
}

// newTimeoutConfigServer is a test server with the given write timeout, logging into
// log (nil: no log).
func newTimeoutConfigServer(t *testing.T, b Backend, writeTimeout time.Duration, log io.Writer) *Server {
	t.Helper()
	cfg := Config{Now: func() time.Time { return testTime }, NewRequestID: func() string { return "id" },
		StreamWriteTimeout: writeTimeout}
	if log != nil {
		cfg.Logger = zerolog.New(log)
	}
	s, err := New(cfg, b, fakeOptions(fakePreprocessor{eos: []uint32{fakeEOS}})...)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// stalledClient sends one request over a fresh TCP connection with a tiny receive
// buffer and never reads, keeping the socket open until the test ends.
func stalledClient(t *testing.T, addr, path, body string) {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	if err := conn.(*net.TCPConn).SetReadBuffer(1024); err != nil {
		t.Fatal(err)
	}
	if _, err := fmt.Fprintf(conn, "POST %s HTTP/1.1\r\nHost: test\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s",
		path, len(body), body); err != nil {
		t.Fatal(err)
	}
}

// connClosed waits for the server to close a connection (srv's StateClosed).
func connClosed(t *testing.T, closed <-chan struct{}) {
	t.Helper()
	select {
	case <-closed:
	case <-time.After(eventBound):
		t.Fatalf("the server did not close the connection within %v", eventBound)
	}
}

// A client that opens a stream and stops reading is cut once a write has waited
// StreamWriteTimeout, and its engine request is cancelled (the Stream closed).
func TestStalledStreamReaderIsCut(t *testing.T) {
	b := newEndlessBackend()
	var log syncBuffer
	s := newTimeoutConfigServer(t, b, testWriteTimeout, &log)
	srv, closed := newWriteTimeoutServer(t, s)

	stalledClient(t, srv.Listener.Addr().String(), compPath, `{"model":"org/big-model","prompt":"hi","stream":true}`)
	select {
	case <-b.closed:
	case <-time.After(eventBound):
		t.Fatalf("the engine request of a client that stopped reading was not cancelled within %v (write timeout %v)", eventBound, testWriteTimeout)
	}
	connClosed(t, closed)
	ctx, cancel := context.WithTimeout(context.Background(), eventBound)
	defer cancel()
	if err := s.WaitIdle(ctx); err != nil {
		t.Fatal("the handler did not return")
	}
	if v := metricValue(s, `turbine_frontend_cancelled_requests_total{model="org/big-model",endpoint="completions"}`); v != "1" {
		t.Errorf("cancellations = %q, want 1", v)
	}
	if want := "read nothing for the 200ms write timeout"; !strings.Contains(log.String(), want) {
		t.Errorf("log %q: want the request line to say %q", log.String(), want)
	}
}

// syncBuffer is a bytes.Buffer safe for a handler goroutine and the test.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// A non-streaming answer gets the same write timeout: a client that never reads its
// (large) body is cut and the handler returns.
func TestStalledUnaryReaderIsCut(t *testing.T) {
	big := strings.Repeat("abcdefgh", 1<<15) // 256 KiB of text, far above the socket buffers
	b := &openedBackend{fakeBackend: newFakeBackend(finish(big, "length")), opened: make(chan *fakeStream, 1)}
	s := newTimeoutConfigServer(t, b, testWriteTimeout, nil)
	srv, closed := newWriteTimeoutServer(t, s)

	stalledClient(t, srv.Listener.Addr().String(), compPath, `{"model":"org/big-model","prompt":"hi"}`)
	var st *fakeStream
	select {
	case st = <-b.opened:
	case <-time.After(eventBound):
		t.Fatal("the request never reached the backend")
	}
	select {
	case <-st.closed: // closed once the answer was written, or its write failed
	case <-time.After(eventBound):
		t.Fatalf("the handler still writes to a client that does not read, %v after it started (write timeout %v)", eventBound, testWriteTimeout)
	}
	connClosed(t, closed)
	ctx, cancel := context.WithTimeout(context.Background(), eventBound)
	defer cancel()
	if err := s.WaitIdle(ctx); err != nil {
		t.Fatal("the handler did not return")
	}
	if v := metricValue(s, `turbine_frontend_requests_total{model="org/big-model",endpoint="completions",request_type="unary",status="499"}`); v != "1" {
		t.Errorf("requests{status=499} = %q, want 1 (the cut client counted as gone)", v)
	}
}

// The write timeout bounds how long one write may block, not the time between writes: a
// stream whose engine is silent for longer than the timeout, read by a live client,
// runs to its end; so does a later request on the same keep-alive connection.
func TestWriteTimeoutSparesReadingClients(t *testing.T) {
	// A write waits only for its own flush to the socket, but the deadline is set before
	// it: the timeout must outlast a loaded machine's pause between the two.
	const timeout = testWriteTimeout
	silent := func() { time.Sleep(timeout + timeout/2) } // an engine step slower than the timeout
	b := newFakeBackend(tokens("Hel"), step{chunk: &messages.TokenChunk{TokenIds: toks("lo")}, before: silent}, finish(" world", "stop"))
	s := newTimeoutConfigServer(t, b, timeout, nil)
	srv, _ := newWriteTimeoutServer(t, s)
	client := srv.Client()
	for i := range 2 {
		resp, err := client.Post(srv.URL+compPath, "application/json",
			strings.NewReader(`{"model":"org/big-model","prompt":"hi","stream":true}`))
		if err != nil {
			t.Fatal(err)
		}
		got, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil || !strings.HasSuffix(strings.TrimSpace(string(got)), "data: [DONE]") {
			t.Fatalf("request %d: %v, body %q; want a complete stream", i, err, got)
		}
		if i == 0 {
			silent() // the connection idles past the first request's last deadline
		}
	}
}

func TestStreamWriteTimeoutConfig(t *testing.T) {
	for _, tc := range []struct {
		in, want time.Duration
	}{
		{0, DefaultStreamWriteTimeout},
		{-1, -1},
		{time.Second, time.Second},
	} {
		c, err := Config{StreamWriteTimeout: tc.in}.withDefaults()
		if err != nil || c.StreamWriteTimeout != tc.want {
			t.Errorf("StreamWriteTimeout %v: got %v, %v; want %v", tc.in, c.StreamWriteTimeout, err, tc.want)
		}
	}
}

// A client that reads a large answer steadily, if slowly, is not cut: the deadline
// covers each piece of a write (writePiece), not the whole answer, so the timeout
// measures a pause in the client's reading rather than the time a large answer takes.
func TestSlowSteadyReaderOfLargeAnswer(t *testing.T) {
	const timeout = time.Second
	big := strings.Repeat("abcdefgh", 1<<19) // 4 MiB of text, written at once
	s := newTimeoutConfigServer(t, newFakeBackend(finish(big, "length")), timeout, nil)
	srv := httptest.NewUnstartedServer(s)
	srv.Listener = sendBuffers{srv.Listener, 64 << 10}
	srv.Start()
	t.Cleanup(srv.Close)
	conn, err := net.Dial("tcp", srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if err := conn.(*net.TCPConn).SetReadBuffer(64 << 10); err != nil {
		t.Fatal(err)
	}
	body := `{"model":"org/big-model","prompt":"hi"}`
	if _, err := fmt.Fprintf(conn, "POST %s HTTP/1.1\r\nHost: test\r\nContent-Type: application/json\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s",
		compPath, len(body), body); err != nil {
		t.Fatal(err)
	}
	// 64 KiB every 50 ms: a piece in about a twentieth of the timeout, the whole answer
	// (beyond the socket buffers' few hundred KiB) in about three times it.
	var got bytes.Buffer
	buf := make([]byte, 64<<10)
	start := time.Now()
	for {
		n, err := io.ReadFull(conn, buf)
		got.Write(buf[:n])
		if err != nil {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if got.Len() < len(big) || !strings.Contains(got.String(), `"finish_reason":"length"`) {
		t.Fatalf("read %d bytes in %v; want the whole answer (%d bytes of text)", got.Len(), time.Since(start), len(big))
	}
}

// sendBuffers sets the kernel send buffer of every accepted connection to size (small:
// loopback autotuning would let a client that does not read queue megabytes).
type sendBuffers struct {
	net.Listener
	size int
}

func (l sendBuffers) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetWriteBuffer(l.size)
	}
	return c, err
}
