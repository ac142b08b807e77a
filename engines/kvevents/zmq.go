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
	ctx, cancel := context.WithCancel(context.Background())
	var w *watch
	if !binds && scheme == "tcp" {
		w = &watch{lost: make(chan struct{}, 1)}
		ctx = context.WithValue(ctx, watchKey{}, w)
	}
	sock := zmq4.NewPub(ctx, zmq4.WithDialerRetry(100*time.Millisecond), zmq4.WithDialerMaxRetries(-1))
	if cfg.HWM > 0 {
		if err := sock.SetOption(zmq4.OptionHWM, cfg.HWM); err != nil {
			cancel()
			_ = sock.Close()
			return nil, fmt.Errorf("kvevents: publisher: set hwm: %w", err)
		}
	}
	p := &Publisher{sock: sock, topic: cfg.Topic, rank: dpRank, ep: cfg.Endpoint, cancel: cancel}
	if binds {
		if err := sock.Listen(cfg.Endpoint); err != nil {
			cancel()
			_ = sock.Close()
			return nil, fmt.Errorf("kvevents: publisher: bind %s: %w", cfg.Endpoint, err)
		}
		if a, ok := sock.Addr().(*net.TCPAddr); ok && scheme == "tcp" {
			// Keep the host as configured (e.g. *), resolve the port.
			host := addr[:strings.LastIndex(addr, ":")]
			p.ep = fmt.Sprintf("tcp://%s:%d", host, a.Port)
		}
		return p, nil
	}
	dialEP := cfg.Endpoint
	if w != nil {
		registerWatchedTCP()
		dialEP = watchedTCP + "://" + addr
	}
	p.dialer.Add(1)
	go p.dialLoop(ctx, dialEP, w)
	return p, nil
}

// dialLoop connects, waits for the connection to be lost, and connects again, until ctx
// ends. w is nil for transports that cannot report losses (one dial only).
func (p *Publisher) dialLoop(ctx context.Context, ep string, w *watch) {
	defer p.dialer.Done()
	for ctx.Err() == nil {
		if w != nil {
			select { // forget losses of earlier connections
			case <-w.lost:
			default:
			}
		}
		if err := p.sock.Dial(ep); err != nil {
			select {
			case <-ctx.Done():
				return
			case <-time.After(100 * time.Millisecond):
			}
			continue
		}
		if w == nil {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-w.lost:
		}
	}
}

// watchedTCP is a zmq4 transport: TCP whose connections report their loss to the watch
// found in the socket's context.
const watchedTCP = "kvevents-tcp"

var registerOnce sync.Once

func registerWatchedTCP() {
	registerOnce.Do(func() {
		_ = zmq4.RegisterTransport(watchedTCP, watchTransport{inner: transport.New("tcp")})
	})
}

type watchKey struct{}

// watch follows the current connection of one publisher.
type watch struct {
	mu   sync.Mutex
	cur  *watchedConn
	lost chan struct{}
}

type watchTransport struct{ inner transport.Transport }

func (t watchTransport) Dial(ctx context.Context, d transport.Dialer, addr string) (net.Conn, error) {
	c, err := t.inner.Dial(ctx, d, addr)
	if err != nil {
		return nil, err
	}
	w, _ := ctx.Value(watchKey{}).(*watch)
	if w == nil {
		return c, nil
	}
	wc := &watchedConn{Conn: c, w: w}
	w.mu.Lock()
	w.cur = wc
	w.mu.Unlock()
	return wc, nil
}

func (t watchTransport) Listen(ctx context.Context, addr string) (net.Listener, error) {
	return t.inner.Listen(ctx, addr)
}

func (t watchTransport) Addr(ep string) (string, error) { return t.inner.Addr(ep) }

type watchedConn struct {
	net.Conn
	w    *watch
	once sync.Once
}

func (c *watchedConn) gone() {
	c.once.Do(func() {
		c.w.mu.Lock()
		current := c.w.cur == c
		c.w.mu.Unlock()
		if current {
			select {
			case c.w.lost <- struct{}{}:
			default:
			}
		}
	})
}

func (c *watchedConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	if err != nil {
		c.gone()
	}
	return n, err
}

func (c *watchedConn) Write(b []byte) (int, error) {
	n, err := c.Conn.Write(b)
	if err != nil {
		c.gone()
	}
	return n, err
}

func (c *watchedConn) Close() error {
	c.gone()
	return c.Conn.Close()
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

// Close closes the socket. Safe to call more than once.
func (p *Publisher) Close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil
	}
	p.closed = true
	p.cancel()
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
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	sock := zmq4.NewSub(sctx, zmq4.WithDialerMaxRetries(0), zmq4.WithDialerTimeout(2*time.Second))
	defer sock.Close()
	if err := sock.SetOption(zmq4.OptionSubscribe, cfg.Topic); err != nil {
		return false, fmt.Errorf("kvevents: subscribe %q: %w", cfg.Topic, err)
	}
	if cfg.Listen {
		if err := sock.Listen(cfg.Endpoint); err != nil {
			return false, fmt.Errorf("kvevents: listen %s: %w", cfg.Endpoint, err)
		}
	} else if err := sock.Dial(cfg.Endpoint); err != nil {
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
