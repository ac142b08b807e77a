package enginehttp

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"sync"
)

// SSEReader reads the data of Server-Sent Events: the "data:" lines of an event up to
// the blank line that ends it, joined by newlines. Comment lines (":"), other fields and
// events without data are skipped. Not safe for concurrent use.
type SSEReader struct {
	rd   *bufio.Reader
	name string // prefixes errors
	max  int    // bound on one event's data, and on one line
	data []byte // the current event's data, reused from event to event
}

// sseBufferBytes is an SSEReader's buffer: a first frame repeating a long prompt's ids
// is read in one piece (and handed out in place: Next).
const sseBufferBytes = 64 << 10

// sseReaders keeps the buffered readers of released SSEReaders (Release): a stream per
// request would otherwise allocate and clear 64 KiB each.
var sseReaders = sync.Pool{New: func() any { return bufio.NewReaderSize(nil, sseBufferBytes) }}

// errReleased is Next's error after Release.
var errReleased = errors.New("enginehttp: SSE reader used after Release")

// NewSSEReader returns a reader of r's events; name prefixes its errors and
// maxEventBytes bounds one event.
func NewSSEReader(r io.Reader, name string, maxEventBytes int) *SSEReader {
	rd := sseReaders.Get().(*bufio.Reader)
	rd.Reset(r)
	return &SSEReader{rd: rd, name: name, max: maxEventBytes}
}

// Release gives the reader's buffer back for other streams; Next fails after it, and
// what it returned before is no longer valid. Call it from the goroutine that reads,
// once no read is in progress; a reader never released is left to the garbage collector.
func (s *SSEReader) Release() {
	if s.rd == nil {
		return
	}
	s.rd.Reset(nil)
	sseReaders.Put(s.rd)
	s.rd, s.data = nil, nil
}

// Next returns the next event's data, valid until the following call. Errors: the body
// ended, also inside an event ("<name>: stream ended before [DONE]", wrapping
// io.ErrUnexpectedEOF), an event over maxEventBytes, or the transport's error.
func (s *SSEReader) Next() ([]byte, error) {
	if s.rd == nil {
		return nil, errReleased
	}
	s.data = s.data[:0]
	var long []byte // a line longer than the reader's buffer, assembled in pieces
	seen := false   // a non-empty data line was read
	for {
		line, err := s.rd.ReadSlice('\n')
		if err == bufio.ErrBufferFull {
			if len(long)+len(line) > s.max {
				return nil, s.tooLong()
			}
			long = append(long, line...)
			continue
		}
		if long != nil && err == nil {
			line, long = append(long, line...), nil
		}
		if err != nil {
			if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
				return nil, fmt.Errorf("%s: stream ended before [DONE]: %w", s.name, io.ErrUnexpectedEOF)
			}
			return nil, fmt.Errorf("%s: reading the stream: %w", s.name, err)
		}
		l := bytes.TrimRight(line, "\r\n")
		if len(l) == 0 {
			if seen {
				return s.data, nil
			}
			continue
		}
		v, ok := bytes.CutPrefix(l, []byte("data:"))
		if !ok {
			continue // a comment or another field
		}
		v = bytes.TrimPrefix(v, []byte(" "))
		if !seen && len(v) > 0 && len(v) <= s.max && s.blankNext() {
			// One data line, and the blank line ending its event already read from the
			// connection: the data is handed out where it is (the reader's buffer, or
			// the line assembled past it), not copied; capped, so that an append by the
			// caller cannot write over what the reader holds after it.
			return v[:len(v):len(v)], nil
		}
		if seen {
			s.data = append(s.data, '\n')
		}
		if len(s.data)+len(v) > s.max {
			return nil, s.tooLong()
		}
		s.data = append(s.data, v...)
		seen = seen || len(v) > 0
	}
}

// blankNext reports whether the reader's buffer begins with a blank line ("\n" or
// "\r\n"), and if so consumes it. It never reads from the connection, so a slice the
// last ReadSlice returned stays valid.
func (s *SSEReader) blankNext() bool {
	n := s.rd.Buffered()
	if n == 0 {
		return false
	}
	b, _ := s.rd.Peek(min(n, 2))
	switch {
	case b[0] == '\n':
		_, _ = s.rd.Discard(1)
		return true
	case len(b) == 2 && b[0] == '\r' && b[1] == '\n':
		_, _ = s.rd.Discard(2)
		return true
	}
	return false
}

func (s *SSEReader) tooLong() error {
	return fmt.Errorf("%s: stream event longer than %d bytes", s.name, s.max)
}
