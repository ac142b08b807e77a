package kvtransfer

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"time"
)

// Defaults of a Client's timeouts.
const (
	// DefaultConnectTimeout bounds connecting to a transfer port: a prefill engine on
	// the same network accepts at once, while a host that is gone leaves the SYN
	// unanswered for minutes.
	DefaultConnectTimeout = 5 * time.Second
	// DefaultProgressTimeout bounds every wait for the server once connected: its
	// answer line, each of its keepalive lines while a read waits for its blocks to be
	// pinned (sent every DefaultKeepalive), and each piece of the KV data (a paced read
	// sends one about every millisecond). A prefill engine that accepted the connection
	// and then sends nothing for this long is frozen or gone.
	DefaultProgressTimeout = 10 * time.Second
)

// ErrStalled is wrapped by the error of a read or release whose transfer server stopped
// answering: nothing arrived for Client.ProgressTimeout.
var ErrStalled = errors.New("kvtransfer: the transfer server stopped answering")

// Client reads and releases pinned KV blocks. The zero value uses the defaults.
type Client struct {
	// ConnectTimeout bounds connecting (DefaultConnectTimeout when 0).
	ConnectTimeout time.Duration
	// ProgressTimeout bounds each wait for the server once connected
	// (DefaultProgressTimeout when 0); see DefaultProgressTimeout.
	ProgressTimeout time.Duration
}

func (cl Client) connectTimeout() time.Duration {
	if cl.ConnectTimeout > 0 {
		return cl.ConnectTimeout
	}
	return DefaultConnectTimeout
}

func (cl Client) progressTimeout() time.Duration {
	if cl.ProgressTimeout > 0 {
		return cl.ProgressTimeout
	}
	return DefaultProgressTimeout
}

// ReadResult is what a read transferred.
type ReadResult struct {
	// Bytes of KV data received; BlockIDs the blocks they hold (the server's list when
	// the request named none); BlockSize and BytesPerToken the server's.
	Bytes         int64
	BlockIDs      []int64
	BlockSize     int
	BytesPerToken int64
	// Duration from the dial to the last byte.
	Duration time.Duration
}

// Read reads with the default timeouts (Client.Read).
func Read(ctx context.Context, addr string, req Request, check func(Response) error) (ReadResult, error) {
	return Client{}.Read(ctx, addr, req, check)
}

// Release releases with the default timeouts (Client.Release).
func Release(ctx context.Context, addr, engineID, key string) (released bool, err error) {
	return Client{}.Release(ctx, addr, engineID, key)
}

// Read reads the KV blocks req names from the transfer server at addr (host:port).
// check, when not nil, sees the server's answer before the data flows; an error from it
// ends the read (the server then releases the blocks). Cancelling ctx closes the
// connection, which also makes the server release them. Errors: *RemoteError for what
// the server refused, check's error, or a transport error: the connection refused or
// not made within ConnectTimeout, cut, or silent for ProgressTimeout (wrapping
// ErrStalled); it wraps the context's error when ctx ended.
func (cl Client) Read(ctx context.Context, addr string, req Request, check func(Response) error) (ReadResult, error) {
	req.Op = OpRead
	start := time.Now()
	c, br, resp, err := cl.roundTrip(ctx, addr, req)
	if err != nil {
		return ReadResult{}, err
	}
	defer c.Close()
	stop := context.AfterFunc(ctx, func() { _ = c.Close() })
	defer stop()
	res := ReadResult{BlockIDs: resp.BlockIDs, BlockSize: resp.BlockSize, BytesPerToken: resp.BytesPerToken}
	if check != nil {
		if err := check(resp); err != nil {
			return res, err
		}
	}
	progress := cl.progressTimeout()
	buf := make([]byte, 256<<10)
	for res.Bytes < resp.Bytes {
		_ = c.SetReadDeadline(time.Now().Add(progress))
		n, err := br.Read(buf[:min(int64(len(buf)), resp.Bytes-res.Bytes)])
		res.Bytes += int64(n)
		if err != nil {
			switch {
			case ctx.Err() != nil:
				return res, fmt.Errorf("kvtransfer: reading from %s: %w", addr, ctx.Err())
			case isTimeout(err):
				return res, fmt.Errorf("kvtransfer: reading from %s: nothing for %v after %d of %d bytes: %w",
					addr, progress, res.Bytes, resp.Bytes, ErrStalled)
			}
			return res, fmt.Errorf("kvtransfer: reading from %s after %d of %d bytes: %w", addr, res.Bytes, resp.Bytes, err)
		}
	}
	res.Duration = time.Since(start)
	_ = c.SetWriteDeadline(time.Now().Add(writeTimeout))
	if _, err := c.Write(encodeLine(Request{Op: OpAck})); err != nil {
		return res, fmt.Errorf("kvtransfer: acknowledging to %s: %w", addr, err)
	}
	return res, nil
}

