package parse

import "strings"

// hermes parses the Hermes format that Qwen2.5, Qwen3 and NousResearch Hermes models
// write (vLLM's --tool-call-parser hermes; docs/reference.md §15):
//
//	text<tool_call>
//	{"name": "get_weather", "arguments": {"city": "Paris"}}
//	</tool_call>
//	<tool_call>
//	{"name": ..., "arguments": ...}
//	</tool_call>
//
// Text outside the blocks is content. The JSON object may put "arguments" before
// "name"; arguments given as a JSON string holding an object are decoded. A block whose
// closing tag never comes is still a call when its object is complete (the tag may be
// cut off with the output). A malformed block comes back as content through its
// </tool_call>.
type hermes struct {
	t    toolCalls
	st   hermesState
	hold string
	call jsonCall
}

type hermesState uint8

const (
	hermesText  hermesState = iota // outside blocks
	hermesCall                     // inside a block's object
	hermesAfter                    // after the object: whitespace, then </tool_call>
	hermesSkip                     // a malformed block: content through </tool_call>
)

const (
	hermesOpen  = "<tool_call>"
	hermesClose = "</tool_call>"
)

func init() {
	registerTool("hermes", newHermes, hermesOpen, hermesClose)
}

func newHermes(o Options) Parser {
	return &hermes{t: toolCalls{o: o}, call: jsonCall{argKeys: []string{"arguments", "parameters"}, needArgs: true}}
}

func (p *hermes) Push(text string, out []Event) []Event {
	s := text
	if p.hold != "" {
		s, p.hold = p.hold+text, ""
	}
	for s != "" {
		switch p.st {
		case hermesText:
			at := strings.Index(s, hermesOpen)
			if at < 0 {
				k := partialSuffix(s, hermesOpen)
				out = p.t.text(out, s[:len(s)-k])
				p.hold = s[len(s)-k:]
				return out
			}
			out = p.t.text(out, s[:at])
			s = s[at+len(hermesOpen):]
			p.call.reset()
			p.call.raw = append(p.call.raw, hermesOpen...)
			p.st = hermesCall
		case hermesCall:
			n, r, o := p.call.feed(s, &p.t, out)
			out, s = o, s[n:]
			switch r {
			case jcDone:
				p.st = hermesAfter
			case jcRejected, jcBroken:
				p.t.bad++
				if !p.call.started {
					out = p.t.text(out, string(p.call.raw))
				}
				p.st = hermesSkip
			}
		case hermesAfter:
			s = trimSpaceLeft(s)
			switch {
			case s == "":
			case strings.HasPrefix(s, hermesClose):
				s = s[len(hermesClose):]
				p.st = hermesText
			case strings.HasPrefix(hermesClose, s):
				p.hold, s = s, ""
			default:
				p.st = hermesText
			}
		case hermesSkip:
			at := strings.Index(s, hermesClose)
			if at < 0 {
				k := partialSuffix(s, hermesClose)
				out = p.t.text(out, s[:len(s)-k])
				p.hold = s[len(s)-k:]
				return out
			}
			out = p.t.text(out, s[:at+len(hermesClose)])
			s = s[at+len(hermesClose):]
			p.st = hermesText
		}
	}
	return out
}

func (p *hermes) Finish(out []Event) []Event {
	if p.st == hermesCall {
		out = p.call.finish(&p.t, out)
	} else {
		// Held text that never became a marker is text.
		out = p.t.text(out, p.hold)
	}
	p.hold, p.st = "", hermesText
	return p.t.finish(out)
}

func (p *hermes) Malformed() int { return p.t.bad }
