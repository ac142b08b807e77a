// Package parse turns a model's generated text into what agents read: the answer
// (content), the chain of thought (reasoning) and tool calls, incrementally, as the
// text streams out of the detokenizer (docs/reference.md §15).
//
// A Parser is a pure single-stream state machine: one per request, fed the output text in
// order, in chunks of any size (a chunk may end anywhere, even inside a marker or a UTF-8
// character), never re-reading what it already consumed. It appends Events; the same
// text cut into any chunks yields events whose Collect is identical. Malformed output
// (an unterminated call, arguments that are not JSON, an unknown function) is never
// dropped: it comes back as content, and Malformed counts it.
//
// Parsers are chosen by vLLM's names: NewToolParser (--tool-call-parser) and
// NewReasoningParser (--reasoning-parser); Chain runs a reasoning parser in front of a
// tool parser. NewNamedCall and NewRequiredCalls parse the JSON an engine constrained by
// tool_choice (a named function, "required") produces, whatever the model family.
package parse

import (
	"fmt"
	"slices"
	"sort"
)

// Kind is what an Event carries.
type Kind uint8

const (
	// KindContent: Text is answer text.
	KindContent Kind = iota + 1
	// KindReasoning: Text is chain of thought.
	KindReasoning
	// KindToolCall starts tool call Index: ID and Name are set, Text is empty.
	KindToolCall
	// KindToolArgs: Text is the next fragment of tool call Index's arguments, a JSON
	// object's text once all fragments are joined.
	KindToolArgs
)

func (k Kind) String() string {
	switch k {
	case KindContent:
		return "content"
	case KindReasoning:
		return "reasoning"
	case KindToolCall:
		return "tool_call"
	case KindToolArgs:
		return "tool_args"
	}
	return fmt.Sprintf("Kind(%d)", uint8(k))
}

// Event is one piece of parsed output.
type Event struct {
	Kind Kind
	Text string
	// Index numbers the answer's tool calls from 0 (KindToolCall, KindToolArgs).
	Index int
	// ID and Name are set on KindToolCall.
	ID, Name string
}

// Parser consumes one answer's output text. Push appends the events that text made
// certain and returns out; text that may still turn out to be part of a marker is held
// back until a later Push or Finish decides it. Finish ends the answer: held text and
// unterminated calls come out (as content when they cannot be calls). Neither call
// fails; a Parser is not safe for concurrent use.
type Parser interface {
	Push(text string, out []Event) []Event
	Finish(out []Event) []Event
	// Malformed is the number of tool calls that came back as content.
	Malformed() int
}

// Tool is one function a request offers the model.
type Tool struct {
	Name string
	// Parameters is the function's parameters JSON Schema, decoded (nil when absent).
	// Parsers whose format does not carry JSON types (XML or Python-call arguments) read
	// the declared types from it.
	Parameters map[string]any
}

// Options configure a parser for one request.
type Options struct {
	// Tools are the functions the request offers. A call naming another function is
	// malformed (content). With no tools every call is malformed.
	Tools []Tool
	// Prompt is the rendered prompt the output continues. Reasoning parsers read its end:
	// a template that opens the reasoning block itself (DeepSeek-R1's "<think>\n") means
	// the output starts inside it; one that closes it (Qwen3 with enable_thinking false)
	// means there is none.
	Prompt string
	// NewID returns tool call index's id; nil uses "call_<index>". Families whose format
	// carries its own ids (Kimi K2's functions.NAME:IDX) use those instead.
	NewID func(index int) string
}

func (o *Options) id(index int) string {
	if o.NewID != nil {
		return o.NewID(index)
	}
	return fmt.Sprintf("call_%d", index)
}

// tool returns the offered tool called name.
func (o *Options) tool(name string) (Tool, bool) {
	for _, t := range o.Tools {
		if t.Name == name {
			return t, true
		}
	}
	return Tool{}, false
}

type constructor func(Options) Parser

var (
	toolParsers      = map[string]constructor{}
	reasoningParsers = map[string]constructor{}
	// markers are each parser's marker strings, by "tool:NAME" / "reasoning:NAME".
	markers = map[string][]string{}
)

// registerTool adds a tool-call parser; markers are the strings of its format that a
// tokenizer may hold as special tokens (Markers).
func registerTool(name string, c constructor, marks ...string) {
	toolParsers[name] = c
	markers["tool:"+name] = marks
}

// registerReasoning adds a reasoning parser, as registerTool.
func registerReasoning(name string, c constructor, marks ...string) {
	reasoningParsers[name] = c
	markers["reasoning:"+name] = marks
}

