package parse

import (
	"encoding/json"
	"strconv"
	"strings"
	"unicode/utf8"
)

// pythonic parses tool calls written as a Python list of calls with keyword arguments,
// as Llama 3.2 and Llama 4 do (vLLM's --tool-call-parser pythonic and llama4_pythonic;
// docs/reference.md §15):
//
//	[get_weather(city="San Francisco", metric="celsius"), get_time()]
//
// Llama 4 may wrap the list in <|python_start|> ... <|python_end|>, and may write text
// before the wrapped list. Argument values are Python literals (strings in either quote
// with escapes, numbers, True/False/None, lists, tuples, dicts) and become JSON:
// {"city": "San Francisco", "metric": "celsius"}. A call starts at its '(' and its
// arguments stream one at a time, each once its value is complete.
//
// An answer that does not start with '[' (after whitespace) or <|python_start|> is
// content, as is a list whose first element is not a call of an offered function; a
// later call of an unknown function comes back as content on its own. A call cut by
// the end of the output, or by text that is not Python, keeps the arguments it
// streamed and is malformed; the text of its unfinished argument and what follows are
// content.
type pythonic struct {
	t    toolCalls
	st   pyState
	hold string

	// The list being read.
	ls        pyListState
	committed bool    // a call of this list started: the list can no longer be content
	raw       []byte  // the list's text while not committed
	ident     []byte  // the name or keyword being read
	naming    bool    // a call's name is being read (after the list committed)
	inCall    bool    // a call is open (started, or discarded)
	discard   bool    // the open call names an unknown function: its text is content
	callRaw   []byte  // the text of the call being named or discarded
	pending   []byte  // the open call's text since its last emitted argument
	last      *[]byte // the buffer keep put the last byte in (broken takes it back)
	nargs     int     // arguments emitted for the open call
	key       string
	val       []byte // the argument value being read
	frame     pyFrame
	scratch   []byte
}

type pyState uint8

const (
	pyStart pyState = iota // deciding: a list or content
	pyText                 // content; <|python_start|> starts a list
	pyTag                  // after <|python_start|>: whitespace, then '['
	pyList                 // inside the list
	pyEnd                  // after the list: whitespace, <|python_end|>
)

type pyListState uint8

const (
	plOpen      pyListState = iota // after '[': the first call's name
	plName                         // inside a call's name
	plParen                        // after the name: '('
	plKey                          // before a keyword or ')'
	plKeyName                      // inside a keyword
	plEq                           // after a keyword: '='
	plValue                        // inside a value
	plListNext                     // after a call: ',' or ']'
	plCallStart                    // after ',': the next call's name or ']'
)

const (
	pyStartTag = "<|python_start|>"
	pyEndTag   = "<|python_end|>"
)

func init() {
	registerTool("pythonic", newPythonic, pyStartTag, pyEndTag)
	registerTool("llama4_pythonic", newPythonic, pyStartTag, pyEndTag)
}

func newPythonic(o Options) Parser { return &pythonic{t: toolCalls{o: o}} }

func (p *pythonic) Push(text string, out []Event) []Event {
	s := text
	if p.hold != "" {
		s, p.hold = p.hold+text, ""
	}
	for s != "" {
		switch p.st {
		case pyStart:
			r := trimSpaceLeft(s)
			switch {
			case r == "" || strings.HasPrefix(pyStartTag, r) && len(r) < len(pyStartTag):
				p.hold = s
				return out
			case r[0] == '[':
				p.openList("[")
				p.st, s = pyList, r[1:]
			default:
				p.st = pyText
			}
		case pyText:
			at := strings.Index(s, pyStartTag)
			if at < 0 {
				k := partialSuffix(s, pyStartTag)
				out = p.t.text(out, s[:len(s)-k])
				p.hold = s[len(s)-k:]
				return out
			}
			out = p.t.text(out, s[:at])
			s = s[at+len(pyStartTag):]
			p.raw = append(p.raw[:0], pyStartTag...)
			p.st = pyTag
		case pyTag:
			r := trimSpaceLeft(s)
			p.raw = append(p.raw, s[:len(s)-len(r)]...)
			if r == "" {
				return out
			}
			s = r
			if s[0] != '[' {
				out = p.t.text(out, string(p.raw))
				p.st = pyText
				continue
			}
			p.openList(string(p.raw) + "[")
			p.st, s = pyList, s[1:]
		case pyList:
			var n int
			n, out = p.list(s, out)
			s = s[n:]
		case pyEnd:
			r := trimSpaceLeft(s)
			switch {
			case r == "":
				return out
			case strings.HasPrefix(r, pyEndTag):
				s = r[len(pyEndTag):]
				p.st = pyText
			case strings.HasPrefix(pyEndTag, r):
				p.hold = s
				return out
			default:
				p.st = pyText
			}
		}
	}
	return out
}

