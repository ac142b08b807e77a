package kvevents

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"time"

	"github.com/go-zeromq/zmq4"
	"github.com/go-zeromq/zmq4/transport"

	"github.com/turbine-llm/turbine/kv"
)

// Publisher is the engine side: a ZeroMQ PUB socket sending numbered event batches.
// It binds or connects by vLLM's rule (EngineBinds). Safe for concurrent use.
//
// A connecting publisher re-dials whenever its connection is lost (a restarted
// consumer), as libzmq's connect does; the library's own reconnect option is not used
// because it also fires on bound sockets and races with Close.
type Publisher struct {
	mu     sync.Mutex
	sock   zmq4.Socket
	conns  *connSet
	topic  string
	seq    uint64
	rank   int
	ep     string
	cancel context.CancelFunc
	dialer sync.WaitGroup
	closed bool
}

// NewPublisher opens the PUB socket of cfg (which must be Enabled) for data-parallel
// rank dpRank (0 without data parallelism). A binding endpoint is bound at once (port 0
// or * picks a free port; see Endpoint); a connecting one is dialled in the background
// until it succeeds, and again after every loss, until the publisher is closed.
func NewPublisher(cfg Config, dpRank int) (*Publisher, error) {
	if !cfg.Enabled() {
		return nil, errors.New("kvevents: publisher: events are not enabled in the config")
	}
	if dpRank < 0 {
		return nil, fmt.Errorf("kvevents: publisher: data-parallel rank %d is negative", dpRank)
	}
	scheme, addr, err := splitEndpoint(cfg.Endpoint)
	if err != nil {
		return nil, fmt.Errorf("kvevents: publisher: %w", err)
	}
	binds := EngineBinds(cfg.Endpoint)
	// Only tcp endpoints connect (EngineBinds), so a connecting publisher can always
	// watch its connection.
	conns := newConnSet(!binds)
	ctx, cancel := context.WithCancel(conns.context(context.Background()))
	sock := zmq4.NewPub(ctx, zmq4.WithDialerRetry(100*time.Millisecond), zmq4.WithDialerMaxRetries(-1))
	p := &Publisher{sock: sock, conns: conns, topic: cfg.Topic, rank: dpRank, ep: cfg.Endpoint, cancel: cancel}
	if cfg.HWM > 0 {
		if err := sock.SetOption(zmq4.OptionHWM, cfg.HWM); err != nil {
			_ = p.Close()
			return nil, fmt.Errorf("kvevents: publisher: set hwm: %w", err)
		}
	}
	if binds {
		if err := sock.Listen(trackedEndpoint(scheme, addr)); err != nil {
			_ = p.Close()
			return nil, fmt.Errorf("kvevents: publisher: bind %s: %w", cfg.Endpoint, err)
		}
		if a, ok := sock.Addr().(*net.TCPAddr); ok && scheme == "tcp" {
			// Keep the host as configured (e.g. *), resolve the port.
			host := addr[:strings.LastIndex(addr, ":")]
			p.ep = fmt.Sprintf("tcp://%s:%d", host, a.Port)
		}
		return p, nil
	}
	p.dialer.Add(1)
	go p.dialLoop(ctx, trackedEndpoint(scheme, addr))
	return p, nil
}

// dialLoop connects, waits for the connection to be lost, and connects again, until ctx
// ends.
func (p *Publisher) dialLoop(ctx context.Context, ep string) {
	defer p.dialer.Done()
	for ctx.Err() == nil {
		p.conns.beginDial() // forget losses of earlier connections
		if err := p.sock.Dial(ep); err != nil {
			// A connection whose handshake failed is not closed by zmq4.
			p.conns.closeDialed()
			select {
			case <-ctx.Done():
				return
			case <-time.After(100 * time.Millisecond):
			}
			continue
		}
		select {
		case <-ctx.Done():
			return
		case <-p.conns.lost:
		}
	}
}

