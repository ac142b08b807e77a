package resp

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/turbine-llm/turbine/kv"
	"github.com/turbine-llm/turbine/kvbm"
)

// serve runs srv on a loopback listener until the test ends and returns its address.
func serve(t *testing.T, srv *Server) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	t.Cleanup(func() {
		_ = srv.Close()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return ln.Addr().String()
}

func newStore(t *testing.T) *kvbm.Store {
	t.Helper()
	st, err := kvbm.Open(kvbm.Config{HostBytes: 1 << 30})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	return st
}

func dial(t *testing.T, addr string) (net.Conn, *bufio.Reader) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	if err := c.SetDeadline(time.Now().Add(20 * time.Second)); err != nil {
		t.Fatal(err)
	}
	return c, bufio.NewReader(c)
}

// expect reads exactly len(want) bytes and compares them.
func expect(t *testing.T, r io.Reader, want string) {
	t.Helper()
	got := make([]byte, len(want))
	if _, err := io.ReadFull(r, got); err != nil {
		t.Fatalf("reading %q: %v (got %q)", want, err, got)
	}
	if string(got) != want {
		t.Fatalf("got %q, want %q", got, want)
	}
}

func cmd(args ...string) []byte {
	b := make([][]byte, len(args))
	for i, a := range args {
		b[i] = []byte(a)
	}
	return appendCommand(nil, b...)
}

// TestPipelineFlushedWithoutEOF: a batch in one write is answered in order, and the
// replies arrive while the connection stays open (flushed once the input is drained).
func TestPipelineFlushedWithoutEOF(t *testing.T) {
	addr := serve(t, New(newStore(t), Options{}))
	c, r := dial(t, addr)
	var req []byte
	var want strings.Builder
	for i := range 200 {
		req = append(req, cmd("SET", fmt.Sprint("k", i), fmt.Sprint("v", i))...)
		want.WriteString("+OK\r\n")
	}
	for i := range 200 {
		req = append(req, cmd("GET", fmt.Sprint("k", i))...)
		v := fmt.Sprint("v", i)
		fmt.Fprintf(&want, "$%d\r\n%s\r\n", len(v), v)
	}
	if _, err := c.Write(req); err != nil {
		t.Fatal(err)
	}
	expect(t, r, want.String())
}

