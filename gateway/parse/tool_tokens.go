package parse

import "strings"

// tokenFormat describes a tool-call format whose calls are delimited by special tokens
// and whose arguments are one JSON object (docs/reference.md §15): DeepSeek V3 and V3.1,
// Kimi K2. The model writes
//
//	[SECTION_BEGIN] CALL_BEGIN header ARGS_BEGIN pre {arguments} post CALL_END ... [SECTION_END]
//
// The section markers are optional: a call marker opens a call outside a section too.
// Every marker must begin with '<' (cutAtMarker relies on it).
type tokenFormat struct {
	sectionBegin, sectionEnd []string
	callBegin, argsBegin     string
	callEnd                  string
	// decode reads a call's header (the text between CALL_BEGIN and ARGS_BEGIN) and pre
	// (the text between ARGS_BEGIN and the arguments' opening brace). It returns the
	// function's name and the call id the model wrote ("": Options.NewID's), or ok false
	// when they are not what the format writes there.
	decode func(header, pre string) (name, id string, ok bool)
	// postOK reports whether post (the text between the arguments' closing brace and
	// CALL_END) is the format's own (whitespace, a closing code fence).
	postOK func(post string) bool

	// marker sets looked for in each state (built by init).
	text, section, header, call []string
}

func (f *tokenFormat) init() *tokenFormat {
	f.text = append(append([]string{}, f.sectionBegin...), f.callBegin)
	f.section = append(append(append([]string{}, f.sectionBegin...), f.sectionEnd...), f.callBegin)
	f.call = append([]string{f.callEnd, f.callBegin}, f.sectionEnd...)
	f.header = append([]string{f.argsBegin}, f.call...)
	for _, m := range f.section {
		if !strings.HasPrefix(m, "<") {
			panic("parse: token format marker " + m + " does not begin with '<'")
		}
	}
	return f
}

func (f *tokenFormat) isSectionEnd(m string) bool {
	for _, e := range f.sectionEnd {
		if m == e {
			return true
		}
	}
	return false
}

// tokenState is where a tokenCalls parser is in the output.
type tokenState uint8

const (
	tsText    tokenState = iota // answer text, outside a calls section
	tsSection                   // inside a calls section, between calls
	tsHeader                    // after CALL_BEGIN: the header
	tsPre                       // after ARGS_BEGIN, before the arguments' '{'
	tsArgs                      // inside the arguments object (the call was emitted)
	tsPost                      // after the arguments, before CALL_END
	tsRaw                       // a malformed call, passed through as content until CALL_END
	tsJunk                      // text after the arguments that is not the format's, as content
)

// tokenCalls parses a tokenFormat incrementally, with the streaming policy of
// toolcalls.go: a call starts when its arguments' opening brace arrives; one that cannot
// be a call (a header longer than maxCallHeader among them) comes back as content from
// its CALL_BEGIN through its CALL_END, markers included. A call whose object is complete
// is a call even if CALL_END never comes. The section markers and whitespace inside a
// section are dropped; other text inside a section is content and counts as malformed.
// Text after a section is content (vLLM drops it).
type tokenCalls struct {
	f  *tokenFormat
	t  toolCalls
	st tokenState

	held      string // unconsumed bytes that may begin a marker
	inSection bool
	strayOpen bool // a run of stray text inside the section has started (and was counted)

	// the current call
	raw     []byte // its text from CALL_BEGIN, until it is emitted
	hdrEnd  int    // raw[len(CALL_BEGIN):hdrEnd] is the header
	preAt   int    // raw[preAt:] is pre
	callBad bool   // counted in t.bad
	args    argStream
	post    []byte
}

func newTokenCalls(f *tokenFormat, o Options) Parser { return &tokenCalls{f: f, t: toolCalls{o: o}} }

func (p *tokenCalls) Malformed() int { return p.t.bad }

func (p *tokenCalls) Push(text string, out []Event) []Event {
	return pushSteps(&p.held, text, out, p.step)
}

