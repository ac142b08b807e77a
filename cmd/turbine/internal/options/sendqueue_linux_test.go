package options

import (
	"net"
	"syscall"
	"testing"
)

// TestListenLimitsUnsentBytes: connections accepted by HTTP.Listen's listener hold at
// most DefaultUnsentLimit bytes unsent (TCP_NOTSENT_LOWAT).
func TestListenLimitsUnsentBytes(t *testing.T) {
	o := DefaultHTTP()
	o.Port = 0
	ln, err := o.Listen()
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	client, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	c, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	raw, err := c.(*net.TCPConn).SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var got int
	var gerr error
	if err := raw.Control(func(fd uintptr) {
		got, gerr = syscall.GetsockoptInt(int(fd), syscall.IPPROTO_TCP, tcpNotSentLowat)
	}); err != nil || gerr != nil {
		t.Fatal(err, gerr)
	}
	if got != DefaultUnsentLimit {
		t.Errorf("TCP_NOTSENT_LOWAT = %d, want %d", got, DefaultUnsentLimit)
	}
}
