package model

import (
	"math/rand"
	"strings"
	"testing"
	"unicode/utf8"
)

// fakeTokenizer is a Tokenizer over a fixed table of byte strings, for detokenizer tests.
type fakeTokenizer struct {
	tokens  [][]byte
	special map[uint32]bool
}

func (f *fakeTokenizer) Encode(string) []uint32 { panic("not used") }
func (f *fakeTokenizer) Decode(ids []uint32) string {
	var b []byte
	for _, id := range ids {
		if int(id) < len(f.tokens) {
			b = append(b, f.tokens[id]...)
		}
	}
	return string(appendValidUTF8(nil, b))
}
func (f *fakeTokenizer) TokenBytes(id uint32) ([]byte, bool) {
	if int(id) >= len(f.tokens) {
		return nil, false
	}
	return f.tokens[id], true
}
func (f *fakeTokenizer) VocabSize() int           { return len(f.tokens) }
func (f *fakeTokenizer) IsSpecial(id uint32) bool { return f.special[id] }
func (f *fakeTokenizer) TokenString(id uint32) (string, bool) {
	b, ok := f.TokenBytes(id)
	return string(b), ok
}

// newFake returns a tokenizer whose token i is pieces[i]; ids listed in special are
// special tokens.
func newFake(pieces []string, special ...uint32) *fakeTokenizer {
	f := &fakeTokenizer{special: map[uint32]bool{}}
	for _, p := range pieces {
		f.tokens = append(f.tokens, []byte(p))
	}
	for _, id := range special {
		f.special[id] = true
	}
	return f
}

func TestDetokenizer(t *testing.T) {
	// 😀 is F0 9F 98 80; 你 is E4 BD A0.
	tok := newFake([]string{"a", "\xf0", "\x9f", "\x98", "\x80", "\xe4\xbd", "\xa0b", "<|end|>", "\xff", " ", "\xf0\x9f"}, 7)
	tests := []struct {
		name        string
		skipSpecial bool
		pushes      [][]uint32
		want        []string // one per push, then the flush
	}{
		{"ascii", false, [][]uint32{{0}, {9, 0}}, []string{"a", " a", ""}},
		{"emoji byte by byte", false, [][]uint32{{0}, {1}, {2}, {3}, {4}, {0}}, []string{"a", "", "", "", "😀", "a", ""}},
		{"emoji in one push", false, [][]uint32{{1, 2, 3, 4}}, []string{"😀", ""}},
		{"cjk split across tokens", false, [][]uint32{{5}, {6}}, []string{"", "你b", ""}},
		{"truncated at the end", false, [][]uint32{{0, 1, 2}}, []string{"a", "\uFFFD"}},
		{"interrupted sequence", false, [][]uint32{{1, 2}, {0}}, []string{"", "\uFFFDa", ""}},
		{"invalid byte", false, [][]uint32{{8}, {0}}, []string{"\uFFFD", "a", ""}},
		{"special kept", false, [][]uint32{{0, 7}}, []string{"a<|end|>", ""}},
		{"special skipped", true, [][]uint32{{0, 7, 0}}, []string{"aa", ""}},
		{"special inside a partial character", false, [][]uint32{{5}, {7}}, []string{"", "\uFFFD<|end|>", ""}},
		{"skipped special inside a partial character", true, [][]uint32{{5}, {7}, {6}}, []string{"", "", "你b", ""}},
		{"unknown id skipped", false, [][]uint32{{0, 999, 0}}, []string{"aa", ""}},
		{"empty push", false, [][]uint32{{}, {10}, {}, {3, 4}}, []string{"", "", "", "😀", ""}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			d := NewDetokenizer(tok, tc.skipSpecial)
			var got []string
			for _, ids := range tc.pushes {
				got = append(got, d.Push(ids...))
			}
			got = append(got, d.Flush())
			if strings.Join(got, "|") != strings.Join(tc.want, "|") {
				t.Errorf("got %q, want %q", got, tc.want)
			}
		})
	}
}

// checkDetokenizerProperty streams ids in random chunks and checks that every chunk is
// valid UTF-8 and that chunks + Flush equal Decode (of the non-special ids when
// skipping), also after a Flush has reset the Detokenizer.
func checkDetokenizerProperty(t *testing.T, tok Tokenizer, ids []uint32, r *rand.Rand) {
	t.Helper()
	for _, skip := range []bool{false, true} {
		want := tok.Decode(ids)
		if skip {
			var kept []uint32
			for _, id := range ids {
				if !tok.IsSpecial(id) {
					kept = append(kept, id)
				}
			}
			want = tok.Decode(kept)
		}
		d := NewDetokenizer(tok, skip)
		for round := range 2 {
			var sb strings.Builder
			for i := 0; i < len(ids); {
				n := min(len(ids)-i, r.Intn(4))
				chunk := d.Push(ids[i : i+n]...)
				if !utf8.ValidString(chunk) {
					t.Fatalf("Push(%v) = %q: not valid UTF-8", ids[i:i+n], chunk)
				}
				sb.WriteString(chunk)
				i += n
			}
			sb.WriteString(d.Flush())
			if sb.String() != want {
				t.Fatalf("round %d, skip %v, ids %v: streamed %q, Decode %q", round, skip, ids, sb.String(), want)
			}
		}
	}
}

// TestDetokenizerProperty: random byte fragments (valid, truncated and invalid UTF-8),
// and random ids of a real vocabulary.
func TestDetokenizerProperty(t *testing.T) {
	r := rand.New(rand.NewSource(5))
	var pieces []string
	for _, s := range []string{"a", "é", "你", "😀", "\u0301", "<s>"} {
		b := []byte(s)
		for i := 0; i <= len(b); i++ {
			for j := i + 1; j <= len(b); j++ {
				pieces = append(pieces, string(b[i:j]))
			}
		}
	}
	pieces = append(pieces, "\xff", "\xc0", "\xed\xa0", "\xf4\x90")
	fake := newFake(pieces, uint32(len(pieces)-5)) // one fragment of "<s>" is special
	for range 3000 {
		ids := make([]uint32, r.Intn(20))
		for i := range ids {
			ids[i] = uint32(r.Intn(len(pieces)))
		}
		checkDetokenizerProperty(t, fake, ids, r)
	}
	tok := builtinModel(t, "cl100k_base").Tokenizer
	for range 300 {
		ids := make([]uint32, r.Intn(40))
		for i := range ids {
			ids[i] = uint32(r.Intn(tok.VocabSize()))
		}
		checkDetokenizerProperty(t, tok, ids, r)
	}
}
