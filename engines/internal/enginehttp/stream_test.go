package enginehttp

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/turbine-llm/turbine/engines"
)

func openStream(t *testing.T, ctx context.Context, body string) *Stream {
	t.Helper()
	c := testClient(t, func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, body) })
	s, err := c.Stream(ctx, http.MethodPost, "/gen", []byte(`{}`), nil, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestRecvMakesTheFirstErrorFinal(t *testing.T) {
	s := openStream(t, context.Background(), "data: a\n\ndata: b\n\n")
	closes := 0
	closeFn := func() error { closes++; return s.Close() }
	next := func() (string, error) {
		d, err := s.Event()
		if string(d) == "b" {
			return "", errors.New("bad chunk")
		}
		return string(d), err
	}
	if ch, err := Recv(s, next, closeFn); ch != "a" || err != nil {
		t.Fatalf("first: %q %v", ch, err)
	}
	for range 2 {
		if _, err := Recv(s, next, closeFn); err == nil || err.Error() != "bad chunk" {
			t.Fatalf("after the error: %v", err)
		}
	}
	if closes != 1 {
		t.Fatalf("closed %d times, want 1", closes)
	}
}

func TestRecvAfterCancel(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	s := openStream(t, ctx, "data: a\n\ndata: b\n\n")
	calls := 0
	next := func() (string, error) { calls++; d, err := s.Event(); return string(d), err }
	if _, err := Recv(s, next, s.Close); err != nil {
		t.Fatal(err)
	}
	cancel()
	// "b" may already be buffered: it is not handed out once the context ended.
	if _, err := Recv(s, next, s.Close); !errors.Is(err, context.Canceled) {
		t.Fatalf("after cancel: %v", err)
	}
	if calls != 1 {
		t.Fatalf("next called %d times after cancel", calls-1)
	}
	// An error of the connection that the cancel closed reads as the context's.
	ctx2, cancel2 := context.WithCancel(context.Background())
	s2 := openStream(t, ctx2, "data: a\n\n")
	next2 := func() (string, error) {
		cancel2()
		return "", errors.New("read on closed body")
	}
	if _, err := Recv(s2, next2, s2.Close); !errors.Is(err, context.Canceled) {
		t.Fatalf("error during cancel: %v", err)
	}
}

func TestForward(t *testing.T) {
	chunks := func(cs ...string) func() (string, error) {
		return func() (string, error) {
			if len(cs) == 0 {
				return "", io.EOF
			}
			c := cs[0]
			cs = cs[1:]
			if c == "!" {
				return "", errors.New("recv failed")
			}
			return c, nil
		}
	}
	conv := func(c string) engines.Chunk {
		id, reason, _ := strings.Cut(c, ":")
		return engines.Chunk{TokenIDs: []uint32{uint32(id[0])}, FinishReason: reason}
	}
	fnErr := errors.New("fn failed")
	cases := []struct {
		name    string
		recv    func() (string, error)
		failAt  int // fn fails on this chunk (0: never)
		want    string
		wantErr error
	}{
		{"stops at the finish reason", chunks("a", "b:stop", "c"), 0, "a b:stop", nil},
		{"stops at the end of the stream", chunks("a", "b"), 0, "a b", nil},
		{"recv error", chunks("a", "!"), 0, "a", errors.New("recv failed")},
		{"fn error", chunks("a", "b", "c:stop"), 2, "a b", fnErr},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var got []string
			err := Forward(tc.recv, conv, func(c engines.Chunk) error {
				s := string(rune(c.TokenIDs[0]))
				if c.FinishReason != "" {
					s += ":" + c.FinishReason
				}
				got = append(got, s)
				if len(got) == tc.failAt {
					return fnErr
				}
				return nil
			})
			if strings.Join(got, " ") != tc.want {
				t.Fatalf("chunks %q, want %q", got, tc.want)
			}
			if fmt.Sprint(err) != fmt.Sprint(tc.wantErr) {
				t.Fatalf("error %v, want %v", err, tc.wantErr)
			}
		})
	}
}