func (p *tokenCalls) Finish(out []Event) []Event {
	s := p.held
	p.held = ""
	switch p.st {
	case tsText, tsRaw, tsJunk:
		out = p.t.text(out, s)
	case tsSection:
		out = p.stray(out, s)
	case tsHeader, tsPre:
		p.raw = append(p.raw, s...)
		out = p.t.text(out, string(p.raw))
		p.t.bad++
	case tsArgs:
		// The held bytes begin a marker, which holds no closing bracket: the arguments
		// stay unterminated.
		out = p.t.args(out, s)
		p.markBad()
	case tsPost:
		p.post = append(p.post, s...)
		out = p.endPost(out)
	}
	p.st = tsText
	return p.t.finish(out)
}

// step consumes a prefix of s (never empty unless all of s may begin a marker, which
// then waits for the next Push) and returns its length.
func (p *tokenCalls) step(s string, out []Event) (int, []Event) {
	f := p.f
	switch p.st {
	case tsText:
		at, m, lim := cutAtMarker(s, f.text)
		out = p.t.text(out, s[:lim])
		if at < 0 {
			return lim, out
		}
		if m == f.callBegin {
			p.beginCall(m)
		} else {
			p.inSection, p.strayOpen, p.st = true, false, tsSection
		}
		return at + len(m), out

	case tsSection:
		at, m, lim := cutAtMarker(s, f.section)
		out = p.stray(out, s[:lim])
		if at < 0 {
			return lim, out
		}
		p.strayOpen = false
		switch {
		case m == f.callBegin:
			p.beginCall(m)
		case f.isSectionEnd(m):
			p.inSection, p.st = false, tsText
		}
		return at + len(m), out

	case tsHeader:
		at, m, lim := cutAtMarker(s, f.header)
		if room := maxCallHeader - (len(p.raw) - len(f.callBegin)); lim > room {
			return p.overlong(s, room, out)
		}
		p.raw = append(p.raw, s[:lim]...)
		if at < 0 {
			return lim, out
		}
		if m == f.argsBegin {
			p.hdrEnd = len(p.raw)
			p.raw = append(p.raw, m...)
			p.preAt = len(p.raw)
			p.st = tsPre
		} else {
			out = p.fail(out, m)
		}
		return at + len(m), out

	case tsPre:
		at, m, lim := cutAtMarker(s, f.call)
		room := maxCallHeader - (len(p.raw) - p.preAt)
		b := strings.IndexByte(s[:lim], '{')
		if (b < 0 || b > room) && lim > room {
			return p.overlong(s, room, out)
		}
		if b >= 0 {
			p.raw = append(p.raw, s[:b]...)
			header := string(p.raw[len(f.callBegin):p.hdrEnd])
			name, id, ok := f.decode(header, string(p.raw[p.preAt:]))
			if ok && p.t.known(name) {
				out = p.t.start(out, name, id)
				p.args.reset()
				p.st = tsArgs
			} else {
				out = p.t.text(out, string(p.raw))
				p.t.bad++
				p.st = tsRaw
			}
			// Go on from the brace in the new state.
			n, out := p.step(s[b:], out)
			return b + n, out
		}
		p.raw = append(p.raw, s[:lim]...)
		if at < 0 {
			return lim, out
		}
		return at + len(m), p.fail(out, m)

	case tsArgs:
		at, m, lim := cutAtMarker(s, f.call)
		n, done := p.args.feed(s[:lim])
		out = p.t.args(out, s[:n])
		if done {
			if !p.args.object() {
				p.markBad()
			}
			p.post, p.st = p.post[:0], tsPost
			return n, out
		}
		if at < 0 {
			return lim, out
		}
		// A marker before the object closed: the arguments are cut short.
		p.markBad()
		return at + len(m), p.endCall(out, m)

	case tsPost:
		at, m, lim := cutAtMarker(s, f.call)
		if room := maxCallHeader - len(p.post); lim > room {
			// Too much to be a fence: the text is content, streamed from here on.
			p.post = append(p.post, s[:room]...)
			out = p.t.text(out, string(p.post))
			p.markBad()
			p.st = tsJunk
			n, out := p.step(s[room:], out)
			return room + n, out
		}
		p.post = append(p.post, s[:lim]...)
		if at < 0 {
			return lim, out
		}
		out = p.endPost(out)
		return at + len(m), p.endCall(out, m)

	case tsJunk:
		at, m, lim := cutAtMarker(s, f.call)
		out = p.t.text(out, s[:lim])
		if at < 0 {
			return lim, out
		}
		return at + len(m), p.endCall(out, m)

	case tsRaw:
		at, m, lim := cutAtMarker(s, f.call)
		out = p.t.text(out, s[:lim])
		if at < 0 {
			return lim, out
		}
		if m == f.callEnd {
			out = p.t.text(out, m)
		}
		return at + len(m), p.endCall(out, m)
	}
	panic("parse: unknown token state")
}

