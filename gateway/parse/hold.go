package parse

import "strings"

// partialSuffix returns the length of the longest suffix of s that is a proper prefix of
// one of markers: text a parser must hold back, because the next chunk may complete the
// marker. It is 0 when no marker can start in s's tail.
func partialSuffix(s string, markers ...string) int {
	best := 0
	for _, m := range markers {
		n := min(len(m)-1, len(s))
		for ; n > best; n-- {
			if strings.HasPrefix(m, s[len(s)-n:]) {
				best = n
				break
			}
		}
	}
	return best
}

// pushSteps runs a step-wise parser over the text it held back and text: step consumes
// what it can decide from the start of s and returns how many bytes; when it consumes
// nothing, the rest is held (in *held) until the next Push brings more.
func pushSteps(held *string, text string, out []Event, step func(s string, out []Event) (int, []Event)) []Event {
	s := text
	if *held != "" {
		s, *held = *held+text, ""
	}
	for s != "" {
		var n int
		n, out = step(s, out)
		if n == 0 {
			*held = s
			break
		}
		s = s[n:]
	}
	return out
}

// firstMarker returns the index in s of the earliest of markers and which one (-1, ""
// when none occurs).
func firstMarker(s string, markers ...string) (int, string) {
	at, which := -1, ""
	for _, m := range markers {
		if i := strings.Index(s, m); i >= 0 && (at < 0 || i < at || i == at && len(m) > len(which)) {
			at, which = i, m
		}
	}
	return at, which
}

// jsonValue follows one JSON value (object or array, or a scalar) byte by byte, without
// building it, to find where it ends: a streaming parser can forward a call's arguments
// as they arrive and still know when they are complete. It checks nesting and strings
// only; the complete text is validated with encoding/json once.
type jsonValue struct {
	depth   int
	started bool
	inStr   bool
	esc     bool
	scalar  bool // a top-level scalar (number, true, false, null) is being read
	done    bool
	bad     bool // a closing bracket without an opener, or one that does not match
	stack   []byte
}

// feed consumes bytes of s until the value ends and returns how many it consumed.
// Leading whitespace before the value is consumed too. After done, feed consumes nothing.
func (j *jsonValue) feed(s string) int {
	for i := 0; i < len(s); i++ {
		if j.done {
			return i
		}
		c := s[i]
		if j.inStr {
			switch {
			case j.esc:
				j.esc = false
			case c == '\\':
				j.esc = true
			case c == '"':
				j.inStr = false
				if j.depth == 0 {
					j.done = true
					return i + 1
				}
			}
			continue
		}
		if j.scalar {
			if isScalarByte(c) {
				continue
			}
			j.done = true
			return i
		}
		switch c {
		case ' ', '\t', '\n', '\r':
			continue
		case '"':
			j.started, j.inStr = true, true
		case '{', '[':
			j.started = true
			j.depth++
			j.stack = append(j.stack, c)
		case '}', ']':
			open := byte('{')
			if c == ']' {
				open = '['
			}
			if j.depth == 0 || j.stack[len(j.stack)-1] != open {
				j.bad, j.done = true, true
				return i + 1
			}
			j.depth--
			j.stack = j.stack[:len(j.stack)-1]
			if j.depth == 0 {
				j.done = true
				return i + 1
			}
		default:
			if j.depth == 0 {
				if !j.started && isScalarByte(c) {
					j.started, j.scalar = true, true
					continue
				}
				j.bad, j.done = true, true
				return i + 1
			}
		}
	}
	return len(s)
}

// end finishes a top-level scalar at the end of the text (a number has no terminator).
func (j *jsonValue) end() {
	if j.scalar {
		j.done = true
	}
}

func isScalarByte(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c == '-' || c == '+' || c == '.'
}
