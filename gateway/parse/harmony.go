package parse

import (
	"encoding/json"
	"strings"
)

// gpt-oss's harmony format (docs/reference.md §15). The prompt ends with
// "<|start|>assistant"; the output is a run of messages, each a header, <|message|>, the
// text, and an end:
//
//	<|channel|>analysis<|message|>chain of thought<|end|>
//	<|start|>assistant<|channel|>commentary to=functions.NAME <|constrain|>json<|message|>{"a":1}<|call|>
//	<|start|>assistant<|channel|>final<|message|>the answer<|return|>
//
// (the first message's <|start|>assistant is the prompt's). The header holds the role
// (after <|start|>), the channel (after <|channel|>), an optional recipient "to=NAME"
// (before or after the channel) and an optional content type ("json", "<|constrain|>json").
// Routing follows vLLM: a recipient functions.NAME makes the message a tool call (its
// text the arguments, streamed), whatever the channel; otherwise analysis is reasoning,
// and final and commentary (preambles meant for the user) are content. A header with
// anything else (an unknown channel, a built-in tool's recipient, stray words) comes
// back raw with its message's text, on the analysis channel as reasoning, elsewhere as
// content. A call to a function the request does not offer, or whose text does not start
// a JSON object, is content (Malformed counts it); arguments cut short or not valid JSON
// stay the call's, as vLLM keeps them (their fragments are already out), and are
// counted too. <|return|> and <|call|> are stop tokens the engine usually removes: a
// message still open at Finish is complete. Every marker is a special token of the
// o200k_harmony encoding.
//
// Two parsers share the machine: the tool parser "openai" (a Whole: it separates the
// reasoning itself) and the reasoning parser "openai_gptoss", which returns a tool call
// message's raw text as content.

const (
	harmonyStart     = "<|start|>"
	harmonyEnd       = "<|end|>"
	harmonyMessage   = "<|message|>"
	harmonyChannel   = "<|channel|>"
	harmonyConstrain = "<|constrain|>"
	harmonyReturn    = "<|return|>"
	harmonyCall      = "<|call|>"

	// maxHarmonyHeader bounds a header: text that runs longer without <|message|> is not
	// one, and comes back as content.
	maxHarmonyHeader = 512
	// harmonyLongest is the longest marker's length.
	harmonyLongest = len(harmonyConstrain)
)

var (
	harmonyMarkers = []string{harmonyStart, harmonyEnd, harmonyMessage, harmonyChannel,
		harmonyConstrain, harmonyReturn, harmonyCall}
	// Markers read while in a header, and while in or between messages.
	harmonyHeaderScan = newMarkerScan(harmonyMessage, harmonyStart, harmonyEnd, harmonyReturn, harmonyCall)
	harmonyBodyScan   = newMarkerScan(harmonyEnd, harmonyReturn, harmonyCall, harmonyStart, harmonyChannel)
)

func init() {
	registerTool("openai", func(o Options) Parser { return &harmonyWhole{newHarmony(o, true)} }, harmonyMarkers...)
	registerReasoning("openai_gptoss", func(o Options) Parser { return newHarmony(o, false) }, harmonyMarkers...)
}

// harmonyWhole is the tool parser: it also separates the reasoning (analysis channel).
type harmonyWhole struct{ *harmony }

func (harmonyWhole) ParsesReasoning() {}

type harmonyState uint8

const (
	// harmonyHeader: reading a header, up to <|message|>.
	harmonyHeader harmonyState = iota
	// harmonyBody: in a message's text, which goes out as kind.
	harmonyBody
	// harmonyCallWait: in a tool call's text, before its first non-space byte.
	harmonyCallWait
	// harmonyCallArgs: in a tool call's JSON arguments.
	harmonyCallArgs
	// harmonyCallTail: in a tool call's text after its arguments ended.
	harmonyCallTail
	// harmonyBetween: after a message's end, before the next <|start|>.
	harmonyBetween
)