// Transports registered with zmq4 that wrap tcp and ipc to give every connection of a
// socket to the connSet found in the socket's context.
const (
	trackedTCP = "kvevents-tcp"
	trackedIPC = "kvevents-ipc"
)

var registerOnce sync.Once

// trackedEndpoint is the zmq4 endpoint of a checked scheme and address (splitEndpoint)
// on the tracked transports.
func trackedEndpoint(scheme, addr string) string {
	registerOnce.Do(func() {
		_ = zmq4.RegisterTransport(trackedTCP, trackedTransport{inner: transport.New("tcp")})
		_ = zmq4.RegisterTransport(trackedIPC, trackedTransport{inner: transport.New("unix")})
	})
	if scheme == "ipc" {
		return trackedIPC + "://" + addr
	}
	return trackedTCP + "://" + addr
}

var errSocketClosed = errors.New("kvevents: socket closed")

// connSet holds every open connection of one socket, so that closing the socket closes
// all of them. zmq4's Close closes the connections it knows, then its listener: a
// connection accepted in between (a peer re-dialling at once, as a connecting engine
// does) is handshaken and kept by the closed socket, which never reads, writes or closes
// it; the peer stays connected to a dead socket and never re-dials. Closing the set
// after the socket closes such stragglers, and a connection made after closeAll is
// closed at once.
//
// For a connecting publisher it also watches the connection made by the last Dial:
// lost is signalled when that connection ends.
type connSet struct {
	mu     sync.Mutex
	closed bool
	conns  map[*trackedConn]struct{}
	dialed *trackedConn
	lost   chan struct{} // nil unless watched
}

type connSetKey struct{}

func newConnSet(watch bool) *connSet {
	s := &connSet{conns: make(map[*trackedConn]struct{})}
	if watch {
		s.lost = make(chan struct{}, 1)
	}
	return s
}

// context returns ctx carrying s, for the socket's context: zmq4 passes the socket's
// context to the transport on Dial and Listen.
func (s *connSet) context(ctx context.Context) context.Context {
	return context.WithValue(ctx, connSetKey{}, s)
}

// add tracks c, or closes it and returns errSocketClosed once the set is closed.
func (s *connSet) add(c net.Conn, dialed bool) (net.Conn, error) {
	tc := &trackedConn{Conn: c, set: s}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		_ = c.Close()
		return nil, errSocketClosed
	}
	s.conns[tc] = struct{}{}
	if dialed {
		s.dialed = tc
	}
	s.mu.Unlock()
	return tc, nil
}

// beginDial forgets the previous dialled connection and any loss already signalled.
func (s *connSet) beginDial() {
	s.mu.Lock()
	s.dialed = nil
	s.mu.Unlock()
	select {
	case <-s.lost:
	default:
	}
}

// closeDialed closes the connection of a failed Dial, if one was made.
func (s *connSet) closeDialed() {
	s.mu.Lock()
	c := s.dialed
	s.dialed = nil
	s.mu.Unlock()
	if c != nil {
		_ = c.Close()
	}
}

// closeAll closes every connection and every later one. Safe to call more than once.
func (s *connSet) closeAll() {
	s.mu.Lock()
	s.closed = true
	cs := make([]*trackedConn, 0, len(s.conns))
	for c := range s.conns {
		cs = append(cs, c)
	}
	s.mu.Unlock()
	for _, c := range cs {
		_ = c.Close()
	}
}

// ended is called once when c fails or closes.
func (s *connSet) ended(c *trackedConn) {
	s.mu.Lock()
	current := s.dialed == c
	s.mu.Unlock()
	if current && s.lost != nil {
		select {
		case s.lost <- struct{}{}:
		default:
		}
	}
}

func (s *connSet) remove(c *trackedConn) {
	s.mu.Lock()
	delete(s.conns, c)
	s.mu.Unlock()
}

type trackedTransport struct{ inner transport.Transport }

