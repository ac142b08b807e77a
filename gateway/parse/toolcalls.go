package parse

import (
	"encoding/json"
	"strings"
)

// This file holds what the tool-call parsers share: the output side (toolCalls), a
// streamed arguments object (argStream), an incremental reader of one
// {"name": ..., "arguments": {...}} object (jsonCall) and of a JSON list of them
// (callList), and JSON string escaping.
//
// Streaming policy, the same in every family (docs/reference.md §15):
//   - A call starts (KindToolCall) once its name is complete and one of Options.Tools
//     and its arguments have begun; its arguments are then forwarded as they arrive
//     (JSON arguments as the model's own text).
//     Before that point nothing of the call has been emitted, so a call that turns out
//     malformed (unknown name, arguments that are not a JSON object, a syntax error,
//     the end of the output) comes back whole as content and counts in Malformed.
//   - After that point nothing can be taken back: JSON arguments that end as invalid
//     JSON stay as the model wrote them, and arguments cut by the end of the output stay
//     cut (as OpenAI's API returns a call cut by max_tokens); both count in Malformed.
//     Text after a syntax error comes back as content. Families whose JSON the parser
//     writes itself (XML or Python arguments) may close it instead; each says so.
//   - Content is the model's text verbatim, except whitespace that touches a call (the
//     newlines a template writes around <tool_call> blocks), which is dropped.

// toolCalls is the output side a tool-call parser shares: call numbering, the malformed
// count and the whitespace rule for content. It never merges an event into one already
// in out: a caller may pass back every event of the answer so far.
type toolCalls struct {
	o   Options
	n   int // calls started
	bad int
	// ws is whitespace at the end of the content so far, held until it is known whether
	// a call follows it (dropped) or more text (emitted).
	ws []byte
	// afterCall: the last thing out was a call, so leading whitespace is dropped.
	afterCall bool
}

func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

func trimSpaceLeft(s string) string {
	i := 0
	for i < len(s) && isSpace(s[i]) {
		i++
	}
	return s[i:]
}

func trimSpaceRight(s string) string {
	i := len(s)
	for i > 0 && isSpace(s[i-1]) {
		i--
	}
	return s[:i]
}

// text emits s as content.
func (t *toolCalls) text(out []Event, s string) []Event {
	if t.afterCall {
		s = trimSpaceLeft(s)
		if s == "" {
			return out
		}
		t.afterCall = false
	}
	body := trimSpaceRight(s)
	if body == "" {
		t.ws = append(t.ws, s...)
		return out
	}
	if len(t.ws) > 0 {
		body = string(t.ws) + body
		t.ws = t.ws[:0]
	}
	t.ws = append(t.ws, s[len(trimSpaceRight(s)):]...)
	return append(out, Event{Kind: KindContent, Text: body})
}

// start begins the next call; id "" takes Options' id.
func (t *toolCalls) start(out []Event, name, id string) []Event {
	t.ws = t.ws[:0]
	t.afterCall = true
	i := t.n
	t.n++
	if id == "" {
		id = t.o.id(i)
	}
	return append(out, Event{Kind: KindToolCall, Index: i, ID: id, Name: name})
}

// args emits s as the next fragment of the open call's arguments.
func (t *toolCalls) args(out []Event, s string) []Event {
	if s == "" {
		return out
	}
	return append(out, Event{Kind: KindToolArgs, Index: t.n - 1, Text: s})
}

// finish emits the whitespace still held when no call follows it.
func (t *toolCalls) finish(out []Event) []Event {
	if !t.afterCall && len(t.ws) > 0 {
		out = append(out, Event{Kind: KindContent, Text: string(t.ws)})
	}
	t.ws = t.ws[:0]
	return out
}

func (t *toolCalls) known(name string) bool {
	_, ok := t.o.tool(name)
	return ok
}

// argStream follows one JSON value (a call's arguments) and keeps its text for the
// validity check once it is complete.
type argStream struct {
	v    jsonValue
	text []byte
}

func (a *argStream) reset() {
	a.v = jsonValue{stack: a.v.stack[:0]}
	a.text = a.text[:0]
}