// openList starts a list whose '[' (and <|python_start|>) raw holds.
func (p *pythonic) openList(raw string) {
	p.ls, p.committed, p.naming, p.inCall, p.discard = plOpen, false, false, false, false
	p.raw = append(p.raw[:0], raw...)
}

// keep records c in the buffer that gives the list's text back if it fails.
func (p *pythonic) keep(c byte) {
	switch {
	case !p.committed:
		p.last = &p.raw
	case p.naming || p.discard:
		p.last = &p.callRaw
	case p.inCall:
		p.last = &p.pending
	default:
		p.last = nil
		return
	}
	*p.last = append(*p.last, c)
}

// list reads the list byte by byte until it ends (pyEnd) or turns out to be text
// (pyText); it returns the bytes it consumed.
func (p *pythonic) list(s string, out []Event) (int, []Event) {
	for i := 0; i < len(s); i++ {
		c := s[i]
		p.keep(c)
		switch p.ls {
		case plOpen, plCallStart:
			switch {
			case isSpace(c):
			case isIdentStart(c):
				p.ident = append(p.ident[:0], c)
				if p.committed {
					p.naming = true
					p.callRaw = append(p.callRaw[:0], c)
				}
				p.ls = plName
			case c == ']' && p.ls == plCallStart:
				return i + 1, p.endList(out)
			case c == ']' && !p.committed:
				// An empty list is text.
				out = p.t.text(out, string(p.raw))
				p.st = pyText
				return i + 1, out
			default:
				return i, p.broken(out)
			}
		case plName, plKeyName:
			switch {
			case isIdentByte(c) && len(p.ident) < 256:
				p.ident = append(p.ident, c)
			case p.ls == plName && (c == '(' || isSpace(c)):
				p.ls = plParen
				if c == '(' {
					var ok bool
					if out, ok = p.openCall(out); !ok {
						return i + 1, p.rejectList(out)
					}
				}
			case p.ls == plKeyName && (c == '=' || isSpace(c)):
				p.key = string(p.ident)
				p.ls = plEq
				if c == '=' {
					p.openValue()
				}
			default:
				return i, p.broken(out)
			}
		case plParen, plEq:
			switch {
			case isSpace(c):
			case p.ls == plParen && c == '(':
				var ok bool
				if out, ok = p.openCall(out); !ok {
					return i + 1, p.rejectList(out)
				}
			case p.ls == plEq && c == '=':
				p.openValue()
			default:
				return i, p.broken(out)
			}
		case plKey:
			switch {
			case isSpace(c):
			case isIdentStart(c):
				p.ident = append(p.ident[:0], c)
				p.ls = plKeyName
			case c == ')':
				out = p.closeCall(out)
			default:
				return i, p.broken(out)
			}
		case plValue:
			end, bad := p.frame.step(c)
			if bad {
				return i, p.broken(out)
			}
			if !end {
				p.val = append(p.val, c)
				continue
			}
			var ok bool
			if out, ok = p.argument(out); !ok {
				return i, p.broken(out)
			}
			if c == ')' {
				out = p.closeCall(out)
			} else {
				p.ls = plKey
			}
		case plListNext:
			switch {
			case isSpace(c):
			case c == ',':
				p.ls = plCallStart
			case c == ']':
				return i + 1, p.endList(out)
			default:
				return i, p.broken(out)
			}
		}
	}
	return len(s), out
}

func isIdentStart(c byte) bool { return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c == '_' }

func isIdentByte(c byte) bool {
	return isIdentStart(c) || c >= '0' && c <= '9' || c == '.' || c == '-'
}

func (p *pythonic) openValue() {
	p.ls, p.val = plValue, p.val[:0]
	p.frame = pyFrame{stack: p.frame.stack[:0]}
}