// Release asks the transfer server at addr to release key's pinned blocks, naming the
// engine id the caller expects ("" accepts any). released is false when nothing was
// pinned under key (already read, released or timed out): releasing is idempotent.
// Errors: *RemoteError (e.g. another engine id), or a transport error (as Read's).
func (cl Client) Release(ctx context.Context, addr, engineID, key string) (released bool, err error) {
	c, _, resp, err := cl.roundTrip(ctx, addr, Request{Op: OpRelease, EngineID: engineID, Key: key})
	if err != nil {
		return false, err
	}
	_ = c.Close()
	return resp.Released, nil
}

// roundTrip dials addr, sends req and reads the answer line, skipping the keepalive
// lines of a read that waits for its blocks; a refusal is *RemoteError (and the
// connection closed).
func (cl Client) roundTrip(ctx context.Context, addr string, req Request) (net.Conn, *bufio.Reader, Response, error) {
	d := net.Dialer{Timeout: cl.connectTimeout()}
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		if ctx.Err() == nil && isTimeout(err) {
			err = fmt.Errorf("no connection within %v: %w", cl.connectTimeout(), err)
		}
		return nil, nil, Response{}, fmt.Errorf("kvtransfer: connecting to %s: %w", addr, err)
	}
	stop := context.AfterFunc(ctx, func() { _ = c.Close() })
	defer stop()
	fail := func(err error) (net.Conn, *bufio.Reader, Response, error) {
		_ = c.Close()
		if ctx.Err() != nil {
			err = fmt.Errorf("%w (%w)", err, ctx.Err())
		}
		return nil, nil, Response{}, err
	}
	_ = c.SetWriteDeadline(time.Now().Add(writeTimeout))
	if _, err := c.Write(encodeLine(req)); err != nil {
		return fail(fmt.Errorf("kvtransfer: sending to %s: %w", addr, err))
	}
	progress := cl.progressTimeout()
	br := bufio.NewReaderSize(c, 256<<10)
	var resp Response
	for {
		_ = c.SetReadDeadline(time.Now().Add(progress))
		line, err := readLine(br)
		switch {
		case err != nil && ctx.Err() == nil && isTimeout(err):
			return fail(fmt.Errorf("kvtransfer: %s accepted the connection, then answered nothing for %v: %w", addr, progress, ErrStalled))
		case errors.Is(err, io.EOF):
			return fail(fmt.Errorf("kvtransfer: reading the answer of %s: %w", addr, io.ErrUnexpectedEOF))
		case err != nil:
			return fail(fmt.Errorf("kvtransfer: reading the answer of %s: %w", addr, err))
		}
		resp = Response{}
		if err := json.Unmarshal(line, &resp); err != nil {
			return fail(fmt.Errorf("kvtransfer: malformed answer from %s: %w", addr, err))
		}
		if !resp.OK || !resp.Waiting {
			break
		}
	}
	_ = c.SetDeadline(time.Time{})
	if !resp.OK {
		return fail(&RemoteError{Field: resp.Field, Message: resp.Error})
	}
	if resp.Bytes < 0 {
		return fail(fmt.Errorf("kvtransfer: %s announced %d bytes", addr, resp.Bytes))
	}
	return c, br, resp, nil
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}