// Markers returns the marker strings the named parsers read ("" names none). A
// detokenizer that drops special tokens (skip_special_tokens) must keep these when the
// tokenizer holds them as special tokens (gpt-oss's <|channel|>, Kimi K2's
// <|tool_call_begin|>), or the parser never sees them.
func Markers(toolParser, reasoningParser string) []string {
	var out []string
	if toolParser != "" {
		out = append(out, markers["tool:"+toolParser]...)
	}
	if reasoningParser != "" {
		out = append(out, markers["reasoning:"+reasoningParser]...)
	}
	return out
}

// Whole is a tool-call parser that also separates reasoning (gpt-oss's harmony
// channels): Chain gives it the whole output and drops the reasoning parser.
type Whole interface {
	Parser
	ParsesReasoning()
}

// NewToolParser returns the tool-call parser vLLM calls name (--tool-call-parser).
func NewToolParser(name string, o Options) (Parser, error) {
	c, ok := toolParsers[name]
	if !ok {
		return nil, fmt.Errorf("unknown tool call parser %q (known: %v)", name, ToolParserNames())
	}
	return c(o), nil
}

// NewReasoningParser returns the reasoning parser vLLM calls name (--reasoning-parser).
func NewReasoningParser(name string, o Options) (Parser, error) {
	c, ok := reasoningParsers[name]
	if !ok {
		return nil, fmt.Errorf("unknown reasoning parser %q (known: %v)", name, ReasoningParserNames())
	}
	return c(o), nil
}

// ToolParserNames lists the tool-call parsers, sorted.
func ToolParserNames() []string { return names(toolParsers) }

// ReasoningParserNames lists the reasoning parsers, sorted.
func ReasoningParserNames() []string { return names(reasoningParsers) }

func names(m map[string]constructor) []string {
	out := make([]string, 0, len(m))
	for n := range m {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// Chain runs reasoning in front of tools: reasoning's content events go through tools;
// its reasoning events pass unchanged. Either may be nil.
func Chain(reasoning, tools Parser) Parser {
	switch {
	case reasoning == nil && tools == nil:
		return passthrough{}
	case reasoning == nil:
		return tools
	case tools == nil:
		return reasoning
	}
	if _, ok := tools.(Whole); ok {
		return tools
	}
	return &chain{r: reasoning, t: tools}
}

type chain struct {
	r, t Parser
	buf  []Event
}

func (c *chain) Push(text string, out []Event) []Event {
	c.buf = c.r.Push(text, c.buf[:0])
	return c.route(out)
}

func (c *chain) Finish(out []Event) []Event {
	c.buf = c.r.Finish(c.buf[:0])
	out = c.route(out)
	return c.t.Finish(out)
}

func (c *chain) route(out []Event) []Event {
	for _, e := range c.buf {
		if e.Kind == KindContent {
			out = c.t.Push(e.Text, out)
		} else {
			out = append(out, e)
		}
	}
	return out
}

func (c *chain) Malformed() int { return c.r.Malformed() + c.t.Malformed() }

// passthrough is the parser of a model with neither: all text is content.
type passthrough struct{}

func (passthrough) Push(text string, out []Event) []Event {
	if text == "" {
		return out
	}
	return append(out, Event{Kind: KindContent, Text: text})
}
func (passthrough) Finish(out []Event) []Event { return out }
func (passthrough) Malformed() int             { return 0 }

// Call is one collected tool call.
type Call struct {
	ID, Name string
	// Arguments is the JSON text of the arguments object.
	Arguments string
}

// Result is an answer's events collected: what a non-streaming response carries.
type Result struct {
	Content, Reasoning string
	Calls              []Call
}

// Collect folds events into a Result: texts joined in order, calls by index.
func Collect(evs []Event) Result {
	var r Result
	var content, reasoning []byte
	var args [][]byte // each call's arguments, joined once at the end (linear in the text)
	for _, e := range evs {
		switch e.Kind {
		case KindContent:
			content = append(content, e.Text...)
		case KindReasoning:
			reasoning = append(reasoning, e.Text...)
		case KindToolCall, KindToolArgs:
			for len(r.Calls) <= e.Index {
				r.Calls = append(r.Calls, Call{})
				args = append(args, nil)
			}
			if e.Kind == KindToolCall {
				r.Calls[e.Index].ID, r.Calls[e.Index].Name = e.ID, e.Name
			} else {
				args[e.Index] = append(args[e.Index], e.Text...)
			}
		}
	}
	for i := range r.Calls {
		r.Calls[i].Arguments = string(args[i])
	}
	r.Content, r.Reasoning = string(content), string(reasoning)
	r.Calls = slices.Clip(r.Calls)
	return r
}