// openCall opens the call named p.ident and starts it when it names an offered
// function; false when it is the list's first call and does not (the list is then
// text).
func (p *pythonic) openCall(out []Event) ([]Event, bool) {
	name := string(p.ident)
	p.naming, p.nargs, p.pending = false, 0, p.pending[:0]
	p.ls = plKey
	if p.t.known(name) {
		p.inCall, p.discard, p.committed = true, false, true
		p.raw = p.raw[:0]
		return p.t.start(out, name, ""), true
	}
	if !p.committed {
		return out, false
	}
	p.inCall, p.discard = true, true
	return out, true
}

// argument converts the value just read and emits it.
func (p *pythonic) argument(out []Event) ([]Event, bool) {
	if p.discard {
		return out, true
	}
	b := p.scratch[:0]
	if p.nargs == 0 {
		b = append(b, '{')
	} else {
		b = append(b, ',', ' ')
	}
	b = appendJSONString(b, p.key)
	b = append(b, ':', ' ')
	b, ok := pyToJSON(b, string(p.val))
	p.scratch = b
	if !ok {
		return out, false
	}
	p.nargs++
	p.pending = p.pending[:0]
	return p.t.args(out, string(b)), true
}

func (p *pythonic) closeCall(out []Event) []Event {
	p.ls, p.inCall = plListNext, false
	if p.discard {
		p.t.bad++
		p.discard = false
		return p.t.text(out, string(p.callRaw))
	}
	if p.nargs == 0 {
		return p.t.args(out, "{}")
	}
	return p.t.args(out, "}")
}

func (p *pythonic) endList(out []Event) []Event {
	p.st = pyEnd
	return out
}

// rejectList gives a list whose first call names no offered function back as text.
func (p *pythonic) rejectList(out []Event) []Event {
	p.t.bad++
	out = p.t.text(out, string(p.raw))
	p.st = pyText
	return out
}

// broken ends the list at a byte that cannot continue it (not consumed: it and the
// text after it are content).
func (p *pythonic) broken(out []Event) []Event {
	if p.last != nil {
		*p.last = (*p.last)[:len(*p.last)-1]
	}
	out = p.giveBack(out)
	p.st = pyText
	return out
}

// giveBack ends the list early: text not yet part of a started call is content, and an
// open call is malformed.
func (p *pythonic) giveBack(out []Event) []Event {
	switch {
	case !p.committed:
		out = p.t.text(out, string(p.raw))
	case p.naming || p.discard:
		p.t.bad++
		out = p.t.text(out, string(p.callRaw))
	case p.inCall:
		p.t.bad++
		out = p.t.text(out, string(p.pending))
	}
	p.naming, p.inCall, p.discard = false, false, false
	return out
}

func (p *pythonic) Finish(out []Event) []Event {
	switch p.st {
	case pyStart, pyText, pyEnd:
		out = p.t.text(out, p.hold)
	case pyTag:
		out = p.t.text(out, string(p.raw))
	case pyList:
		out = p.giveBack(out)
	}
	p.hold, p.st = "", pyText
	return p.t.finish(out)
}

func (p *pythonic) Malformed() int { return p.t.bad }

// pyFrame follows a Python value's brackets and strings to find where it ends: at a ','
// or ')' outside them.
type pyFrame struct {
	stack []byte
	quote byte
	esc   bool
}

// step reads c and reports whether c ends the value (c is then not part of it), or
// whether it cannot be part of one.
func (f *pyFrame) step(c byte) (end, bad bool) {
	if f.quote != 0 {
		switch {
		case f.esc:
			f.esc = false
		case c == '\\':
			f.esc = true
		case c == f.quote:
			f.quote = 0
		}
		return false, false
	}
	switch c {
	case '\'', '"':
		f.quote = c
	case '[', '(', '{':
		f.stack = append(f.stack, c)
	case ']', ')', '}':
		if len(f.stack) == 0 {
			return c == ')', c != ')'
		}
		open := byte('[')
		if c == ')' {
			open = '('
		} else if c == '}' {
			open = '{'
		}
		if f.stack[len(f.stack)-1] != open {
			return false, true
		}
		f.stack = f.stack[:len(f.stack)-1]
	case ',':
		return len(f.stack) == 0, false
	}
	return false, false
}

// pyToJSON appends the JSON form of the Python literal src to dst, formatted as
// json.dumps does (", " and ": " separators). It accepts what vLLM's pythonic parser
// accepts through ast.literal_eval for arguments (strings, numbers, True/False/None,
// lists, tuples, dicts with string or number keys) and JSON's true/false/null.
func pyToJSON(dst []byte, src string) ([]byte, bool) {
	c := pyConv{s: src}
	dst, ok := c.value(dst, 0)
	c.space()
	return dst, ok && c.i == len(c.s)
}