func (t trackedTransport) Dial(ctx context.Context, d transport.Dialer, addr string) (net.Conn, error) {
	raw, err := t.inner.Dial(ctx, d, addr)
	if err != nil {
		return nil, err
	}
	c := net.Conn(guardConn(raw))
	s, _ := ctx.Value(connSetKey{}).(*connSet)
	if s == nil {
		return c, nil
	}
	return s.add(c, true)
}

func (t trackedTransport) Listen(ctx context.Context, addr string) (net.Listener, error) {
	l, err := t.inner.Listen(ctx, addr)
	if err != nil {
		return nil, err
	}
	s, _ := ctx.Value(connSetKey{}).(*connSet)
	return trackedListener{Listener: l, set: s}, nil
}

func (t trackedTransport) Addr(ep string) (string, error) { return t.inner.Addr(ep) }

// trackedListener guards every connection it accepts (zmtpGuard) and adds it to set,
// when there is one.
type trackedListener struct {
	net.Listener
	set *connSet
}

func (l trackedListener) Accept() (net.Conn, error) {
	raw, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	c := net.Conn(guardConn(raw))
	if l.set == nil {
		return c, nil
	}
	return l.set.add(c, false)
}

type trackedConn struct {
	net.Conn
	set       *connSet
	endOnce   sync.Once
	closeOnce sync.Once
	closeErr  error
}

func (c *trackedConn) end() { c.endOnce.Do(func() { c.set.ended(c) }) }

func (c *trackedConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	if err != nil {
		c.end()
	}
	return n, err
}

func (c *trackedConn) Write(b []byte) (int, error) {
	n, err := c.Conn.Write(b)
	if err != nil {
		c.end()
	}
	return n, err
}

// Close closes the connection once; later calls return the first result (zmq4 and the
// connSet may both close it).
func (c *trackedConn) Close() error {
	c.closeOnce.Do(func() {
		c.end()
		c.set.remove(c)
		c.closeErr = c.Conn.Close()
	})
	return c.closeErr
}

// Endpoint is the configured endpoint with a bound port resolved (tcp://*:0 becomes
// tcp://*:41234); ConsumerEndpoint turns it into the address a consumer dials.
func (p *Publisher) Endpoint() string { return p.ep }

// Publish sends events as one batch stamped ts, with the next sequence number (the
// first is 0). An empty events list is not sent. Sending never blocks on subscribers;
// with none connected the batch is dropped, as ZeroMQ PUB does.
func (p *Publisher) Publish(ts time.Time, events []kv.Event) error {
	if len(events) == 0 {
		return nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return errors.New("kvevents: publish on a closed publisher")
	}
	b := kv.Batch{
		Seq:              p.seq,
		Timestamp:        float64(ts.UnixNano()) / 1e9,
		DataParallelRank: p.rank,
		Events:           events,
	}
	frames, err := EncodeMessage(p.topic, b)
	if err != nil {
		return err
	}
	if err := p.sock.SendMulti(zmq4.NewMsgFrom(frames...)); err != nil {
		return fmt.Errorf("kvevents: publish seq %d: %w", p.seq, err)
	}
	p.seq++
	return nil
}

// Close closes the socket and all its connections. Safe to call more than once.
func (p *Publisher) Close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil
	}
	p.closed = true
	p.cancel()
	// Before the socket: this also ends a handshake that would hold Dial, and closes at
	// once what the socket accepts while it closes.
	p.conns.closeAll()
	p.dialer.Wait() // no Dial may run while the socket closes
	return p.sock.Close()
}

// SubscriberConfig configures Subscribe.
type SubscriberConfig struct {
	// Endpoint of the engine's publisher, e.g. tcp://127.0.0.1:5557 (see ConsumerEndpoint).
	Endpoint string
	// Topic prefix to subscribe to; "" receives every topic.
	Topic string
	// Listen binds the SUB socket on Endpoint instead of dialling it, for engines that
	// connect (EngineBinds false).
	Listen bool
	// OnError, when set, is told of connection losses and undecodable messages (which
	// are dropped; the gap shows in Batch.Seq). It must not block.
	OnError func(error)
	// RetryMin and RetryMax bound the reconnect back-off (defaults 50 ms and 2 s).
	RetryMin, RetryMax time.Duration
}

