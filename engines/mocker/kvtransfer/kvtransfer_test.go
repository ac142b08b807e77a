package kvtransfer

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"math"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

type release struct {
	key, requestID string
	reason         Reason
}

type fixture struct {
	srv      *Server
	addr     string
	released chan release
	tap      *tap
}

// tap is a listener whose connections record what the server writes to them.
type tap struct {
	net.Listener
	mu      sync.Mutex
	writes  [][]byte      // every write, in order
	changed chan struct{} // closed and replaced at every write
}

func newTap(l net.Listener) *tap { return &tap{Listener: l, changed: make(chan struct{})} }

func (l *tap) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &tappedConn{Conn: c, tap: l}, nil
}

type tappedConn struct {
	net.Conn
	tap *tap
}

func (c *tappedConn) Write(b []byte) (int, error) {
	c.tap.mu.Lock()
	c.tap.writes = append(c.tap.writes, append([]byte(nil), b...))
	close(c.tap.changed)
	c.tap.changed = make(chan struct{})
	c.tap.mu.Unlock()
	return c.Conn.Write(b)
}

// count returns how many writes so far match.
func (l *tap) count(match func([]byte) bool) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, w := range l.writes {
		if match(w) {
			n++
		}
	}
	return n
}

// await returns true once n writes match, false if they do not within 10 s (a bound on
// liveness only).
func (l *tap) await(n int, match func([]byte) bool) bool {
	limit := time.NewTimer(10 * time.Second)
	defer limit.Stop()
	for {
		l.mu.Lock()
		changed := l.changed
		l.mu.Unlock()
		if l.count(match) >= n {
			return true
		}
		select {
		case <-changed:
		case <-limit.C:
			return false
		}
	}
}

// isKeepalive matches a keepalive line; isData a piece of the KV data (zeros).
func isKeepalive(b []byte) bool { return strings.Contains(string(b), `"waiting":true`) }
func isData(b []byte) bool      { return len(b) > 0 && strings.Trim(string(b), "\x00") == "" }

