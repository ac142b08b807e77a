package resp

import (
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"

	"github.com/turbine-llm/turbine/kvbm"
)

// Defaults for Options' zero values.
const (
	DefaultMaxConns      = 10000 // redis's maxclients default
	DefaultMaxKeyBytes   = kvbm.DefaultMaxKeyBytes
	DefaultMaxValueBytes = kvbm.DefaultMaxValueBytes // also redis's proto-max-bulk-len default
)

// redisVersion is the redis version the server answers as (HELLO, INFO): the one whose
// replies it reproduces.
const redisVersion = "7.0.15"

// Options configures a Server. Zero values take the defaults above.
type Options struct {
	// Password, when set, must be given with AUTH <password>, AUTH default <password> or
	// HELLO 2 AUTH default <password> before other commands (redis's requirepass).
	Password string
	// MaxConns bounds the open connections; one more is answered redis's "max number of
	// clients reached" error and closed.
	MaxConns int
	// MaxKeyBytes bounds a key (bytes): a longer one gets an -ERR reply, the connection
	// stays open.
	MaxKeyBytes int
	// MaxValueBytes bounds every argument (bytes), redis's proto-max-bulk-len: a longer
	// bulk length is a protocol error and closes the connection.
	MaxValueBytes int64
	// Logger receives connection-level events (debug) and accept errors (error).
	Logger zerolog.Logger
}

// config is the runtime configuration built from Options.
type config struct {
	password    string
	maxConns    int
	maxKeyBytes int
	maxBulk     int64
	log         zerolog.Logger
}

func (o Options) config() *config {
	c := &config{password: o.Password, maxConns: o.MaxConns, maxKeyBytes: o.MaxKeyBytes, maxBulk: o.MaxValueBytes, log: o.Logger}
	if c.maxConns <= 0 {
		c.maxConns = DefaultMaxConns
	}
	if c.maxKeyBytes <= 0 {
		c.maxKeyBytes = DefaultMaxKeyBytes
	}
	if c.maxBulk <= 0 {
		c.maxBulk = DefaultMaxValueBytes
	}
	return c
}

// counters are the server's figures (INFO).
type counters struct {
	conns, totalConns, rejectedConns, commands atomic.Int64
	start                                      time.Time
}

// Server serves a kvbm.Store over RESP2 (docs/reference.md §9.3). It is safe for
// concurrent use; Serve may run on several listeners at once (TCP and Unix).
type Server struct {
	st       blockStore
	cfg      *config
	counters counters
	nextID   atomic.Int64

	mu     sync.Mutex
	closed bool
	lns    []net.Listener
	conns  map[net.Conn]struct{}
	wg     sync.WaitGroup
}

// New returns a server over st.
func New(st *kvbm.Store, o Options) *Server { return newServer(st, o) }

func newServer(st blockStore, o Options) *Server {
	s := &Server{st: st, cfg: o.config(), conns: map[net.Conn]struct{}{}}
	s.counters.start = time.Now()
	return s
}

// ErrServerClosed is Serve's error on a server already closed.
var ErrServerClosed = errors.New("resp: server closed")

// Serve accepts connections on ln and serves each on its own goroutine until Close; it
// then returns nil. Other accept errors end it with that error (temporary ones are
// retried). It closes ln when it returns.
func (s *Server) Serve(ln net.Listener) error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		_ = ln.Close()
		return ErrServerClosed
	}
	s.lns = append(s.lns, ln)
	s.wg.Add(1)
	s.mu.Unlock()
	defer s.wg.Done()
	defer ln.Close()
	var backoff time.Duration
	for {
		c, err := ln.Accept()
		if err != nil {
			if s.isClosed() {
				return nil
			}
			if kvbm.RetryableAccept(err) {
				backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
				s.cfg.log.Warn().Err(err).Dur("retry_in", backoff).Msg("kvbm resp: accept")
				time.Sleep(backoff)
				continue
			}
			s.cfg.log.Error().Err(err).Msg("kvbm resp: accept")
			return err
		}
		backoff = 0
		if !s.track(c) {
			continue
		}
		go s.handle(c)
	}
}

func (s *Server) isClosed() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closed
}

// track registers c, or refuses it (closed server, too many connections).
func (s *Server) track(c net.Conn) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		_ = c.Close()
		return false
	}
	if len(s.conns) >= s.cfg.maxConns {
		s.counters.rejectedConns.Add(1)
		_, _ = c.Write([]byte(errMaxClients + "\r\n"))
		_ = c.Close()
		return false
	}
	s.conns[c] = struct{}{}
	s.wg.Add(1)
	s.counters.conns.Add(1)
	s.counters.totalConns.Add(1)
	return true
}

// handle serves one connection: parse a request, run it, repeat; replies are flushed
// when the parser is about to wait for input (every buffered request answered) or when
// flushAt bytes are pending. A protocol error is answered, then the connection closed.
func (s *Server) handle(c net.Conn) {
	defer func() {
		_ = c.Close()
		s.mu.Lock()
		delete(s.conns, c)
		s.mu.Unlock()
		s.counters.conns.Add(-1)
		s.wg.Done()
	}()
	out := newReplyWriter(c)
	p := NewParser(c)
	p.MaxBulk = s.cfg.maxBulk
	p.BeforeBlock = out.Flush
	sess := &session{
		st: s.st, cfg: s.cfg, out: out, counters: &s.counters,
		id:     s.nextID.Add(1),
		authed: s.cfg.password == "",
	}
	for {
		p.Unauthenticated = !sess.authed
		argv, err := p.Next()
		if err != nil {
			var pe *ProtocolError
			if errors.As(err, &pe) {
				s.cfg.log.Debug().Str("remote", c.RemoteAddr().String()).Str("error", pe.Msg).Msg("kvbm resp: protocol error")
				out.errorLine("-ERR " + pe.Msg)
			}
			_ = out.Flush()
			return
		}
		sess.exec(argv)
		if sess.quitting {
			_ = out.Flush()
			return
		}
		if out.Pending() >= flushAt {
			if out.Flush() != nil {
				return
			}
		}
	}
}

// Addr is the address of the first listener Serve was given; nil before.
func (s *Server) Addr() net.Addr {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.lns) == 0 {
		return nil
	}
	return s.lns[0].Addr()
}

// Close closes the listeners and every connection, and waits for Serve and the
// connections' goroutines to end. The store stays open (it is the caller's).
func (s *Server) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	var first error
	for _, ln := range s.lns {
		if err := ln.Close(); err != nil && first == nil && !errors.Is(err, net.ErrClosed) {
			first = err
		}
	}
	for c := range s.conns {
		_ = c.Close()
	}
	s.mu.Unlock()
	s.wg.Wait()
	return first
}
