// Package persona makes the mock engine answer like a tool-calling, reasoning model: from
// a rendered chat prompt and the model family's parser names it writes the text such a
// model would generate, so that agent loops run end to end without a GPU
// (docs/reference.md §15, "The mock engine as a stand-in model", and §16).
//
// Plan reads the prompt only (the tools a chat template rendered into it, tools.go;
// whether the last turn is a tool result; whether the template switched thinking off)
// and answers, in the family's syntax: a thinking block when a reasoning parser is named
// (only its rest when the template opened it); then an instance of the request's
// structured-output constraint (schema.go; a regex it cannot satisfy, and a grammar, get
// the text answer); or, after a tool result, a short text quoting it; or, with tools
// offered and a tool parser named, one call (two, one time in five, except in harmony,
// whose <|call|> stops the engine), preferring tools that share a word with the
// question, with arguments generated from the schema and strings taken from the user's
// last message (asked.go); or a short text. gpt-oss answers in harmony messages.
//
// The text holds no end-of-turn marker: the engine ends it with its EOS token.
// Everything is pure: the same input gives the same text.
package persona

import (
	"encoding/json"
	"sort"
	"strings"

	"github.com/turbine-llm/turbine/messages"
)

// Input is what Plan decides from.
type Input struct {
	// ToolParser and ReasoningParser are vLLM's parser names of the model family
	// (--tool-call-parser, --reasoning-parser); "" for none. Names Plan does not know
	// (ToolParsers, ReasoningParsers) are treated as none.
	ToolParser, ReasoningParser string
	// Prompt is the decoded prompt text, special tokens included.
	Prompt string
	// Structured constrains the output; nil for free text.
	Structured *messages.StructuredOutput
	// Seed is the request's generation seed.
	Seed uint64
}

// Plan returns the text the model answers in.Prompt with (see the package comment).
//
// A prompt that already ends with the beginning of its own answer (a request resumed on
// another engine after part of the answer was streamed: the prompt plus the tokens
// generated so far) gets the rest of that answer, so a resumed stream continues the
// same text. Plan recognises it from the assistant header that begins the answer: of
// the last four headers after the last user turn or tool result (harmony answers hold
// headers of their own), the earliest whose planned answer, with or without what a
// template writes after the header, starts with the text that follows; the rest of
// that answer is returned. That holds whenever the resumed prompt's text is the
// original's followed by a prefix of the answer; when a cut split a multi-byte
// character the decoded text differs, and the prompt is answered afresh.
func Plan(in Input) string {
	text := in.Prompt
	// Headers after the last user turn or tool result, the last first: the answer in
	// progress began at one of them (harmony answers hold headers of their own).
	var heads []int
	for _, h := range headerEnds(text, 4) {
		if at, _ := lastOf(text[h:], userMarkers); at >= 0 {
			break
		}
		if at, _ := lastOf(text[h:], toolMarkers); at >= 0 {
			break
		}
		heads = append(heads, h)
	}
	if len(heads) == 0 || fresh(text[heads[0]:]) && len(heads) == 1 {
		return plan(in, text)
	}
	for i := len(heads) - 1; i >= 0; i-- { // the earliest first: the prompt's own header
		h := heads[i]
		tail := text[h:]
		// The answer began after the header and what the template wrote there.
		ws := len(tail) - len(strings.TrimLeft(tail, " \t\r\n"))
		tried := map[int]bool{}
		for _, c := range append([]string{""}, promptSuffixes...) {
			if !strings.HasPrefix(tail[ws:], c) {
				continue
			}
			n := ws + len(c)
			m := len(tail) - len(strings.TrimLeft(tail[n:], " \t\r\n"))
			for _, cut := range []int{0, n, m} {
				if tried[cut] {
					continue
				}
				tried[cut] = true
				if done, ok := continuation(in, text[:h+cut], tail[cut:]); ok {
					return done
				}
			}
		}
	}
	return plan(in, text)
}

// fresh reports whether the text after the last assistant header is only what the
// template writes there.
func fresh(tail string) bool {
	tail = strings.TrimSpace(tail)
	if tail == "" {
		return true
	}
	for _, s := range promptSuffixes {
		if tail == strings.TrimSpace(s) {
			return true
		}
	}
	return false
}

