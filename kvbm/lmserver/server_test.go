package lmserver

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/turbine-llm/turbine/kv"
	"github.com/turbine-llm/turbine/kvbm"
)

// syncBuffer is a log sink safe for the server's goroutines.
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

type fixture struct {
	st   *kvbm.Store
	srv  *Server
	addr string
	log  *syncBuffer
}

func start(t testing.TB, o Options) *fixture {
	t.Helper()
	st, err := kvbm.Open(kvbm.Config{HostBytes: 1 << 30})
	if err != nil {
		t.Fatal(err)
	}
	f := &fixture{st: st, log: &syncBuffer{}}
	o.Logger = zerolog.New(f.log)
	f.srv = New(st, o)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- f.srv.Serve(ln) }()
	f.addr = ln.Addr().String()
	t.Cleanup(func() {
		if err := f.srv.Close(); err != nil {
			t.Error(err)
		}
		if err := <-done; err != nil {
			t.Errorf("Serve returned %v after Close", err)
		}
		_ = st.Close()
	})
	return f
}

func (f *fixture) dial(t testing.TB) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", f.addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	_ = c.SetDeadline(time.Now().Add(20 * time.Second)) // a hang fails instead of blocking
	return c
}

func (f *fixture) client(t testing.TB) *Client {
	t.Helper()
	c, err := Dial(f.addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func readN(t testing.TB, c net.Conn, n int) []byte {
	t.Helper()
	b := make([]byte, n)
	if _, err := io.ReadFull(c, b); err != nil {
		t.Fatalf("reading %d bytes: %v", n, err)
	}
	return b
}

// expectClosed reads until EOF: the server must close without sending anything more.
func expectClosed(t testing.TB, c net.Conn) {
	t.Helper()
	rest, err := io.ReadAll(c)
	if err != nil && !errors.Is(err, net.ErrClosed) && !strings.Contains(err.Error(), "reset") {
		t.Fatalf("waiting for close: %v", err)
	}
	if len(rest) != 0 {
		t.Fatalf("server sent %d more bytes (%x) before closing", len(rest), rest[:min(len(rest), 64)])
	}
}

// pattern returns n seeded bytes: a random 64 KiB tile, repeated, with every 4 KiB page
// stamped with its index and the seed (cheap enough for 32 MiB under the race detector).
func pattern(n int, seed uint64) []byte {
	b := make([]byte, n)
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	tile := min(n, 64<<10)
	for i := 0; i+8 <= tile; i += 8 {
		le.PutUint64(b[i:], rng.Uint64())
	}
	for i := tile; i < n; i *= 2 {
		copy(b[i:], b[:i])
	}
	for p := 0; p+16 <= n; p += 4 << 10 {
		le.PutUint64(b[p:], uint64(p))
		le.PutUint64(b[p+8:], seed)
	}
	return b
}

// TestGoldenExchange drives the server with the golden frames on a raw socket: the
// replies must be the golden reply bytes, and a GET must echo PUT's descriptor.
func TestGoldenExchange(t *testing.T) {
	f := start(t, Options{})
	c := f.dial(t)
	must := func(_ int, err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(c.Write(readGolden(t, "exist_request.bin")))
	if got := readN(t, c, ReplyLen); !bytes.Equal(got, readGolden(t, "miss_reply.bin")) {
		t.Fatalf("EXIST before PUT: %x", got)
	}
	must(c.Write(readGolden(t, "get_request.bin")))
	if got := readN(t, c, ReplyLen); !bytes.Equal(got, readGolden(t, "miss_reply.bin")) {
		t.Fatalf("GET before PUT: %x", got)
	}
	body := pattern(chunkBytes, 1)
	bufs := net.Buffers{readGolden(t, "put_request.bin"), body}
	if _, err := bufs.WriteTo(c); err != nil {
		t.Fatal(err)
	}
	must(c.Write(readGolden(t, "exist_request.bin")))
	if got := readN(t, c, ReplyLen); !bytes.Equal(got, readGolden(t, "exist_reply.bin")) {
		t.Fatalf("EXIST after PUT: %x", got)
	}
	must(c.Write(readGolden(t, "get_request.bin")))
	if got := readN(t, c, ReplyLen); !bytes.Equal(got, readGolden(t, "get_reply.bin")) {
		t.Fatalf("GET reply header: %x", got)
	}
	if got := readN(t, c, chunkBytes); !bytes.Equal(got, body) {
		t.Fatal("GET body differs from PUT body")
	}
	e, err := f.st.Get(goldenKey)
	if err != nil {
		t.Fatal(err)
	}
	if want := AppendMeta(nil, chunkBytes, chunkDesc); !bytes.Equal(e.Meta, want) {
		t.Fatalf("stored meta %x, want %x", e.Meta, want)
	}
}

// TestRoundTripChunk puts and gets a bf16 [2,32,256,1024] chunk (32 MiB) with the client.
func TestRoundTripChunk(t *testing.T) {
	f := start(t, Options{})
	c := f.client(t)
	if err := c.Health(); err != nil {
		t.Fatal(err)
	}
	body := pattern(chunkBytes, 2)
	d := chunkDesc
	d.Location = 1
	if err := c.Put(goldenKey, d, body); err != nil {
		t.Fatal(err)
	}
	gd, got, err := c.Get(goldenKey, nil)
	if err != nil {
		t.Fatal(err)
	}
	if gd != d {
		t.Fatalf("GET desc %+v, want %+v", gd, d)
	}
	if !bytes.Equal(got, body) {
		t.Fatal("GET bytes differ")
	}
	if _, _, err := c.Get("absent", nil); !errors.Is(err, kvbm.ErrNotFound) {
		t.Fatalf("GET absent: %v", err)
	}
	// A block stored without a descriptor (by another protocol) is served as opaque bytes.
	if err := f.st.Put("raw", nil, []byte("hello"), 0); err != nil {
		t.Fatal(err)
	}
	gd, got, err = c.Get("raw", make([]byte, 0, 64))
	if err != nil || string(got) != "hello" || gd != BinaryDesc(5) {
		t.Fatalf("GET raw = %+v %q %v", gd, got, err)
	}
}

// lmcacheKeys returns n chained chunk keys of one rank in LMCache's format
// model@world_size@worker_id@chunk_hash_hex@dtype: each hash covers the previous one.
func lmcacheKeys(model string, world, rank, n int) []string {
	keys := make([]string, n)
	prev := []byte("none")
	for i := range keys {
		h := sha256.Sum256(append(prev, fmt.Sprintf("tokens[%d:%d]", i*256, (i+1)*256)...))
		prev = h[:]
		keys[i] = fmt.Sprintf("%s@%d@%d@%s@bfloat16", model, world, rank, hex.EncodeToString(h[:8]))
	}
	return keys
}

// TestConcurrentRanks: N ranks of one tensor-parallel engine, each on its own connection,
// store and load their shards of the same chunk chain concurrently.
func TestConcurrentRanks(t *testing.T) {
	const ranks, chunks, shard = 4, 8, 256 << 10
	f := start(t, Options{})
	var wg sync.WaitGroup
	errs := make(chan error, ranks)
	for r := 0; r < ranks; r++ {
		c := f.client(t)
		wg.Add(1)
		go func(r int, c *Client) {
			defer wg.Done()
			errs <- func() error {
				keys := lmcacheKeys("Qwen/Qwen3-8B", ranks, r, chunks)
				d := Desc{Fmt: FmtKV2LTD, Dtype: DtypeBF16, Shape: [4]int32{2, 36, 256, shard / (2 * 36 * 256 * 2)}}
				for i, k := range keys {
					if len(k) > KeyLen {
						return fmt.Errorf("key %q over %d bytes", k, KeyLen)
					}
					if ok, err := c.Exists(k); err != nil || ok {
						return fmt.Errorf("rank %d: EXIST %s before PUT = %v, %v", r, k, ok, err)
					}
					if err := c.Put(k, d, pattern(shard, uint64(r*1000+i))); err != nil {
						return err
					}
				}
				buf := make([]byte, shard)
				for i, k := range keys {
					if ok, err := c.Exists(k); err != nil || !ok {
						return fmt.Errorf("rank %d: EXIST %s after PUT = %v, %v", r, k, ok, err)
					}
					gd, got, err := c.Get(k, buf)
					if err != nil {
						return err
					}
					if gd != d || !bytes.Equal(got, pattern(shard, uint64(r*1000+i))) {
						return fmt.Errorf("rank %d: chunk %d differs", r, i)
					}
				}
				return nil
			}()
		}(r, c)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if n := f.st.Stats().Tiers[kv.TierHost].Blocks; n != ranks*chunks {
		t.Fatalf("store holds %d blocks, want %d", n, ranks*chunks)
	}
}

// TestPipelined: requests written back to back are answered in order.
func TestPipelined(t *testing.T) {
	f := start(t, Options{})
	c := f.dial(t)
	var in []byte
	var want []byte
	add := func(r Request, body []byte, reply []byte) {
		in, _ = AppendRequest(in, r)
		in = append(in, body...)
		want = append(want, reply...)
	}
	miss := AppendReply(nil, Reply{Code: CodeFail, Desc: defaultDesc})
	ok := AppendReply(nil, Reply{Code: CodeOK, Desc: defaultDesc})
	d := Desc{Fmt: FmtBinary, Dtype: DtypeU8, Shape: [4]int32{3}}
	for i := 0; i < 50; i++ {
		k := fmt.Sprintf("k%d", i)
		add(Request{Command: CmdExist, Desc: defaultDesc, Key: k}, nil, miss)
		add(Request{Command: CmdPut, Length: 3, Desc: d, Key: k}, []byte{byte(i), 1, 2}, nil)
		add(Request{Command: CmdHealth, Desc: defaultDesc}, nil, ok)
		add(Request{Command: CmdGet, Desc: defaultDesc, Key: k}, nil,
			append(AppendReply(nil, Reply{Code: CodeOK, Length: 3, Desc: d}), byte(i), 1, 2))
		add(Request{Command: CmdExist, Desc: defaultDesc, Key: k}, nil, ok)
	}
	go func() { _, _ = c.Write(in) }()
	if got := readN(t, c, len(want)); !bytes.Equal(got, want) {
		t.Fatal("pipelined replies differ from the expected sequence")
	}
}

// TestBadInput: each case's bytes go on a fresh connection; the server must answer
// exactly `reply`, then close the connection or keep it (checked with HEALTH); another
// connection opened before stays served, and the store keeps its block.
func TestBadInput(t *testing.T) {
	req := func(r Request) []byte {
		b, err := AppendRequest(nil, r)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	setLen := func(b []byte, n uint32) []byte { le.PutUint32(b[4:], n); return b }
	fail := AppendReply(nil, Reply{Code: CodeFail, Desc: defaultDesc})
	const maxValue = 1 << 20
	cases := []struct {
		name   string
		in     []byte
		reply  []byte
		closed bool
		log    string // a substring the server must log
	}{
		{name: "negative length", in: setLen(req(Request{Command: CmdPut, Key: "k"}), 0xfffffff0), closed: true, log: "negative or oversized"},
		{name: "oversized length", in: req(Request{Command: CmdPut, Length: maxValue + 1, Key: "k"}), closed: true, log: "negative or oversized"},
		{name: "v0 client", in: readGolden(t, "v0_exist_request.bin"), closed: true, log: "protocol v0"},
		{name: "truncated header", in: req(Request{Command: CmdExist, Key: "k"})[:100], closed: true},
		{name: "truncated put body", in: append(req(Request{Command: CmdPut, Length: 1000, Key: "torn"}), make([]byte, 999)...), closed: true},
		{name: "garbled fmt", in: func() []byte { b := req(Request{Command: CmdGet, Key: "k"}); le.PutUint32(b[8:], 0xfffffffe); return b }(), closed: true, log: "malformed"},
		{name: "list", in: req(Request{Command: CmdList, Key: "k"}), reply: fail},
		{name: "unknown command", in: req(Request{Command: 9, Key: "k"}), reply: fail},
		{name: "unknown command with a body", in: req(Request{Command: 77, Length: 5, Key: "k"}), reply: fail, closed: true, log: "non-zero length"},
		{name: "empty key get", in: req(Request{Command: CmdGet}), reply: fail},
		{name: "empty key put", in: append(req(Request{Command: CmdPut, Length: 2}), 'h', 'i'), log: "empty key"},
	}
	health := req(Request{Command: CmdHealth, Key: "k"})
	healthOK := AppendReply(nil, Reply{Code: CodeOK, Desc: defaultDesc})
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := start(t, Options{MaxValueBytes: maxValue})
			good := f.client(t)
			if err := good.Put("kept", Desc{}, []byte("v")); err != nil {
				t.Fatal(err)
			}
			c := f.dial(t)
			if _, err := c.Write(tc.in); err != nil {
				t.Fatal(err)
			}
			if strings.HasPrefix(tc.name, "truncated") {
				_ = c.(*net.TCPConn).CloseWrite()
			}
			if len(tc.reply) > 0 {
				if got := readN(t, c, len(tc.reply)); !bytes.Equal(got, tc.reply) {
					t.Fatalf("reply %x, want %x", got, tc.reply)
				}
			}
			if tc.closed {
				expectClosed(t, c)
			} else {
				if _, err := c.Write(health); err != nil {
					t.Fatal(err)
				}
				if got := readN(t, c, ReplyLen); !bytes.Equal(got, healthOK) {
					t.Fatalf("HEALTH after the input: %x", got)
				}
			}
			if tc.log != "" && !strings.Contains(f.log.String(), tc.log) {
				t.Fatalf("log lacks %q:\n%s", tc.log, f.log.String())
			}
			if f.st.Exists("torn") {
				t.Fatal("a truncated PUT was stored")
			}
			if _, got, err := good.Get("kept", nil); err != nil || string(got) != "v" {
				t.Fatalf("other connection after bad input: %q %v", got, err)
			}
		})
	}
}

// TestRandomBytes: seeded random garbage on several connections never stops the server.
func TestRandomBytes(t *testing.T) {
	f := start(t, Options{MaxValueBytes: 1 << 16})
	good := f.client(t)
	rng := rand.New(rand.NewPCG(7, 7))
	for i := 0; i < 20; i++ {
		c := f.dial(t)
		junk := make([]byte, rng.IntN(4*RequestLen))
		for j := range junk {
			junk[j] = byte(rng.Uint32())
		}
		if rng.IntN(2) == 0 && len(junk) >= 12 { // a plausible v1 prefix, random after
			le.PutUint32(junk[8:], uint32(rng.IntN(8)))
		}
		if _, err := c.Write(junk); err != nil {
			t.Fatal(err)
		}
		_ = c.(*net.TCPConn).CloseWrite()
		if _, err := io.Copy(io.Discard, c); err != nil && !strings.Contains(err.Error(), "reset") {
			t.Fatalf("conn %d: %v", i, err)
		}
		if err := good.Health(); err != nil {
			t.Fatalf("after conn %d: %v", i, err)
		}
	}
}

func TestMaxConns(t *testing.T) {
	f := start(t, Options{MaxConns: 1})
	first := f.client(t)
	if err := first.Health(); err != nil { // accepted and counted
		t.Fatal(err)
	}
	second := f.dial(t)
	expectClosed(t, second)
	if !strings.Contains(f.log.String(), "too many connections") {
		t.Fatalf("log: %s", f.log.String())
	}
	if err := first.Health(); err != nil {
		t.Fatal(err)
	}
}

// TestCloseWithOpenConns: Close ends idle and mid-frame connections and Serve returns.
func TestCloseWithOpenConns(t *testing.T) {
	f := start(t, Options{})
	idle := f.client(t)
	if err := idle.Health(); err != nil {
		t.Fatal(err)
	}
	mid := f.dial(t)
	b, _ := AppendRequest(nil, Request{Command: CmdPut, Length: 1 << 20, Key: "k"})
	if _, err := mid.Write(b); err != nil {
		t.Fatal(err)
	}
	if err := f.srv.Close(); err != nil {
		t.Fatal(err)
	}
	if err := idle.Health(); err == nil {
		t.Fatal("HEALTH answered after Close")
	}
	if f.srv.Addr() == nil {
		t.Fatal("Addr nil after Serve")
	}
}
