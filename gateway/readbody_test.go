package gateway

import (
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"
	"testing/iotest"
)

func TestReadAllSized(t *testing.T) {
	body := strings.Repeat("0123456789", 100)
	for _, size := range []int64{-1, 0, 1, 999, 1000, 1001, 5000} {
		for _, slow := range []bool{false, true} {
			var r io.Reader = strings.NewReader(body)
			if slow {
				r = iotest.OneByteReader(r)
			}
			got, err := readAllSized(r, size)
			if err != nil || string(got) != body {
				t.Errorf("size %d slow %v: %d bytes, %v", size, slow, len(got), err)
			}
		}
	}
	boom := errors.New("boom")
	if _, err := readAllSized(io.MultiReader(bytes.NewReader([]byte("ab")), iotest.ErrReader(boom)), 2); !errors.Is(err, boom) {
		t.Errorf("read error: got %v, want %v", err, boom)
	}
}