// continuation returns the rest of the answer to prompt when it starts with done.
func continuation(in Input, prompt, done string) (string, bool) {
	if done == "" {
		return "", false
	}
	full := plan(in, prompt)
	if strings.HasPrefix(full, done) {
		return full[len(done):], true
	}
	return "", false
}

// plan answers prompt afresh. Its choices are drawn from the seed and the prompt up to
// its last assistant header: what a template writes after the header (an opened or
// closed thinking block) changes the syntax of the answer but not its choices, so that
// the answer to prompt+"<think>\n" is the answer to prompt without its "<think>\n", and
// a resumed answer continues the same way whichever of the two the prompt was.
func plan(in Input, prompt string) string {
	key := prompt
	if h := headerEnds(prompt, 1); len(h) > 0 {
		key = prompt[:h[0]]
	}
	r := newRNG(hashPrompt(in.Seed, key))
	conv := readConversation(prompt)
	a := answer{in: in, r: r, conv: conv, prompt: prompt, user: readAsked(conv.user)}
	return a.write()
}

type answer struct {
	in     Input
	r      *rng
	conv   conversation
	prompt string
	// user is what the user's last message offers string arguments.
	user *asked
	b    strings.Builder
}

func (a *answer) harmony() bool {
	return a.in.ToolParser == harmonyTool || a.in.ReasoningParser == harmonyReasoning
}

func (a *answer) write() string {
	body, calls := a.decide()
	if a.harmony() {
		a.writeHarmony(body, calls)
		return a.b.String()
	}
	a.b.WriteString(a.thinking(a.reason(calls)))
	if len(calls) > 0 {
		toolSyntaxes[a.in.ToolParser](&a.b, calls, a.conv.calls)
	} else {
		a.b.WriteString(body)
	}
	return a.b.String()
}

// decide returns the answer's text, or the tool calls to make (body is then "").
func (a *answer) decide() (string, []call) {
	if so := a.in.Structured; so != nil {
		if s, ok := a.structured(so); ok {
			return s, nil
		}
		return a.text(), nil
	}
	if a.conv.afterTool {
		return a.afterTool(), nil
	}
	_, known := toolSyntaxes[a.in.ToolParser]
	if !known && a.in.ToolParser != harmonyTool {
		return a.text(), nil
	}
	tools := findTools(a.prompt)
	if len(tools) == 0 {
		return a.text(), nil
	}
	n := 1
	if a.in.ToolParser != harmonyTool && a.r.chance(1, 5) {
		n = 2
	}
	order := a.rank(tools)
	calls := make([]call, 0, n)
	for i := 0; i < n; i++ {
		t := tools[order[i%len(order)]]
		calls = append(calls, call{name: t.name, args: a.arguments(t)})
	}
	return "", calls
}

// rank orders the tools to call: those whose name shares a word with the user's
// question first ("weather" picks get_weather), each group shuffled.
func (a *answer) rank(tools []tool) []int {
	asked := words(strings.ToLower(a.conv.user), 64)
	score := func(t tool) int {
		n := 0
		for _, part := range strings.FieldsFunc(strings.ToLower(t.name), func(r rune) bool { return !isWordRune(r) }) {
			if len(part) < 3 {
				continue
			}
			for _, w := range asked {
				if len(w) >= 4 && (strings.HasPrefix(w, part) || strings.HasPrefix(part, w)) {
					n++
					break
				}
			}
		}
		return n
	}
	order := make([]int, len(tools))
	scores := make([]int, len(tools))
	for i, t := range tools {
		order[i], scores[i] = i, score(t)
	}
	for i := len(order) - 1; i > 0; i-- { // Fisher-Yates
		j := a.r.intn(i + 1)
		order[i], order[j] = order[j], order[i]
	}
	sort.SliceStable(order, func(i, j int) bool { return scores[order[i]] > scores[order[j]] })
	return order
}

// arguments generates a call's arguments object from the tool's parameters schema, its
// strings from the user's message where the schema allows (asked.go).
func (a *answer) arguments(t tool) object {
	if t.params == nil {
		return object{}
	}
	if o, ok := instanceAsked(a.r, t.params, a.user).(object); ok {
		return o
	}
	return object{}
}

