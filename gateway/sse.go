package gateway

import (
	"errors"
	"net/http"
)

// sseWriter writes a Server-Sent Events response in OpenAI's framing: one
// `data: {json}\n\n` frame per chunk, `data: [DONE]\n\n` at the end, flushed after every
// frame. A write error means the client is gone; the caller stops and cancels.
type sseWriter struct {
	w  http.ResponseWriter
	rc *http.ResponseController
	// err is the first write or flush error (the client is gone, or stopped reading for
	// Config.StreamWriteTimeout); every later frame fails with it.
	err error
	// lazy: frames are written without a flush (unflushed says one was), until
	// flushPending; set while a ChunkPoller's chunks are pumped.
	lazy, unflushed bool
}

// startSSE writes the stream's headers (status 200) and flushes them.
func startSSE(w http.ResponseWriter) (*sseWriter, error) {
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no") // stop reverse proxies from buffering the stream
	w.WriteHeader(http.StatusOK)
	s := &sseWriter{w: w, rc: http.NewResponseController(w)}
	return s, s.flush()
}

// data writes v as one JSON frame.
func (s *sseWriter) data(v any) error {
	b, err := encodeJSON(v)
	if err != nil {
		return err
	}
	return s.frame(b)
}

// done writes the terminating frame.
func (s *sseWriter) done() error { return s.frame([]byte("[DONE]")) }

func (s *sseWriter) frame(payload []byte) error {
	if s.err != nil {
		return s.err
	}
	buf := make([]byte, 0, len(payload)+8)
	buf = append(buf, "data: "...)
	buf = append(buf, payload...)
	buf = append(buf, "\n\n"...)
	return s.write(buf)
}

// write writes whole SSE frames (b is not kept) and flushes them unless lazy.
func (s *sseWriter) write(b []byte) error {
	if s.err != nil {
		return s.err
	}
	if _, err := s.w.Write(b); err != nil {
		s.err = err
		return err
	}
	if s.lazy {
		s.unflushed = true
		return nil
	}
	return s.flush()
}

// flushPending flushes the frames written since the last flush, if any.
func (s *sseWriter) flushPending() error {
	if s.err != nil || !s.unflushed {
		return s.err
	}
	return s.flush()
}

func (s *sseWriter) flush() error {
	s.unflushed = false
	if err := s.rc.Flush(); err != nil && !errors.Is(err, http.ErrNotSupported) {
		s.err = err
		return err
	}
	return nil
}
