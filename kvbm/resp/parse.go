package resp

import (
	"bytes"
	"errors"
	"io"
)

// Limits of the request parser, as redis 7.0 has them (docs/reference.md §9.3).
const (
	// inlineMaxSize bounds the unparsed bytes of a line that has no terminator yet: an
	// inline command, a "*<n>" or a "$<n>" line (redis's PROTO_INLINE_MAX_SIZE).
	inlineMaxSize = 64 << 10
	// readChunk is how many bytes one read from the connection asks for (redis's
	// PROTO_IOBUF_LEN); the inlineMaxSize check runs after each read, as in redis.
	readChunk = 16 << 10
	// unauthMultibulkMax and unauthBulkMax bound the argument count and an argument's
	// length before a client has authenticated (when a password is set).
	unauthMultibulkMax = 10
	unauthBulkMax      = 16384
	// maxMultibulk is redis's INT_MAX bound on the argument count.
	maxMultibulk = 1<<31 - 1
)

// ProtocolError is a request that cannot be parsed. The server answers "-ERR " + Msg and
// closes the connection, as redis does.
type ProtocolError struct{ Msg string }

func (e *ProtocolError) Error() string { return "resp: " + e.Msg }

// Parser reads RESP2 requests from a byte stream: multibulk frames ("*<n>\r\n" then n
// "$<len>\r\n<bytes>\r\n") and inline commands (a line split on blanks, with redis's
// quoting rules). It follows redis 7.0's networking.c byte for byte, quirks included:
// the two bytes after a bulk are skipped unchecked, a NUL byte before a line's terminator
// hides the terminator, numbers follow string2ll (no '+', no leading zeros).
//
// Each bulk argument is read into its own slice of exactly its length, the bytes beyond
// the buffered ones straight from the source, so a value is copied once, from the socket
// into the slice a store may keep.
type Parser struct {
	src io.Reader
	buf []byte
	r   int // next unparsed byte in buf
	w   int // end of valid bytes in buf
	err error
	// MaxBulk bounds one argument's length in bytes (redis's proto-max-bulk-len): a
	// longer one is a protocol error ("invalid bulk length"). Zero: DefaultMaxBulk.
	MaxBulk int64
	// Unauthenticated turns on redis's limits for a client that must still AUTH (at
	// most 10 arguments of at most 16384 bytes). The server sets it before each Next.
	Unauthenticated bool
	// BeforeBlock, when set, is called before each read from the source, that is when
	// every buffered request has been handled: the server flushes its replies there.
	BeforeBlock func() error
}

// NewParser returns a parser reading from src.
func NewParser(src io.Reader) *Parser {
	return &Parser{src: src, buf: make([]byte, 4*readChunk)}
}

// DefaultMaxBulk is redis's default proto-max-bulk-len, 512 MiB.
const DefaultMaxBulk = 512 << 20

func (p *Parser) maxBulk() int64 {
	if p.MaxBulk > 0 {
		return p.MaxBulk
	}
	return DefaultMaxBulk
}

// Buffered is the number of received bytes not yet parsed.
func (p *Parser) Buffered() int { return p.w - p.r }

// Next returns the next request's arguments (argv[0] is the command name). An empty
// argv (an empty inline line, "*0\r\n", "*-1\r\n") is a request redis ignores. Errors: a
// *ProtocolError, or the source's error (io.EOF at a clean end, io.ErrUnexpectedEOF
// inside a request).
func (p *Parser) Next() ([][]byte, error) {
	if p.r == p.w {
		if err := p.fill(); err != nil {
			return nil, err
		}
	}
	if p.buf[p.r] == '*' {
		return p.multibulk()
	}
	return p.inline()
}

// fill reads at least one more byte into the buffer, compacting or growing it so that
// readChunk bytes fit.
func (p *Parser) fill() error {
	if p.err != nil {
		return p.err
	}
	if p.r > 0 && p.r == p.w {
		p.r, p.w = 0, 0
	}
	if len(p.buf)-p.w < readChunk {
		if p.r > 0 {
			p.w = copy(p.buf, p.buf[p.r:p.w])
			p.r = 0
		}
		if len(p.buf)-p.w < readChunk {
			nb := make([]byte, 2*len(p.buf)+readChunk)
			p.w = copy(nb, p.buf[p.r:p.w])
			p.r = 0
			p.buf = nb
		}
	}
	if p.BeforeBlock != nil {
		if err := p.BeforeBlock(); err != nil {
			p.err = err
			return err
		}
	}
	for {
		n, err := p.src.Read(p.buf[p.w : p.w+readChunk])
		p.w += n
		if n > 0 {
			if err != nil {
				p.err = err
			}
			return nil
		}
		if err != nil {
			p.err = err
			return err
		}
	}
}

