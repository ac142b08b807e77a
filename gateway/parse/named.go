package parse

// The parsers of a request that forces a call (tool_choice): the engine was constrained
// with NamedSchema or RequiredSchema (schema.go), so the output is JSON whatever the
// model family, and is read as vLLM reads it (docs/reference.md §16). They follow the
// streaming policy of toolcalls.go.

// NewNamedCall returns the parser of an answer constrained to the parameters of function
// name (tool_choice {"type": "function", "function": {"name": name}}): the whole output,
// after whitespace, is the arguments object of one call of name, streamed as it
// arrives. Output that is not an object comes back as content, counted malformed, as
// does any output when name is not among o.Tools; text after the object is content.
func NewNamedCall(name string, o Options) Parser {
	return &namedCall{t: toolCalls{o: o}, name: name}
}

type namedCall struct {
	t    toolCalls
	name string
	st   namedState
	lead string // whitespace before the object
	args argStream
}

type namedState uint8

const (
	namedStart namedState = iota // before the object
	namedArgs                    // inside it
	namedAfter                   // after it, or not a call: content
)

func (p *namedCall) Push(text string, out []Event) []Event {
	s := text
	for s != "" {
		switch p.st {
		case namedStart:
			r := trimSpaceLeft(s)
			if r == "" {
				p.lead += s
				return out
			}
			if r[0] != '{' || !p.t.known(p.name) {
				p.t.bad++
				p.st = namedAfter
				return p.t.text(out, p.lead+s)
			}
			p.args.reset()
			out = p.t.start(out, p.name, "")
			s = r
			p.st = namedArgs
		case namedArgs:
			n, done := p.args.feed(s)
			out = p.t.args(out, s[:n])
			s = s[n:]
			if done {
				if !p.args.object() {
					p.t.bad++
				}
				p.st = namedAfter
			}
		case namedAfter:
			return p.t.text(out, s)
		}
	}
	return out
}

func (p *namedCall) Finish(out []Event) []Event {
	switch p.st {
	case namedStart:
		out = p.t.text(out, p.lead)
	case namedArgs:
		p.t.bad++ // cut by the end of the output
	}
	p.st = namedAfter
	return p.t.finish(out)
}

func (p *namedCall) Malformed() int { return p.t.bad }

// NewRequiredCalls returns the parser of an answer constrained by tool_choice
// "required": a JSON array of one or more calls, [{"name": NAME, "parameters": {...}},
// ...] ("arguments" is read too), streamed call by call. An element that is no call of
// o.Tools comes back as content, counted malformed; output that is not an array is
// content and malformed; text after the array is content.
func NewRequiredCalls(o Options) Parser {
	return &requiredCalls{t: toolCalls{o: o}, list: callList{call: jsonCall{argKeys: []string{"parameters", "arguments"}, needArgs: true}}}
}

type requiredCalls struct {
	t    toolCalls
	st   namedState
	lead string
	list callList
}

func (p *requiredCalls) Push(text string, out []Event) []Event {
	s := text
	for s != "" {
		switch p.st {
		case namedStart:
			r := trimSpaceLeft(s)
			if r == "" {
				p.lead += s
				return out
			}
			if r[0] != '[' {
				p.t.bad++
				p.st = namedAfter
				return p.t.text(out, p.lead+s)
			}
			s = r
			p.st = namedArgs
		case namedArgs:
			n, r, o := p.list.feed(s, &p.t, out)
			out, s = o, s[n:]
			if r != clMore {
				p.st = namedAfter
			}
		case namedAfter:
			return p.t.text(out, s)
		}
	}
	return out
}

func (p *requiredCalls) Finish(out []Event) []Event {
	switch p.st {
	case namedStart:
		out = p.t.text(out, p.lead)
	case namedArgs:
		out = p.list.finish(&p.t, out)
	}
	p.st = namedAfter
	return p.t.finish(out)
}

func (p *requiredCalls) Malformed() int { return p.t.bad }
