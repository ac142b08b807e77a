package model

import (
	"math/rand"
	"strings"
	"testing"
	"unicode/utf8"
)

func TestByteLevelTable(t *testing.T) {
	seen := map[rune]bool{}
	for b := 0; b < 256; b++ {
		r := byteLevel.toRune[b]
		if seen[r] {
			t.Fatalf("rune %U used twice", r)
		}
		seen[r] = true
		if back, ok := byteLevel.decode(string(r)); !ok || len(back) != 1 || back[0] != byte(b) {
			t.Errorf("byte 0x%02X → %U → %v", b, r, back)
		}
	}
	// Values from GPT-2's bytes_to_unicode: space is Ġ, newline Ċ, 0x00 Ā, 0xAD Ń.
	for b, want := range map[byte]rune{' ': 'Ġ', '\n': 'Ċ', 0: 'Ā', 0xAD: 'Ń', 'a': 'a', 0xFF: 'ÿ'} {
		if got := byteLevel.toRune[b]; got != want {
			t.Errorf("byte 0x%02X → %c, want %c", b, got, want)
		}
	}
	if _, ok := byteLevel.decode("▁a"); ok {
		t.Error("decode accepted U+2581 (a SentencePiece marker)")
	}
	if got := byteLevel.encode([]byte("a b\n")); got != "aĠbĊ" {
		t.Errorf("encode = %q", got)
	}
}

func TestAppendValidUTF8(t *testing.T) {
	const R = "\uFFFD"
	tests := []struct {
		in, want string
	}{
		{"", ""},
		{"héllo 你好 😀", "héllo 你好 😀"},
		{"\xe4\xb8", R},                           // truncated 3-byte character: one maximal subpart
		{"\xe4\xb8A", R + "A"},                    // interrupted
		{"\xf0\x9f\x98", R},                       // truncated 4-byte character
		{"\xf0\x9f\x98\xf0\x9f\x98\x80", R + "😀"}, // a truncated one, then a whole one
		{"\x80", R},                               // lone continuation byte
		{"\x80\x80", R + R},                       // each one its own subpart
		{"\xc0\xaf", R + R},                       // overlong: C0 never starts a character
		{"\xed\xa0\x80", R + R + R},               // surrogate: ED A0 is not a valid prefix
		{"\xf4\x90\x80\x80", R + R + R + R},       // above U+10FFFF
		{"\xe0\x80\x80", R + R + R},               // overlong 3-byte
		{"a\xffb", "a" + R + "b"},
	}
	for _, tc := range tests {
		if got := string(appendValidUTF8(nil, []byte(tc.in))); got != tc.want {
			t.Errorf("appendValidUTF8(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func TestPartialTail(t *testing.T) {
	tests := []struct {
		in   string
		want int
	}{
		{"", 0}, {"a", 0}, {"你", 0}, {"\xe4", 1}, {"a\xe4\xb8", 2}, {"\xf0\x9f\x98", 3},
		{"\xf0\x9f", 2}, {"\xe4\x41", 0}, {"\x80", 0}, {"😀\x80", 0}, {"\xed\xa0", 0}, {"\xed\x9f", 2},
		{"\xf4\x90", 0}, {"\xc0", 0}, {"\xe0\x80", 0}, {"\xe0\xa0", 2},
	}
	for _, tc := range tests {
		if got := partialTail([]byte(tc.in)); got != tc.want {
			t.Errorf("partialTail(%q) = %d, want %d", tc.in, got, tc.want)
		}
	}
}

// TestUTF8HelpersProperties checks, on random byte strings, that appendValidUTF8 agrees
// with Go's decoder on valid input, always returns valid UTF-8, and that decoding in two
// parts cut after partialTail gives the same text as decoding at once.
func TestUTF8HelpersProperties(t *testing.T) {
	r := rand.New(rand.NewSource(7))
	alphabet := []byte{'a', 0x80, 0x9f, 0xa0, 0xbf, 0xc2, 0xdf, 0xe0, 0xe4, 0xed, 0xef, 0xf0, 0xf4, 0xf5, 0xff}
	for range 20000 {
		b := make([]byte, r.Intn(12))
		for i := range b {
			b[i] = alphabet[r.Intn(len(alphabet))]
		}
		whole := appendValidUTF8(nil, b)
		if !utf8.Valid(whole) {
			t.Fatalf("appendValidUTF8(%q) = %q is not valid", b, whole)
		}
		if utf8.Valid(b) && string(whole) != string(b) {
			t.Fatalf("valid %q changed to %q", b, whole)
		}
		if !utf8.Valid(b) && !strings.Contains(string(whole), "\uFFFD") {
			t.Fatalf("invalid %q gave no U+FFFD: %q", b, whole)
		}
		cut := r.Intn(len(b) + 1)
		head := b[:cut]
		keep := partialTail(head)
		first := appendValidUTF8(nil, head[:len(head)-keep])
		rest := appendValidUTF8(nil, append(append([]byte{}, head[len(head)-keep:]...), b[cut:]...))
		if string(first)+string(rest) != string(whole) {
			t.Fatalf("%q cut at %d (keep %d): %q + %q != %q", b, cut, keep, first, rest, whole)
		}
	}
}