// feed consumes the bytes of s that belong to the value and reports whether it ended.
func (a *argStream) feed(s string) (int, bool) {
	n := a.v.feed(s)
	a.text = append(a.text, s[:n]...)
	return n, a.v.done
}

// object reports whether the complete value is a valid JSON object.
func (a *argStream) object() bool {
	return !a.v.bad && len(a.text) > 0 && a.text[0] == '{' && json.Valid(a.text)
}

// jsonObjectText returns s trimmed when it is a JSON object's text.
func jsonObjectText(s string) (string, bool) {
	s = strings.TrimSpace(s)
	if s == "" || s[0] != '{' || !json.Valid([]byte(s)) {
		return "", false
	}
	return s, true
}

type jcState uint8

const (
	jcOpen     jcState = iota // before the object's '{'
	jcFirstKey                // after '{': a key or '}'
	jcKey                     // inside a key
	jcColon                   // after a key
	jcValue                   // before a value
	jcName                    // inside the name string
	jcArgs                    // inside the arguments value
	jcOther                   // inside another key's value
	jcNext                    // after a value: ',' or '}'
	jcNextKey                 // after ',': a key
	jcDiscard                 // a rejected call: following the object to its end
)

type jcResult uint8

const (
	jcMore     jcResult = iota // all of the text consumed; the object goes on
	jcDone                     // the object ended and was a call
	jcRejected                 // the object ended but is no call; raw is its text
	jcBroken                   // the next byte cannot continue the object
)

// jsonCall reads one call object, {"name": NAME, "arguments": {...}} (the arguments key
// is the family's), incrementally. Other keys are skipped; the keys may come in any
// order: arguments that precede the name are held until the name is known. Arguments
// written as a JSON string that holds an object (Granite and some Hermes fine-tunes)
// are decoded; they cannot be streamed.
type jsonCall struct {
	argKeys []string // the keys that hold the arguments
	// needArgs rejects a call without an arguments key (else its arguments are {}).
	needArgs bool

	st      jcState
	key     []byte
	esc     bool
	name    []byte
	nameStr string
	hasName bool
	argsAt  uint8 // 0 not seen, 1 reading, 2 complete
	strArgs bool  // the arguments are a JSON string holding the object
	held    string
	args    argStream
	other   jsonValue
	started bool
	// raw is the object's text while no call has started: what a rejected call gives back.
	raw []byte
}

func (c *jsonCall) reset() {
	c.st, c.esc, c.hasName, c.argsAt, c.strArgs, c.started = jcOpen, false, false, 0, false, false
	c.key, c.name, c.raw = c.key[:0], c.name[:0], c.raw[:0]
	c.nameStr, c.held = "", ""
	c.args.reset()
}

func (c *jsonCall) isArgsKey() bool {
	for _, k := range c.argKeys {
		if string(c.key) == k {
			return true
		}
	}
	return false
}