type pyConv struct {
	s string
	i int
}

func (c *pyConv) space() {
	for c.i < len(c.s) && isSpace(c.s[c.i]) {
		c.i++
	}
}

func (c *pyConv) value(dst []byte, depth int) ([]byte, bool) {
	c.space()
	if c.i >= len(c.s) || depth > 256 {
		return dst, false
	}
	switch ch := c.s[c.i]; {
	case ch == '\'' || ch == '"':
		return c.str(dst)
	case ch == '[' || ch == '(':
		return c.list(dst, depth)
	case ch == '{':
		return c.dict(dst, depth)
	case ch == '-' || ch == '+' || ch == '.' || ch >= '0' && ch <= '9':
		return c.number(dst)
	default:
		j := c.i
		for j < len(c.s) && isIdentByte(c.s[j]) {
			j++
		}
		var lit string
		switch c.s[c.i:j] {
		case "True", "true":
			lit = "true"
		case "False", "false":
			lit = "false"
		case "None", "null":
			lit = "null"
		default:
			return dst, false
		}
		c.i = j
		return append(dst, lit...), true
	}
}

func (c *pyConv) list(dst []byte, depth int) ([]byte, bool) {
	open := c.s[c.i]
	end := byte(']')
	if open == '(' {
		end = ')'
	}
	c.i++
	mark := len(dst)
	dst = append(dst, '[')
	n, comma := 0, false
	for {
		c.space()
		if c.i < len(c.s) && c.s[c.i] == end {
			c.i++
			break
		}
		if n > 0 {
			if c.i >= len(c.s) || c.s[c.i] != ',' {
				return dst, false
			}
			c.i++
			comma = true
			c.space()
			if c.i < len(c.s) && c.s[c.i] == end {
				c.i++
				break
			}
			dst = append(dst, ',', ' ')
		}
		var ok bool
		if dst, ok = c.value(dst, depth+1); !ok {
			return dst, false
		}
		n++
		comma = false
	}
	if open == '(' && n == 1 && !comma {
		// (x) is x, not a tuple.
		inner := append([]byte(nil), dst[mark+1:]...)
		return append(dst[:mark], inner...), true
	}
	return append(dst, ']'), true
}

func (c *pyConv) dict(dst []byte, depth int) ([]byte, bool) {
	c.i++
	dst = append(dst, '{')
	for n := 0; ; n++ {
		c.space()
		if c.i < len(c.s) && c.s[c.i] == '}' {
			c.i++
			return append(dst, '}'), true
		}
		if n > 0 {
			if c.i >= len(c.s) || c.s[c.i] != ',' {
				return dst, false
			}
			c.i++
			c.space()
			if c.i < len(c.s) && c.s[c.i] == '}' {
				c.i++
				return append(dst, '}'), true
			}
			dst = append(dst, ',', ' ')
		}
		if c.i >= len(c.s) {
			return dst, false
		}
		// Keys: strings, or numbers and constants that JSON writes as strings.
		var ok bool
		if ch := c.s[c.i]; ch == '\'' || ch == '"' {
			dst, ok = c.str(dst)
		} else {
			var k []byte
			k, ok = c.value(nil, depth+1)
			if ok && (k[0] == '[' || k[0] == '{') {
				ok = false
			}
			dst = appendJSONString(dst, string(k))
		}
		if !ok {
			return dst, false
		}
		c.space()
		if c.i >= len(c.s) || c.s[c.i] != ':' {
			return dst, false
		}
		c.i++
		dst = append(dst, ':', ' ')
		if dst, ok = c.value(dst, depth+1); !ok {
			return dst, false
		}
	}
}

// number keeps a literal that is already a JSON number and converts the other Python
// forms (1_000, .5, 5., +1, 1E3) through float64 (or an integer).
func (c *pyConv) number(dst []byte) ([]byte, bool) {
	j := c.i
	if c.s[j] == '-' || c.s[j] == '+' {
		j++
	}
	for j < len(c.s) && (isIdentByte(c.s[j]) && c.s[j] != '-' || (c.s[j] == '+' || c.s[j] == '-') && (c.s[j-1] == 'e' || c.s[j-1] == 'E')) {
		j++
	}
	lit := c.s[c.i:j]
	c.i = j
	return appendNumber(dst, lit)
}

