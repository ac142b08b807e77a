package parse

import (
	"encoding/json"
	"math/big"
	"strings"
)

// qwen3Coder parses Qwen3-Coder's XML tool calls (vLLM's --tool-call-parser
// qwen3_coder; docs/reference.md §15):
//
//	text<tool_call>
//	<function=write_file>
//	<parameter=path>
//	a.txt
//	</parameter>
//	<parameter=content>
//	any text, kept verbatim
//	</parameter>
//	</function>
//	</tool_call>
//
// Each value loses one leading and one trailing newline and becomes JSON by the type the
// tool's parameters schema declares, as vLLM converts them: a string (or an undeclared
// parameter) stays a string and streams as it arrives; integer, number, boolean, object
// and array values are parsed (JSON, then Python literals), falling back to the string;
// "null" or "None" is null where the schema allows null or the type is not a string.
// A closing tag counts only where the format can continue after it (</parameter> before
// <parameter=, </function> or </tool_call>; </function> before </tool_call> or the end),
// so a value may contain the tags as text. A call cut by the end of the output is closed
// there (its last value ends with the text) and counted malformed.
type qwen3Coder struct {
	t    toolCalls
	st   qcState
	hold string
	raw  []byte // the call's text until it starts
	name []byte
	tool Tool

	nparams int
	pname   []byte
	str     bool   // the value streams as a JSON string
	typ     string // the declared type (held values)
	null    bool   // the schema allows null
	val     []byte // a held value
	buf     []byte
}

type qcState uint8

const (
	qcText      qcState = iota // content; <tool_call> or <function= starts a call
	qcOpen                     // after <tool_call>: <function=
	qcName                     // inside <function=NAME>
	qcBody                     // between parameters
	qcParamName                // inside <parameter=NAME>
	qcValueNL                  // after <parameter=NAME>: a newline to drop
	qcValue                    // inside a value
	qcAfter                    // after </function>: </tool_call>
)

const (
	qcCallOpen   = "<tool_call>"
	qcCallClose  = "</tool_call>"
	qcFuncOpen   = "<function="
	qcFuncClose  = "</function>"
	qcParamOpen  = "<parameter="
	qcParamClose = "</parameter>"
)

func init() {
	registerTool("qwen3_coder", newQwen3Coder, qcCallOpen, qcCallClose)
}

func newQwen3Coder(o Options) Parser { return &qwen3Coder{t: toolCalls{o: o}} }

func (p *qwen3Coder) Push(text string, out []Event) []Event {
	s := text
	if p.hold != "" {
		s, p.hold = p.hold+text, ""
	}
	return p.run(s, out, false)
}

