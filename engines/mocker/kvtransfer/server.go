package kvtransfer

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Reason says why a pin ended.
type Reason string

const (
	// ReasonRead: a decode engine read the blocks and acknowledged them.
	ReasonRead Reason = "read"
	// ReasonClosed: the reader's connection ended before its ack (its own client left,
	// or it refused the blocks), or an SGLang room's reader left before the pin came.
	ReasonClosed Reason = "closed"
	// ReasonReleased: an explicit release (OpRelease, or Unpin).
	ReasonReleased Reason = "released"
	// ReasonTimeout: nobody read the blocks within Config.Timeout.
	ReasonTimeout Reason = "timeout"
	// ReasonClientGone: the prefill leg's own client left before the answer that names
	// the blocks reached it, so no decode leg can be told to read them (Drop). A real
	// engine keeps them until its timeout; the mock engine frees them at once.
	ReasonClientGone Reason = "client_gone"
)

// Reasons lists every Reason (metric labels).
var Reasons = []Reason{ReasonRead, ReasonClosed, ReasonReleased, ReasonTimeout, ReasonClientGone}

// Config configures a Server.
type Config struct {
	// EngineID is the id reads must name (vLLM's remote_engine_id); required.
	EngineID string
	// BlockSize is the engine's KV block size in tokens; BytesPerToken the KV cache size
	// of one token in bytes. A block is sent as BlockSize × BytesPerToken bytes.
	BlockSize     int
	BytesPerToken int64
	// Bandwidth paces reads, in bytes per second (already multiplied by the engine's
	// speed-up ratio); 0 or +Inf sends as fast as the connection goes. A finite
	// bandwidth must be at least 1 byte/s.
	Bandwidth float64
	// Timeout is how long a pin waits for its reader before it is released (vLLM's
	// VLLM_NIXL_ABORT_REQUEST_TIMEOUT); also how long an abandoned SGLang room is
	// remembered. Required.
	Timeout time.Duration
	// Release frees a pin's blocks in the engine. It is called exactly once per pin that
	// ends by a read, a closed reader, an OpRelease, Unpin or a timeout, from the
	// goroutine that ended it, with no lock held. Required.
	Release func(key, requestID string, reason Reason)
	// Keepalive is how often a read that waits for its key to be pinned gets a
	// keepalive line (DefaultKeepalive when 0); it must stay well below the readers'
	// Client.ProgressTimeout.
	Keepalive time.Duration
}

// DefaultKeepalive is Config.Keepalive's default: a twentieth of DefaultProgressTimeout.
const DefaultKeepalive = 500 * time.Millisecond

// Server serves reads and releases of pinned KV blocks. Safe for concurrent use.
type Server struct {
	cfg Config

	mu        sync.Mutex
	pins      map[string]*pin
	waiters   map[string]*waiter   // readers waiting for a key to be pinned
	abandoned map[string]time.Time // keys whose waiting reader left: released when pinned
	conns     map[net.Conn]struct{}
	closed    bool
	wg        sync.WaitGroup

	sent atomic.Int64 // KV bytes sent by reads
}

// waiter is closed when its key is pinned; n readers wait on it.
type waiter struct {
	ch chan struct{}
	n  int
}

type pin struct {
	requestID string
	blocks    []int32
	timer     *time.Timer
	reading   bool
}

