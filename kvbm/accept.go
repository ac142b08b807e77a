package kvbm

import (
	"errors"
	"net"
	"syscall"
)

// RetryableAccept reports whether a listener's Accept error is passing (a timeout, the
// process or system out of file descriptors, buffers or memory, a connection aborted
// before it was taken): the block manager's protocol servers wait and accept again
// instead of ending, so that a burst of connections cannot take the node's block
// manager off the network.
func RetryableAccept(err error) bool {
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return true
	}
	for _, e := range []error{syscall.EMFILE, syscall.ENFILE, syscall.ENOBUFS, syscall.ENOMEM, syscall.ECONNABORTED} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}
