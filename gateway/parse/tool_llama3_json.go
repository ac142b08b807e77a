package parse

import "strings"

// llama3JSON parses Llama 3.1/3.2/3.3's JSON tool calls (vLLM's --tool-call-parser
// llama3_json; docs/reference.md §15): an answer that starts, after whitespace, with '{'
// or with <|python_tag|> is one or more call objects
//
//	{"name": "get_weather", "parameters": {"city": "Paris"}}; {"name": ...}
//
// ("parameters" as Meta's template asks, or "arguments"), separated by ';' and/or
// whitespace. Any other answer is content, as is text after the calls. An object that is
// no call (unknown name, no arguments) comes back as content and the next one is read;
// text that is not JSON ends the calls and is content.
type llama3JSON struct {
	t    toolCalls
	st   llamaState
	hold string // leading whitespace, or a partial <|python_tag|>, before the decision
	semi bool   // a ';' was read between two calls
	call jsonCall
}

type llamaState uint8

const (
	llamaStart   llamaState = iota // deciding: call or content
	llamaTag                       // after <|python_tag|>: whitespace, then '{'
	llamaCall                      // inside a call object
	llamaBetween                   // after a call: whitespace, ';', the next '{'
	llamaText                      // content to the end
)

const llamaPythonTag = "<|python_tag|>"

func init() {
	registerTool("llama3_json", newLlama3JSON, llamaPythonTag)
	registerTool("llama4_json", newLlama3JSON, llamaPythonTag)
}

func newLlama3JSON(o Options) Parser {
	return &llama3JSON{t: toolCalls{o: o}, call: jsonCall{argKeys: []string{"parameters", "arguments"}, needArgs: true}}
}

func (p *llama3JSON) Push(text string, out []Event) []Event {
	s := text
	if p.hold != "" {
		s, p.hold = p.hold+text, ""
	}
	for s != "" {
		switch p.st {
		case llamaStart:
			r := trimSpaceLeft(s)
			switch {
			case r == "" || strings.HasPrefix(llamaPythonTag, r) && len(r) < len(llamaPythonTag):
				p.hold = s
				return out
			case r[0] == '{':
				s = r
				p.call.reset()
				p.st = llamaCall
			case strings.HasPrefix(r, llamaPythonTag):
				s = r[len(llamaPythonTag):]
				p.st = llamaTag
			default:
				p.st = llamaText
			}
		case llamaTag:
			s = trimSpaceLeft(s)
			if s == "" {
				return out
			}
			if s[0] == '{' {
				p.call.reset()
				p.st = llamaCall
				continue
			}
			// Code for a built-in tool (brave_search.call(...)), not a JSON call.
			p.t.bad++
			p.st = llamaText
		case llamaCall:
			n, r, o := p.call.feed(s, &p.t, out)
			out, s = o, s[n:]
			switch r {
			case jcDone:
				p.st, p.semi = llamaBetween, false
			case jcRejected:
				p.t.bad++
				out = p.t.text(out, string(p.call.raw))
				p.st, p.semi = llamaBetween, false
			case jcBroken:
				p.t.bad++
				if !p.call.started {
					out = p.t.text(out, string(p.call.raw))
				}
				p.st = llamaText
			}
		case llamaBetween:
			s = trimSpaceLeft(s)
			switch {
			case s == "":
			case s[0] == ';' && !p.semi:
				p.semi = true
				s = s[1:]
			case s[0] == '{':
				p.call.reset()
				p.st = llamaCall
			default:
				p.st = llamaText
			}
		case llamaText:
			return p.t.text(out, s)
		}
	}
	return out
}

func (p *llama3JSON) Finish(out []Event) []Event {
	switch p.st {
	case llamaStart:
		out = p.t.text(out, p.hold)
	case llamaCall:
		out = p.call.finish(&p.t, out)
	}
	p.hold, p.st = "", llamaText
	return p.t.finish(out)
}

func (p *llama3JSON) Malformed() int { return p.t.bad }
