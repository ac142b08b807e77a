package parse

import (
	"encoding/json"
	"strings"
)

// GLM-4.5/4.6's tool-call tags (docs/reference.md §15).
const (
	glmCallOpen  = "<tool_call>"
	glmCallClose = "</tool_call>"
	glmKeyOpen   = "<arg_key>"
	glmKeyClose  = "</arg_key>"
	glmValOpen   = "<arg_value>"
	glmValClose  = "</arg_value>"
)

// Marker sets a glmCalls parser looks for in each state.
var (
	glmTextMarks    = []string{glmCallOpen}
	glmBetweenMarks = []string{glmKeyOpen, glmCallClose, glmCallOpen}
	glmKeyMarks     = []string{glmKeyClose, glmValOpen, glmCallClose, glmCallOpen}
	glmAfterKey     = []string{glmValOpen, glmKeyOpen, glmCallClose, glmCallOpen}
	glmValueMarks   = []string{glmValClose, glmCallClose}
	glmRawMarks     = []string{glmCallClose, glmCallOpen}
)

func init() {
	registerTool("glm45", func(o Options) Parser { return &glmCalls{t: toolCalls{o: o}} },
		glmCallOpen, glmCallClose, glmKeyOpen, glmKeyClose, glmValOpen, glmValClose)
}

type glmState uint8

const (
	gsText     glmState = iota // answer text
	gsName                     // after <tool_call>: the function's name
	gsBetween                  // in an emitted call, between arguments
	gsKey                      // after <arg_key>
	gsAfterKey                 // after </arg_key>, before <arg_value>
	gsValue                    // after <arg_value>
	gsRaw                      // a malformed call, passed through as content until </tool_call>
)

// glmCalls parses GLM-4.5's format (vLLM's glm45):
//
//	<tool_call>NAME
//	<arg_key>K</arg_key>
//	<arg_value>V</arg_value>
//	...</tool_call>
//
// into calls whose arguments are a JSON object built from the pairs, in order: a value
// whose parameter the tool's schema types "string" is a JSON string of the text as
// written (streamed as it arrives); any other value is its trimmed text when that is
// JSON, else a JSON string of it (vLLM also evaluates Python literals; this does not).
// The name ends at the first whitespace or '<' (GLM-4.7 writes no newline after it); a
// name longer than maxCallHeader bytes makes the call's text content, tags included.
// Text inside a call that is not an argument pair (a key without a value, stray words)
// is content and the call counts as malformed, as does a call the output leaves
// unterminated (its arguments stay unclosed). A missing </arg_key> or </arg_value>
// before the next tag is forgiven. The rest is toolcalls.go's streaming policy.
type glmCalls struct {
	t  toolCalls
	st glmState

	held string

	raw     []byte // the call's text from <tool_call>, until it is emitted
	name    []byte
	tool    Tool
	nargs   int  // argument pairs emitted in the current call
	callBad bool // the current call is counted in t.bad
	// junkOpen: a run of stray text between arguments has begun (its whitespace is text).
	junkOpen bool
	key      []byte // the pending key's text
	keyRaw   []byte // the pending key's text with its tags, returned as content if it gets no value
	str      bool   // the current value is a string (streamed)
	val      []byte // a non-string value's text
	esc      []byte // scratch for escaping
}

func (p *glmCalls) Malformed() int { return p.t.bad }

func (p *glmCalls) Push(text string, out []Event) []Event {
	return pushSteps(&p.held, text, out, p.step)
}

func (p *glmCalls) Finish(out []Event) []Event {
	s := p.held
	p.held = ""
	switch p.st {
	case gsText, gsRaw:
		out = p.t.text(out, s)
	case gsName:
		out = p.t.text(out, string(p.raw)+s)
		p.t.bad++
	case gsBetween:
		out = p.junk(out, s)
		p.markBad()
	case gsKey, gsAfterKey:
		out = p.t.text(out, string(p.keyRaw)+s)
		p.markBad()
	case gsValue:
		if p.str {
			out = p.escArgs(out, s)
		} else {
			out = p.argText(out, string(p.val)+s)
		}
		p.markBad()
	}
	p.st = gsText
	return p.t.finish(out)
}

