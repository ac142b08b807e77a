package parse

import "strings"

// The think-tag reasoning families (docs/reference.md §15): the chain of thought sits
// between a start and an end marker (<think>…</think>, Magistral's [THINK]…[/THINK]), the
// answer after the end marker. Families differ in where the output starts (inside the
// block, because the chat template opened it, or outside it), in which markers end the
// block implicitly (a tool call started inside the reasoning), and in whether a start
// marker in the answer opens a new block. One state machine, thinkParser, serves them
// all; each family's file registers its thinkFormat.

// thinkFormat describes one family's reasoning markers.
type thinkFormat struct {
	// start and end delimit the reasoning block.
	start, end string
	// implicitEnd are markers that end the reasoning when they occur inside it (a tool
	// call the model starts without closing the block); the marker itself begins the
	// content, so the tool parser behind sees it.
	implicitEnd []string
	// inReasoning is where an output starts when the prompt does not decide: true for
	// templates that open the block themselves or models that always think.
	inReasoning bool
	// reopen: a start marker in the content opens a new reasoning block; otherwise it
	// is content text.
	reopen bool

	inScan, outScan markerScan
}

// newThinkFormat prepares f's marker scanners.
func newThinkFormat(f thinkFormat) *thinkFormat {
	f.inScan = newMarkerScan(append([]string{f.start, f.end}, f.implicitEnd...)...)
	if f.reopen {
		f.outScan = newMarkerScan(f.start, f.end)
	} else {
		f.outScan = newMarkerScan(f.end)
	}
	return &f
}

// markers lists f's marker strings (for registerReasoning).
func (f *thinkFormat) markers() []string {
	return append([]string{f.start, f.end}, f.implicitEnd...)
}

// startsInReasoning reports whether an output continuing prompt begins inside the
// reasoning block: a prompt that ends (before trailing whitespace) with the end marker
// closed the block itself (Qwen3 with enable_thinking false writes
// "<think>\n\n</think>\n\n", DeepSeek-V3.1 non-thinking "</think>"), so there is none; one
// that ends with the start marker opened it (DeepSeek-R1's "<think>\n"); otherwise the
// family's default holds. Only the prompt's end is read: earlier turns' blocks do not count.
func (f *thinkFormat) startsInReasoning(prompt string) bool {
	t := strings.TrimRight(prompt, " \t\r\n")
	switch {
	case strings.HasSuffix(t, f.end):
		return false
	case strings.HasSuffix(t, f.start):
		return true
	}
	return f.inReasoning
}

// maxLeadingSpace bounds the whitespace held at the start of an output: a longer run is
// text, whatever follows it.
const maxLeadingSpace = 64

// thinkParser is the streaming state machine of a thinkFormat. Inside the block it
// drops start markers (a leading <think> the model writes itself, or a repeated one),
// ends at the end marker (dropped) or an implicit end (kept as content). In the content
// it drops stray end markers (a repeated </think>) and, when the family reopens, enters a
// new block at a start marker. Whitespace at the very start of the output is held until
// it is known whether a start marker follows it: then it is dropped with the marker (up to
// maxLeadingSpace bytes).
type thinkParser struct {
	f         *thinkFormat
	reasoning bool
	// held is text that may be the start of a marker.
	held string
	// fresh: nothing but whitespace (held in ws) has been read yet.
	fresh bool
	ws    string
}

func newThinkParser(f *thinkFormat, o Options) Parser {
	return &thinkParser{f: f, reasoning: f.startsInReasoning(o.Prompt), fresh: true}
}

func (p *thinkParser) kind() Kind {
	if p.reasoning {
		return KindReasoning
	}
	return KindContent
}

func (p *thinkParser) Push(text string, out []Event) []Event {
	s := text
	if p.held != "" {
		s, p.held = p.held+text, ""
	}
	for s != "" {
		scan := &p.f.outScan
		if p.reasoning {
			scan = &p.f.inScan
		}
		at, m, partial := scan.next(s)
		if at < 0 {
			out = p.text(s[:len(s)-partial], out)
			p.held = s[len(s)-partial:]
			return out
		}
		out = p.text(s[:at], out)
		s = s[at+len(m):]
		out = p.marker(m, out)
	}
	return out
}

// text emits s in the current state.
func (p *thinkParser) text(s string, out []Event) []Event {
	if s == "" {
		return out
	}
	if p.fresh {
		if len(p.ws)+len(s) <= maxLeadingSpace && strings.TrimLeft(s, " \t\r\n") == "" {
			p.ws += s
			return out
		}
		s, p.ws, p.fresh = p.ws+s, "", false
	}
	return append(out, Event{Kind: p.kind(), Text: s})
}

// marker applies marker m in the current state.
func (p *thinkParser) marker(m string, out []Event) []Event {
	if p.fresh && m == p.f.start {
		// A leading start marker: the whitespace before it goes with it.
		p.ws, p.fresh = "", false
	} else if p.ws != "" {
		// Whitespace alone before another marker is text of the state it was read in.
		out = append(out, Event{Kind: p.kind(), Text: p.ws})
		p.ws, p.fresh = "", false
	}
	switch {
	case m == p.f.start:
		// Absorbed inside the block; opens one from the content (reopen families only
		// scan for it there).
		p.reasoning = true
	case m == p.f.end:
		// Closes the block; a stray one in the content is dropped.
		p.reasoning = false
	default:
		// An implicit end: the marker begins the content.
		p.reasoning = false
		p.fresh = false
		out = append(out, Event{Kind: KindContent, Text: m})
	}
	return out
}

func (p *thinkParser) Finish(out []Event) []Event {
	if p.ws != "" {
		out = append(out, Event{Kind: p.kind(), Text: p.ws})
		p.ws = ""
	}
	if p.held != "" {
		out = append(out, Event{Kind: p.kind(), Text: p.held})
		p.held = ""
	}
	return out
}

func (p *thinkParser) Malformed() int { return 0 }

// markerScan finds the earliest of a set of marker strings in text, in one pass over it.
type markerScan struct {
	marks []string
	// firsts holds the markers' distinct first bytes.
	firsts string
}

func newMarkerScan(marks ...string) markerScan {
	var firsts []byte
	for _, m := range marks {
		if strings.IndexByte(string(firsts), m[0]) < 0 {
			firsts = append(firsts, m[0])
		}
	}
	return markerScan{marks: marks, firsts: string(firsts)}
}

// next returns the index in s of the earliest marker and the marker (the longest, when
// several start there). When none occurs it returns -1 and the length of the longest
// suffix of s that is a proper prefix of a marker: text to hold back until the next chunk
// says whether the marker completes. The cost is O(len(s)).
func (sc *markerScan) next(s string) (at int, marker string, partial int) {
	for i := 0; i < len(s); i++ {
		var j int
		if len(sc.firsts) == 1 {
			j = strings.IndexByte(s[i:], sc.firsts[0])
		} else {
			j = strings.IndexAny(s[i:], sc.firsts)
		}
		if j < 0 {
			return -1, "", 0
		}
		i += j
		rest := s[i:]
		prefix := false
		for _, m := range sc.marks {
			if strings.HasPrefix(rest, m) {
				if len(m) > len(marker) {
					marker = m
				}
			} else if len(rest) < len(m) && strings.HasPrefix(m, rest) {
				prefix = true
			}
		}
		if marker != "" {
			return i, marker, 0
		}
		if prefix {
			return -1, "", len(rest)
		}
	}
	return -1, "", 0
}