// feed consumes s up to the object's end. It returns the bytes consumed (for jcBroken,
// the index of the byte that cannot continue the object) and the events the object made
// certain.
func (c *jsonCall) feed(s string, t *toolCalls, out []Event) (int, jcResult, []Event) {
	i := 0
	for i < len(s) {
		ch := s[i]
		switch c.st {
		case jcOpen, jcFirstKey, jcNextKey, jcColon, jcNext:
			if isSpace(ch) {
				i++
				continue
			}
			switch {
			case c.st == jcOpen && ch == '{':
				c.st = jcFirstKey
			case (c.st == jcFirstKey || c.st == jcNextKey) && ch == '"':
				c.st, c.key, c.esc = jcKey, c.key[:0], false
			case c.st == jcColon && ch == ':':
				c.st = jcValue
			case c.st == jcNext && ch == ',':
				c.st = jcNextKey
			case (c.st == jcFirstKey || c.st == jcNext) && ch == '}':
				return c.end(s, i+1, t, out)
			default:
				return c.ret(s, i, jcBroken, out)
			}
			i++
		case jcKey, jcName:
			j := i
			for ; j < len(s); j++ {
				if c.esc {
					c.esc = false
				} else if s[j] == '\\' {
					c.esc = true
				} else if s[j] == '"' {
					break
				}
			}
			if c.st == jcKey {
				if room := 64 - len(c.key); room > 0 {
					c.key = append(c.key, s[i:i+min(room, j-i)]...)
				}
			} else {
				c.name = append(c.name, s[i:j]...)
			}
			if j == len(s) {
				i = j
				continue
			}
			i = j + 1
			if c.st == jcKey {
				c.st = jcColon
				continue
			}
			c.st = jcNext
			var ok bool
			out, ok = c.gotName(t, out)
			if !ok {
				c.discard()
			}
		case jcValue:
			if isSpace(ch) {
				i++
				continue
			}
			switch {
			case string(c.key) == "name" && !c.hasName:
				if ch != '"' {
					return c.ret(s, i, jcBroken, out)
				}
				c.st, c.name, c.esc = jcName, c.name[:0], false
				i++
			case c.argsAt == 0 && c.isArgsKey():
				switch ch {
				case '{':
					if c.hasName {
						out = c.start(t, out)
					}
				case '"':
					c.strArgs = true
				default:
					return c.ret(s, i, jcBroken, out)
				}
				c.st, c.argsAt = jcArgs, 1
			default:
				c.other = jsonValue{stack: c.other.stack[:0]}
				c.st = jcOther
			}
		case jcArgs:
			m, done := c.args.feed(s[i:])
			if c.started {
				out = t.args(out, s[i:i+m])
			}
			i += m
			if !done {
				continue
			}
			c.st, c.argsAt = jcNext, 2
			var ok bool
			out, ok = c.gotArgs(t, out)
			if !ok {
				c.discard()
			}
		case jcOther, jcDiscard:
			m := c.other.feed(s[i:])
			i += m
			if !c.other.done {
				continue
			}
			if c.other.bad {
				return c.ret(s, i-1, jcBroken, out)
			}
			if c.st == jcDiscard {
				return c.ret(s, i, jcRejected, out)
			}
			c.st = jcNext
		}
	}
	return c.ret(s, len(s), jcMore, out)
}

// ret keeps the consumed text while no call has started.
func (c *jsonCall) ret(s string, n int, r jcResult, out []Event) (int, jcResult, []Event) {
	if !c.started {
		c.raw = append(c.raw, s[:n]...)
	}
	return n, r, out
}

func (c *jsonCall) start(t *toolCalls, out []Event) []Event {
	c.started = true
	c.raw = c.raw[:0]
	return t.start(out, c.nameStr, "")
}

// discard follows the rest of a rejected object (the reader is between members, at
// depth 1) so that its whole text comes back.
func (c *jsonCall) discard() {
	c.st = jcDiscard
	c.other = jsonValue{started: true, depth: 1, stack: append(c.other.stack[:0], '{')}
}

// gotName checks the completed name; false rejects the call.
func (c *jsonCall) gotName(t *toolCalls, out []Event) ([]Event, bool) {
	name := string(c.name)
	if strings.IndexByte(name, '\\') >= 0 {
		if err := json.Unmarshal([]byte(`"`+name+`"`), &name); err != nil {
			return out, false
		}
	}
	c.nameStr, c.hasName = name, true
	if !t.known(name) {
		return out, false
	}
	if c.argsAt == 2 {
		out = c.start(t, out)
		out = t.args(out, c.held)
	}
	return out, true
}

// gotArgs checks the completed arguments; false rejects the call.
func (c *jsonCall) gotArgs(t *toolCalls, out []Event) ([]Event, bool) {
	if c.started {
		if !c.args.object() {
			t.bad++
		}
		return out, true
	}
	if c.strArgs {
		var inner string
		if json.Unmarshal(c.args.text, &inner) != nil {
			return out, false
		}
		obj, ok := jsonObjectText(inner)
		if !ok {
			return out, false
		}
		c.held = obj
	} else {
		if !c.args.object() {
			return out, false
		}
		c.held = string(c.args.text)
	}
	if c.hasName {
		out = c.start(t, out)
		out = t.args(out, c.held)
	}
	return out, true
}

