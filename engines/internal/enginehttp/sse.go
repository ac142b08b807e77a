package enginehttp

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
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

// NewSSEReader returns a reader of r's events; name prefixes its errors and
// maxEventBytes bounds one event.
func NewSSEReader(r io.Reader, name string, maxEventBytes int) *SSEReader {
	return &SSEReader{rd: bufio.NewReaderSize(r, 64<<10), name: name, max: maxEventBytes}
}

// Next returns the next event's data, valid until the following call. Errors: the body
// ended, also inside an event ("<name>: stream ended before [DONE]", wrapping
// io.ErrUnexpectedEOF), an event over maxEventBytes, or the transport's error.
func (s *SSEReader) Next() ([]byte, error) {
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

func (s *SSEReader) tooLong() error {
	return fmt.Errorf("%s: stream event longer than %d bytes", s.name, s.max)
}