// appendNumber appends the JSON form of the Python number literal lit.
func appendNumber(dst []byte, lit string) ([]byte, bool) {
	if lit == "" {
		return dst, false
	}
	if json.Valid([]byte(lit)) && (lit[0] == '-' || lit[0] >= '0' && lit[0] <= '9') {
		return append(dst, lit...), true
	}
	t := strings.TrimPrefix(strings.ReplaceAll(lit, "_", ""), "+")
	if t == "" || strings.ContainsAny(t, "xXoObBjJnN") {
		return dst, false // hex, octal, binary, complex, inf and nan have no JSON form
	}
	if n, err := strconv.ParseInt(t, 10, 64); err == nil {
		return strconv.AppendInt(dst, n, 10), true
	}
	f, err := strconv.ParseFloat(t, 64)
	if err != nil {
		return dst, false
	}
	return appendFloat(dst, f), true
}

// appendFloat writes f as Python's json.dumps does for values that are whole numbers
// in int form, else the shortest repr.
func appendFloat(dst []byte, f float64) []byte {
	if f == float64(int64(f)) && f > -1e18 && f < 1e18 {
		return strconv.AppendInt(dst, int64(f), 10)
	}
	return strconv.AppendFloat(dst, f, 'g', -1, 64)
}

// str converts a Python string literal (either quote, escapes as Python reads them).
func (c *pyConv) str(dst []byte) ([]byte, bool) {
	q := c.s[c.i]
	c.i++
	dst = append(dst, '"')
	start := c.i
	for c.i < len(c.s) {
		ch := c.s[c.i]
		switch {
		case ch == q:
			dst = appendJSONStringBody(dst, c.s[start:c.i])
			c.i++
			return append(dst, '"'), true
		case ch == '\\':
			dst = appendJSONStringBody(dst, c.s[start:c.i])
			var ok bool
			if dst, ok = c.escape(dst); !ok {
				return dst, false
			}
			start = c.i
		case ch == '\n':
			return dst, false // a single-quoted string does not span lines
		default:
			c.i++
		}
	}
	return dst, false
}

// escape converts the escape sequence at c.i.
func (c *pyConv) escape(dst []byte) ([]byte, bool) {
	c.i++ // the backslash
	if c.i >= len(c.s) {
		return dst, false
	}
	e := c.s[c.i]
	c.i++
	switch e {
	case '\n':
		return dst, true // a line continuation
	case '\\', '\'', '"':
		return appendJSONStringBody(dst, string(e)), true
	case 'n':
		return append(dst, '\\', 'n'), true
	case 't':
		return append(dst, '\\', 't'), true
	case 'r':
		return append(dst, '\\', 'r'), true
	case 'b':
		return append(dst, '\\', 'b'), true
	case 'f':
		return append(dst, '\\', 'f'), true
	case 'v':
		return append(dst, '\\', 'u', '0', '0', '0', 'b'), true
	case 'a':
		return append(dst, '\\', 'u', '0', '0', '0', '7'), true
	case 'x', 'u', 'U':
		n := map[byte]int{'x': 2, 'u': 4, 'U': 8}[e]
		if c.i+n > len(c.s) {
			return dst, false
		}
		v, err := strconv.ParseUint(c.s[c.i:c.i+n], 16, 32)
		if err != nil || v > utf8.MaxRune {
			return dst, false
		}
		c.i += n
		return appendRune(dst, rune(v)), true
	}
	if e >= '0' && e <= '7' {
		v := rune(e - '0')
		for k := 0; k < 2 && c.i < len(c.s) && c.s[c.i] >= '0' && c.s[c.i] <= '7'; k++ {
			v = v*8 + rune(c.s[c.i]-'0')
			c.i++
		}
		return appendRune(dst, v), true
	}
	// Python keeps an unknown escape as written.
	return appendJSONStringBody(dst, c.s[c.i-2:c.i]), true
}

// appendRune appends r to a JSON string: escaped when it is a control character or a
// surrogate (which UTF-8 cannot hold), else as UTF-8.
func appendRune(dst []byte, r rune) []byte {
	if r >= 0xd800 && r <= 0xdfff {
		const hex = "0123456789abcdef"
		return append(dst, '\\', 'u', hex[r>>12&0xf], hex[r>>8&0xf], hex[r>>4&0xf], hex[r&0xf])
	}
	if r < 0x80 {
		return appendJSONStringBody(dst, string(rune(r)))
	}
	return utf8.AppendRune(dst, r)
}
