package kvevents

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"os"
	"testing"
	"time"

	"github.com/go-zeromq/zmq4"
	"github.com/go-zeromq/zmq4/security/null"
	"github.com/go-zeromq/zmq4/transport"

	"github.com/turbine-llm/turbine/kv"
)

// replayConn reads the bytes already taken from its connection before the rest.
type replayConn struct {
	net.Conn
	r io.Reader
}

func (c replayConn) Read(b []byte) (int, error) { return c.r.Read(b) }

// TestHandshakeAfterCloseIsDropped reproduces the race behind a publisher that never
// re-dialled a restarted consumer: a peer whose connection a socket accepted before it
// closed, and whose ZMTP handshake completes only after, must find that connection
// closed. zmq4 adds such a connection to the closed socket and never serves or closes
// it, so a connecting engine would wait on it for ever instead of re-dialling.
func TestHandshakeAfterCloseIsDropped(t *testing.T) {
	for _, tc := range []struct {
		name string
		peer zmq4.SocketType
		// start opens the socket under test and returns the host:port to dial and a
		// function that closes the socket and returns once it is closed.
		start func(t *testing.T) (addr string, stop func())
	}{
		{"listening subscription", zmq4.Pub, func(t *testing.T) (string, func()) {
			addr := "127.0.0.1:" + freePort(t)
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan struct{})
			go func() {
				defer close(done)
				_ = SubscribeWith(ctx, SubscriberConfig{Endpoint: "tcp://" + addr, Listen: true}, func(kv.Batch) {})
			}()
			stop := func() { cancel(); <-done }
			t.Cleanup(stop)
			return addr, stop
		}},
		{"binding publisher", zmq4.Sub, func(t *testing.T) (string, func()) {
			p, err := NewPublisher(Config{EnableKVCacheEvents: true, Publisher: "zmq", Endpoint: "tcp://*:0"}, 0)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { p.Close() })
			ep, _ := ConsumerEndpoint(p.Endpoint())
			return ep[len("tcp://"):], func() { p.Close() }
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			addr, stop := tc.start(t)
			c := dialWhenListening(t, addr)
			defer c.Close()
			// Deadlines here only bound a broken run.
			if err := c.SetDeadline(time.Now().Add(20 * time.Second)); err != nil {
				t.Fatal(err)
			}
			// The socket writes its greeting first: a byte of it shows the connection
			// was accepted and the handshake is waiting for this end.
			first := make([]byte, 1)
			if _, err := io.ReadFull(c, first); err != nil {
				t.Fatalf("no greeting: %v", err)
			}
			stop()
			if err := c.SetDeadline(time.Now().Add(20 * time.Second)); err != nil {
				t.Fatal(err)
			}
			_, _ = zmq4.Open(replayConn{Conn: c, r: io.MultiReader(bytes.NewReader(first), c)},
				null.Security(), tc.peer, zmq4.SocketIdentity("peer"), false, nil)
			// Whether or not the handshake got through, the closed socket must end the
			// connection; a read that runs into the deadline means it was left open.
			buf := make([]byte, 512)
			for {
				_, err := c.Read(buf)
				if errors.Is(err, os.ErrDeadlineExceeded) {
					t.Fatal("the closed socket left the connection open")
				}
				if err != nil {
					return
				}
			}
		})
	}
}

// dialWhenListening dials addr until its listener is up (nothing signals that).
func dialWhenListening(t *testing.T, addr string) net.Conn {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		c, err := net.Dial("tcp", addr)
		if err == nil {
			return c
		}
		if time.Now().After(deadline) {
			t.Fatalf("dial %s: %v", addr, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// peerClosed reads from c and fails unless the other end closed it. The deadline only
// bounds a broken run.
func peerClosed(t *testing.T, c net.Conn, what string) {
	t.Helper()
	if err := c.SetReadDeadline(time.Now().Add(20 * time.Second)); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Read(make([]byte, 1)); !errors.Is(err, io.EOF) {
		t.Fatalf("%s: read %v, want EOF (the tracked end closed)", what, err)
	}
}

// TestConnSetClosesLateConnections: zmq4's Close closes the connections it knows and
// only then its listener, so a connection accepted in between outlives the socket. A
// closed connSet closes what it holds and, at once, whatever is accepted after.
func TestConnSetClosesLateConnections(t *testing.T) {
	set := newConnSet(false)
	l, err := trackedTransport{inner: transport.New("tcp")}.Listen(set.context(context.Background()), "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	dial := func() net.Conn {
		c, err := net.Dial("tcp", l.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	early := dial()
	s, err := l.Accept()
	if err != nil {
		t.Fatal(err)
	}
	set.closeAll()
	peerClosed(t, early, "connection accepted before closeAll")
	if err := s.Close(); err != nil {
		t.Fatalf("second close: %v, want the first close's nil", err)
	}
	late := dial()
	if c, err := l.Accept(); !errors.Is(err, errSocketClosed) {
		t.Fatalf("accept after closeAll = %v, %v; want errSocketClosed", c, err)
	}
	peerClosed(t, late, "connection accepted after closeAll")
	set.mu.Lock()
	n := len(set.conns)
	set.mu.Unlock()
	if n != 0 {
		t.Fatalf("%d connections still tracked", n)
	}
}

// TestConnSetSignalsLossOfDialled: only the end of the connection made by the latest
// dial signals a loss (which makes a publisher re-dial); an earlier connection ending
// late must not, or the publisher would hold two connections to one consumer.
func TestConnSetSignalsLossOfDialled(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	set := newConnSet(true)
	defer set.closeAll()
	ctx := set.context(context.Background())
	tr := trackedTransport{inner: transport.New("tcp")}
	dial := func() (client, server net.Conn) {
		set.beginDial()
		c, err := tr.Dial(ctx, &net.Dialer{}, l.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		s, err := l.Accept()
		if err != nil {
			t.Fatal(err)
		}
		return c, s
	}
	noLoss := func(what string) {
		t.Helper()
		select {
		case <-set.lost:
			t.Fatalf("loss signalled %s", what)
		default:
		}
	}
	c1, s1 := dial()
	noLoss("for a live connection")
	c2, s2 := dial() // c1 stays open: an earlier connection
	s1.Close()
	if _, err := c1.Read(make([]byte, 1)); err == nil {
		t.Fatal("read from a connection closed by its peer succeeded")
	}
	c1.Close()
	noLoss("when an earlier connection ended")
	s2.Close()
	if _, err := c2.Read(make([]byte, 1)); err == nil {
		t.Fatal("read from a connection closed by its peer succeeded")
	}
	select {
	case <-set.lost:
	default:
		t.Fatal("the dialled connection ended without a loss signal")
	}
	c3, s3 := dial()
	defer s3.Close()
	c3.Close()
	select {
	case <-set.lost:
	default:
		t.Fatal("closing the dialled connection signalled no loss")
	}
}
