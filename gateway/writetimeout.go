package gateway

import (
	"errors"
	"net/http"
	"time"
)

// deadlineWriter gives every write (every writePiece bytes of one) and flush of a
// response a fresh write deadline of timeout (Config.StreamWriteTimeout): a client that
// stops reading while keeping its connection open makes the blocked write fail after
// timeout, the handler sees a write error (the client is gone), and closing the
// Backend's Stream cancels the engine request. net/http clears the deadline once the
// response is finished, before the connection's next request.
//
// Writers that cannot take a deadline (httptest.ResponseRecorder) are written to
// without one.
type deadlineWriter struct {
	http.ResponseWriter
	rc      *http.ResponseController
	timeout time.Duration
	// unsupported is set once SetWriteDeadline answered http.ErrNotSupported.
	unsupported bool
}

// withWriteDeadlines wraps w; timeout ≤ 0 returns w unchanged.
func withWriteDeadlines(w http.ResponseWriter, timeout time.Duration) http.ResponseWriter {
	if timeout <= 0 {
		return w
	}
	return &deadlineWriter{ResponseWriter: w, rc: http.NewResponseController(w), timeout: timeout}
}

// extend moves the write deadline to timeout from now.
func (d *deadlineWriter) extend() {
	if d.unsupported {
		return
	}
	if err := d.rc.SetWriteDeadline(time.Now().Add(d.timeout)); errors.Is(err, http.ErrNotSupported) {
		d.unsupported = true
	}
}

// writePiece is the most one deadline covers: a longer write (a large answer, or a
// stream's frame of many merged tokens) goes in pieces, each with a fresh deadline, so
// that the timeout cuts a client that stopped reading, not one reading a large frame
// slowly.
const writePiece = 64 << 10

func (d *deadlineWriter) Write(p []byte) (int, error) {
	n := 0
	for len(p) > 0 {
		k := min(len(p), writePiece)
		d.extend()
		m, err := d.ResponseWriter.Write(p[:k])
		n += m
		if err != nil {
			return n, err
		}
		p = p[k:]
	}
	return n, nil
}

// FlushError flushes under a fresh deadline (http.ResponseController.Flush uses it).
func (d *deadlineWriter) FlushError() error {
	d.extend()
	return d.rc.Flush()
}

// Flush is http.Flusher's, for callers that assert it.
func (d *deadlineWriter) Flush() { _ = d.FlushError() }

// Unwrap lets http.ResponseController reach the connection's writer.
func (d *deadlineWriter) Unwrap() http.ResponseWriter { return d.ResponseWriter }

// unwrapDeadlines returns the writer under a deadlineWriter (http.MaxBytesReader must
// see net/http's own writer to close the connection after an oversized body).
func unwrapDeadlines(w http.ResponseWriter) http.ResponseWriter {
	if d, ok := w.(*deadlineWriter); ok {
		return d.ResponseWriter
	}
	return w
}
