package options

import "net"

// DefaultUnsentLimit bounds the response bytes the kernel holds unsent for one client
// connection of the OpenAI listener (TCP_NOTSENT_LOWAT, Linux): bytes sent and not yet
// acknowledged are bounded by the client's receive window anyway, but without this
// bound the send buffer of a client that stopped reading fills up to its autotuned
// size (megabytes: minutes of tokens) before a write blocks and --stream-write-timeout
// starts to count. 16 KiB, as common for HTTP/2 servers, is many SSE frames and does not
// limit throughput (the window in flight is not counted).
const DefaultUnsentLimit = 16 << 10

// unsentLimitListener sets the unsent-bytes bound on every accepted TCP connection.
type unsentLimitListener struct {
	net.Listener
	limit int
}

func (l unsentLimitListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if tc, ok := c.(*net.TCPConn); ok {
		// Best effort: a kernel without the option serves the connection as before.
		_ = setUnsentLimit(tc, l.limit)
	}
	return c, err
}