func start(t *testing.T, mut func(*Config)) *fixture {
	t.Helper()
	f := &fixture{released: make(chan release, 16)}
	cfg := Config{EngineID: "engine-a", BlockSize: 16, BytesPerToken: 1024, Timeout: time.Minute,
		Release: func(key, id string, r Reason) { f.released <- release{key, id, r} }}
	if mut != nil {
		mut(&cfg)
	}
	srv, err := NewServer(cfg)
	if err != nil {
		t.Fatal(err)
	}
	nl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l := newTap(nl)
	done := make(chan error, 1)
	go func() { done <- srv.Serve(l) }()
	t.Cleanup(func() {
		_ = srv.Close()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	f.srv, f.addr, f.tap = srv, l.Addr().String(), l
	return f
}

// next waits for the next release (there is no other way to see it happen).
func (f *fixture) next(t *testing.T) release {
	t.Helper()
	select {
	case r := <-f.released:
		return r
	case <-time.After(10 * time.Second):
		t.Fatal("no release")
	}
	return release{}
}

func (f *fixture) none(t *testing.T) {
	t.Helper()
	select {
	case r := <-f.released:
		t.Fatalf("unexpected release %+v", r)
	default:
	}
}

func TestReadReleasesAfterAck(t *testing.T) {
	f := start(t, nil)
	f.srv.Pin("req-1", "engine-req-1", []int32{4, 5, 6})
	res, err := Read(context.Background(), f.addr, Request{EngineID: "engine-a", Key: "req-1", BlockIDs: []int64{4, 5}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if res.Bytes != 2*16*1024 || len(res.BlockIDs) != 2 || res.BlockSize != 16 || res.BytesPerToken != 1024 {
		t.Fatalf("read %+v", res)
	}
	if r := f.next(t); r != (release{"req-1", "engine-req-1", ReasonRead}) {
		t.Fatalf("release %+v", r)
	}
	if f.srv.Pins() != 0 || f.srv.SentBytes() != res.Bytes {
		t.Fatalf("pins %d, sent %d", f.srv.Pins(), f.srv.SentBytes())
	}
	// A pin is read once.
	_, err = Read(context.Background(), f.addr, Request{EngineID: "engine-a", Key: "req-1"}, nil)
	var re *RemoteError
	if !errors.As(err, &re) || re.Field != "remote_request_id" {
		t.Fatalf("second read: %v", err)
	}
	f.none(t)
}

// TestReadPaced: the bytes arrive no faster than the bandwidth allows (a lower bound
// that holds by construction, not a speed measurement).
func TestReadPaced(t *testing.T) {
	f := start(t, func(c *Config) { c.Bandwidth = 4 << 20 }) // 4 MiB/s
	f.srv.Pin("r", "r", []int32{1, 2, 3, 4, 5, 6, 7, 8})     // 8 × 16 KiB = 128 KiB: ≥ 31 ms
	res, err := Read(context.Background(), f.addr, Request{Key: "r"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if min := time.Duration(float64(res.Bytes) / (4 << 20) * float64(time.Second)); res.Duration < min {
		t.Fatalf("%d bytes in %v, faster than the bandwidth allows (%v)", res.Bytes, res.Duration, min)
	}
	f.next(t)
}

func TestReadRefusals(t *testing.T) {
	f := start(t, nil)
	f.srv.Pin("r", "r", []int32{1, 2})
	for _, tc := range []struct {
		name  string
		req   Request
		field string
		msg   string
	}{
		{"engine id", Request{EngineID: "engine-b", Key: "r"}, "remote_engine_id", `"engine-b" is not this engine's`},
		{"unknown request", Request{Key: "x"}, "remote_request_id", `no KV blocks are pinned for "x"`},
		{"no key", Request{}, "remote_request_id", "names no pinned request"},
		{"unknown block", Request{Key: "r", BlockIDs: []int64{1, 9}}, "remote_block_ids", "block 9 is not pinned"},
		{"block twice", Request{Key: "r", BlockIDs: []int64{1, 1}}, "remote_block_ids", "listed twice"},
		{"unknown room", Request{Key: RoomKey(7)}, "bootstrap_room", "room:7"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Read(context.Background(), f.addr, tc.req, nil)
			var re *RemoteError
			if !errors.As(err, &re) || re.Field != tc.field || !strings.Contains(re.Message, tc.msg) {
				t.Fatalf("error %v, want field %s containing %q", err, tc.field, tc.msg)
			}
		})
	}
	// Refusals leave the pin in place.
	f.none(t)
	if f.srv.Pins() != 1 {
		t.Fatal("a refused read dropped the pin")
	}
	// A malformed request line and an unknown op are refused too.
	for _, line := range []string{"{\"op\":\"steal\"}\n", "not json\n", "{\"op\":\"read\",\"extra\":1}\n"} {
		c, err := net.Dial("tcp", f.addr)
		if err != nil {
			t.Fatal(err)
		}
		c.Write([]byte(line))
		buf := make([]byte, 512)
		n, _ := c.Read(buf)
		c.Close()
		if !strings.Contains(string(buf[:n]), `"ok":false`) {
			t.Fatalf("%q answered %q", line, buf[:n])
		}
	}
}

func TestReleaseOp(t *testing.T) {
	f := start(t, nil)
	f.srv.Pin("r", "id", []int32{1})
	if ok, err := Release(context.Background(), f.addr, "engine-a", "r"); err != nil || !ok {
		t.Fatalf("release: %v %v", ok, err)
	}
	if r := f.next(t); r.reason != ReasonReleased || r.requestID != "id" {
		t.Fatalf("release %+v", r)
	}
	if ok, err := Release(context.Background(), f.addr, "", "r"); err != nil || ok {
		t.Fatalf("second release: %v %v", ok, err)
	}
	var re *RemoteError
	if _, err := Release(context.Background(), f.addr, "engine-b", "r"); !errors.As(err, &re) || re.Field != "remote_engine_id" {
		t.Fatalf("release on another engine id: %v", err)
	}
	f.srv.Pin("u", "u", nil)
	if !f.srv.Unpin("u") || f.srv.Unpin("u") {
		t.Fatal("Unpin")
	}
	if r := f.next(t); r.reason != ReasonReleased {
		t.Fatalf("release %+v", r)
	}
	f.srv.Pin("g", "gone", []int32{2})
	if !f.srv.Drop("g", ReasonClientGone) || f.srv.Drop("g", ReasonClientGone) {
		t.Fatal("Drop")
	}
	if r := f.next(t); r != (release{"g", "gone", ReasonClientGone}) {
		t.Fatalf("drop %+v", r)
	}
	f.none(t)
}

func TestTimeoutReleases(t *testing.T) {
	f := start(t, func(c *Config) { c.Timeout = 50 * time.Millisecond })
	f.srv.Pin("r", "id", []int32{1})
	if r := f.next(t); r != (release{"r", "id", ReasonTimeout}) {
		t.Fatalf("release %+v", r)
	}
	if f.srv.Pins() != 0 {
		t.Fatal("pin left after its timeout")
	}
}

// TestReaderLeaves: a reader that leaves in the middle of the transfer, or refuses the
// blocks, makes the server release them.
func TestReaderLeaves(t *testing.T) {
	f := start(t, func(c *Config) { c.Bandwidth = 64 << 10 }) // 64 KiB/s: 2 MiB take 32 s
	blocks := make([]int32, 128)
	for i := range blocks {
		blocks[i] = int32(i)
	}
	f.srv.Pin("r", "id", blocks)
	ctx, cancel := context.WithCancel(context.Background())
	_, err := Read(ctx, f.addr, Request{Key: "r", BlockIDs: seq(128)}, func(Response) error {
		go func() {
			f.tap.await(1, isData) // the reader leaves once the data has begun to flow
			cancel()
		}()
		return nil
	})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled read: %v", err)
	}
	if r := f.next(t); r.reason != ReasonClosed {
		t.Fatalf("release %+v", r)
	}

	f.srv.Pin("s", "id2", []int32{3})
	refuse := errors.New("block size differs")
	if _, err := Read(context.Background(), f.addr, Request{Key: "s"}, func(Response) error { return refuse }); err != refuse {
		t.Fatalf("refused read: %v", err)
	}
	if r := f.next(t); r.reason != ReasonClosed || r.key != "s" {
		t.Fatalf("release %+v", r)
	}
}

func seq(n int) []int64 {
	out := make([]int64, n)
	for i := range out {
		out[i] = int64(i)
	}
	return out
}

// TestRoomWait: an SGLang decode leg may ask before its prefill leg finished; it waits
// for the room. One that leaves first makes the room's pin be released on arrival.
func TestRoomWait(t *testing.T) {
	f := start(t, nil)
	key := RoomKey(1 << 62)
	got := make(chan error, 1)
	go func() {
		res, err := Read(context.Background(), f.addr, Request{Key: key, WaitMillis: 10_000}, nil)
		if err == nil && res.Bytes != 2*16*1024 {
			err = errors.New("wrong size")
		}
		got <- err
	}()
	waitFor(t, func() bool { return f.srv.Waiting() == 1 })
	f.srv.Pin(key, "p", []int32{8, 9})
	if err := <-got; err != nil {
		t.Fatal(err)
	}
	if r := f.next(t); r.reason != ReasonRead {
		t.Fatalf("release %+v", r)
	}

	key = RoomKey(5)
	ctx, cancel := context.WithCancel(context.Background())
	go func() { _, err := Read(ctx, f.addr, Request{Key: key, WaitMillis: 10_000}, nil); got <- err }()
	waitFor(t, func() bool { return f.srv.Waiting() == 1 })
	cancel()
	<-got
	waitFor(t, func() bool { f.srv.mu.Lock(); defer f.srv.mu.Unlock(); _, ok := f.srv.abandoned[key]; return ok })
	f.srv.Pin(key, "p2", []int32{1})
	if r := f.next(t); r != (release{key, "p2", ReasonClosed}) {
		t.Fatalf("release %+v", r)
	}
	if f.srv.Pins() != 0 || f.srv.Waiting() != 0 {
		t.Fatal("an abandoned room stayed pinned or waited for")
	}
}

// waitFor polls a condition set by another goroutine of the server.
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not reached")
		}
		time.Sleep(time.Millisecond)
	}
}

func TestNewServerValidation(t *testing.T) {
	ok := Config{EngineID: "e", BlockSize: 1, BytesPerToken: 1, Timeout: time.Second, Release: func(string, string, Reason) {}}
	for _, tc := range []struct {
		mut  func(*Config)
		want string
	}{
		{func(c *Config) { c.EngineID = "" }, "engine id"},
		{func(c *Config) { c.BlockSize = 0 }, "block size"},
		{func(c *Config) { c.BytesPerToken = 0 }, "bytes per token"},
		{func(c *Config) { c.Bandwidth = -1 }, "bandwidth"},
		{func(c *Config) { c.Bandwidth = 1e-300 }, "bandwidth"},
		{func(c *Config) { c.BytesPerToken = MaxBytesPerToken + 1 }, "bytes per token"},
		{func(c *Config) { c.BytesPerToken = math.MaxInt64 }, "bytes per token"},
		{func(c *Config) { c.BytesPerToken, c.BlockSize = MaxBytesPerToken, 1<<20 }, "too large"},
		{func(c *Config) { c.Keepalive = -time.Second }, "keepalive"},
		{func(c *Config) { c.Timeout = 0 }, "timeout"},
		{func(c *Config) { c.Release = nil }, "release"},
	} {
		c := ok
		tc.mut(&c)
		if _, err := NewServer(c); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("NewServer = %v, want %q", err, tc.want)
		}
	}
}