// TestTruncatedFrameWaits: a request in pieces is answered once, when complete.
func TestTruncatedFrameWaits(t *testing.T) {
	addr := serve(t, New(newStore(t), Options{}))
	c, r := dial(t, addr)
	req := cmd("SET", "k", "a\r\nb")
	for _, piece := range [][]byte{req[:3], req[3:9], req[9 : len(req)-1], req[len(req)-1:]} {
		if _, err := c.Write(piece); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.Write(cmd("GET", "k")); err != nil {
		t.Fatal(err)
	}
	expect(t, r, "+OK\r\n$4\r\na\r\nb\r\n")
}

// TestProtocolErrorAffectsOnlyItsConnection: a bad frame closes its connection; another
// connection, mid-request, carries on.
func TestProtocolErrorAffectsOnlyItsConnection(t *testing.T) {
	addr := serve(t, New(newStore(t), Options{MaxKeyBytes: 8}))
	good, gr := dial(t, addr)
	req := cmd("SET", "k", "v")
	if _, err := good.Write(req[:7]); err != nil {
		t.Fatal(err)
	}
	bad, br := dial(t, addr)
	if _, err := bad.Write([]byte("*1\r\n$-5\r\n")); err != nil {
		t.Fatal(err)
	}
	expect(t, br, "-ERR Protocol error: invalid bulk length\r\n")
	if n, err := br.Read(make([]byte, 1)); n != 0 || !errors.Is(err, io.EOF) {
		t.Fatalf("after a protocol error: read %d, %v; want EOF", n, err)
	}
	if _, err := good.Write(append(req[7:], cmd("SET", "a-long-key", "v")...)); err != nil {
		t.Fatal(err)
	}
	expect(t, gr, "+OK\r\n-ERR kvbm key too long (10 bytes, at most 8)\r\n")
	if _, err := good.Write(cmd("GET", "k")); err != nil {
		t.Fatal(err)
	}
	expect(t, gr, "$1\r\nv\r\n")
}

func TestMaxConns(t *testing.T) {
	addr := serve(t, New(newStore(t), Options{MaxConns: 1}))
	c1, r1 := dial(t, addr)
	if _, err := c1.Write(cmd("PING")); err != nil {
		t.Fatal(err)
	}
	expect(t, r1, "+PONG\r\n") // c1 is registered
	_, r2 := dial(t, addr)
	expect(t, r2, "-ERR max number of clients reached\r\n")
	if _, err := r2.ReadByte(); !errors.Is(err, io.EOF) {
		t.Fatalf("the refused connection: %v, want EOF", err)
	}
	_ = c1.Close()
	// Once c1's goroutine ends there is room again; retry until then.
	for {
		c3, r3 := dial(t, addr)
		if _, err := c3.Write(cmd("PING")); err != nil {
			t.Fatal(err)
		}
		line, err := r3.ReadString('\n')
		if err != nil {
			t.Fatal(err)
		}
		if line == "+PONG\r\n" {
			break
		}
		if line != "-ERR max number of clients reached\r\n" {
			t.Fatalf("got %q", line)
		}
	}
}

// TestClose: Close ends Serve with nil, closes open connections and waits for them;
// Serve after Close fails.
func TestClose(t *testing.T) {
	srv := New(newStore(t), Options{})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	c, r := dial(t, ln.Addr().String())
	if _, err := c.Write(cmd("PING")); err != nil {
		t.Fatal(err)
	}
	expect(t, r, "+PONG\r\n")
	if a := srv.Addr(); a == nil || a.String() != ln.Addr().String() {
		t.Errorf("Addr = %v, want %v", a, ln.Addr())
	}
	if err := srv.Close(); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Errorf("Serve after Close = %v, want nil", err)
	}
	if _, err := r.ReadByte(); !errors.Is(err, io.EOF) {
		t.Errorf("an open connection after Close: %v, want EOF", err)
	}
	ln2, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Serve(ln2); !errors.Is(err, ErrServerClosed) {
		t.Errorf("Serve on a closed server = %v, want ErrServerClosed", err)
	}
}

// fakeStore fails puts with err, and otherwise keeps blocks in a map.
type fakeStore struct {
	mu  sync.Mutex
	m   map[string][]byte
	err error
}

func (f *fakeStore) Put(key string, _, data []byte, _ int) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err != nil {
		return f.err
	}
	f.m[key] = data
	return nil
}

func (f *fakeStore) Get(key string) (kvbm.Entry, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	d, ok := f.m[key]
	if !ok {
		return kvbm.Entry{}, kvbm.ErrNotFound
	}
	return kvbm.Entry{Data: d, Tier: kv.TierHost}, nil
}

func (f *fakeStore) Exists(key string) bool { _, err := f.Get(key); return err == nil }

func (f *fakeStore) Delete(key string) (bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	_, ok := f.m[key]
	delete(f.m, key)
	return ok, nil
}

func (f *fakeStore) Snapshot(fn func(string, kv.Tier)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for k := range f.m {
		fn(k, kv.TierHost)
	}
}

func (f *fakeStore) Stats() kvbm.Stats { return kvbm.Stats{} }

