package persona

import (
	"regexp"
	"regexp/syntax"
	"strings"
	"unicode"
)

// maxRegexOutput bounds a generated string (a pattern like a{1000000} is refused).
const maxRegexOutput = 4096

// generateRegex returns a string that pattern matches, walking its syntax tree (Go's
// RE2 syntax, which covers the patterns JSON Schema and guided_regex use: no
// look-around, no back-references). The whole string matches, as vLLM's guided_regex
// requires; JSON Schema's pattern, a search, is satisfied too. Choices are drawn from r: alternatives, repeat
// counts (0 to 2 beyond the minimum), and characters of classes (letters and digits
// first). The result is checked with regexp; false when the pattern does not parse, is
// too large, or the walk cannot satisfy it (anchors or word boundaries in places a
// simple walk gets wrong).
func generateRegex(r *rng, pattern string) (string, bool) {
	re, err := syntax.Parse(pattern, syntax.Perl)
	if err != nil {
		return "", false
	}
	check, err := regexp.Compile(`^(?:` + pattern + `)$`)
	if err != nil {
		return "", false
	}
	re = re.Simplify()
	for try := 0; try < 4; try++ {
		var b strings.Builder
		if !walkRegex(r, re, &b) || b.Len() > maxRegexOutput {
			return "", false
		}
		if check.MatchString(b.String()) {
			return b.String(), true
		}
	}
	return "", false
}

func walkRegex(r *rng, re *syntax.Regexp, b *strings.Builder) bool {
	if b.Len() > maxRegexOutput {
		return false
	}
	switch re.Op {
	case syntax.OpNoMatch:
		return false
	case syntax.OpEmptyMatch, syntax.OpBeginLine, syntax.OpEndLine, syntax.OpBeginText, syntax.OpEndText,
		syntax.OpWordBoundary, syntax.OpNoWordBoundary:
		return true // zero-width: the final check decides
	case syntax.OpLiteral:
		for _, c := range re.Rune {
			b.WriteRune(c)
		}
		return true
	case syntax.OpCharClass:
		c, ok := pickRune(r, re.Rune)
		if ok {
			b.WriteRune(c)
		}
		return ok
	case syntax.OpAnyCharNotNL, syntax.OpAnyChar:
		b.WriteByte(byte('a' + r.intn(26)))
		return true
	case syntax.OpCapture:
		return walkRegex(r, re.Sub[0], b)
	case syntax.OpStar:
		return repeatRegex(r, re.Sub[0], b, 0, 2)
	case syntax.OpPlus:
		return repeatRegex(r, re.Sub[0], b, 1, 2)
	case syntax.OpQuest:
		return repeatRegex(r, re.Sub[0], b, 0, 1)
	case syntax.OpRepeat:
		hi := re.Max
		if hi < 0 || hi > re.Min+2 {
			hi = re.Min + 2
		}
		return repeatRegex(r, re.Sub[0], b, re.Min, hi)
	case syntax.OpConcat:
		for _, s := range re.Sub {
			if !walkRegex(r, s, b) {
				return false
			}
		}
		return true
	case syntax.OpAlternate:
		return walkRegex(r, re.Sub[r.intn(len(re.Sub))], b)
	}
	return false
}

func repeatRegex(r *rng, sub *syntax.Regexp, b *strings.Builder, lo, hi int) bool {
	if lo > maxRegexOutput {
		return false
	}
	n := lo + r.intn(hi-lo+1)
	for i := 0; i < n; i++ {
		if !walkRegex(r, sub, b) {
			return false
		}
	}
	return true
}

// pickRune picks a character of a class (pairs of inclusive ranges): a letter or digit
// when the class has some, else its first printable character that is not a space.
func pickRune(r *rng, ranges []rune) (rune, bool) {
	var nice []rune
	for _, want := range [][2]rune{{'a', 'z'}, {'A', 'Z'}, {'0', '9'}} {
		for i := 0; i+1 < len(ranges); i += 2 {
			lo, hi := max(ranges[i], want[0]), min(ranges[i+1], want[1])
			for c := lo; c <= hi; c++ {
				nice = append(nice, c)
			}
		}
		if len(nice) > 0 {
			return nice[r.intn(len(nice))], true
		}
	}
	for i := 0; i+1 < len(ranges); i += 2 {
		for c := ranges[i]; c <= ranges[i+1] && c-ranges[i] < 256; c++ {
			if unicode.IsPrint(c) && !unicode.IsSpace(c) {
				return c, true
			}
		}
	}
	if len(ranges) >= 2 {
		return ranges[0], true
	}
	return 0, false
}
