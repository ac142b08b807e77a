package lmserver

import (
	"bufio"
	"fmt"
	"io"
	"math"
	"net"
	"sync"

	"github.com/turbine-llm/turbine/kvbm"
)

// Client speaks lm:// v1 to a server (Turbine's or LMCache's reference server) the way
// LMCache's lm_connector does: one connection, one request at a time, replies in order.
// It is safe for concurrent use (calls are serialised). After an I/O error the connection
// is closed and every later call fails.
type Client struct {
	mu   sync.Mutex
	conn net.Conn
	br   *bufio.Reader
	buf  []byte // request header scratch
	err  error  // sticky I/O error
}

// Dial connects to an lm:// server at addr ("host:port") over TCP.
func Dial(addr string) (*Client, error) {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		return nil, err
	}
	return NewClient(c), nil
}

// NewClient wraps an established connection.
func NewClient(conn net.Conn) *Client {
	return &Client{conn: conn, br: bufio.NewReaderSize(conn, readBufferBytes), buf: make([]byte, 0, RequestLen)}
}

// Close closes the connection.
func (c *Client) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err == nil {
		c.err = net.ErrClosed
	}
	return c.conn.Close()
}

// Put sends a PUT of data under key with descriptor d (no reply: the protocol has none).
// Errors: ErrKeyTooLong, ErrEmptyKey, ErrBadLength (data over math.MaxInt32 bytes), or
// the connection's error.
func (c *Client) Put(key string, d Desc, data []byte) error {
	if len(data) > math.MaxInt32 {
		return ErrBadLength
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.send(Request{Command: CmdPut, Length: int32(len(data)), Desc: d, Key: key}, data); err != nil {
		return err
	}
	return nil
}

// Get fetches key's block: its descriptor and bytes, read into dst's storage when it is
// large enough (else a new slice). kvbm.ErrNotFound on a miss (a FAIL reply).
func (c *Client) Get(key string, dst []byte) (Desc, []byte, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	rep, err := c.call(Request{Command: CmdGet, Desc: defaultDesc, Key: key})
	if err != nil {
		return Desc{}, nil, err
	}
	if rep.Code != CodeOK {
		return Desc{}, nil, kvbm.ErrNotFound
	}
	n := int(rep.Length)
	if cap(dst) >= n {
		dst = dst[:n]
	} else {
		dst = make([]byte, n)
	}
	if _, err := io.ReadFull(c.br, dst); err != nil {
		return Desc{}, nil, c.fail(err)
	}
	return rep.Desc, dst, nil
}

// Exists reports whether the server holds key (EXIST: 200 yes, 400 no).
func (c *Client) Exists(key string) (bool, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	rep, err := c.call(Request{Command: CmdExist, Desc: defaultDesc, Key: key})
	if err != nil {
		return false, err
	}
	return rep.Code == CodeOK, nil
}

// Health asks the server for its health (HEALTH); nil when it answers 200.
func (c *Client) Health() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	rep, err := c.call(Request{Command: CmdHealth, Desc: defaultDesc, Key: "health"})
	if err != nil {
		return err
	}
	if rep.Code != CodeOK {
		return fmt.Errorf("lmserver: health answered %d", rep.Code)
	}
	return nil
}

// send writes a request header and body (one writev on a socket). Called with mu held.
func (c *Client) send(r Request, body []byte) error {
	if c.err != nil {
		return c.err
	}
	if r.Key == "" {
		return ErrEmptyKey
	}
	hdr, err := AppendRequest(c.buf[:0], r)
	if err != nil {
		return err
	}
	if len(body) == 0 {
		_, err = c.conn.Write(hdr)
	} else {
		bufs := net.Buffers{hdr, body}
		_, err = bufs.WriteTo(c.conn)
	}
	if err != nil {
		return c.fail(err)
	}
	return nil
}

// call sends a body-less request and reads its reply header. Called with mu held.
func (c *Client) call(r Request) (Reply, error) {
	if err := c.send(r, nil); err != nil {
		return Reply{}, err
	}
	var b [ReplyLen]byte
	if _, err := io.ReadFull(c.br, b[:]); err != nil {
		return Reply{}, c.fail(err)
	}
	rep, err := ParseReply(b[:])
	if err != nil {
		return Reply{}, c.fail(err)
	}
	return rep, nil
}

func (c *Client) fail(err error) error {
	if err == io.EOF {
		err = io.ErrUnexpectedEOF
	}
	c.err = err
	_ = c.conn.Close()
	return err
}