// TestStoreErrors: the store's errors become their replies, and the connection stays.
func TestStoreErrors(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want string
	}{
		{kvbm.ErrFull, "-OOM command not allowed when used memory > 'maxmemory'.\r\n"},
		{fmt.Errorf("disk: %w", kvbm.ErrFull), "-OOM command not allowed when used memory > 'maxmemory'.\r\n"},
		{kvbm.ErrValueTooLarge, "-ERR kvbm value too large for the block store\r\n"},
		{kvbm.ErrKeyTooLong, "-ERR kvbm key too long for the block store\r\n"},
		{kvbm.ErrClosed, "-ERR kvbm block store closed\r\n"},
		{errors.New("write /d/x.tmp:\r\ninput/output error"), "-ERR kvbm write /d/x.tmp:  input/output error\r\n"},
	} {
		t.Run(tc.err.Error(), func(t *testing.T) {
			fs := &fakeStore{m: map[string][]byte{"old": []byte("1")}, err: tc.err}
			addr := serve(t, newServer(fs, Options{}))
			c, r := dial(t, addr)
			req := append(cmd("SET", "k", "v"), cmd("SET", "old", "2", "GET")...)
			req = append(req, cmd("GET", "old")...)
			if _, err := c.Write(req); err != nil {
				t.Fatal(err)
			}
			expect(t, r, tc.want+tc.want+"$1\r\n1\r\n")
		})
	}
}

// TestGetWritesStoredSlice: a large GET reply carries the stored bytes, and the replies
// around it stay in order.
func TestGetWritesStoredSlice(t *testing.T) {
	st := newStore(t)
	big := binValue(3*bigValue+7, 9)
	if err := st.Put("big", nil, big, 0); err != nil {
		t.Fatal(err)
	}
	addr := serve(t, New(st, Options{}))
	c, r := dial(t, addr)
	req := append(cmd("PING"), cmd("GET", "big")...)
	req = append(req, cmd("MGET", "big", "none", "big")...)
	req = append(req, cmd("PING")...)
	if _, err := c.Write(req); err != nil {
		t.Fatal(err)
	}
	bulk := fmt.Sprintf("$%d\r\n%s\r\n", len(big), big)
	expect(t, r, "+PONG\r\n"+bulk+"*3\r\n"+bulk+"$-1\r\n"+bulk+"+PONG\r\n")
}

func TestReplyWriterFlushReusesBuffers(t *testing.T) {
	var sink bytes.Buffer
	w := newReplyWriter(&sink)
	big := bytes.Repeat([]byte{'x'}, bigValue)
	var want bytes.Buffer
	for round := range 3 {
		for i := range 4 {
			w.bulk(big)
			w.integer(int64(round*10 + i))
			fmt.Fprintf(&want, "$%d\r\n%s\r\n:%d\r\n", len(big), big, round*10+i)
		}
		if err := w.Flush(); err != nil {
			t.Fatal(err)
		}
		if w.Pending() != 0 {
			t.Fatalf("pending %d after Flush", w.Pending())
		}
	}
	if !bytes.Equal(sink.Bytes(), want.Bytes()) {
		t.Fatalf("written bytes differ from the replies (%d vs %d bytes)", sink.Len(), want.Len())
	}
	if len(w.spare) > 4 {
		t.Errorf("%d spare buffers kept for 4 large replies a flush", len(w.spare))
	}
}

func TestInfo(t *testing.T) {
	st := newStore(t)
	addr := serve(t, New(st, Options{}))
	c, r := dial(t, addr)
	if _, err := c.Write(append(cmd("SET", "k", "v"), cmd("INFO", "server", "keyspace")...)); err != nil {
		t.Fatal(err)
	}
	expect(t, r, "+OK\r\n")
	line, err := r.ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	var n int
	if _, err := fmt.Sscanf(line, "$%d\r\n", &n); err != nil {
		t.Fatalf("INFO reply %q", line)
	}
	body := make([]byte, n+2)
	if _, err := io.ReadFull(r, body); err != nil {
		t.Fatal(err)
	}
	text := string(body)
	for _, want := range []string{"# Server\r\nredis_version:7.0.15\r\n", "\r\n\r\n# Keyspace\r\ndb0:keys=1,expires=0,avg_ttl=0\r\n"} {
		if !strings.Contains(text, want) {
			t.Errorf("INFO lacks %q:\n%s", want, text)
		}
	}
	if strings.Contains(text, "# Clients") {
		t.Errorf("INFO server keyspace has other sections:\n%s", text)
	}
}
