package model

import (
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/dlclark/regexp2"
)

// pieceSplitter cuts text into pre-tokenizer pieces: split calls emit for each piece, in
// order; the pieces cover text exactly.
type pieceSplitter interface {
	split(text string, emit func(piece string))
}

// Pre-tokenizer regexes that have a hand-written splitter. cl100kPattern is used by
// OpenAI's cl100k_base and by Llama-3; qwen2Pattern (single digits) by Qwen2 and Qwen3.
const (
	cl100kPattern = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
	qwen2Pattern  = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
	// o200kPattern is OpenAI's o200k_base pattern.
	o200kPattern = `[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|` +
		`[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|` +
		`\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+`
)

// newSplitter returns the splitter for an HF Split (behaviour Isolated) regex: the
// hand-written one for the patterns above, else a regexp2 one (regexp2 has the lookahead
// these patterns use, which Go's regexp lacks).
func newSplitter(pattern string) (pieceSplitter, error) {
	switch pattern {
	case cl100kPattern:
		return gptSplitter{maxDigits: 3}, nil
	case qwen2Pattern:
		return gptSplitter{maxDigits: 1}, nil
	case o200kPattern:
		return o200kSplitter{}, nil
	}
	re, err := regexp2.Compile(pattern, regexp2.None)
	if err != nil {
		return nil, err
	}
	return regexSplitter{re: re}, nil
}

// regexSplitter cuts text into the matches of re and the gaps between them (HF Split,
// behaviour "Isolated"). Empty matches cut nothing.
type regexSplitter struct{ re *regexp2.Regexp }

func (s regexSplitter) split(text string, emit func(string)) {
	runes := []rune(text)
	// Match offsets are in runes; walk text alongside to turn them into byte offsets.
	// (An invalid byte is one rune, U+FFFD, and one byte, so the walk stays aligned.)
	runePos, bytePos := 0, 0
	advance := func(toRune int) int {
		for runePos < toRune {
			_, size := utf8.DecodeRuneInString(text[bytePos:])
			bytePos += size
			runePos++
		}
		return bytePos
	}
	last := 0 // byte offset of the end of the previous match
	m, err := s.re.FindRunesMatch(runes)
	for err == nil && m != nil {
		if m.Length > 0 {
			start := advance(m.Index)
			end := advance(m.Index + m.Length)
			if start > last {
				emit(text[last:start]) // gap
			}
			emit(text[start:end])
			last = end
		}
		m, err = s.re.FindNextMatch(m)
	}
	if last < len(text) {
		emit(text[last:])
	}
}

// gptSplitter is a hand-written matcher for cl100kPattern (maxDigits 3) and qwen2Pattern
// (maxDigits 1), giving the same pieces as regexp2 with the pattern (a differential test
// and a fuzz target check this) without its per-match allocations. At each position the
// alternatives are tried in the pattern's order:
//
//  1. an apostrophe contraction: 's 't 're 've 'm 'll 'd, ASCII case-insensitive;
//  2. letters, optionally preceded by one character that is not \r, \n, a letter or a
//     number;
//  3. 1..maxDigits numbers;
//  4. an optional space, then characters that are neither whitespace, letters nor
//     numbers, then any \r and \n;
//  5. whitespace up to and including the last \r or \n of the whitespace run;
//  6. a whitespace run, less its last character when a non-space follows (\s+(?!\S));
//  7. a whitespace run.
//
// Letters are \p{L} (unicode.IsLetter), numbers \p{N} (unicode.IsNumber), whitespace \s
// (unicode.IsSpace), as regexp2 defines them.
type gptSplitter struct{ maxDigits int }

func (s gptSplitter) split(text string, emit func(string)) {
	for i := 0; i < len(text); {
		n := s.match(text, i)
		emit(text[i : i+n])
		i += n
	}
}

