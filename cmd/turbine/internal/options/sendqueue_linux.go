package options

import (
	"net"
	"syscall"
)

// tcpNotSentLowat is Linux's TCP_NOTSENT_LOWAT (include/uapi/linux/tcp.h, the same on
// every architecture; package syscall defines it for a few only).
const tcpNotSentLowat = 0x19

// setUnsentLimit sets TCP_NOTSENT_LOWAT on c: writes wait while more than limit bytes
// are queued unsent.
func setUnsentLimit(c *net.TCPConn, limit int) error {
	raw, err := c.SyscallConn()
	if err != nil {
		return err
	}
	var serr error
	if err := raw.Control(func(fd uintptr) {
		serr = syscall.SetsockoptInt(int(fd), syscall.IPPROTO_TCP, tcpNotSentLowat, limit)
	}); err != nil {
		return err
	}
	return serr
}