// maxCallHeader bounds, in bytes, a call's header, the text between its header and its
// arguments, and the text between its arguments and its end: a name or id longer than
// this is not one, nor a longer text a closing fence, and the text comes back as content
// rather than being held.
const maxCallHeader = 256

// overlong gives up on a call whose header (or pre) runs past maxCallHeader, room bytes
// into s: the call is malformed and passes through as content.
func (p *tokenCalls) overlong(s string, room int, out []Event) (int, []Event) {
	p.raw = append(p.raw, s[:room]...)
	out = p.t.text(out, string(p.raw))
	p.t.bad++
	p.st = tsRaw
	n, out := p.step(s[room:], out)
	return room + n, out
}

func (p *tokenCalls) beginCall(marker string) {
	p.raw = append(p.raw[:0], marker...)
	p.callBad = false
	p.st = tsHeader
}

// fail returns a call that never started as content: its text so far, and the marker
// that ended it when that is its CALL_END.
func (p *tokenCalls) fail(out []Event, m string) []Event {
	out = p.t.text(out, string(p.raw))
	p.t.bad++
	if m == p.f.callEnd {
		out = p.t.text(out, m)
	}
	return p.endCall(out, m)
}

// endCall moves past the marker m that ended a call.
func (p *tokenCalls) endCall(out []Event, m string) []Event {
	switch {
	case m == p.f.callBegin:
		p.beginCall(m)
	case p.f.isSectionEnd(m):
		p.inSection, p.st = false, tsText
	case p.inSection:
		p.st, p.strayOpen = tsSection, false
	default:
		p.st = tsText
	}
	return out
}

// endPost checks the text between the arguments and the call's end.
func (p *tokenCalls) endPost(out []Event) []Event {
	if !p.f.postOK(string(p.post)) {
		out = p.t.text(out, string(p.post))
		p.markBad()
	}
	return out
}

func (p *tokenCalls) markBad() {
	if !p.callBad {
		p.callBad = true
		p.t.bad++
	}
}

// stray handles text inside a section outside any call: whitespace is dropped; a run of
// other text is content and counts as one malformed call.
func (p *tokenCalls) stray(out []Event, s string) []Event {
	if !p.strayOpen {
		s = strings.TrimLeft(s, " \t\r\n")
		if s == "" {
			return out
		}
		p.strayOpen = true
		p.t.bad++
	}
	return p.t.text(out, s)
}

// cutAtMarker finds the earliest of markers (each beginning with '<') in s. It returns its
// index and the marker, and lim: the length of s's prefix that is certainly not part of
// a marker (at when one was found; else len(s) less a tail that may begin one).
func cutAtMarker(s string, markers []string) (at int, m string, lim int) {
	lt := strings.IndexByte(s, '<')
	if lt < 0 {
		return -1, "", len(s)
	}
	if at, m = firstMarker(s[lt:], markers...); at >= 0 {
		return lt + at, m, lt + at
	}
	// Only a '<' in the last (longest marker - 1) bytes can begin a partial marker.
	longest := 0
	for _, mk := range markers {
		longest = max(longest, len(mk))
	}
	from := max(lt, len(s)-longest+1)
	if i := strings.IndexByte(s[from:], '<'); i >= 0 {
		return -1, "", len(s) - partialSuffix(s[from+i:], markers...)
	}
	return -1, "", len(s)
}