func TestHandle(t *testing.T) {
	h := Handle{EngineID: "e", Host: "127.0.0.1", Port: 9000, Key: "42", BlockIDs: []int64{3, 4}}
	got, err := DecodeHandle(h.Encode())
	if err != nil || got.Addr() != "127.0.0.1:9000" || got.Key != "42" || len(got.BlockIDs) != 2 {
		t.Fatalf("round trip %+v %v", got, err)
	}
	for _, bad := range []string{"!!", "e30=" /* {} */, "eyJ4IjoxfQ==" /* {"x":1} */} {
		if _, err := DecodeHandle(bad); err == nil {
			t.Errorf("DecodeHandle(%q) accepted", bad)
		}
	}
}

func TestUnpinRequest(t *testing.T) {
	f := start(t, nil)
	f.srv.Pin(RoomKey(3), "rid-1", []int32{1})
	if f.srv.UnpinRequest("rid-2") || !f.srv.UnpinRequest("rid-1") {
		t.Fatal("UnpinRequest")
	}
	if r := f.next(t); r != (release{RoomKey(3), "rid-1", ReasonReleased}) {
		t.Fatalf("release %+v", r)
	}
}

// BenchmarkRead reads 64 blocks of 16 tokens × 128 KiB (128 MiB, a 1,024-token prompt of
// Llama-3.1-8B) over loopback, unpaced: the ceiling of what a configured bandwidth can
// reach on this machine.
func BenchmarkRead(b *testing.B) {
	released := make(chan struct{}, 1)
	srv, err := NewServer(Config{EngineID: "e", BlockSize: 16, BytesPerToken: 128 << 10, Timeout: time.Minute,
		Release: func(string, string, Reason) { released <- struct{}{} }})
	if err != nil {
		b.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	go srv.Serve(l)
	defer srv.Close()
	blocks := make([]int32, 64)
	for i := range blocks {
		blocks[i] = int32(i)
	}
	var bytes int64
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		srv.Pin("r", "r", blocks)
		res, err := Read(context.Background(), l.Addr().String(), Request{Key: "r"}, nil)
		if err != nil {
			b.Fatal(err)
		}
		bytes += res.Bytes
		<-released
	}
	b.ReportMetric(float64(bytes)/b.Elapsed().Seconds()/1e9, "GB/s")
}