// harmony is the streaming state machine of the harmony format.
type harmony struct {
	o Options
	// calls: function messages are tool calls (the tool parser); otherwise their raw
	// text is content.
	calls bool
	st    harmonyState
	// held is text that may be the start of a marker.
	held string

	// hdr is the current header's text: after <|start|> (role first) or from the
	// <|channel|> that opened it. hdr[rawFrom:] came from the output (the rest from the
	// prompt); rawStart: the output holds the message's <|start|>.
	hdr      []byte
	rawFrom  int
	rawStart bool

	// kind is where a body's text goes.
	kind Kind
	// The open tool call: its index, name, raw header (for content if it turns out not
	// to be a call), whitespace before its arguments, and the arguments so far.
	index int
	name  string
	raw   string
	ws    []byte
	args  []byte
	jv    jsonValue

	malformed int
}

// newHarmony returns the machine positioned where o.Prompt leaves it: the prompt's last
// message, from its <|start|>, is read as output would be and its events dropped, so
// "…<|start|>assistant" leaves it in a header whose role is known. Without a
// <|start|> in the prompt the output starts in a header with no role.
func newHarmony(o Options, calls bool) *harmony {
	h := &harmony{o: o, calls: calls}
	if i := strings.LastIndex(o.Prompt, harmonyStart); i >= 0 {
		h.st = harmonyBetween
		h.Push(o.Prompt[i:], nil)
		h.held = ""
		h.index, h.malformed = 0, 0
	}
	h.rawFrom, h.rawStart = len(h.hdr), false
	return h
}

func (h *harmony) Malformed() int { return h.malformed }

func (h *harmony) scan() *markerScan {
	if h.st == harmonyHeader {
		return &harmonyHeaderScan
	}
	return &harmonyBodyScan
}

func (h *harmony) Push(text string, out []Event) []Event {
	s := text
	if h.held != "" {
		s, h.held = h.held+text, ""
	}
	for s != "" {
		// A header ends within maxHarmonyHeader bytes or not at all: look no further.
		win := s
		if h.st == harmonyHeader {
			win = s[:min(len(s), maxHarmonyHeader-len(h.hdr)+harmonyLongest)]
		}
		at, m, partial := h.scan().next(win)
		seg := win[:len(win)-partial]
		if at >= 0 {
			seg = win[:at]
		}
		var n int
		n, out = h.text(seg, out)
		if n < len(seg) {
			// The state changed inside seg: read the rest with the new state's markers.
			s = s[n:]
			continue
		}
		if at < 0 {
			// Only at the end of s: a window shorter than s overflows the header above.
			h.held = s[len(seg):]
			return out
		}
		s = s[at+len(m):]
		out = h.marker(m, out)
	}
	return out
}

func (h *harmony) Finish(out []Event) []Event {
	for s := h.held; s != ""; {
		var n int
		n, out = h.text(s, out)
		s = s[n:]
	}
	h.held = ""
	switch h.st {
	case harmonyHeader:
		out = h.flushHeader(out)
	case harmonyCallWait, harmonyCallArgs, harmonyCallTail:
		out = h.endCall(out)
	}
	h.st = harmonyBetween
	return out
}

// text consumes the marker-free text s in the current state and returns how much of it
// it consumed: all of it, unless the state changed partway (a header that overflows, a
// call's arguments that end, text that turns out not to be a call).
func (h *harmony) text(s string, out []Event) (int, []Event) {
	if s == "" {
		return 0, out
	}
	switch h.st {
	case harmonyHeader:
		if room := maxHarmonyHeader - len(h.hdr); len(s) > room {
			h.hdr = append(h.hdr, s[:room]...)
			out = h.emit(KindContent, h.rawHeader(""), out)
			h.resetHeader()
			h.st, h.kind = harmonyBody, KindContent
			return room, out
		}
		h.hdr = append(h.hdr, s...)
		return len(s), out
	case harmonyBody:
		return len(s), h.emit(h.kind, s, out)
	case harmonyCallWait:
		i := harmonyNonSpace(s)
		if i < 0 {
			h.ws = append(h.ws, s...)
			return len(s), out
		}
		if s[i] == '{' {
			out = append(out, Event{Kind: KindToolCall, Index: h.index, ID: h.o.id(h.index), Name: h.name})
			h.st, h.jv, h.args = harmonyCallArgs, jsonValue{}, h.args[:0]
			return i, out
		}
		// Not a JSON object: the call's text is content.
		h.malformed++
		out = h.emit(KindContent, h.raw+string(h.ws), out)
		h.st, h.kind = harmonyBody, KindContent
		return 0, out
	case harmonyCallArgs:
		n := h.jv.feed(s)
		if n > 0 {
			h.args = append(h.args, s[:n]...)
			out = append(out, Event{Kind: KindToolArgs, Index: h.index, Text: s[:n]})
		}
		if h.jv.done {
			h.st = harmonyCallTail
		}
		return n, out
	case harmonyCallTail, harmonyBetween:
		// Whitespace after a call's arguments or between messages is dropped; other text
		// there is content.
		i := harmonyNonSpace(s)
		if i < 0 {
			return len(s), out
		}
		if h.st == harmonyCallTail {
			out = h.endCall(out)
		}
		h.st, h.kind = harmonyBody, KindContent
		return i, out
	}
	return len(s), out
}

