package lmserver

import (
	"bytes"
	"errors"
	"io"
	"testing"

	"github.com/turbine-llm/turbine/kvbm"
)

func addGoldenSeeds(f *testing.F) {
	for _, name := range []string{"exist_request.bin", "get_request.bin", "put_request.bin",
		"v0_exist_request.bin", "exist_reply.bin", "get_reply.bin"} {
		f.Add(readGolden(f, name))
	}
	f.Add([]byte{})
}

// FuzzHeader: any bytes parse without panicking; a parsed request re-encodes to a frame
// that parses to the same request; a reply header re-encodes byte for byte.
func FuzzHeader(f *testing.F) {
	addGoldenSeeds(f)
	f.Fuzz(func(t *testing.T, b []byte) {
		if r, err := ParseRequest(b); err == nil {
			enc, err := AppendRequest(nil, r)
			if err != nil {
				t.Fatalf("re-encoding %+v: %v", r, err)
			}
			if len(enc) != RequestLen {
				t.Fatalf("re-encoded %d bytes", len(enc))
			}
			back, err := ParseRequest(enc)
			if err != nil || back != r {
				t.Fatalf("round trip: %+v (%v), want %+v", back, err, r)
			}
		} else if len(b) >= RequestLen && !errors.Is(err, ErrV0Header) && !errors.Is(err, ErrBadHeader) &&
			!errors.Is(err, ErrBadLength) {
			t.Fatalf("unexpected error %v", err)
		}
		if r, err := ParseReply(b); err == nil {
			if enc := AppendReply(nil, r); !bytes.Equal(enc, b[:ReplyLen]) {
				t.Fatalf("reply round trip %x, want %x", enc, b[:ReplyLen])
			}
		}
		_, _ = ParseMeta(b)
	})
}

// FuzzServer feeds a connection's worth of random bytes to the server's request loop: it
// must return (the input ends, so a hang is a bug), never panic, and write only whole
// reply headers and bodies.
func FuzzServer(f *testing.F) {
	addGoldenSeeds(f)
	put, _ := AppendRequest(nil, Request{Command: CmdPut, Length: 4, Desc: defaultDesc, Key: "k"})
	get, _ := AppendRequest(nil, Request{Command: CmdGet, Desc: defaultDesc, Key: "k"})
	f.Add(append(append(put, "abcd"...), get...))
	st, err := kvbm.Open(kvbm.Config{HostBytes: 64 << 20})
	if err != nil {
		f.Fatal(err)
	}
	s := New(st, Options{MaxValueBytes: 1 << 16})
	f.Fuzz(func(t *testing.T, b []byte) {
		var out bytes.Buffer
		err := s.handle(bytes.NewReader(b), &out)
		if err != nil && errors.Is(err, io.EOF) && !errors.Is(err, io.ErrUnexpectedEOF) {
			t.Fatalf("plain EOF reported as an error: %v", err)
		}
		// The output is a sequence of reply headers, each followed by its body.
		o := out.Bytes()
		for len(o) > 0 {
			r, err := ParseReply(o)
			if err != nil {
				t.Fatalf("output is not a reply: %x (%v)", o[:min(len(o), ReplyLen)], err)
			}
			if r.Code != CodeOK && r.Code != CodeFail {
				t.Fatalf("reply code %d", r.Code)
			}
			if int(r.Length) > len(o)-ReplyLen {
				t.Fatalf("reply announces %d bytes, %d follow", r.Length, len(o)-ReplyLen)
			}
			o = o[ReplyLen+int(r.Length):]
		}
	})
}
