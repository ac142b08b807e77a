package lmserver

import (
	"bytes"
	"errors"
	"io"
	"net"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/turbine-llm/turbine/kvbm"
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
	health, err := AppendRequest(nil, Request{Command: CmdHealth, Key: "k"})
	if err != nil {
		t.Fatal(err)
	}
	ok := AppendReply(nil, Reply{Code: CodeOK, Desc: defaultDesc})
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
			st, err := kvbm.Open(kvbm.Config{HostBytes: 1 << 20})
			if err != nil {
				t.Fatal(err)
			}
			defer st.Close()
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			srv := New(st, Options{})
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
			if _, err := c.Write(health); err != nil {
				t.Fatal(err)
			}
			got := make([]byte, ReplyLen)
			_, err = io.ReadFull(c, got)
			if err != nil || !bytes.Equal(got, ok) {
				t.Fatalf("after the accept errors: %x, %v", got, err)
			}
			_ = srv.Close()
			if err := <-done; err != nil {
				t.Fatalf("Serve after Close: %v", err)
			}
		})
	}
}