// unexpected turns a clean EOF inside a request into io.ErrUnexpectedEOF.
func unexpected(err error) error {
	if errors.Is(err, io.EOF) {
		return io.ErrUnexpectedEOF
	}
	return err
}

// findLine finds c in the unparsed bytes as C's strchr does (a NUL byte ends the search:
// a terminator after it is never found), reading more while it is absent, and reports
// tooBig once more than inlineMaxSize bytes are buffered without it. With need2 the
// terminator must have a byte after it (redis waits for the "\n" after "\r" but never
// checks it). The index returned is relative to p.r.
func (p *Parser) findLine(c byte, need2 bool, tooBig string) (int, error) {
	scanned := 0     // bytes after p.r searched without finding c or a NUL
	blocked := false // a NUL came first: the terminator is never found
	for {
		n := p.w - p.r
		if !blocked {
			b := p.buf[p.r+scanned : p.w]
			i := bytes.IndexByte(b, c)
			end := len(b)
			if i >= 0 {
				end = i
			}
			switch {
			case bytes.IndexByte(b[:end], 0) >= 0:
				blocked = true
			case i >= 0:
				if i += scanned; !need2 || i+1 < n {
					return i, nil
				}
				scanned = i // found; wait for the byte after it
				if err := p.fill(); err != nil {
					return 0, unexpected(err)
				}
				continue
			default:
				scanned = n
			}
		}
		if n > inlineMaxSize {
			return 0, &ProtocolError{tooBig}
		}
		if err := p.fill(); err != nil {
			return 0, unexpected(err)
		}
	}
}

func (p *Parser) multibulk() ([][]byte, error) {
	nl, err := p.findLine('\r', true, "Protocol error: too big mbulk count string")
	if err != nil {
		return nil, err
	}
	n, ok := string2ll(p.buf[p.r+1 : p.r+nl])
	if !ok || n > maxMultibulk {
		return nil, &ProtocolError{"Protocol error: invalid multibulk length"}
	}
	if n > unauthMultibulkMax && p.Unauthenticated {
		return nil, &ProtocolError{"Protocol error: unauthenticated multibulk length"}
	}
	p.r += nl + 2
	if n <= 0 {
		return [][]byte{}, nil
	}
	argv := make([][]byte, 0, min(n, 1024))
	for ; n > 0; n-- {
		nl, err := p.findLine('\r', true, "Protocol error: too big bulk count string")
		if err != nil {
			return nil, err
		}
		if c := p.buf[p.r]; c != '$' {
			return nil, &ProtocolError{"Protocol error: expected '$', got '" + string(sanitize([]byte{c})) + "'"}
		}
		l, ok := string2ll(p.buf[p.r+1 : p.r+nl])
		if !ok || l < 0 || l > p.maxBulk() {
			return nil, &ProtocolError{"Protocol error: invalid bulk length"}
		}
		if l > unauthBulkMax && p.Unauthenticated {
			return nil, &ProtocolError{"Protocol error: unauthenticated bulk length"}
		}
		p.r += nl + 2
		arg, err := p.bulk(int(l))
		if err != nil {
			return nil, unexpected(err)
		}
		argv = append(argv, arg)
	}
	return argv, nil
}

// bulkPrealloc bounds the bytes of a bulk argument allocated before they arrive: a longer
// argument's slice grows as its bytes are read (doubling, the last size exact), so that
// what a connection makes the server hold follows what it sent, not what it announced
// (a "$536870912" line alone would otherwise cost 512 MiB per connection).
const bulkPrealloc = 1 << 20

// bulk reads an argument of n bytes into its own slice, then skips the two bytes after it
// without looking at them (redis does not check them either).
func (p *Parser) bulk(n int) ([]byte, error) {
	arg := make([]byte, min(n, max(bulkPrealloc, p.w-p.r)))
	got := copy(arg, p.buf[p.r:p.w])
	p.r += got
	if got < n {
		if p.BeforeBlock != nil {
			if err := p.BeforeBlock(); err != nil {
				return nil, err
			}
		}
		if p.err != nil {
			return nil, p.err
		}
		for {
			if _, err := io.ReadFull(p.src, arg[got:]); err != nil {
				p.err = err
				return nil, err
			}
			if got = len(arg); got == n {
				break
			}
			grown := make([]byte, min(n, 2*got))
			copy(grown, arg)
			arg = grown
		}
	}
	for p.w-p.r < 2 {
		if err := p.fill(); err != nil {
			return nil, err
		}
	}
	p.r += 2
	return arg, nil
}