// NewServer checks cfg and returns a server; Serve starts it.
func NewServer(cfg Config) (*Server, error) {
	switch {
	case cfg.EngineID == "":
		return nil, errors.New("kvtransfer: an engine id is required")
	case cfg.BlockSize < 1:
		return nil, fmt.Errorf("kvtransfer: block size %d must be positive", cfg.BlockSize)
	case cfg.BytesPerToken < 1 || cfg.BytesPerToken > MaxBytesPerToken:
		return nil, fmt.Errorf("kvtransfer: %d KV bytes per token out of range 1-%d", cfg.BytesPerToken, MaxBytesPerToken)
	case int64(cfg.BlockSize) > math.MaxInt64/MaxRequestBytes/cfg.BytesPerToken:
		// A read names at most MaxRequestBytes block ids: its byte count must fit int64.
		return nil, fmt.Errorf("kvtransfer: blocks of %d tokens × %d KV bytes per token are too large", cfg.BlockSize, cfg.BytesPerToken)
	case math.IsNaN(cfg.Bandwidth) || cfg.Bandwidth < 0 || (cfg.Bandwidth > 0 && cfg.Bandwidth < 1):
		return nil, fmt.Errorf("kvtransfer: bandwidth %v bytes/s must be 0 (unpaced) or at least 1", cfg.Bandwidth)
	case cfg.Keepalive < 0:
		return nil, fmt.Errorf("kvtransfer: keepalive %v must not be negative", cfg.Keepalive)
	case cfg.Timeout <= 0:
		return nil, fmt.Errorf("kvtransfer: timeout %v must be positive", cfg.Timeout)
	case cfg.Release == nil:
		return nil, errors.New("kvtransfer: a release function is required")
	}
	if cfg.Keepalive == 0 {
		cfg.Keepalive = DefaultKeepalive
	}
	return &Server{cfg: cfg, pins: map[string]*pin{},
		abandoned: map[string]time.Time{}, conns: map[net.Conn]struct{}{}, waiters: map[string]*waiter{}}, nil
}

// BlockBytes is the size of one block's KV in bytes.
func (s *Server) BlockBytes() int64 { return int64(s.cfg.BlockSize) * s.cfg.BytesPerToken }

// SentBytes is the KV bytes sent by reads so far.
func (s *Server) SentBytes() int64 { return s.sent.Load() }

// Pin registers the blocks a finished prefill leg keeps for its reader under key
// (its request id, or RoomKey for SGLang); requestID is its id in the engine, which
// Config.Release is given. blocks are the ones a reader may read (possibly none: an
// SGLang reader then gets no bytes). Unless read or released first, the pin is released
// after Config.Timeout. A key whose waiting reader already left is released at once
// (ReasonClosed). Pinning a key twice releases the first pin (ReasonReleased).
func (s *Server) Pin(key, requestID string, blocks []int32) {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		s.cfg.Release(key, requestID, ReasonClosed)
		return
	}
	if _, gone := s.abandoned[key]; gone {
		delete(s.abandoned, key)
		s.mu.Unlock()
		s.cfg.Release(key, requestID, ReasonClosed)
		return
	}
	old := s.pins[key]
	if old != nil {
		old.timer.Stop()
	}
	p := &pin{requestID: requestID, blocks: slices.Clone(blocks)}
	p.timer = time.AfterFunc(s.cfg.Timeout, func() { s.expire(key, p) })
	s.pins[key] = p
	if w := s.waiters[key]; w != nil {
		close(w.ch)
		delete(s.waiters, key)
	}
	s.mu.Unlock()
	if old != nil && !old.reading {
		s.cfg.Release(key, old.requestID, ReasonReleased)
	}
}

// Unpin releases key's pin unless a read of it is under way (the read releases it when it
// ends). It reports whether the pin existed and was released now.
func (s *Server) Unpin(key string) bool { return s.Drop(key, ReasonReleased) }

// Drop is Unpin with the reason Config.Release is given (ReasonClientGone: the blocks'
// owner never learned where they are).
func (s *Server) Drop(key string, reason Reason) bool {
	p := s.take(key, nil, false)
	if p == nil {
		return false
	}
	s.cfg.Release(key, p.requestID, reason)
	return true
}

// UnpinRequest releases the pin of the engine request requestID (see Unpin), whatever
// its key; for an engine that aborted a pinned request by its id.
func (s *Server) UnpinRequest(requestID string) bool {
	s.mu.Lock()
	key := ""
	for k, p := range s.pins {
		if p.requestID == requestID {
			key = k
			break
		}
	}
	s.mu.Unlock()
	return key != "" && s.Unpin(key)
}

// Waiting returns how many keys readers wait for (SGLang rooms not pinned yet).
func (s *Server) Waiting() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.waiters)
}