// marker applies marker m in the current state.
func (h *harmony) marker(m string, out []Event) []Event {
	if h.st == harmonyHeader {
		switch m {
		case harmonyMessage:
			return h.endHeader(out)
		case harmonyStart:
			out = h.flushHeader(out)
			h.startHeader(true, "")
		default: // a stop token before <|message|>
			out = h.flushHeader(out)
			h.st = harmonyBetween
		}
		return out
	}
	switch h.st {
	case harmonyCallWait, harmonyCallArgs, harmonyCallTail:
		out = h.endCall(out)
	}
	switch m {
	case harmonyStart:
		h.startHeader(true, "")
	case harmonyChannel:
		// A header without <|start|>role (the model skipped them).
		h.startHeader(false, harmonyChannel)
	default: // <|end|>, <|return|>, <|call|>
		h.st = harmonyBetween
	}
	return out
}

// startHeader opens a header after <|start|> (start) or at text.
func (h *harmony) startHeader(start bool, text string) {
	h.resetHeader()
	h.st, h.rawStart = harmonyHeader, start
	h.hdr = append(h.hdr, text...)
}

func (h *harmony) resetHeader() {
	h.hdr, h.rawFrom, h.rawStart = h.hdr[:0], 0, false
}

// rawHeader returns the output's text of the current header, then end.
func (h *harmony) rawHeader(end string) string {
	var b strings.Builder
	if h.rawStart {
		b.WriteString(harmonyStart)
	}
	b.Write(h.hdr[h.rawFrom:])
	b.WriteString(end)
	return b.String()
}

// header returns the header's text, with a space between the prompt's part (the role)
// and the output's, which a model may start without one.
func (h *harmony) header() string {
	if h.rawFrom == 0 {
		return string(h.hdr)
	}
	return string(h.hdr[:h.rawFrom]) + " " + string(h.hdr[h.rawFrom:])
}

// endHeader routes the message whose header just ended with <|message|>, as the
// format's comment above says. A header with more than harmony's fields is not one
// gpt-oss writes for Turbine (built-in tools such as python or browser are not offered):
// its raw text goes out with the message, so that nothing is lost and nothing of the
// chain of thought reaches the content.
func (h *harmony) endHeader(out []Event) []Event {
	f := harmonyHeaderFields(h.header(), true)
	raw := h.rawHeader(harmonyMessage)
	h.resetHeader()
	h.st, h.kind = harmonyBody, f.kind()
	name, isCall := strings.CutPrefix(f.recipient, "functions.")
	switch {
	case !f.known() || f.recipient != "" && (!isCall || name == ""):
		return h.emit(h.kind, raw, out)
	case !isCall:
		return out
	case !h.calls:
		h.kind = KindContent
		return h.emit(KindContent, raw, out)
	}
	if _, ok := h.o.tool(name); !ok {
		h.malformed++
		h.kind = KindContent
		return h.emit(KindContent, raw, out)
	}
	h.st, h.name, h.raw, h.ws = harmonyCallWait, name, raw, h.ws[:0]
	return out
}

