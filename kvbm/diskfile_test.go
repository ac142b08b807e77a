package kvbm

import (
	"bytes"
	"encoding/binary"
	"errors"
	"testing"
)

func goodHeader(key string) []byte {
	return encodeHeader(nil, fileHeader{KeyLen: uint32(len(key)), MetaLen: 3, DataLen: 1000, Gen: 7, Prio: -2, BodySum: 42}, key)
}

func TestParseHeader(t *testing.T) {
	good := goodHeader("lmcache@key")
	mut := func(f func(b []byte) []byte) []byte { return f(append([]byte(nil), good...)) }
	cases := []struct {
		name string
		b    []byte
		ok   bool
	}{
		{"good", good, true},
		{"empty", nil, false},
		{"short header", good[:fileHeaderSize-1], false},
		{"key truncated", good[:len(good)-1], false},
		{"magic", mut(func(b []byte) []byte { b[0] = 'X'; return b }), false},
		{"version", mut(func(b []byte) []byte { b[4] = 2; return b }), false},
		{"zero key", mut(func(b []byte) []byte { binary.LittleEndian.PutUint32(b[8:], 0); return b }), false},
		{"huge key", mut(func(b []byte) []byte { binary.LittleEndian.PutUint32(b[8:], 1<<20); return b }), false},
		{"huge data", mut(func(b []byte) []byte { binary.LittleEndian.PutUint64(b[16:], 1<<41); return b }), false},
		{"flipped length", mut(func(b []byte) []byte { b[16] ^= 1; return b }), false},
		{"flipped key", mut(func(b []byte) []byte { b[len(b)-1] ^= 1; return b }), false},
		{"flipped checksum", mut(func(b []byte) []byte { b[50] ^= 1; return b }), false},
	}
	for _, c := range cases {
		h, key, err := parseHeader(c.b)
		if (err == nil) != c.ok {
			t.Errorf("%s: %v", c.name, err)
			continue
		}
		if err != nil && !errors.Is(err, errBadHeader) {
			t.Errorf("%s: %v does not wrap errBadHeader", c.name, err)
		}
		if c.ok && (key != "lmcache@key" || h.Gen != 7 || h.Prio != -2 || h.size() != fileHeaderSize+11+3+1000) {
			t.Errorf("%s: %+v %q", c.name, h, key)
		}
	}
}

func TestFileName(t *testing.T) {
	n := fileName("a/b c", 0xabc)
	if !isBlockFileName(n) || n[32:] != "-0000000000000abc.kvb" || fileName("a/b c", 1) == n || fileName("a/b d", 0xabc) == n {
		t.Errorf("fileName: %s", n)
	}
}

// FuzzParseHeader: the block file header parser never panics, and whatever it accepts
// re-encodes to the same bytes.
func FuzzParseHeader(f *testing.F) {
	f.Add(goodHeader("k"))
	f.Add(goodHeader("model@1@0@abcdef@bfloat16"))
	f.Add([]byte("TKVB"))
	f.Add(make([]byte, fileHeaderSize+3))
	f.Fuzz(func(t *testing.T, b []byte) {
		h, key, err := parseHeader(b)
		if err != nil {
			return
		}
		if again := encodeHeader(nil, h, key); !bytes.Equal(again, b[:len(again)]) {
			t.Fatalf("accepted %x, re-encodes as %x", b, again)
		}
	})
}
