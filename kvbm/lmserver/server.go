package lmserver

import (
	"bufio"
	"errors"
	"io"
	"math"
	"net"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/turbine-llm/turbine/kvbm"
)

// Options configure a Server. Zero values take the defaults below.
type Options struct {
	// MaxValueBytes bounds a PUT body (bytes); a larger length closes the connection.
	// Default kvbm.DefaultMaxValueBytes; at most math.MaxInt32 (the length field).
	MaxValueBytes int64
	// MaxConns bounds concurrent connections (LMCache opens one per vLLM worker rank); a
	// connection over the bound is closed at once. Default DefaultMaxConns.
	MaxConns int
	// Logger receives connection-level events (refused v0 clients, malformed frames, store
	// errors). The zero Logger discards.
	Logger zerolog.Logger
}

// DefaultMaxConns is Options.MaxConns's default.
const DefaultMaxConns = 1024

// readBufferBytes is each connection's read buffer. A PUT body larger than what is
// buffered is read straight from the socket into the block's own buffer.
const readBufferBytes = 64 << 10

// Server serves lm:// over a Store (docs/reference.md §9.4). Create it with New, run it
// with Serve, stop it with Close. It is safe for concurrent use.
type Server struct {
	st       *kvbm.Store
	maxValue int64
	maxConns int
	log      zerolog.Logger

	mu     sync.Mutex
	lns    []net.Listener
	conns  map[net.Conn]struct{}
	closed bool
	wg     sync.WaitGroup
}

// New returns a server over st with options o (defaults filled in).
func New(st *kvbm.Store, o Options) *Server {
	if o.MaxValueBytes <= 0 {
		o.MaxValueBytes = kvbm.DefaultMaxValueBytes
	}
	if o.MaxValueBytes > math.MaxInt32 {
		o.MaxValueBytes = math.MaxInt32
	}
	if o.MaxConns <= 0 {
		o.MaxConns = DefaultMaxConns
	}
	return &Server{
		st:       st,
		maxValue: o.MaxValueBytes,
		maxConns: o.MaxConns,
		log:      o.Logger,
		conns:    map[net.Conn]struct{}{},
	}
}

// Serve accepts connections on ln until Close, serving each on its own goroutine. It
// returns nil after Close, or the listener's error (passing ones, such as running out of
// file descriptors, are logged and retried). Serve takes ownership of ln.
func (s *Server) Serve(ln net.Listener) error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		_ = ln.Close()
		return nil
	}
	s.lns = append(s.lns, ln)
	s.mu.Unlock()
	var backoff time.Duration
	for {
		c, err := ln.Accept()
		if err != nil {
			s.mu.Lock()
			closed := s.closed
			s.mu.Unlock()
			if closed {
				return nil
			}
			if kvbm.RetryableAccept(err) {
				backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
				s.log.Warn().Err(err).Dur("retry_in", backoff).Msg("lm:// accept")
				time.Sleep(backoff)
				continue
			}
			return err
		}
		backoff = 0
		s.mu.Lock()
		switch {
		case s.closed:
			s.mu.Unlock()
			_ = c.Close()
			continue
		case len(s.conns) >= s.maxConns:
			s.mu.Unlock()
			s.log.Warn().Str("remote", c.RemoteAddr().String()).Int("max_conns", s.maxConns).
				Msg("lm:// connection refused: too many connections")
			_ = c.Close()
			continue
		}
		s.conns[c] = struct{}{}
		s.wg.Add(1)
		s.mu.Unlock()
		go s.serveConn(c)
	}
}

// Addr is the address of the first listener passed to Serve; nil before that.
func (s *Server) Addr() net.Addr {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.lns) == 0 {
		return nil
	}
	return s.lns[0].Addr()
}

// Close stops accepting, closes every connection and waits for their goroutines. The
// Store stays open (its owner closes it). Later calls return nil.
func (s *Server) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	var err error
	for _, ln := range s.lns {
		if e := ln.Close(); e != nil && err == nil {
			err = e
		}
	}
	for c := range s.conns {
		_ = c.Close()
	}
	s.mu.Unlock()
	s.wg.Wait()
	return err
}

func (s *Server) serveConn(c net.Conn) {
	defer s.wg.Done()
	err := s.handle(c, c)
	// Log before closing, so that the log line precedes the peer's EOF.
	s.mu.Lock()
	closed := s.closed
	s.mu.Unlock()
	if !closed {
		s.logClose(c.RemoteAddr().String(), err)
	}
	_ = c.Close()
	s.mu.Lock()
	delete(s.conns, c)
	s.mu.Unlock()
}

func (s *Server) logClose(remote string, err error) {
	switch {
	case err == nil:
		s.log.Debug().Str("remote", remote).Msg("lm:// client disconnected")
	case errors.Is(err, ErrV0Header):
		s.log.Warn().Str("remote", remote).
			Msg("lm:// client speaks protocol v0 (158-byte header); connection closed: upgrade LMCache to the v1 protocol (186-byte header)")
	case errors.Is(err, io.ErrUnexpectedEOF):
		s.log.Debug().Str("remote", remote).Msg("lm:// connection closed mid-frame")
	default:
		s.log.Warn().Str("remote", remote).Err(err).Msg("lm:// connection closed")
	}
}

