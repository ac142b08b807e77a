package model

import (
	"fmt"
	"math/rand"
	"slices"
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"
)

// plainAddedSplit is the added-token split written plainly: at each byte, of the tokens
// whose content starts there (and, for single_word ones, stands between words) the
// longest, the first listed among equal contents; lstrip/rstrip take the whitespace
// around it. Pieces are "seg:TEXT" and "tok:ID".
func plainAddedSplit(tokens []addedToken, text string) []string {
	var out []string
	last := 0
	for i := 0; i < len(text); {
		best := -1
		for k, tok := range tokens {
			if tok.content == "" || !strings.HasPrefix(text[i:], tok.content) {
				continue
			}
			if tok.singleWord && !isWordBoundary(text, i, i+len(tok.content)) {
				continue
			}
			if best < 0 || len(tok.content) > len(tokens[best].content) {
				best = k
			}
		}
		if best < 0 {
			i++
			continue
		}
		tok := tokens[best]
		start, end := i, i+len(tok.content)
		for tok.lstrip && start > last {
			r, size := utf8.DecodeLastRuneInString(text[last:start])
			if !unicode.IsSpace(r) {
				break
			}
			start -= size
		}
		for tok.rstrip && end < len(text) {
			r, size := utf8.DecodeRuneInString(text[end:])
			if !unicode.IsSpace(r) {
				break
			}
			end += size
		}
		if start > last {
			out = append(out, "seg:"+text[last:start])
		}
		out = append(out, fmt.Sprint("tok:", tok.id))
		last, i = end, end
	}
	if last < len(text) {
		out = append(out, "seg:"+text[last:])
	}
	return out
}

func matcherSplit(m *addedMatcher, text string) []string {
	var out []string
	m.split(text, func(seg string, id uint32, isAdded bool) {
		if isAdded {
			out = append(out, fmt.Sprint("tok:", id))
		} else {
			out = append(out, "seg:"+seg)
		}
	})
	return out
}

// TestAddedMatcherMatchesPlainSplit compares the trie-based matcher with the plain
// split on random texts over an alphabet that makes the added tokens overlap: prefixes
// of one another, one content listed twice, single_word tokens that must give way to
// shorter ones inside words, and lstrip/rstrip.
func TestAddedMatcherMatchesPlainSplit(t *testing.T) {
	tokens := []addedToken{
		{content: "<", id: 1},
		{content: "<a", id: 2},
		{content: "<ab>", id: 3},
		{content: "<ab>", id: 4}, // listed twice: the first wins
		{content: "ab", id: 5, singleWord: true},
		{content: "a", id: 6},
		{content: "<b>", id: 7, lstrip: true, rstrip: true},
		{content: "\n\n", id: 8},
		{content: "\n\n\n\n", id: 9},
		{content: "é", id: 10, singleWord: true},
		{content: "bb>", id: 11, rstrip: true},
		{content: "", id: 12}, // ignored
	}
	m := newAddedMatcher(tokens)
	fixed := []string{"", "<ab>", "xab y", "ab", "a <b>  c", "\n\n\n\n\n", "<a<ab><", "éa é", "bb>  x", "<abb>"}
	for _, text := range fixed {
		if got, want := matcherSplit(m, text), plainAddedSplit(tokens, text); !slices.Equal(got, want) {
			t.Errorf("split(%q)\n got %q\nwant %q", text, got, want)
		}
	}
	r := rand.New(rand.NewSource(31))
	alpha := []rune("<>ab \nxé")
	for range 5000 {
		rs := make([]rune, r.Intn(40))
		for i := range rs {
			rs[i] = alpha[r.Intn(len(alpha))]
		}
		text := string(rs)
		if got, want := matcherSplit(m, text), plainAddedSplit(tokens, text); !slices.Equal(got, want) {
			t.Fatalf("split(%q)\n got %q\nwant %q", text, got, want)
		}
	}
	if newAddedMatcher([]addedToken{{content: "", id: 1}}) != nil {
		t.Error("a matcher with no non-empty token is not nil")
	}
}
