package resp

import (
	"io"
	"net"
	"strconv"
)

const (
	// bigValue is the size from which a bulk reply's bytes are not copied into the output
	// buffer but handed to the connection as they are (one writev with the buffer).
	bigValue = 16 << 10
	// flushAt is the pending reply size (bytes) from which replies are written out
	// before the input is drained.
	flushAt = 1 << 20
)

// replyWriter batches replies: small ones are appended to a buffer, large bulk values are
// queued by reference (never copied), and Flush writes everything with one writev where
// the connection supports it. Not safe for concurrent use.
type replyWriter struct {
	w       io.Writer
	cur     []byte      // the buffer small replies are appended to
	bufs    net.Buffers // queued buffers and values, in order, ahead of cur
	spare   [][]byte    // buffers to reuse after a flush
	pending int         // bytes queued, cur included
	err     error
}

func newReplyWriter(w io.Writer) *replyWriter {
	return &replyWriter{w: w, cur: make([]byte, 0, 4096)}
}

func (r *replyWriter) raw(b []byte) {
	r.cur = append(r.cur, b...)
	r.pending += len(b)
}

func (r *replyWriter) str(s string) {
	r.cur = append(r.cur, s...)
	r.pending += len(s)
}

// simple writes "+s\r\n".
func (r *replyWriter) simple(s string) { r.str("+" + s + "\r\n") }

// errorLine writes an error reply: msg is the whole line without its "\r\n", its "-CODE"
// prefix included.
func (r *replyWriter) errorLine(msg string) { r.str(msg + "\r\n") }

// integer writes ":n\r\n".
func (r *replyWriter) integer(n int64) {
	start := len(r.cur)
	r.cur = append(r.cur, ':')
	r.cur = strconv.AppendInt(r.cur, n, 10)
	r.cur = append(r.cur, '\r', '\n')
	r.pending += len(r.cur) - start
}

// arrayLen writes "*n\r\n".
func (r *replyWriter) arrayLen(n int) {
	start := len(r.cur)
	r.cur = append(r.cur, '*')
	r.cur = strconv.AppendInt(r.cur, int64(n), 10)
	r.cur = append(r.cur, '\r', '\n')
	r.pending += len(r.cur) - start
}

// null writes the RESP2 null bulk "$-1\r\n".
func (r *replyWriter) null() { r.str("$-1\r\n") }

// bulk writes "$len\r\n<b>\r\n". A large b is queued by reference: it must not change
// until the next Flush (the store's blocks never do).
func (r *replyWriter) bulk(b []byte) {
	start := len(r.cur)
	r.cur = append(r.cur, '$')
	r.cur = strconv.AppendInt(r.cur, int64(len(b)), 10)
	r.cur = append(r.cur, '\r', '\n')
	r.pending += len(r.cur) - start
	if len(b) < bigValue {
		r.raw(b)
	} else {
		r.bufs = append(r.bufs, r.cur, b)
		r.pending += len(b)
		r.cur = r.next()
	}
	r.str("\r\n")
}

// bulkString is bulk for a string.
func (r *replyWriter) bulkString(s string) {
	start := len(r.cur)
	r.cur = append(r.cur, '$')
	r.cur = strconv.AppendInt(r.cur, int64(len(s)), 10)
	r.cur = append(r.cur, '\r', '\n')
	r.cur = append(r.cur, s...)
	r.cur = append(r.cur, '\r', '\n')
	r.pending += len(r.cur) - start
}

func (r *replyWriter) next() []byte {
	if n := len(r.spare); n > 0 {
		b := r.spare[n-1]
		r.spare = r.spare[:n-1]
		return b[:0]
	}
	return make([]byte, 0, 4096)
}

// Pending is the number of bytes queued and not yet written.
func (r *replyWriter) Pending() int { return r.pending }

// Flush writes every queued reply. After an error every later Flush returns it.
func (r *replyWriter) Flush() error {
	if r.err != nil {
		return r.err
	}
	if r.pending == 0 {
		return nil
	}
	var err error
	if len(r.bufs) == 0 {
		_, err = r.w.Write(r.cur)
	} else {
		// Remember the buffers to reuse: WriteTo consumes the slice.
		for i := 0; i < len(r.bufs); i += 2 {
			r.spare = append(r.spare, r.bufs[i])
		}
		all := append(r.bufs, r.cur)
		_, err = all.WriteTo(r.w)
		clear(r.bufs[:cap(r.bufs)])
		r.bufs = r.bufs[:0]
	}
	r.cur = r.cur[:0]
	r.pending = 0
	if err != nil {
		r.err = err
	}
	return err
}