// handle serves one connection's requests in order: r is read until EOF or an error; the
// replies go to w (the connection: a GET hit is written with net.Buffers, which is one
// writev on a TCP or Unix socket). nil at a clean EOF between frames; io.ErrUnexpectedEOF
// for a truncated frame; ErrV0Header, ErrBadHeader, ErrBadLength,
// errUnknownBody for framing the server cannot follow; or the socket's error.
func (s *Server) handle(r io.Reader, w io.Writer) error {
	br := bufio.NewReaderSize(r, readBufferBytes)
	var hdr [RequestLen]byte
	out := make([]byte, 0, 4*ReplyLen)
	flush := func() error {
		if len(out) == 0 {
			return nil
		}
		_, err := w.Write(out)
		out = out[:0]
		return err
	}
	for {
		// Small replies are batched while pipelined requests are already buffered.
		if len(out) > 0 && br.Buffered() < RequestLen {
			if err := flush(); err != nil {
				return err
			}
		}
		p, err := br.Peek(versionProbeLen)
		if err != nil {
			if errors.Is(err, io.EOF) {
				if len(p) == 0 {
					return flush()
				}
				err = io.ErrUnexpectedEOF
			}
			return errors.Join(err, flush())
		}
		if IsV0(p) {
			return errors.Join(ErrV0Header, flush())
		}
		if _, err := io.ReadFull(br, hdr[:]); err != nil {
			return errors.Join(eofUnexpected(err), flush())
		}
		req, err := ParseRequest(hdr[:])
		if err != nil {
			return errors.Join(err, flush())
		}
		switch req.Command {
		case CmdPut:
			if int64(req.Length) > s.maxValue {
				return errors.Join(ErrBadLength, flush())
			}
			data, err := readValue(br, int(req.Length))
			if err != nil {
				return errors.Join(eofUnexpected(err), flush())
			}
			if req.Key == "" {
				s.log.Warn().Int32("bytes", req.Length).Msg("lm:// put with an empty key dropped")
				continue
			}
			meta := AppendMeta(make([]byte, 0, MetaLen), req.Length, req.Desc)
			if err := s.st.Put(req.Key, meta, data, 0); err != nil {
				// PUT has no reply: the client learns of the loss on its next GET.
				s.log.Warn().Str("key", req.Key).Int32("bytes", req.Length).Err(err).Msg("lm:// put not stored")
				if errors.Is(err, kvbm.ErrClosed) {
					return errors.Join(err, flush())
				}
			}
		case CmdGet:
			if req.Key == "" {
				out = AppendReply(out, Reply{Code: CodeFail, Desc: defaultDesc})
				continue
			}
			e, err := s.st.Get(req.Key)
			if err != nil || len(e.Data) > math.MaxInt32 {
				if err != nil && !errors.Is(err, kvbm.ErrNotFound) {
					s.log.Warn().Str("key", req.Key).Err(err).Msg("lm:// get failed")
				}
				out = AppendReply(out, Reply{Code: CodeFail, Desc: defaultDesc})
				continue
			}
			d, ok := ParseMeta(e.Meta)
			if !ok {
				d = BinaryDesc(int32(len(e.Data)))
			}
			out = AppendReply(out, Reply{Code: CodeOK, Length: int32(len(e.Data)), Desc: d})
			bufs := net.Buffers{out, e.Data}
			_, err = bufs.WriteTo(w)
			out = out[:0]
			if err != nil {
				return err
			}
		case CmdExist:
			code := CodeFail
			if req.Key != "" && s.st.Exists(req.Key) {
				code = CodeOK
			}
			out = AppendReply(out, Reply{Code: code, Desc: defaultDesc})
		case CmdHealth:
			out = AppendReply(out, Reply{Code: CodeOK, Desc: defaultDesc})
		default: // CmdList and unknown commands
			out = AppendReply(out, Reply{Code: CodeFail, Desc: defaultDesc})
			if req.Length != 0 {
				return errors.Join(errUnknownBody, flush())
			}
		}
	}
}

// valuePrealloc bounds the bytes of a PUT body allocated before they arrive: a longer
// body's slice grows as its bytes are read (doubling, the last size exact), so that what
// a connection makes the server hold follows what it sent, not the length its header
// announced.
const valuePrealloc = 1 << 20

// readValue reads n bytes from r into one slice of exactly n bytes.
func readValue(r io.Reader, n int) ([]byte, error) {
	data := make([]byte, min(n, valuePrealloc))
	got := 0
	for {
		if _, err := io.ReadFull(r, data[got:]); err != nil {
			return nil, err
		}
		if got = len(data); got == n {
			return data, nil
		}
		grown := make([]byte, min(n, 2*got))
		copy(grown, data)
		data = grown
	}
}

// errUnknownBody: a LIST or unknown command announced a body whose framing is unknown.
var errUnknownBody = errors.New("lmserver: unsupported command with a non-zero length")

func eofUnexpected(err error) error {
	if errors.Is(err, io.EOF) {
		return io.ErrUnexpectedEOF
	}
	return err
}
