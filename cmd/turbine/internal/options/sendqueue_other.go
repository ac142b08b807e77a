//go:build !linux

package options

import "net"

// setUnsentLimit does nothing off Linux: the send buffer bounds what a stalled client
// holds.
func setUnsentLimit(*net.TCPConn, int) error { return nil }