// match returns the byte length (> 0) of the piece starting at text[i].
func (s gptSplitter) match(text string, i int) int {
	r, size := decodeRune(text, i)
	// 1. contractions
	if r == '\'' && i+1 < len(text) {
		if n := contraction(text[i+1:]); n > 0 {
			return 1 + n
		}
	}
	// 2. [^\r\n\p{L}\p{N}]?\p{L}+
	if isLetter(r) {
		return size + letterRun(text, i+size)
	}
	if r != '\r' && r != '\n' && !isNumber(r) && i+size < len(text) {
		if r2, _ := decodeRune(text, i+size); isLetter(r2) {
			return size + letterRun(text, i+size)
		}
	}
	// 3. \p{N}{1,maxDigits}
	if isNumber(r) {
		n := size
		for k := 1; k < s.maxDigits && i+n < len(text); k++ {
			r2, sz := decodeRune(text, i+n)
			if !isNumber(r2) {
				break
			}
			n += sz
		}
		return n
	}
	// 4. ' ?[^\s\p{L}\p{N}]+[\r\n]*'
	if n := otherRun(text, i, "\r\n"); n > 0 {
		return n
	}
	// r is whitespace.
	return whitespacePiece(text, i)
}

// whitespacePiece matches the whitespace alternatives at text[i], which must be
// whitespace: \s*[\r\n]+ (up to the last \r or \n of the run), else \s+(?!\S) (the
// whole run at the end of text, else all but its last character), else \s+ (a single
// whitespace character before a non-space).
func whitespacePiece(text string, i int) int {
	end, lastNewline := i, -1
	for end < len(text) {
		r2, sz := decodeRune(text, end)
		if !unicode.IsSpace(r2) {
			break
		}
		if r2 == '\r' || r2 == '\n' {
			lastNewline = end
		}
		end += sz
	}
	if lastNewline >= 0 {
		return lastNewline + 1 - i
	}
	if end == len(text) {
		return end - i
	}
	if _, lastSize := utf8.DecodeLastRuneInString(text[i:end]); end-lastSize > i {
		return end - lastSize - i
	}
	return end - i
}

// otherRun matches ' ?[^\s\p{L}\p{N}]+' then any characters of trail at text[i];
// 0 when it does not match.
func otherRun(text string, i int, trail string) int {
	r, _ := decodeRune(text, i)
	start := i
	if r == ' ' && i+1 < len(text) {
		if r2, _ := decodeRune(text, i+1); isOther(r2) {
			start = i + 1
		}
	}
	if c, _ := decodeRune(text, start); !isOther(c) {
		return 0
	}
	j := start
	for j < len(text) {
		r2, sz := decodeRune(text, j)
		if !isOther(r2) {
			break
		}
		j += sz
	}
	for j < len(text) && strings.IndexByte(trail, text[j]) >= 0 {
		j++
	}
	return j - i
}

// o200kSplitter is a hand-written matcher for o200kPattern, checked against regexp2 like
// gptSplitter. With U = [\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}], W = [\p{Ll}\p{Lm}\p{Lo}\p{M}],
// P = [^\r\n\p{L}\p{N}] and C an optional contraction, the alternatives are P?U*W+C?,
// P?U+W*C?, \p{N}{1,3}, ' ?[^\s\p{L}\p{N}]+[\r\n/]*' and the whitespace ones. The first
// two split camel case ("HelloWorld" → "Hello", "World"); their backtracking is written
// out in wordFrom.
type o200kSplitter struct{}

func (s o200kSplitter) split(text string, emit func(string)) {
	for i := 0; i < len(text); {
		n := s.match(text, i)
		emit(text[i : i+n])
		i += n
	}
}

func (o200kSplitter) match(text string, i int) int {
	r, size := decodeRune(text, i)
	prefix := r != '\r' && r != '\n' && !isLetter(r) && !isNumber(r)
	for _, lowerRequired := range []bool{true, false} { // P?U*W+C?, then P?U+W*C?
		if prefix && i+size < len(text) {
			if n := wordFrom(text, i+size, lowerRequired); n > 0 {
				return size + n
			}
		}
		if n := wordFrom(text, i, lowerRequired); n > 0 {
			return n
		}
	}
	if isNumber(r) {
		n := size
		for k := 1; k < 3 && i+n < len(text); k++ {
			r2, sz := decodeRune(text, i+n)
			if !isNumber(r2) {
				break
			}
			n += sz
		}
		return n
	}
	if n := otherRun(text, i, "\r\n/"); n > 0 {
		return n
	}
	return whitespacePiece(text, i)
}