// Reading returns how many pins are being read (their data on its way to a reader).
func (s *Server) Reading() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, p := range s.pins {
		if p.reading {
			n++
		}
	}
	return n
}

// Pins returns how many pins wait for a reader or are being read.
func (s *Server) Pins() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.pins)
}

// take removes key's pin and stops its timer. With want set it removes only that pin;
// a pin being read is removed only when reading is true (the read ending it).
func (s *Server) take(key string, want *pin, reading bool) *pin {
	s.mu.Lock()
	defer s.mu.Unlock()
	p := s.pins[key]
	if p == nil || (want != nil && p != want) || p.reading != reading {
		return nil
	}
	p.timer.Stop()
	delete(s.pins, key)
	return p
}

func (s *Server) expire(key string, p *pin) {
	if s.take(key, p, false) != nil {
		s.cfg.Release(key, p.requestID, ReasonTimeout)
	}
}

// Serve accepts connections on l until Close. It returns nil after Close, else the
// accept error.
func (s *Server) Serve(l net.Listener) error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return l.Close()
	}
	s.conns[listenerConn{l}] = struct{}{}
	s.mu.Unlock()
	for {
		c, err := l.Accept()
		if err != nil {
			s.mu.Lock()
			closed := s.closed
			s.mu.Unlock()
			if closed {
				return nil
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			return fmt.Errorf("kvtransfer: accept: %w", err)
		}
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			_ = c.Close()
			return nil
		}
		s.conns[c] = struct{}{}
		s.wg.Add(1)
		s.mu.Unlock()
		go func() {
			defer s.wg.Done()
			s.serveConn(c)
			s.mu.Lock()
			delete(s.conns, c)
			s.mu.Unlock()
			_ = c.Close()
		}()
	}
}

// listenerConn lets Close close the listener along with the connections.
type listenerConn struct{ net.Listener }

func (listenerConn) Read([]byte) (int, error)         { return 0, net.ErrClosed }
func (listenerConn) Write([]byte) (int, error)        { return 0, net.ErrClosed }
func (listenerConn) LocalAddr() net.Addr              { return nil }
func (listenerConn) RemoteAddr() net.Addr             { return nil }
func (listenerConn) SetDeadline(time.Time) error      { return nil }
func (listenerConn) SetReadDeadline(time.Time) error  { return nil }
func (listenerConn) SetWriteDeadline(time.Time) error { return nil }

// Close stops serving: the listener and every connection are closed (reads under way
// end, releasing their pins), and pins still waiting are dropped without Release (the
// engine is going away). It waits for the connections' goroutines.
func (s *Server) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	for c := range s.conns {
		_ = c.Close()
	}
	for _, p := range s.pins {
		p.timer.Stop()
	}
	for k, w := range s.waiters {
		close(w.ch)
		delete(s.waiters, k)
	}
	s.mu.Unlock()
	s.wg.Wait()
	return nil
}

// requestTimeout bounds how long a connection may take to send its request line, and
// ackTimeout how long the server waits for the ack after the last byte.
const (
	requestTimeout = 10 * time.Second
	ackTimeout     = 30 * time.Second
	writeTimeout   = 30 * time.Second
)

func (s *Server) serveConn(c net.Conn) {
	br := bufio.NewReaderSize(c, 4096)
	_ = c.SetReadDeadline(time.Now().Add(requestTimeout))
	line, err := readLine(br)
	if err != nil {
		return
	}
	_ = c.SetReadDeadline(time.Time{})
	var req Request
	dec := json.NewDecoder(bytes.NewReader(line))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		s.answer(c, Response{Error: "malformed request: " + err.Error()})
		return
	}
	if req.EngineID != "" && req.EngineID != s.cfg.EngineID {
		s.answer(c, Response{Field: "remote_engine_id",
			Error: fmt.Sprintf("engine id %q is not this engine's (%q)", req.EngineID, s.cfg.EngineID)})
		return
	}
	switch req.Op {
	case OpRelease:
		s.answer(c, Response{OK: true, Released: s.Unpin(req.Key)})
	case OpRead:
		s.serveRead(c, br, req)
	default:
		s.answer(c, Response{Error: fmt.Sprintf("unknown op %q (want %q or %q)", req.Op, OpRead, OpRelease)})
	}
}