// end handles the object's closing brace, consumed as s[:n].
func (c *jsonCall) end(s string, n int, t *toolCalls, out []Event) (int, jcResult, []Event) {
	if !c.started {
		if !c.hasName || c.argsAt == 0 && c.needArgs {
			return c.ret(s, n, jcRejected, out)
		}
		out = c.start(t, out)
		out = t.args(out, "{}")
	}
	return c.ret(s, n, jcDone, out)
}

// finish ends an object cut by the end of the output: one that has not started comes
// back as content; a started one keeps what streamed and is malformed unless its
// arguments were complete (only a closing brace or tag was missing).
func (c *jsonCall) finish(t *toolCalls, out []Event) []Event {
	if !c.started {
		t.bad++
		return t.text(out, string(c.raw))
	}
	if c.argsAt != 2 {
		t.bad++
	}
	return out
}

type clState uint8

const (
	clOpen clState = iota // before '['
	clElem                // before an element or ']'
	clCall                // inside an element
	clNext                // after an element: ',' or ']'
)

// callList reads a JSON array of call objects ([{"name": ..., "arguments": ...}, ...]):
// Mistral's pre-v11 format and the output of tool_choice "required". An element that is
// no call (unknown name, bad arguments) comes back as content and the list goes on; a
// byte that cannot continue the list ends it (clBroken, counted malformed) and the text
// from there on is the caller's content.
type callList struct {
	st   clState
	call jsonCall
}

type clResult uint8

const (
	clMore   clResult = iota // all of the text consumed; the list goes on
	clEnd                    // the list ended
	clBroken                 // the next byte cannot continue the list
)

func (l *callList) feed(s string, t *toolCalls, out []Event) (int, clResult, []Event) {
	i := 0
	for i < len(s) {
		if l.st == clCall {
			n, r, o := l.call.feed(s[i:], t, out)
			out = o
			i += n
			switch r {
			case jcDone:
				l.st = clNext
			case jcRejected:
				t.bad++
				out = t.text(out, string(l.call.raw))
				l.st = clNext
			case jcBroken:
				t.bad++
				if !l.call.started {
					out = t.text(out, string(l.call.raw))
				}
				return i, clBroken, out
			}
			continue
		}
		ch := s[i]
		if isSpace(ch) {
			i++
			continue
		}
		switch {
		case l.st == clOpen && ch == '[':
			l.st = clElem
		case l.st == clElem && ch == '{':
			l.call.reset()
			l.st = clCall
			continue
		case l.st == clNext && ch == ',':
			l.st = clElem
		case (l.st == clElem || l.st == clNext) && ch == ']':
			return i + 1, clEnd, out
		default:
			t.bad++
			return i, clBroken, out
		}
		i++
	}
	return len(s), clMore, out
}

func (l *callList) finish(t *toolCalls, out []Event) []Event {
	if l.st == clCall {
		return l.call.finish(t, out)
	}
	return out
}

// appendJSONString appends s as a JSON string, escaped as Python's json.dumps with
// ensure_ascii=False does: quotes, backslashes and control characters only.
func appendJSONString(dst []byte, s string) []byte {
	dst = append(dst, '"')
	dst = appendJSONStringBody(dst, s)
	return append(dst, '"')
}

// appendJSONStringBody is appendJSONString without the quotes: a fragment of a string
// that streams. Every other byte is kept as is, so a string cut anywhere (even inside a
// UTF-8 character) escapes to the same bytes in pieces.
func appendJSONStringBody(dst []byte, s string) []byte {
	const hexDigits = "0123456789abcdef"
	start := 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 0x20 && c != '"' && c != '\\' {
			continue
		}
		dst = append(dst, s[start:i]...)
		switch c {
		case '"', '\\':
			dst = append(dst, '\\', c)
		case '\n':
			dst = append(dst, '\\', 'n')
		case '\r':
			dst = append(dst, '\\', 'r')
		case '\t':
			dst = append(dst, '\\', 't')
		case '\b':
			dst = append(dst, '\\', 'b')
		case '\f':
			dst = append(dst, '\\', 'f')
		default:
			dst = append(dst, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
		}
		start = i + 1
	}
	return append(dst, s[start:]...)
}