func (p *glmCalls) step(s string, out []Event) (int, []Event) {
	switch p.st {
	case gsText:
		at, m, lim := cutAtMarker(s, glmTextMarks)
		out = p.t.text(out, s[:lim])
		if at < 0 {
			return lim, out
		}
		p.beginCall(m)
		return at + len(m), out

	case gsName:
		i := 0
		if len(p.name) == 0 {
			for i < len(s) && isSpace(s[i]) {
				i++
			}
		}
		end := strings.IndexAny(s[i:], " \t\r\n<")
		if end >= 0 {
			end += i
		}
		if room := maxCallHeader - (len(p.raw) - len(glmCallOpen)); end > room || end < 0 && len(s) > room {
			// Too long for a name: the call passes through as content.
			p.raw = append(p.raw, s[:room]...)
			out = p.t.text(out, string(p.raw))
			p.t.bad++
			p.st = gsRaw
			n, out := p.step(s[room:], out)
			return room + n, out
		}
		if end < 0 {
			p.name = append(p.name, s[i:]...)
			p.raw = append(p.raw, s...)
			return len(s), out
		}
		p.name = append(p.name, s[i:end]...)
		p.raw = append(p.raw, s[:end]...)
		if t, ok := p.t.o.tool(string(p.name)); ok && len(p.name) > 0 {
			p.tool = t
			out = p.t.start(out, t.Name, "")
			out = p.t.args(out, "{")
			p.nargs, p.callBad, p.junkOpen, p.st = 0, false, false, gsBetween
		} else {
			out = p.t.text(out, string(p.raw))
			p.t.bad++
			p.st = gsRaw
		}
		if end == 0 {
			// Nothing consumed: the name ended where s begins. Continue from the new state.
			return p.step(s, out)
		}
		return end, out

	case gsBetween:
		at, m, lim := cutAtMarker(s, glmBetweenMarks)
		out = p.junk(out, s[:lim])
		if at < 0 {
			return lim, out
		}
		p.junkOpen = false
		switch m {
		case glmKeyOpen:
			p.beginKey(m)
		case glmCallClose:
			out = p.closeCall(out)
		case glmCallOpen:
			p.markBad() // unterminated: its arguments stay unclosed
			p.beginCall(m)
		}
		return at + len(m), out

	case gsKey:
		at, m, lim := cutAtMarker(s, glmKeyMarks)
		p.key = append(p.key, s[:lim]...)
		p.keyRaw = append(p.keyRaw, s[:lim]...)
		if at < 0 {
			return lim, out
		}
		switch m {
		case glmKeyClose:
			p.keyRaw = append(p.keyRaw, m...)
			p.st = gsAfterKey
		case glmValOpen: // </arg_key> missing
			out = p.beginValue(out)
		default:
			out = p.loneKey(out, m)
		}
		return at + len(m), out

	case gsAfterKey:
		at, m, lim := cutAtMarker(s, glmAfterKey)
		if !isSpaces(s[:lim]) {
			// Text between a key and its value: the key and the text are content.
			p.keyRaw = append(p.keyRaw, s[:lim]...)
			out = p.t.text(out, string(p.keyRaw))
			p.markBad()
			p.keyRaw, p.key = p.keyRaw[:0], p.key[:0]
			// The stray text runs on, whitespace included, to the next tag.
			p.st, p.junkOpen = gsBetween, true
			return lim, out
		}
		p.keyRaw = append(p.keyRaw, s[:lim]...)
		if at < 0 {
			return lim, out
		}
		if m == glmValOpen {
			out = p.beginValue(out)
		} else {
			out = p.loneKey(out, m)
		}
		return at + len(m), out

	case gsValue:
		at, m, lim := cutAtMarker(s, glmValueMarks)
		if p.str {
			out = p.escArgs(out, s[:lim])
		} else {
			p.val = append(p.val, s[:lim]...)
		}
		if at < 0 {
			return lim, out
		}
		out = p.endValue(out)
		if m == glmCallClose { // </arg_value> missing
			out = p.closeCall(out)
		}
		return at + len(m), out

	case gsRaw:
		at, m, lim := cutAtMarker(s, glmRawMarks)
		out = p.t.text(out, s[:lim])
		if at < 0 {
			return lim, out
		}
		if m == glmCallClose {
			out = p.t.text(out, m)
			p.st = gsText
		} else {
			p.beginCall(m)
		}
		return at + len(m), out
	}
	panic("parse: unknown glm45 state")
}

