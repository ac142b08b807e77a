package trtllm

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
)

// maxFrameBytes bounds one SSE event. A chunk holds one step's token ids; the bound
// guards against a runaway server.
const maxFrameBytes = 16 << 20

// sseReader reads the data of Server-Sent Events: "data:" lines up to a blank line,
// joined by newlines; comment lines (":") and other fields are skipped.
type sseReader struct {
	rd   *bufio.Reader
	data []byte // the current event's data, reused from event to event
}

func newSSEReader(r io.Reader) *sseReader { return &sseReader{rd: bufio.NewReaderSize(r, 64<<10)} }

// next returns the next event's data, valid until the following call. Errors: the body
// ended (io.ErrUnexpectedEOF, also when it ends inside an event), an event over
// maxFrameBytes, or the transport's error.
func (s *sseReader) next() ([]byte, error) {
	s.data = s.data[:0]
	var long []byte // a line longer than the reader's buffer, assembled in pieces
	seen := false
	for {
		line, err := s.rd.ReadSlice('\n')
		if err == bufio.ErrBufferFull {
			if len(long)+len(line) > maxFrameBytes {
				return nil, fmt.Errorf("trtllm: stream event longer than %d bytes", maxFrameBytes)
			}
			long = append(long, line...)
			continue
		}
		if long != nil && err == nil {
			line, long = append(long, line...), nil
		}
		if err != nil {
			if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
				return nil, fmt.Errorf("trtllm: stream ended before [DONE]: %w", io.ErrUnexpectedEOF)
			}
			return nil, fmt.Errorf("trtllm: reading the stream: %w", err)
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
			continue // comment or another field
		}
		v = bytes.TrimPrefix(v, []byte(" "))
		if seen {
			s.data = append(s.data, '\n')
		}
		if len(s.data)+len(v) > maxFrameBytes {
			return nil, fmt.Errorf("trtllm: stream event longer than %d bytes", maxFrameBytes)
		}
		s.data = append(s.data, v...)
		seen = true
	}
}
