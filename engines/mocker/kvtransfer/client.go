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

// Read reads the KV blocks req names from the transfer server at addr (host:port).
// check, when not nil, sees the server's answer before the data flows; an error from it
// ends the read (the server then releases the blocks). Cancelling ctx closes the
// connection, which also makes the server release them. Errors: *RemoteError for what
// the server refused, check's error, or a transport error (wrapping the context's error
// when ctx ended).
func Read(ctx context.Context, addr string, req Request, check func(Response) error) (ReadResult, error) {
	req.Op = OpRead
	start := time.Now()
	c, br, resp, err := roundTrip(ctx, addr, req)
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
	buf := make([]byte, 256<<10)
	for res.Bytes < resp.Bytes {
		n, err := br.Read(buf[:min(int64(len(buf)), resp.Bytes-res.Bytes)])
		res.Bytes += int64(n)
		if err != nil {
			if ctx.Err() != nil {
				return res, fmt.Errorf("kvtransfer: reading from %s: %w", addr, ctx.Err())
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
// Errors: *RemoteError (e.g. another engine id), or a transport error.
func Release(ctx context.Context, addr, engineID, key string) (released bool, err error) {
	c, _, resp, err := roundTrip(ctx, addr, Request{Op: OpRelease, EngineID: engineID, Key: key})
	if err != nil {
		return false, err
	}
	_ = c.Close()
	return resp.Released, nil
}

// roundTrip dials addr, sends req and reads the answer line; a refusal is *RemoteError
// (and the connection closed).
func roundTrip(ctx context.Context, addr string, req Request) (net.Conn, *bufio.Reader, Response, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
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
	if _, err := c.Write(encodeLine(req)); err != nil {
		return fail(fmt.Errorf("kvtransfer: sending to %s: %w", addr, err))
	}
	br := bufio.NewReaderSize(c, 256<<10)
	line, err := readLine(br)
	if err != nil {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return fail(fmt.Errorf("kvtransfer: reading the answer of %s: %w", addr, err))
	}
	var resp Response
	if err := json.Unmarshal(line, &resp); err != nil {
		return fail(fmt.Errorf("kvtransfer: malformed answer from %s: %w", addr, err))
	}
	if !resp.OK {
		return fail(&RemoteError{Field: resp.Field, Message: resp.Error})
	}
	if resp.Bytes < 0 {
		return fail(fmt.Errorf("kvtransfer: %s announced %d bytes", addr, resp.Bytes))
	}
	return c, br, resp, nil
}