func (p *Parser) inline() ([][]byte, error) {
	nl, err := p.findLine('\n', false, "Protocol error: too big inline request")
	if err != nil {
		return nil, err
	}
	line := p.buf[p.r : p.r+nl]
	p.r += nl + 1
	if len(line) > 0 && line[len(line)-1] == '\r' {
		line = line[:len(line)-1]
	}
	argv, ok := splitArgs(line)
	if !ok {
		return nil, &ProtocolError{"Protocol error: unbalanced quotes in request"}
	}
	return argv, nil
}

// string2ll parses a decimal int64 exactly as redis's string2ll: an optional '-', no
// '+', no leading zeros (but "0"), no blanks, at most 20 bytes.
func string2ll(s []byte) (int64, bool) {
	if len(s) == 0 || len(s) >= 21 {
		return 0, false
	}
	if len(s) == 1 && s[0] == '0' {
		return 0, true
	}
	neg := false
	if s[0] == '-' {
		neg = true
		s = s[1:]
		if len(s) == 0 {
			return 0, false
		}
	}
	if s[0] < '1' || s[0] > '9' {
		return 0, false
	}
	var v uint64
	for _, c := range s {
		if c < '0' || c > '9' {
			return 0, false
		}
		d := uint64(c - '0')
		if v > (1<<64-1)/10 {
			return 0, false
		}
		v *= 10
		if v > 1<<64-1-d {
			return 0, false
		}
		v += d
	}
	if neg {
		if v > 1<<63 {
			return 0, false
		}
		return int64(-v), true //nolint:gosec // -v wraps to the intended value, 1<<63 included
	}
	if v > 1<<63-1 {
		return 0, false
	}
	return int64(v), true
}

// isSpace is C's isspace in the C locale.
func isSpace(c byte) bool {
	return c == ' ' || c == '\t' || c == '\n' || c == '\v' || c == '\f' || c == '\r'
}

func isHex(c byte) bool {
	return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F')
}

func hexVal(c byte) byte {
	switch {
	case c >= '0' && c <= '9':
		return c - '0'
	case c >= 'a' && c <= 'f':
		return c - 'a' + 10
	default:
		return c - 'A' + 10
	}
}

// splitArgs splits an inline command as redis's sdssplitargs: blanks separate arguments;
// "double quotes" take \xHH, \n, \r, \t, \b, \a and \<any> escapes; 'single quotes' take
// \'; a closing quote must be followed by a blank or the end. ok is false for unbalanced
// quotes. The line ends at its first NUL byte, as a C string does.
func splitArgs(line []byte) (argv [][]byte, ok bool) {
	if z := bytes.IndexByte(line, 0); z >= 0 {
		line = line[:z]
	}
	at := func(i int) byte { // the C string's byte i, NUL past the end
		if i < len(line) {
			return line[i]
		}
		return 0
	}
	argv = [][]byte{}
	i := 0
	for {
		for i < len(line) && isSpace(line[i]) {
			i++
		}
		if i >= len(line) {
			return argv, true
		}
		inq, insq, done := false, false, false
		cur := []byte{}
		for !done {
			c := at(i)
			switch {
			case inq:
				switch {
				case c == '\\' && at(i+1) == 'x' && isHex(at(i+2)) && isHex(at(i+3)):
					cur = append(cur, hexVal(at(i+2))*16+hexVal(at(i+3)))
					i += 3
				case c == '\\' && at(i+1) != 0:
					i++
					e := at(i)
					switch e {
					case 'n':
						e = '\n'
					case 'r':
						e = '\r'
					case 't':
						e = '\t'
					case 'b':
						e = '\b'
					case 'a':
						e = '\a'
					}
					cur = append(cur, e)
				case c == '"':
					if n := at(i + 1); n != 0 && !isSpace(n) {
						return nil, false
					}
					done = true
				case c == 0:
					return nil, false
				default:
					cur = append(cur, c)
				}
			case insq:
				switch {
				case c == '\\' && at(i+1) == '\'':
					i++
					cur = append(cur, '\'')
				case c == '\'':
					if n := at(i + 1); n != 0 && !isSpace(n) {
						return nil, false
					}
					done = true
				case c == 0:
					return nil, false
				default:
					cur = append(cur, c)
				}
			default:
				switch c {
				case ' ', '\n', '\r', '\t', 0:
					done = true
				case '"':
					inq = true
				case '\'':
					insq = true
				default:
					cur = append(cur, c)
				}
			}
			if at(i) != 0 {
				i++
			}
		}
		argv = append(argv, cur)
	}
}

// sanitize maps \r and \n to blanks, as redis does to every error message it formats.
func sanitize(b []byte) []byte {
	out := make([]byte, len(b))
	for i, c := range b {
		if c == '\r' || c == '\n' {
			c = ' '
		}
		out[i] = c
	}
	return out
}