func (p *qwen3Coder) run(s string, out []Event, final bool) []Event {
	for s != "" {
		switch p.st {
		case qcText:
			at, m := firstMarker(s, qcCallOpen, qcFuncOpen)
			if at < 0 {
				k := partialSuffix(s, qcCallOpen, qcFuncOpen)
				out = p.t.text(out, s[:len(s)-k])
				p.hold = s[len(s)-k:]
				return out
			}
			out = p.t.text(out, s[:at])
			s = s[at+len(m):]
			p.raw = append(p.raw[:0], m...)
			p.name = p.name[:0]
			p.st = qcName
			if m == qcCallOpen {
				p.st = qcOpen
			}
		case qcOpen:
			r := trimSpaceLeft(s)
			p.raw = append(p.raw, s[:len(s)-len(r)]...)
			switch {
			case r == "":
				return out
			case strings.HasPrefix(r, qcFuncOpen):
				p.raw = append(p.raw, qcFuncOpen...)
				s = r[len(qcFuncOpen):]
				p.st = qcName
			case strings.HasPrefix(qcFuncOpen, r):
				p.hold = r
				return out
			default:
				out, s = p.reject(out), r
			}
		case qcName:
			j := strings.IndexByte(s, '>')
			if j < 0 {
				p.name = append(p.name, s...)
				p.raw = append(p.raw, s...)
				if len(p.name) > 256 {
					return p.reject(out)
				}
				return out
			}
			p.name = append(p.name, s[:j]...)
			p.raw = append(p.raw, s[:j+1]...)
			s = s[j+1:]
			name := strings.TrimSpace(string(p.name))
			tool, ok := p.t.o.tool(name)
			if !ok || strings.ContainsAny(name, "{}<>\"' \t\r\n") {
				out = p.reject(out)
				continue
			}
			p.tool, p.nparams = tool, 0
			out = p.t.start(out, name, "")
			p.st = qcBody
		case qcBody:
			r := trimSpaceLeft(s)
			switch {
			case r == "":
				return out
			case strings.HasPrefix(r, qcParamOpen):
				s = r[len(qcParamOpen):]
				p.pname = p.pname[:0]
				p.st = qcParamName
			case strings.HasPrefix(r, qcFuncClose):
				s = r[len(qcFuncClose):]
				out = p.closeArgs(out)
				p.st = qcAfter
			case strings.HasPrefix(r, qcCallClose):
				// </function> left out.
				s = r[len(qcCallClose):]
				out = p.closeArgs(out)
				p.st = qcText
			case strings.HasPrefix(qcParamOpen, r) || strings.HasPrefix(qcFuncClose, r) || strings.HasPrefix(qcCallClose, r):
				p.hold = r
				return out
			default:
				// Not the format: the call ends here and the text is content.
				p.t.bad++
				out = p.closeArgs(out)
				s = r
				p.st = qcText
			}
		case qcParamName:
			j := strings.IndexByte(s, '>')
			if j < 0 {
				p.pname = append(p.pname, s...)
				if len(p.pname) > 256 {
					p.t.bad++
					out = p.closeArgs(out)
					out = p.t.text(out, qcParamOpen+string(p.pname))
					p.st = qcText
				}
				return out
			}
			p.pname = append(p.pname, s[:j]...)
			s = s[j+1:]
			out = p.openParam(out)
			p.st = qcValueNL
		case qcValueNL:
			if s[0] == '\n' {
				s = s[1:]
			}
			p.st = qcValue
		case qcValue:
			at, m := firstMarker(s, qcParamClose, qcFuncClose)
			if at < 0 {
				e := len(s) - partialSuffix(s, qcParamClose, qcFuncClose)
				if final {
					e = len(s)
				} else if e > 0 && s[e-1] == '\n' {
					e-- // may be the newline before the closing tag
				}
				out = p.value(out, s[:e])
				if !final {
					p.hold = s[e:]
					return out
				}
				out = p.closeParam(out, true)
				p.st = qcBody
				return out
			}
			next := []string{qcParamOpen, qcFuncClose, qcCallClose}
			if m == qcFuncClose {
				next = next[2:]
			}
			switch follows(s[at+len(m):], final, next...) {
			case 0:
				e := at
				if e > 0 && s[e-1] == '\n' {
					e--
				}
				out = p.value(out, s[:e])
				p.hold = s[e:]
				return out
			case -1:
				out = p.value(out, s[:at+len(m)])
				s = s[at+len(m):]
				continue
			}
			v := s[:at]
			v = strings.TrimSuffix(v, "\n")
			out = p.value(out, v)
			out = p.closeParam(out, false)
			s = s[at+len(m):]
			p.st = qcBody
			if m == qcFuncClose {
				out = p.closeArgs(out)
				p.st = qcAfter
			}
		case qcAfter:
			r := trimSpaceLeft(s)
			switch {
			case r == "":
				return out
			case strings.HasPrefix(r, qcCallClose):
				s = r[len(qcCallClose):]
				p.st = qcText
			case strings.HasPrefix(qcCallClose, r) && !final:
				p.hold = r
				return out
			default:
				s = r
				p.st = qcText
			}
		}
	}
	return out
}

// follows reports whether rest (the text after a closing tag) continues, after
// whitespace, with one of next: 1 yes (or the output ends there, or inside one of them),
// -1 no, 0 not known yet.
func follows(rest string, final bool, next ...string) int {
	r := trimSpaceLeft(rest)
	if len(rest)-len(r) > 1024 {
		return -1 // no template writes that much whitespace between tags
	}
	if r == "" {
		if final {
			return 1
		}
		return 0
	}
	maybe := false
	for _, n := range next {
		if strings.HasPrefix(r, n) {
			return 1
		}
		maybe = maybe || strings.HasPrefix(n, r)
	}
	switch {
	case maybe && final:
		return 1 // the output ends inside the next tag
	case maybe:
		return 0
	}
	return -1
}

// reject gives a call that did not start back as content.
func (p *qwen3Coder) reject(out []Event) []Event {
	p.t.bad++
	p.st = qcText
	return p.t.text(out, string(p.raw))
}

// openParam starts parameter p.pname: a string value's key and opening quote go out now.
func (p *qwen3Coder) openParam(out []Event) []Event {
	p.typ, p.null, p.str = qcParamType(p.tool, string(p.pname))
	p.val = p.val[:0]
	if !p.str {
		return out
	}
	return p.t.args(out, string(p.key(p.buf[:0])))
}

// key appends the separator and the parameter's key.
func (p *qwen3Coder) key(b []byte) []byte {
	if p.nparams == 0 {
		b = append(b, '{')
	} else {
		b = append(b, ',', ' ')
	}
	b = appendJSONString(b, string(p.pname))
	b = append(b, ':', ' ')
	if p.str {
		b = append(b, '"')
	}
	return b
}

// value takes the next piece of the value being read.
func (p *qwen3Coder) value(out []Event, s string) []Event {
	if s == "" {
		return out
	}
	if !p.str {
		p.val = append(p.val, s...)
		return out
	}
	if !needsJSONEscape(s) {
		return p.t.args(out, s)
	}
	p.buf = appendJSONStringBody(p.buf[:0], s)
	return p.t.args(out, string(p.buf))
}

// closeParam ends the value; cut marks a value that the end of the output ended.
func (p *qwen3Coder) closeParam(out []Event, cut bool) []Event {
	if !p.str {
		v := string(p.val)
		if !cut {
			v = strings.TrimSuffix(v, "\n")
		}
		b := p.key(p.buf[:0])
		b = qcConvert(b, v, p.typ, p.null)
		p.buf = b
		out = p.t.args(out, string(b))
	} else {
		out = p.t.args(out, `"`)
	}
	p.nparams++
	return out
}