// flushHeader ends a header that never reached <|message|>: what it holds besides the
// role and a known channel is the text of a message on that channel; a header with an
// unknown channel comes back whole, as content.
func (h *harmony) flushHeader(out []Event) []Event {
	f := harmonyHeaderFields(h.header(), false)
	raw := h.rawHeader("")
	h.resetHeader()
	if !f.knownChannel() {
		return h.emit(KindContent, raw, out)
	}
	return h.emit(f.kind(), f.rest, out)
}

// endCall closes the open tool call. Arguments that never started are an empty object;
// others stay as they are (see the format's comment above).
func (h *harmony) endCall(out []Event) []Event {
	switch h.st {
	case harmonyCallWait:
		out = append(out,
			Event{Kind: KindToolCall, Index: h.index, ID: h.o.id(h.index), Name: h.name},
			Event{Kind: KindToolArgs, Index: h.index, Text: "{}"})
	case harmonyCallArgs, harmonyCallTail:
		if !h.jv.done || h.jv.bad || !json.Valid(h.args) {
			h.malformed++
		}
	default:
		return out
	}
	h.index++
	h.st, h.kind = harmonyBetween, KindContent
	return out
}

func (h *harmony) emit(k Kind, s string, out []Event) []Event {
	if s == "" {
		return out
	}
	return append(out, Event{Kind: k, Text: s})
}

// harmonyRoles are the roles a header may start with.
var harmonyRoles = map[string]bool{"assistant": true, "system": true, "developer": true, "user": true}

// harmonyFields are a header's fields.
type harmonyFields struct {
	channel, recipient, contentType string
	// rest is what the fields leave of the header (none in a well-formed one).
	rest string
}

// harmonyHeaderFields reads a header as openai-harmony does: the channel is the word
// after <|channel|> (up to a space or '<'); the rest, split at spaces (a <|constrain|>
// starting its own word), begins with the role when it is one of harmonyRoles (other
// words are kept: a model's stray text must not vanish). With fields, the last word is
// the recipient when it starts with "to=" or is the only one; otherwise it is the
// content type and the word before it the recipient; rest is what remains. Without
// fields, rest is all but the role and the channel.
func harmonyHeaderFields(hdr string, fields bool) harmonyFields {
	var f harmonyFields
	if i := strings.Index(hdr, harmonyChannel); i >= 0 {
		after := hdr[i+len(harmonyChannel):]
		end := strings.IndexAny(after, " \t\r\n<")
		if end < 0 {
			end = len(after)
		}
		f.channel = after[:end]
		hdr = hdr[:i] + after[end:]
	}
	hdr = strings.ReplaceAll(hdr, harmonyConstrain, " "+harmonyConstrain)
	parts := strings.Fields(hdr)
	if len(parts) > 0 && harmonyRoles[parts[0]] {
		parts = parts[1:]
	}
	if fields && len(parts) > 0 {
		last := parts[len(parts)-1]
		parts = parts[:len(parts)-1]
		if r, ok := strings.CutPrefix(last, "to="); ok || len(parts) == 0 {
			f.recipient = r
		} else {
			f.contentType = last
			f.recipient = strings.TrimPrefix(parts[len(parts)-1], "to=")
			parts = parts[:len(parts)-1]
		}
	}
	f.rest = strings.Join(parts, " ")
	return f
}

// known reports whether f has only fields gpt-oss writes: a known channel, the json
// content type (or none), nothing else.
func (f harmonyFields) known() bool {
	switch f.contentType {
	case "", "json", harmonyConstrain + "json":
	default:
		return false
	}
	return f.knownChannel() && f.rest == ""
}

// knownChannel reports whether f's channel is analysis, commentary or final (or none).
func (f harmonyFields) knownChannel() bool {
	switch f.channel {
	case "", "analysis", "commentary", "final":
		return true
	}
	return false
}

// kind is where the text of a message on f's channel goes.
func (f harmonyFields) kind() Kind {
	if f.channel == "analysis" {
		return KindReasoning
	}
	return KindContent
}

// harmonyNonSpace returns the index of s's first byte that is not JSON whitespace, or -1.
func harmonyNonSpace(s string) int {
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case ' ', '\t', '\r', '\n':
		default:
			return i
		}
	}
	return -1
}