func (s *Server) answer(c net.Conn, r Response) bool {
	_ = c.SetWriteDeadline(time.Now().Add(writeTimeout))
	_, err := c.Write(encodeLine(r))
	return err == nil
}

// keyField names the kv_transfer_params field a key came from.
func keyField(key string) string {
	if strings.HasPrefix(key, "room:") {
		return "bootstrap_room"
	}
	return "remote_request_id"
}

func (s *Server) serveRead(c net.Conn, br *bufio.Reader, req Request) {
	// The reader's next line is its ack; EOF or anything else before all bytes are sent
	// means it left.
	ended := make(chan bool, 1)
	go func() {
		line, err := readLine(br)
		ended <- err == nil && isAck(line)
	}()
	p, resp, left := s.claim(c, req, ended)
	if left {
		if p != nil {
			s.cfg.Release(req.Key, p.requestID, ReasonClosed)
		}
		return
	}
	if p == nil {
		s.answer(c, resp)
		return
	}
	reason := ReasonClosed
	defer func() {
		s.take(req.Key, p, true)
		s.cfg.Release(req.Key, p.requestID, reason)
	}()
	if !s.answer(c, resp) {
		return
	}
	if !s.send(c, resp.Bytes, ended) {
		return
	}
	t := time.NewTimer(ackTimeout)
	defer t.Stop()
	select {
	case ok := <-ended:
		if ok {
			reason = ReasonRead
		}
	case <-t.C:
	}
}

// claim finds and marks the pin a read names (waiting for it when asked, with a
// keepalive line on c every Config.Keepalive), or returns the error response. left is
// true when the reader left while waiting (or a keepalive could not be written); a pin
// that came meanwhile is then removed and returned for the caller to release.
func (s *Server) claim(c net.Conn, req Request, ended <-chan bool) (p *pin, resp Response, left bool) {
	if req.Key == "" {
		return nil, Response{Field: "remote_request_id", Error: "the request names no pinned request"}, false
	}
	s.mu.Lock()
	p = s.pins[req.Key]
	if p == nil && req.WaitMillis > 0 && !s.closed {
		w := s.waiters[req.Key]
		if w == nil {
			w = &waiter{ch: make(chan struct{})}
			s.waiters[req.Key] = w
		}
		w.n++
		s.mu.Unlock()
		t := time.NewTimer(time.Duration(req.WaitMillis) * time.Millisecond)
		tick := time.NewTicker(s.cfg.Keepalive)
	wait:
		for {
			select {
			case <-w.ch:
				break wait
			case <-t.C:
				break wait
			case <-ended:
				left = true
				break wait
			case <-tick.C:
				if !s.answer(c, Response{OK: true, Waiting: true}) {
					left = true
					break wait
				}
			}
		}
		tick.Stop()
		t.Stop()
		s.mu.Lock()
		if w.n--; w.n == 0 && s.waiters[req.Key] == w {
			delete(s.waiters, req.Key)
		}
		p = s.pins[req.Key]
		if p == nil && left && !s.closed {
			// The reader left before the prefill leg finished: release its pin when it
			// comes. Old marks are dropped after Timeout.
			now := time.Now()
			for k, at := range s.abandoned {
				if now.Sub(at) > s.cfg.Timeout {
					delete(s.abandoned, k)
				}
			}
			s.abandoned[req.Key] = now
		}
	}
	defer s.mu.Unlock()
	switch {
	case p == nil:
		return nil, Response{Field: keyField(req.Key), Error: fmt.Sprintf("no KV blocks are pinned for %q on engine %s (never pinned, already read or released, or timed out)",
			req.Key, s.cfg.EngineID)}, left
	case p.reading:
		return nil, Response{Field: keyField(req.Key), Error: fmt.Sprintf("the KV blocks of %q are already being read", req.Key)}, left
	case left:
		p.timer.Stop()
		delete(s.pins, req.Key)
		return p, Response{}, true
	}
	blocks := req.BlockIDs
	if len(blocks) == 0 {
		for _, b := range p.blocks {
			blocks = append(blocks, int64(b))
		}
	} else {
		seen := make(map[int64]bool, len(blocks))
		for _, b := range blocks {
			if seen[b] {
				return nil, Response{Field: "remote_block_ids", Error: fmt.Sprintf("block %d is listed twice", b)}, false
			}
			seen[b] = true
			if b < math.MinInt32 || b > math.MaxInt32 || !slices.Contains(p.blocks, int32(b)) {
				return nil, Response{Field: "remote_block_ids", Error: fmt.Sprintf("block %d is not pinned for %q on engine %s (%d blocks are)",
					b, req.Key, s.cfg.EngineID, len(p.blocks))}, false
			}
		}
	}
	if int64(len(blocks)) > math.MaxInt64/s.BlockBytes() {
		return nil, Response{Field: "remote_block_ids", Error: fmt.Sprintf("%d blocks of %d bytes are more than a read can carry",
			len(blocks), s.BlockBytes())}, false
	}
	p.reading = true
	p.timer.Stop()
	return p, Response{OK: true, Bytes: int64(len(blocks)) * s.BlockBytes(), BlockIDs: blocks,
		BlockSize: s.cfg.BlockSize, BytesPerToken: s.cfg.BytesPerToken}, false
}

