package resp

import (
	"errors"
	"io"
	"net"
	"os"
	"syscall"
	"testing"
	"time"
)

// failingListener fails its first n Accepts with err, then accepts from the listener.
type failingListener struct {
	net.Listener
	n   int
	err error
}

func (l *failingListener) Accept() (net.Conn, error) {
	if l.n > 0 {
		l.n--
		return nil, &net.OpError{Op: "accept", Net: "tcp", Err: l.err}
	}
	return l.Listener.Accept()
}

// TestServeSurvivesAcceptErrors: running out of file descriptors (more clients than the
// process's limit) or an aborted connection does not stop the server: later clients are
// served. Another accept error ends Serve with it.
func TestServeSurvivesAcceptErrors(t *testing.T) {
	for _, tc := range []struct {
		name   string
		err    error
		served bool
	}{
		{"EMFILE", os.NewSyscallError("accept4", syscall.EMFILE), true},
		{"ENFILE", os.NewSyscallError("accept4", syscall.ENFILE), true},
		{"ECONNABORTED", os.NewSyscallError("accept4", syscall.ECONNABORTED), true},
		{"other", errors.New("listener broken"), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			srv := New(newStore(t), Options{})
			done := make(chan error, 1)
			go func() { done <- srv.Serve(&failingListener{Listener: ln, n: 3, err: tc.err}) }()
			defer srv.Close()
			if !tc.served {
				if err := <-done; err == nil {
					t.Fatal("Serve returned nil after a fatal accept error")
				}
				return
			}
			c, err := net.Dial("tcp", ln.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			_ = c.SetDeadline(time.Now().Add(10 * time.Second))
			if _, err := c.Write([]byte("PING\r\n")); err != nil {
				t.Fatal(err)
			}
			got := make([]byte, 7)
			_, err = io.ReadFull(c, got)
			if err != nil || string(got) != "+PONG\r\n" {
				t.Fatalf("after the accept errors: %q, %v", got, err)
			}
			_ = srv.Close()
			if err := <-done; err != nil {
				t.Fatalf("Serve after Close: %v", err)
			}
		})
	}
}
