package lmserver

import (
	"bytes"
	"errors"
	"io"
	"runtime"
	"testing"

	"github.com/turbine-llm/turbine/kvbm"
)

// TestPutAllocFollowsBytes: a PUT header's length is not allocated before the body
// arrives: a header announcing 512 MiB followed by a few bytes costs the server about
// valuePrealloc, and a body sent whole is still stored byte-exact.
func TestPutAllocFollowsBytes(t *testing.T) {
	for _, tc := range []struct {
		name      string
		announced int32
		sent      int // body bytes sent before the stream ends
		maxAlloc  uint64
	}{
		{"512 MiB announced, 3 bytes sent", 512 << 20, 3, 4 << 20},
		{"64 MiB announced, 3 MiB sent", 64 << 20, 3 << 20, 16 << 20},
		{"8 MiB sent whole", 8 << 20, 8 << 20, 24 << 20},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st, err := kvbm.Open(kvbm.Config{HostBytes: 64 << 20})
			if err != nil {
				t.Fatal(err)
			}
			defer st.Close()
			s := New(st, Options{})
			head, err := AppendRequest(nil, Request{Command: CmdPut, Length: tc.announced, Desc: BinaryDesc(tc.announced), Key: "big"})
			if err != nil {
				t.Fatal(err)
			}
			body := bytes.Repeat([]byte{7}, tc.sent)
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			err = s.handle(io.MultiReader(bytes.NewReader(head), bytes.NewReader(body)), io.Discard)
			runtime.ReadMemStats(&after)
			if got := after.TotalAlloc - before.TotalAlloc; got > tc.maxAlloc {
				t.Errorf("allocated %d bytes for %d sent, want at most %d", got, tc.sent, tc.maxAlloc)
			}
			if tc.sent < int(tc.announced) {
				if !errors.Is(err, io.ErrUnexpectedEOF) || st.Exists("big") {
					t.Errorf("handle = %v, stored %v; want unexpected EOF, nothing stored", err, st.Exists("big"))
				}
				return
			}
			e, gerr := st.Get("big")
			if err != nil || gerr != nil || !bytes.Equal(e.Data, body) || cap(e.Data) != len(body) {
				t.Errorf("handle = %v, Get = %v; or not the body sent", err, gerr)
			}
		})
	}
}