// structured returns an instance of the constraint; false when there is none to give
// (a grammar, a regex the generator cannot satisfy, a schema that is not JSON).
func (a *answer) structured(so *messages.StructuredOutput) (string, bool) {
	switch {
	case so.GetJsonSchema() != "":
		schema, err := decodeOrdered(json.NewDecoder(strings.NewReader(so.GetJsonSchema())))
		if err != nil {
			return "", false
		}
		return jsonText(instanceAsked(a.r, schema, a.user)), true
	case so.GetJsonObject():
		return jsonText(object{{"answer", a.sentence()}}), true
	case len(so.GetChoice()) > 0:
		return so.GetChoice()[a.r.intn(len(so.GetChoice()))], true
	case so.GetRegex() != "":
		return generateRegex(a.r, so.GetRegex())
	}
	return "", false
}

// text is a short answer in plain text.
func (a *answer) text() string {
	return answerOpeners[a.r.intn(len(answerOpeners))] + ": " + a.sentence() + "."
}

func (a *answer) sentence() string { return answerBodies[a.r.intn(len(answerBodies))] }

// afterTool is the answer to a tool result: a few of its words, quoted.
func (a *answer) afterTool() string {
	quote := sentence(words(a.conv.result, 10))
	if quote == "" {
		quote = "nothing"
	}
	return resultOpeners[a.r.intn(len(resultOpeners))] + ": " + quote + ". That answers the question."
}

// reason is the chain of thought: what the user asked and what the answer will do.
func (a *answer) reason(calls []call) string {
	var why string
	switch {
	case len(calls) > 0:
		why = "I should call " + calls[0].name + " to find out."
	case a.in.Structured != nil:
		why = "The answer must follow the requested format."
	case a.conv.afterTool:
		why = "The tool result has what I need."
	default:
		why = "I can answer this directly."
	}
	about := sentence(words(a.conv.user, 12))
	if about == "" {
		about = "for help"
	}
	return thinkOpeners[a.r.intn(len(thinkOpeners))] + ": " + about + ". " + why
}

// thinking returns the thinking block holding reason: "" when no reasoning parser of a
// thinking-block family is named, or the template closed the block (thinking off); the
// rest of the block when the template opened it ("<think>\n": the body and the closing
// tag), so that an answer to a prompt that opened the block is the answer to the same
// prompt without it, less what the prompt already holds.
func (a *answer) thinking(reason string) string {
	st, ok := thinkStyles[a.in.ReasoningParser]
	if !ok {
		return ""
	}
	block := st.open + "\n" + reason + "\n" + st.close + "\n\n"
	if st.open == "[THINK]" {
		block = st.open + reason + st.close
	}
	end := strings.TrimRight(a.prompt, " \t\r\n")
	switch {
	case strings.HasSuffix(end, st.close):
		return ""
	case strings.HasSuffix(a.prompt, st.open+"\n") && strings.HasPrefix(block, st.open+"\n"):
		return block[len(st.open)+1:]
	case strings.HasSuffix(a.prompt, st.open):
		return block[len(st.open):]
	case strings.HasSuffix(end, st.open):
		return strings.TrimLeft(block[len(st.open):], "\n")
	}
	return block
}

// writeHarmony writes gpt-oss's messages. The prompt ends with <|start|>assistant, so
// the first message starts at its channel; a later one with its own header. A tool call
// ends the answer (its <|call|>, a stop token, comes from the engine's EOS).
func (a *answer) writeHarmony(body string, calls []call) {
	if a.in.ReasoningParser != "" {
		a.b.WriteString("<|channel|>analysis<|message|>" + a.reason(calls) + "<|end|><|start|>assistant")
	}
	switch syntax, other := toolSyntaxes[a.in.ToolParser]; {
	case len(calls) > 0 && other:
		// Harmony's reasoning with another family's calls: they are the final message's
		// text, which that family's tool parser reads.
		a.b.WriteString("<|channel|>final<|message|>")
		syntax(&a.b, calls, a.conv.calls)
	case len(calls) > 0:
		a.b.WriteString("<|channel|>commentary to=functions." + calls[0].name + " <|constrain|>json<|message|>")
		writeJSON(&a.b, calls[0].args)
	default:
		a.b.WriteString("<|channel|>final<|message|>" + body)
	}
}