// silentServer accepts connections, reads the request line and then, after answer
// (when not nil) is written, sends nothing more: a prefill engine frozen while it holds
// the connection.
func silentServer(t *testing.T, answer []byte) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	var conns []net.Conn
	go func() {
		defer close(done)
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			conns = append(conns, c)
			go func() {
				if _, err := bufio.NewReader(c).ReadSlice('\n'); err == nil && answer != nil {
					_, _ = c.Write(answer)
				}
			}()
		}
	}()
	t.Cleanup(func() {
		_ = l.Close()
		<-done
		for _, c := range conns {
			_ = c.Close()
		}
	})
	return l.Addr().String()
}

// TestReadStalls: a transfer server that accepted the connection and then stops (never
// answers, or stops in the middle of the data) fails the read with ErrStalled after the
// client's progress timeout, instead of holding it forever.
func TestReadStalls(t *testing.T) {
	cl := Client{ProgressTimeout: 100 * time.Millisecond}
	for _, tc := range []struct {
		name   string
		answer string
		want   string
	}{
		{"no answer", "", "answered nothing for 100ms"},
		{"data stops", `{"ok":true,"bytes":1000000,"block_ids":[1],"block_size":16,"kv_bytes_per_token":62500}` + "\n" + "abc",
			"nothing for 100ms after 3 of 1000000 bytes"},
		{"keepalives stop", `{"ok":true,"waiting":true}` + "\n", "answered nothing for 100ms"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var answer []byte
			if tc.answer != "" {
				answer = []byte(tc.answer)
			}
			addr := silentServer(t, answer)
			_, err := cl.Read(context.Background(), addr, Request{Key: "r", WaitMillis: 60_000}, nil)
			if !errors.Is(err, ErrStalled) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Read = %v, want ErrStalled with %q", err, tc.want)
			}
		})
	}
	if _, err := cl.Release(context.Background(), silentServer(t, nil), "", "r"); !errors.Is(err, ErrStalled) {
		t.Fatalf("Release = %v, want ErrStalled", err)
	}
}

