package parse

import "strings"

// mistral parses Mistral's tool calls (vLLM's --tool-call-parser mistral;
// docs/reference.md §15), in both of its tokenizers' formats, told apart by what
// follows [TOOL_CALLS]:
//
//	text[TOOL_CALLS][{"name": "add", "arguments": {"a": 1}}, {"name": ...}]   (before v11)
//	text[TOOL_CALLS]add[ARGS]{"a": 1}[TOOL_CALLS]mul[ARGS]{"b": 2}           (v11 and later)
//
// In the second, a detokenizer that drops special tokens leaves add{"a": 1}, so the
// name also ends at '{'; [CALL_ID]ID after the name carries the model's own call id.
// [TOOL_CALLS], [ARGS] and [CALL_ID] are special tokens (Markers). Text before the first
// [TOOL_CALLS] is content, as is text after the calls.
type mistral struct {
	t    toolCalls
	st   mistralState
	hold string
	raw  []byte // the v11 call's text while it has not started
	name []byte
	id   []byte
	args argStream
	list callList
}

type mistralState uint8

const (
	mistralText    mistralState = iota // content; [TOOL_CALLS] starts calls
	mistralBot                         // after [TOOL_CALLS]: '[' (a JSON list) or a name
	mistralName                        // inside a v11 name
	mistralCallID                      // after [CALL_ID]
	mistralArgsAt                      // before a v11 call's arguments
	mistralArgs                        // inside a started call's arguments
	mistralDiscard                     // inside the arguments of a call of an unknown function
	mistralList                        // inside a pre-v11 JSON list
)

const (
	mistralBOT     = "[TOOL_CALLS]"
	mistralArgsT   = "[ARGS]"
	mistralCallIDT = "[CALL_ID]"
)

func init() {
	registerTool("mistral", newMistral, mistralBOT, mistralArgsT, mistralCallIDT)
}

func newMistral(o Options) Parser {
	return &mistral{t: toolCalls{o: o}, list: callList{call: jsonCall{argKeys: []string{"arguments"}}}}
}

func (p *mistral) Push(text string, out []Event) []Event {
	s := text
	if p.hold != "" {
		s, p.hold = p.hold+text, ""
	}
	for s != "" {
		switch p.st {
		case mistralText:
			at := strings.Index(s, mistralBOT)
			if at < 0 {
				k := partialSuffix(s, mistralBOT)
				out = p.t.text(out, s[:len(s)-k])
				p.hold = s[len(s)-k:]
				return out
			}
			out = p.t.text(out, s[:at])
			s = s[at+len(mistralBOT):]
			p.st = mistralBot
		case mistralBot:
			s = trimSpaceLeft(s)
			if s == "" {
				return out
			}
			if s[0] == '[' {
				p.list.st = clOpen
				p.st = mistralList
				continue
			}
			p.raw = append(p.raw[:0], mistralBOT...)
			p.name, p.id = p.name[:0], p.id[:0]
			p.st = mistralName
		case mistralName, mistralCallID:
			at, m := firstMarker(s, mistralArgsT, mistralCallIDT, "{")
			if at < 0 {
				k := partialSuffix(s, mistralArgsT, mistralCallIDT)
				p.grow(s[:len(s)-k])
				p.hold = s[len(s)-k:]
				if len(p.name) > 256 || len(p.id) > 256 {
					// No name is this long: the text is not a call.
					p.t.bad++
					out = p.t.text(out, string(p.raw))
					p.st = mistralText
				}
				return out
			}
			p.grow(s[:at])
			if m == "{" {
				s = s[at:]
			} else {
				p.raw = append(p.raw, m...)
				s = s[at+len(m):]
			}
			p.st = mistralArgsAt
			if m == mistralCallIDT {
				p.st = mistralCallID
			}
		case mistralArgsAt:
			r := trimSpaceLeft(s)
			p.raw = append(p.raw, s[:len(s)-len(r)]...)
			s = r
			if s == "" {
				return out
			}
			p.args.reset()
			name := strings.TrimSpace(string(p.name))
			if s[0] != '{' {
				p.t.bad++
				out = p.t.text(out, string(p.raw))
				p.st = mistralText
				continue
			}
			if !p.t.known(name) {
				p.st = mistralDiscard
				continue
			}
			out = p.t.start(out, name, mistralID(string(p.id)))
			p.st = mistralArgs
		case mistralArgs:
			n, done := p.args.feed(s)
			out = p.t.args(out, s[:n])
			s = s[n:]
			if done {
				if !p.args.object() {
					p.t.bad++
				}
				p.st = mistralText
			}
		case mistralDiscard:
			n, done := p.args.feed(s)
			p.raw = append(p.raw, s[:n]...)
			s = s[n:]
			if done {
				p.t.bad++
				out = p.t.text(out, string(p.raw))
				p.st = mistralText
			}
		case mistralList:
			n, r, o := p.list.feed(s, &p.t, out)
			out, s = o, s[n:]
			if r != clMore {
				p.st = mistralText
			}
		}
	}
	return out
}

// grow adds text to the name or call id being read, and to the call's text.
func (p *mistral) grow(s string) {
	p.raw = append(p.raw, s...)
	if p.st == mistralCallID {
		p.id = append(p.id, s...)
	} else {
		p.name = append(p.name, s...)
	}
}

// mistralID returns the model's call id when it is one Mistral's validator accepts
// (nine letters and digits), else "" (Options' id).
func mistralID(id string) string {
	id = strings.TrimSpace(id)
	if len(id) != 9 {
		return ""
	}
	for i := 0; i < len(id); i++ {
		if c := id[i]; !(c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z') {
			return ""
		}
	}
	return id
}

func (p *mistral) Finish(out []Event) []Event {
	switch p.st {
	case mistralText:
		out = p.t.text(out, p.hold)
	case mistralName, mistralCallID, mistralArgsAt, mistralDiscard:
		p.t.bad++
		out = p.t.text(out, string(p.raw)+p.hold)
	case mistralArgs:
		p.t.bad++
	case mistralList:
		out = p.list.finish(&p.t, out)
	}
	p.hold, p.st = "", mistralText
	return p.t.finish(out)
}

func (p *mistral) Malformed() int { return p.t.bad }