// wordFrom matches U*W+C? (lowerRequired) or U+W*C? at text[j]; 0 when it does not
// match.
func wordFrom(text string, j int, lowerRequired bool) int {
	// The maximal U run [j, k).
	k := j
	lastW := -1 // start of the last character of the run that is also in W
	for k < len(text) {
		r, sz := decodeRune(text, k)
		if !isUpperClass(r) {
			break
		}
		if isLowerClass(r) {
			lastW = k
		}
		k += sz
	}
	end := -1
	if k < len(text) {
		if r, _ := decodeRune(text, k); isLowerClass(r) {
			end = k + lowerRun(text, k) // W+ right after the whole U run
		}
	}
	if end < 0 {
		if lowerRequired {
			if lastW < 0 {
				return 0
			}
			// U* gives back characters until one is also in W; W+ is that one alone
			// (what follows it in the run is not in W, nor is the character after the run).
			_, sz := decodeRune(text, lastW)
			end = lastW + sz
		} else {
			if k == j {
				return 0
			}
			end = k // U+ then an empty W*
		}
	}
	if end < len(text) && text[end] == '\'' {
		if n := contraction(text[end+1:]); n > 0 {
			end += 1 + n
		}
	}
	return end - j
}

func lowerRun(text string, i int) int {
	n := 0
	for i+n < len(text) {
		r, sz := decodeRune(text, i+n)
		if !isLowerClass(r) {
			break
		}
		n += sz
	}
	return n
}

// isUpperClass reports r ∈ [\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]; isLowerClass r ∈
// [\p{Ll}\p{Lm}\p{Lo}\p{M}].
func isUpperClass(r rune) bool {
	if r < utf8.RuneSelf {
		return 'A' <= r && r <= 'Z'
	}
	return unicode.In(r, unicode.Lu, unicode.Lt, unicode.Lm, unicode.Lo, unicode.M)
}

func isLowerClass(r rune) bool {
	if r < utf8.RuneSelf {
		return 'a' <= r && r <= 'z'
	}
	return unicode.In(r, unicode.Ll, unicode.Lm, unicode.Lo, unicode.M)
}

// decodeRune decodes the rune at text[i]; an invalid byte is U+FFFD of size 1, as in
// the []rune conversion regexp2 works on.
func decodeRune(text string, i int) (rune, int) {
	if c := text[i]; c < utf8.RuneSelf {
		return rune(c), 1
	}
	return utf8.DecodeRuneInString(text[i:])
}

// contraction returns the length of the contraction suffix at the start of s (after the
// apostrophe): s, t, re, ve, m, ll, d in any ASCII case; 0 when none.
func contraction(s string) int {
	lower := func(i int) byte {
		if i >= len(s) {
			return 0
		}
		c := s[i]
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		return c
	}
	switch lower(0) {
	case 's', 't', 'm', 'd':
		return 1
	case 'r', 'v':
		if lower(1) == 'e' {
			return 2
		}
	case 'l':
		if lower(1) == 'l' {
			return 2
		}
	}
	return 0
}

func letterRun(text string, i int) int {
	n := 0
	for i+n < len(text) {
		r, sz := decodeRune(text, i+n)
		if !isLetter(r) {
			break
		}
		n += sz
	}
	return n
}

// asciiClass classifies ASCII characters: letter, number, space, or other.
var asciiClass = func() (t [utf8.RuneSelf]byte) {
	for c := range utf8.RuneSelf {
		r := rune(c)
		switch {
		case unicode.IsLetter(r):
			t[c] = classLetter
		case unicode.IsNumber(r):
			t[c] = classNumber
		case unicode.IsSpace(r):
			t[c] = classSpace
		default:
			t[c] = classOther
		}
	}
	return t
}()

const (
	classOther = iota
	classLetter
	classNumber
	classSpace
)

func isLetter(r rune) bool {
	if r < utf8.RuneSelf {
		return asciiClass[r] == classLetter
	}
	return unicode.IsLetter(r)
}

func isNumber(r rune) bool {
	if r < utf8.RuneSelf {
		return asciiClass[r] == classNumber
	}
	return unicode.IsNumber(r)
}

// isOther reports whether r is in [^\s\p{L}\p{N}].
func isOther(r rune) bool {
	if r < utf8.RuneSelf {
		return asciiClass[r] == classOther
	}
	return !unicode.IsSpace(r) && !unicode.IsLetter(r) && !unicode.IsNumber(r)
}