// Subscribe receives event batches from endpoint on topic and calls fn for each, in
// order, from one goroutine, until ctx ends; it then returns ctx.Err(). Lost connections
// are re-established with back-off. A restarted engine begins again at sequence 0.
func Subscribe(ctx context.Context, endpoint, topic string, fn func(kv.Batch)) error {
	return SubscribeWith(ctx, SubscriberConfig{Endpoint: endpoint, Topic: topic}, fn)
}

// SubscribeWith is Subscribe with every option. It returns an error at once for an
// invalid endpoint.
func SubscribeWith(ctx context.Context, cfg SubscriberConfig, fn func(kv.Batch)) error {
	if _, _, err := splitEndpoint(cfg.Endpoint); err != nil {
		return fmt.Errorf("kvevents: subscribe: %w", err)
	}
	if fn == nil {
		return errors.New("kvevents: subscribe: nil callback")
	}
	if cfg.RetryMin <= 0 {
		cfg.RetryMin = 50 * time.Millisecond
	}
	if cfg.RetryMax < cfg.RetryMin {
		cfg.RetryMax = 2 * time.Second
		if cfg.RetryMax < cfg.RetryMin {
			cfg.RetryMax = cfg.RetryMin
		}
	}
	report := func(err error) {
		if cfg.OnError != nil && ctx.Err() == nil {
			cfg.OnError(err)
		}
	}
	backoff := cfg.RetryMin
	for {
		received, err := subscribeOnce(ctx, cfg, fn, report)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		report(err)
		if received {
			backoff = cfg.RetryMin
		}
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
		backoff = min(2*backoff, cfg.RetryMax)
	}
}

// subscribeOnce runs one connection until it fails; received reports whether any
// message arrived (which resets the back-off).
func subscribeOnce(ctx context.Context, cfg SubscriberConfig, fn func(kv.Batch), report func(error)) (received bool, err error) {
	scheme, addr, _ := splitEndpoint(cfg.Endpoint) // checked by SubscribeWith
	ep := trackedEndpoint(scheme, addr)
	conns := newConnSet(false)
	sctx, cancel := context.WithCancel(conns.context(ctx))
	// Ending ctx also ends a handshake that would hold Dial.
	stop := context.AfterFunc(sctx, conns.closeAll)
	sock := zmq4.NewSub(sctx, zmq4.WithDialerMaxRetries(0), zmq4.WithDialerTimeout(2*time.Second))
	defer func() {
		stop()
		cancel()
		_ = sock.Close()
		// What the socket accepted while closing: left open, a connecting engine would
		// stay connected to this dead socket and never re-dial.
		conns.closeAll()
	}()
	if err := sock.SetOption(zmq4.OptionSubscribe, cfg.Topic); err != nil {
		return false, fmt.Errorf("kvevents: subscribe %q: %w", cfg.Topic, err)
	}
	if cfg.Listen {
		if err := sock.Listen(ep); err != nil {
			return false, fmt.Errorf("kvevents: listen %s: %w", cfg.Endpoint, err)
		}
	} else if err := sock.Dial(ep); err != nil {
		return false, fmt.Errorf("kvevents: dial %s: %w", cfg.Endpoint, err)
	}
	for {
		msg, err := sock.Recv()
		if err != nil {
			err = fmt.Errorf("kvevents: receive from %s: %w", cfg.Endpoint, err)
			if cfg.Listen && sctx.Err() == nil {
				// One engine's connection ended; the socket keeps listening for the
				// next (closing it here could strand a connection being accepted).
				report(err)
				continue
			}
			return received, err
		}
		received = true
		topic, b, err := DecodeMessage(msg.Frames)
		if err != nil {
			report(fmt.Errorf("%w (from %s)", err, cfg.Endpoint))
			continue
		}
		if !strings.HasPrefix(topic, cfg.Topic) {
			continue
		}
		fn(b)
	}
}