// TestRoomWaitKeepalive: a read that waits for its room longer than the client's
// progress timeout is kept alive by the server's keepalive lines, and gets its blocks
// once they are pinned.
func TestRoomWaitKeepalive(t *testing.T) {
	const keepalive = 10 * time.Millisecond
	f := start(t, func(c *Config) { c.Keepalive = keepalive })
	cl := Client{ProgressTimeout: 500 * time.Millisecond}
	key := RoomKey(7)
	got := make(chan error, 1)
	go func() {
		res, err := cl.Read(context.Background(), f.addr, Request{Key: key, WaitMillis: 60_000}, nil)
		if err == nil && res.Bytes != 16*1024 {
			err = errors.New("wrong size")
		}
		got <- err
	}()
	waitFor(t, func() bool { return f.srv.Waiting() == 1 })
	// Two progress timeouts without the pin: the server's keepalive ticker started with
	// the wait, and its n-th line leaves n keepalive periods after that at the earliest.
	if n := int(2 * cl.ProgressTimeout / keepalive); !f.tap.await(n, isKeepalive) {
		t.Fatalf("%d keepalive lines written, want %d", f.tap.count(isKeepalive), n)
	}
	f.srv.Pin(key, "p", []int32{8})
	if err := <-got; err != nil {
		t.Fatal(err)
	}
	if r := f.next(t); r.reason != ReasonRead {
		t.Fatalf("release %+v", r)
	}
}

func TestPaceDelay(t *testing.T) {
	for _, tc := range []struct {
		n    int64
		rate float64
		want time.Duration
	}{
		{1000, 1000, time.Second},
		{1 << 40, 1, math.MaxInt64},
		{math.MaxInt64, 1e6, math.MaxInt64},
	} {
		if got := paceDelay(tc.n, tc.rate); got != tc.want {
			t.Errorf("paceDelay(%d, %g) = %v, want %v", tc.n, tc.rate, got, tc.want)
		}
	}
}

// TestSlowBandwidthKeepsDataFlowing: at a low bandwidth data still goes out in small
// pieces, one per millisecond's worth of the bandwidth (2 bytes at 2,000 bytes/s), each
// due a millisecond after the previous one: far within a reader's progress timeout.
func TestSlowBandwidthKeepsDataFlowing(t *testing.T) {
	f := start(t, func(c *Config) { c.Bandwidth = 2000; c.BlockSize = 1; c.BytesPerToken = 200 }) // 200 bytes: 0.1 s
	f.srv.Pin("r", "id", []int32{1})
	res, err := Read(context.Background(), f.addr, Request{Key: "r"}, nil)
	if err != nil || res.Bytes != 200 {
		t.Fatalf("read %+v: %v", res, err)
	}
	f.tap.mu.Lock()
	defer f.tap.mu.Unlock()
	var pieces []int
	for _, w := range f.tap.writes {
		if isData(w) {
			pieces = append(pieces, len(w))
		}
	}
	if len(pieces) != 100 || slices.ContainsFunc(pieces, func(n int) bool { return n != 2 }) {
		t.Fatalf("200 bytes sent in pieces of %v bytes, want 100 pieces of 2", pieces)
	}
}

// TestReadingCount: a read under way counts in Reading until it ends.
func TestReadingCount(t *testing.T) {
	f := start(t, func(c *Config) { c.Bandwidth = 1 << 20 }) // 1 MiB/s: 128 KiB take 0.125 s
	f.srv.Pin("r", "id", []int32{1, 2, 3, 4, 5, 6, 7, 8})
	_, err := Read(context.Background(), f.addr, Request{Key: "r"}, func(Response) error {
		// The server has answered; the read lasts until this reader acknowledges the data.
		if n := f.srv.Reading(); n != 1 {
			return fmt.Errorf("%d reads under way during one, want 1", n)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if r := f.next(t); r.reason != ReasonRead || f.srv.Reading() != 0 {
		t.Fatalf("release %+v, reading %d", r, f.srv.Reading())
	}
}