// zeros is the KV data sent (its content does not matter, its size does).
var zeros = make([]byte, 1<<20)

// send writes n bytes paced at the bandwidth: a chunk is written once the time the
// bandwidth allows for all bytes up to its end has passed. It returns false when the
// reader left or a write failed.
func (s *Server) send(c net.Conn, n int64, ended <-chan bool) bool {
	rate := s.cfg.Bandwidth
	paced := rate > 0 && !math.IsInf(rate, 1)
	chunk := int64(len(zeros))
	if paced {
		// About one chunk per millisecond, at most 1 MiB: however low the bandwidth, data
		// keeps arriving well within a reader's progress timeout.
		chunk = max(1, min(chunk, int64(rate/1000)))
	}
	start := time.Now()
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for sent := int64(0); sent < n; {
		k := min(chunk, n-sent)
		if paced {
			due := start.Add(paceDelay(sent+k, rate))
			if d := time.Until(due); d > 0 {
				if timer == nil {
					timer = time.NewTimer(d)
				} else {
					timer.Reset(d)
				}
				select {
				case <-timer.C:
				case <-ended:
					return false
				}
			}
		}
		_ = c.SetWriteDeadline(time.Now().Add(writeTimeout))
		if _, err := c.Write(zeros[:k]); err != nil {
			return false
		}
		sent += k
		s.sent.Add(k)
	}
	return true
}

// paceDelay is how long after the first byte the n-th may leave at rate bytes/s,
// saturating at the longest time.Duration instead of overflowing.
func paceDelay(n int64, rate float64) time.Duration {
	d := float64(n) / rate * float64(time.Second)
	if d >= math.MaxInt64 {
		return math.MaxInt64
	}
	return time.Duration(d)
}

// readLine reads one line of at most MaxRequestBytes, without its newline.
func readLine(br *bufio.Reader) ([]byte, error) {
	var line []byte
	for {
		frag, err := br.ReadSlice('\n')
		line = append(line, frag...)
		if len(line) > MaxRequestBytes {
			return nil, fmt.Errorf("kvtransfer: line longer than %d bytes", MaxRequestBytes)
		}
		if err == nil {
			return line[:len(line)-1], nil
		}
		if !errors.Is(err, bufio.ErrBufferFull) {
			return nil, err
		}
	}
}

func isAck(line []byte) bool {
	var r struct {
		Op string `json:"op"`
	}
	return json.Unmarshal(line, &r) == nil && r.Op == OpAck
}