func (p *glmCalls) beginCall(m string) {
	p.raw = append(p.raw[:0], m...)
	p.name = p.name[:0]
	p.st = gsName
}

func (p *glmCalls) beginKey(m string) {
	p.key = p.key[:0]
	p.keyRaw = append(p.keyRaw[:0], m...)
	p.st = gsKey
}

// beginValue emits the pending key and, for a string, the value's opening quote.
func (p *glmCalls) beginValue(out []Event) []Event {
	key := strings.TrimSpace(string(p.key))
	p.str = glmIsString(p.tool, key)
	b := p.esc[:0]
	if p.nargs > 0 {
		b = append(b, ", "...)
	}
	b = appendJSONString(b, key)
	b = append(b, ": "...)
	if p.str {
		b = append(b, '"')
	}
	p.esc = b
	out = p.argText(out, string(b))
	p.nargs++
	p.val = p.val[:0]
	p.st = gsValue
	return out
}

// endValue emits the end of the current value: a string's closing quote, or a
// non-string value whole.
func (p *glmCalls) endValue(out []Event) []Event {
	p.st, p.junkOpen = gsBetween, false
	if p.str {
		return p.argText(out, `"`)
	}
	v := strings.TrimSpace(string(p.val))
	if v != "" && json.Valid([]byte(v)) {
		return p.argText(out, v)
	}
	p.esc = appendJSONString(p.esc[:0], v)
	return p.argText(out, string(p.esc))
}

// loneKey returns a key that got no value as content, then moves past m (the tag that
// followed it).
func (p *glmCalls) loneKey(out []Event, m string) []Event {
	out = p.t.text(out, string(p.keyRaw))
	p.markBad()
	p.st, p.junkOpen = gsBetween, false
	switch m {
	case glmKeyOpen:
		p.beginKey(m)
	case glmCallClose:
		out = p.closeCall(out)
	case glmCallOpen:
		p.beginCall(m)
	}
	return out
}

func (p *glmCalls) closeCall(out []Event) []Event {
	p.st = gsText
	return p.argText(out, "}")
}

// junk handles text between a call's arguments: whitespace is dropped; a run of other
// text (through the next tag) is content and makes the call malformed.
func (p *glmCalls) junk(out []Event, s string) []Event {
	if !p.junkOpen {
		s = trimSpaceLeft(s)
		if s == "" {
			return out
		}
		p.junkOpen = true
		p.markBad()
	}
	return p.t.text(out, s)
}

func (p *glmCalls) markBad() {
	if !p.callBad {
		p.callBad = true
		p.t.bad++
	}
}

func (p *glmCalls) argText(out []Event, s string) []Event { return p.t.args(out, s) }

// escArgs emits s as the next part of a JSON string.
func (p *glmCalls) escArgs(out []Event, s string) []Event {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c == '"' || c == '\\' {
			p.esc = appendJSONStringBody(p.esc[:0], s)
			return p.argText(out, string(p.esc))
		}
	}
	return p.argText(out, s) // nothing to escape: no copy
}

// glmIsString reports whether tool's schema types parameter key as "string" (vLLM's
// test: properties.KEY.type == "string").
func glmIsString(t Tool, key string) bool {
	props, _ := t.Parameters["properties"].(map[string]any)
	prop, _ := props[key].(map[string]any)
	typ, _ := prop["type"].(string)
	return typ == "string"
}
