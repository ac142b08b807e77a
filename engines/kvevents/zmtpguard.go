package kvevents

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"

	"golang.org/x/text/cases"
	"golang.org/x/text/language"
)

// zmtpGreetingLen is the length of a ZMTP 3.x greeting, the first bytes each peer sends.
const zmtpGreetingLen = 64

// maxZMTPFrame bounds the body of one ZMTP frame a connection may announce: the largest
// payload the decoder accepts (MaxPayloadBytes); topic and sequence frames are far smaller.
const maxZMTPFrame = MaxPayloadBytes

// maxZMTPCommand bounds a command frame's body (READY and its metadata, PING, SUBSCRIBE),
// which the guard keeps to check.
const maxZMTPCommand = 64 << 10

// zmtpSocketTypes are the socket types zmq4 knows; a peer naming another makes it panic.
var zmtpSocketTypes = map[string]bool{"PAIR": true, "PUB": true, "SUB": true, "REQ": true, "REP": true,
	"DEALER": true, "ROUTER": true, "PULL": true, "PUSH": true, "XPUB": true, "XSUB": true}

// zmtpGuard watches the ZMTP byte stream one connection reads (docs/reference.md §14, "zmq4
// trusts its peer") and refuses what would make zmq4 panic or exhaust memory, in goroutines of
// its own where no recover can reach:
//   - a frame whose header announces a body over maxZMTPFrame (zmq4 allocates the body at
//     the announced size before reading it: 2⁶² bytes panics in makeslice, gigabytes
//     exhaust the memory);
//   - a READY command whose metadata runs past its end, or that names no Socket-Type or
//     one zmq4 does not know (its metadata parser indexes past the end of the command,
//     and its compatibility check panics on an unknown type, the empty one included);
//   - a command frame over maxZMTPCommand.
//
// After the greeting, each frame is a flags byte (0x02: an 8-byte big-endian size
// follows, else a 1-byte size; 0x04: a command) and its body; a command's body is a
// name (a length byte and the name) and, for READY, properties (a length byte and a
// name, a 4-byte big-endian length and a value).
type zmtpGuard struct {
	greeting int  // greeting bytes still to pass
	inSize   bool // reading a frame's size field
	long     bool // that size field has 8 bytes
	command  bool // the frame is a command, kept in cmd
	sizeBuf  [8]byte
	sizeN    int    // size bytes read so far
	body     uint64 // body bytes still to pass
	cmd      []byte
}

func newZMTPGuard() zmtpGuard { return zmtpGuard{greeting: zmtpGreetingLen} }

// scan follows p, the next bytes read. Errors: a frame announcing more than
// maxZMTPFrame bytes (the stream is unusable from then on).
func (g *zmtpGuard) scan(p []byte) error {
	for len(p) > 0 {
		switch {
		case g.greeting > 0:
			k := min(g.greeting, len(p))
			g.greeting -= k
			p = p[k:]
		case g.body > 0:
			k := min(g.body, uint64(len(p)))
			if g.command {
				g.cmd = append(g.cmd, p[:k]...)
			}
			g.body -= k
			p = p[k:]
			if g.body == 0 && g.command {
				if err := checkZMTPCommand(g.cmd); err != nil {
					return err
				}
			}
		case !g.inSize:
			g.inSize, g.long, g.command, g.sizeN = true, p[0]&0x02 != 0, p[0]&0x04 != 0, 0
			p = p[1:]
		default:
			need := 1
			if g.long {
				need = 8
			}
			k := copy(g.sizeBuf[g.sizeN:need], p)
			g.sizeN += k
			p = p[k:]
			if g.sizeN < need {
				continue
			}
			size := uint64(g.sizeBuf[0])
			if g.long {
				size = binary.BigEndian.Uint64(g.sizeBuf[:])
			}
			if size > maxZMTPFrame {
				return fmt.Errorf("kvevents: peer announced a ZMTP frame of %d bytes, more than the %d accepted", size, maxZMTPFrame)
			}
			if g.command && size > maxZMTPCommand {
				return fmt.Errorf("kvevents: peer announced a ZMTP command of %d bytes, more than the %d accepted", size, maxZMTPCommand)
			}
			g.inSize, g.body, g.cmd = false, size, g.cmd[:0]
			if size == 0 && g.command {
				if err := checkZMTPCommand(nil); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

var errZMTPReady = errors.New("kvevents: peer sent a malformed ZMTP READY command")

// checkZMTPCommand checks one command frame's body: a READY's properties lie within it
// and name a Socket-Type zmq4 knows (the last such property counts, as in zmq4's map).
// Other commands, and bodies too short to hold a name, zmq4 refuses with an error itself.
func checkZMTPCommand(body []byte) error {
	if len(body) == 0 || int(body[0]) > len(body)-1 || string(body[1:1+int(body[0])]) != "READY" {
		return nil
	}
	p := body[1+int(body[0]):]
	sockType, found := "", false
	title := cases.Title(language.Und, cases.NoLower) // zmq4's spelling of a name; a Caser is not shared between goroutines
	for len(p) > 0 {
		klen := int(p[0])
		if 1+klen+4 > len(p) {
			return fmt.Errorf("%w: a property runs past its end", errZMTPReady)
		}
		key := string(p[1 : 1+klen])
		vlen := binary.BigEndian.Uint32(p[1+klen:])
		p = p[1+klen+4:]
		if uint64(vlen) > uint64(len(p)) {
			return fmt.Errorf("%w: a property value runs past its end", errZMTPReady)
		}
		if title.String(key) == "Socket-Type" {
			sockType, found = string(p[:vlen]), true
		}
		p = p[vlen:]
	}
	if !found || !zmtpSocketTypes[sockType] {
		return fmt.Errorf("%w: socket type %q", errZMTPReady, sockType)
	}
	return nil
}

// guardedConn is a connection whose reads pass through a zmtpGuard: the read that
// brings what the guard refuses fails instead and closes the connection, and every read
// after it fails.
type guardedConn struct {
	net.Conn
	guard zmtpGuard
	err   error
}

func guardConn(c net.Conn) *guardedConn { return &guardedConn{Conn: c, guard: newZMTPGuard()} }

func (c *guardedConn) Read(b []byte) (int, error) {
	if c.err != nil {
		return 0, c.err
	}
	n, err := c.Conn.Read(b)
	if gerr := c.guard.scan(b[:n]); gerr != nil {
		// Closed here too: zmq4 drops a connection whose handshake failed without
		// closing it, which would leave the peer connected to nothing.
		c.err = gerr
		_ = c.Conn.Close()
		return 0, gerr
	}
	return n, err
}
