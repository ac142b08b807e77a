package model

import "unicode/utf8"

// byteLevel is GPT-2's byte↔unicode table, used by byte-level BPE tokenizer.json files
// (HF tokenizers' ByteLevel pre-tokenizer and decoder): every byte is written as one
// printable rune so that vocabulary entries are valid strings. Bytes '!'..'~', '¡'..'¬'
// and '®'..'ÿ' stand for themselves; the other 68 bytes map, in increasing order, to
// U+0100, U+0101, ...
var byteLevel = newByteLevelTable()

type byteLevelTable struct {
	toRune [256]rune
	toByte map[rune]byte
}

func newByteLevelTable() *byteLevelTable {
	t := &byteLevelTable{toByte: make(map[rune]byte, 256)}
	printable := func(b int) bool {
		return (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF)
	}
	n := 0
	for b := 0; b < 256; b++ {
		r := rune(b)
		if !printable(b) {
			r = rune(256 + n)
			n++
		}
		t.toRune[b] = r
		t.toByte[r] = byte(b)
	}
	return t
}

// decode maps a byte-level vocabulary string back to the bytes it stands for; ok is false
// when s holds a rune outside the table.
func (t *byteLevelTable) decode(s string) (b []byte, ok bool) {
	b = make([]byte, 0, len(s))
	for _, r := range s {
		c, found := t.toByte[r]
		if !found {
			return nil, false
		}
		b = append(b, c)
	}
	return b, true
}

// encode maps raw bytes to their byte-level string (the inverse of decode).
func (t *byteLevelTable) encode(b []byte) string {
	out := make([]rune, len(b))
	for i, c := range b {
		out[i] = t.toRune[c]
	}
	return string(out)
}

// appendValidUTF8 appends b to dst, replacing each maximal ill-formed subsequence with one
// U+FFFD ("substitution of maximal subparts", Unicode §3.9 / the WHATWG decoder; also what
// Rust's String::from_utf8_lossy, hence HF tokenizers' decode, does).
func appendValidUTF8(dst, b []byte) []byte {
	for len(b) > 0 {
		n := validPrefix(b)
		dst = append(dst, b[:n]...)
		b = b[n:]
		if len(b) == 0 {
			break
		}
		k := maximalSubpart(b)
		dst = utf8.AppendRune(dst, utf8.RuneError)
		b = b[k:]
	}
	return dst
}

// validPrefix returns the length of the longest prefix of b made of whole, valid UTF-8
// characters.
func validPrefix(b []byte) int {
	i := 0
	for i < len(b) {
		if b[i] < utf8.RuneSelf {
			i++
			continue
		}
		r, size := utf8.DecodeRune(b[i:])
		if r == utf8.RuneError && size == 1 {
			return i
		}
		i += size
	}
	return i
}

// maximalSubpart returns the length (1..3) of the ill-formed sequence at the start of b,
// which must not begin with a valid character: the longest prefix of b that is a prefix
// of some valid UTF-8 character, or 1 when b[0] cannot start one.
func maximalSubpart(b []byte) int {
	need, lo, hi := utf8Lead(b[0])
	if need == 0 {
		return 1
	}
	k := 1
	for k < len(b) && k <= need {
		c := b[k]
		if k == 1 {
			if c < lo || c > hi {
				break
			}
		} else if c < 0x80 || c > 0xBF {
			break
		}
		k++
	}
	return k
}

// partialTail returns the length of the incomplete character at the end of b: the
// longest suffix (1..3 bytes) that is a proper prefix of a valid UTF-8 character and
// could still be completed by more bytes; 0 when b ends on a whole character or on bytes
// that can never become valid.
func partialTail(b []byte) int {
	for k := 1; k <= 3 && k <= len(b); k++ {
		start := len(b) - k
		need, lo, hi := utf8Lead(b[start])
		if need == 0 {
			if b[start] >= 0x80 && b[start] <= 0xBF {
				continue // continuation byte: the lead may be further back
			}
			return 0
		}
		if k > need {
			return 0 // complete or ill-formed; either way nothing to wait for
		}
		// b[start] leads a character of need+1 bytes; k <= need bytes are present.
		for j := 1; j < k; j++ {
			c := b[start+j]
			if j == 1 {
				if c < lo || c > hi {
					return 0
				}
			} else if c < 0x80 || c > 0xBF {
				return 0
			}
		}
		return k
	}
	return 0
}

// utf8Lead describes a lead byte: need is the number of continuation bytes it takes (0 for
// ASCII and for bytes that cannot lead), [lo, hi] the range allowed for the first
// continuation byte (Unicode Table 3-7, well-formed UTF-8 byte sequences).
func utf8Lead(c byte) (need int, lo, hi byte) {
	switch {
	case c >= 0xC2 && c <= 0xDF:
		return 1, 0x80, 0xBF
	case c == 0xE0:
		return 2, 0xA0, 0xBF
	case c >= 0xE1 && c <= 0xEC, c == 0xEE, c == 0xEF:
		return 2, 0x80, 0xBF
	case c == 0xED:
		return 2, 0x80, 0x9F
	case c == 0xF0:
		return 3, 0x90, 0xBF
	case c >= 0xF1 && c <= 0xF3:
		return 3, 0x80, 0xBF
	case c == 0xF4:
		return 3, 0x80, 0x8F
	}
	return 0, 0, 0
}
