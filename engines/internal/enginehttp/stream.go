package enginehttp

import (
	"context"
	"errors"
	"io"
	"net/http"

	"github.com/turbine-llm/turbine/engines"
)

// Stream is a streamed answer being read: its Server-Sent Events and the context of its
// request, which Close cancels. Event and Recv are not safe for concurrent use; Close may
// be called from another goroutine.
type Stream struct {
	ctx    context.Context
	cancel context.CancelFunc
	body   io.ReadCloser
	sse    *SSEReader
	err    error // the error that ended the stream (Recv)
}

// Stream sends a request whose 200 answer is an SSE stream, as Submit does, and returns
// the stream; its context is a child of ctx. maxEventBytes bounds one event. The caller
// closes the stream. Errors: Submit's (an answer refusing the request itself is an
// *engines.InvalidRequestError; an error frame in the stream is the caller's to read).
func (c *Client) Stream(ctx context.Context, method, path string, body []byte, hdr http.Header, maxEventBytes int) (*Stream, error) {
	sctx, cancel := context.WithCancel(ctx)
	resp, err := c.Submit(sctx, method, path, body, hdr)
	if err != nil {
		cancel()
		return nil, err
	}
	return &Stream{ctx: sctx, cancel: cancel, body: resp.Body, sse: NewSSEReader(resp.Body, c.name, maxEventBytes)}, nil
}

// Event returns the next event's data (SSEReader.Next).
func (s *Stream) Event() ([]byte, error) { return s.sse.Next() }

// Release gives the stream's read buffer back (SSEReader.Release): call it from the
// goroutine that reads, after its last Event or Recv; the stream is closed first.
func (s *Stream) Release() {
	_ = s.Close()
	s.sse.Release()
}

// Close cancels the request's context and closes the connection (an engine aborts a
// request whose connection closes). Safe to call more than once, and from another
// goroutine than Event and Recv.
func (s *Stream) Close() error {
	s.cancel()
	return s.body.Close()
}

// Recv returns next's chunk, and makes the first error final: once next fails (io.EOF
// included), or the stream's context ends, every later call returns that error without
// calling next. An error other than io.EOF while the context has ended becomes the
// context's error. On the first error it calls closeFn, the engine's Close.
func Recv[C any](s *Stream, next func() (C, error), closeFn func() error) (C, error) {
	var zero C
	if s.err == nil && s.ctx.Err() != nil {
		// Cancelled: chunks still buffered from the connection are not handed out.
		s.err = s.ctx.Err()
		_ = closeFn()
	}
	if s.err != nil {
		return zero, s.err
	}
	ch, err := next()
	if err != nil {
		if s.ctx.Err() != nil && !errors.Is(err, io.EOF) {
			err = s.ctx.Err()
		}
		s.err = err
		_ = closeFn()
	}
	return ch, err
}

// Forward hands a stream's chunks, each converted by conv, to fn in order until the
// chunk that carries a finish reason, the stream's end (io.EOF from recv) or the first
// error, recv's or fn's, which it returns. The caller closes the stream.
func Forward[C any](recv func() (C, error), conv func(C) engines.Chunk, fn func(engines.Chunk) error) error {
	for {
		ch, err := recv()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		out := conv(ch)
		if err := fn(out); err != nil {
			return err
		}
		if out.FinishReason != "" {
			return nil
		}
	}
}