func (p *qwen3Coder) closeArgs(out []Event) []Event {
	if p.nparams == 0 {
		return p.t.args(out, "{}")
	}
	return p.t.args(out, "}")
}

func (p *qwen3Coder) Finish(out []Event) []Event {
	s := p.hold
	p.hold = ""
	switch p.st {
	case qcText, qcAfter:
		out = p.t.text(out, s)
	case qcOpen, qcName:
		p.raw = append(p.raw, s...)
		out = p.reject(out)
	case qcBody:
		p.t.bad++
		out = p.closeArgs(out)
		out = p.t.text(out, s)
	case qcParamName:
		p.t.bad++
		out = p.closeArgs(out)
		out = p.t.text(out, qcParamOpen+string(p.pname))
	case qcValueNL, qcValue:
		// The value ends with the output (or at a closing tag the output ends after).
		p.st = qcValue
		out = p.run(s, out, true)
		switch p.st {
		case qcValue: // nothing was left to read
			p.t.bad++
			out = p.closeParam(out, true)
			out = p.closeArgs(out)
		case qcBody:
			p.t.bad++
			out = p.closeArgs(out)
			out = p.t.text(out, p.hold)
		default:
			out = p.t.text(out, p.hold)
		}
		p.hold = ""
	}
	p.st = qcText
	return p.t.finish(out)
}

func (p *qwen3Coder) Malformed() int { return p.t.bad }

// qcParamType reads parameter name's type from tool's schema: the first non-null type
// of "type" (a string or a list) or of "anyOf"/"oneOf", whether null is allowed, and
// whether the value streams as a string (a string type, or a parameter the schema does
// not declare, and null not allowed).
func qcParamType(tool Tool, name string) (typ string, null, str bool) {
	props, _ := tool.Parameters["properties"].(map[string]any)
	schema, ok := props[name].(map[string]any)
	if !ok {
		return "string", false, true
	}
	var types []any
	if t, has := schema["type"]; has {
		types = append(types, t)
	} else {
		for _, k := range []string{"anyOf", "oneOf"} {
			opts, _ := schema[k].([]any)
			for _, o := range opts {
				if m, isMap := o.(map[string]any); isMap {
					types = append(types, m["type"])
				}
			}
		}
	}
	if len(types) == 1 {
		if list, isList := types[0].([]any); isList {
			types = list
		}
	}
	for _, t := range types {
		s, _ := t.(string)
		switch s = strings.ToLower(strings.TrimSpace(s)); {
		case s == "null":
			null = true
		case s != "" && typ == "":
			typ = s
		}
	}
	if typ == "" {
		typ = "string"
	}
	return typ, null, qcStringType(typ) && !null
}

func qcStringType(t string) bool {
	switch t {
	case "string", "str", "text", "varchar", "char", "enum":
		return true
	}
	return false
}

// qcConvert appends value v, of declared type typ, as JSON (vLLM's conversion; values
// that do not parse as the type stay strings, so no text is lost).
func qcConvert(dst []byte, v, typ string, null bool) []byte {
	trim := strings.TrimSpace(v)
	low := strings.ToLower(trim)
	isNull := low == "null" || low == "none"
	switch {
	case null && isNull:
		return append(dst, "null"...)
	case qcStringType(typ):
		return appendJSONString(dst, v)
	case isNull:
		return append(dst, "null"...)
	case hasAnyPrefix(typ, "int", "uint", "long", "short", "unsigned"):
		if n, ok := new(big.Int).SetString(strings.ReplaceAll(trim, "_", ""), 10); ok && !strings.HasPrefix(trim, "_") {
			if json.Valid([]byte(trim)) {
				return append(dst, trim...)
			}
			return n.Append(dst, 10)
		}
	case hasAnyPrefix(typ, "num", "float"):
		if b, ok := appendNumber(dst, trim); ok {
			return b
		}
	case typ == "boolean" || typ == "bool" || typ == "binary":
		if low == "true" || low == "false" {
			return append(dst, low...)
		}
	case typ == "object" || typ == "array" || typ == "arr" || hasAnyPrefix(typ, "dict", "list"):
		if json.Valid([]byte(trim)) {
			var inner string
			if json.Unmarshal([]byte(trim), &inner) == nil {
				// A JSON string holding a Python repr ("{'k': 'v'}").
				if b, ok := pyToJSON(dst, inner); ok {
					return b
				}
			}
			return append(dst, trim...)
		}
		if b, ok := pyToJSON(dst, trim); ok {
			return b
		}
	default:
		if b, ok := pyToJSON(dst, trim); ok {
			return b
		}
	}
	return appendJSONString(dst, v)
}

func hasAnyPrefix(s string, prefixes ...string) bool {
	for _, p := range prefixes {
		if strings.HasPrefix(s, p) {
			return true
		}
	}
	return false
}

// needsJSONEscape reports whether s holds a byte a JSON string escapes.
func needsJSONEscape(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c == '"' || c == '\\' {
			return true
		}
	}
	return false
}
