package gateway

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
	"sync"

	"github.com/turbine-llm/turbine/gateway/parse"
	"github.com/turbine-llm/turbine/messages"
	"github.com/turbine-llm/turbine/model"
)

// outputParsing is how one chat answer's text is split into content, reasoning and tool
// calls (docs/reference.md §15).
type outputParsing struct {
	parser parse.Parser
	// reasoning returns a fresh reasoning parser alone (nil: the text is all content),
	// to read a non-streaming answer again without its tool calls (textOnly).
	reasoning func() parse.Parser
	// keep are the special tokens the parser reads, kept by the detokenizer even when
	// the request skips special tokens.
	keep map[uint32]bool
}

// chooseOutputParsing picks the request's parsers from the model card (the worker's
// --tool-call-parser and --reasoning-parser) and its tool_choice:
//   - tools offered (tool_choice auto, required or a named function) to a model without
//     a tool-call parser: 400, as vLLM refuses auto tool choice without a parser;
//   - "required" and a named function: the engine is constrained to JSON
//     (chatRequest.Structured), parsed by parse.NewRequiredCalls / NewNamedCall;
//   - "auto": the model family's parser; "none" or no tools: no tool parsing (a call the
//     model writes anyway stays content);
//   - the reasoning parser, when the card names one, runs in front.
func chooseOutputParsing(card *messages.ModelCard, tok model.Tokenizer, req *chatRequest, prompt string,
	newID func(int) string) (outputParsing, *APIError) {
	toolName, reasoningName := card.GetToolCallParser(), card.GetReasoningParser()
	mode := req.ToolChoice.Mode
	if mode == "" {
		mode = "auto"
	}
	offered := len(req.ToolList) > 0 && mode != "none"
	if offered && toolName == "" {
		return outputParsing{}, newError(KindInvalidValue, "tools",
			"Model %q has no tool call parser, so its tool calls cannot be returned: start its workers with --tool-call-parser, or send the request without tools (or with tool choice none).",
			clipName(card.GetModel()))
	}
	opts := parse.Options{Tools: req.ToolList, Prompt: prompt, NewID: newID}
	var tools, reasoning parse.Parser
	var err error
	if offered {
		switch mode {
		case "required":
			tools = parse.NewRequiredCalls(opts)
		case "function":
			tools = parse.NewNamedCall(req.ToolChoice.Name, opts)
		default:
			tools, err = parse.NewToolParser(toolName, opts)
		}
		if err != nil {
			return outputParsing{}, parserError(card, err)
		}
	}
	if reasoningName != "" {
		if reasoning, err = parse.NewReasoningParser(reasoningName, opts); err != nil {
			return outputParsing{}, parserError(card, err)
		}
	}
	if !offered {
		toolName = ""
	}
	out := outputParsing{parser: parse.Chain(reasoning, tools), keep: keptSpecials(tok, toolName, reasoningName)}
	if reasoningName != "" {
		out.reasoning = func() parse.Parser {
			p, _ := parse.NewReasoningParser(reasoningName, opts) // the name was checked above
			return p
		}
	}
	return out, nil
}

// brokenCall reports whether r holds a tool call whose arguments are not a JSON object
// (a call the model left unterminated, or wrote with invalid arguments, after the parser
// had started it).
func brokenCall(r parse.Result) bool {
	for _, c := range r.Calls {
		var obj map[string]json.RawMessage
		if json.Unmarshal([]byte(c.Arguments), &obj) != nil {
			return true
		}
	}
	return false
}

// textOnly reads a whole answer's text again with the reasoning parser alone: what a
// non-streaming answer returns when a tool call is broken (brokenCall), so that the
// model's text comes back whole as content rather than as a call with arguments that are
// not JSON, as vLLM's non-streaming parsers return it.
func (o outputParsing) textOnly(text string) parse.Result {
	if o.reasoning == nil {
		return parse.Result{Content: text}
	}
	p := o.reasoning()
	evs := p.Finish(p.Push(text, nil))
	r := parse.Collect(evs)
	r.Calls = nil
	return r
}

// parserError is a card naming a parser this frontend does not know (workers of a newer
// version): the request cannot be answered as the model's operators meant.
func parserError(card *messages.ModelCard, err error) *APIError {
	return &APIError{Kind: KindInternal, Message: fmt.Sprintf("The output parser configured for model %q is not known to this server.", clipName(card.GetModel())), Cause: err}
}

// newToolCallID is a tool call id as vLLM writes them: "chatcmpl-tool-" and 32 random hex
// digits.
func newToolCallID(int) string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return "chatcmpl-tool-" + hex.EncodeToString(b[:])
}

// keptKey caches keptSpecials per tokenizer and parser names.
type keptKey struct {
	tok             model.Tokenizer
	tool, reasoning string
}

var keptCache sync.Map // keptKey → map[uint32]bool

// keptSpecials returns the ids of the parsers' markers that tok holds as special tokens
// (nil when none).
func keptSpecials(tok model.Tokenizer, toolName, reasoningName string) map[uint32]bool {
	key := keptKey{tok, toolName, reasoningName}
	if v, ok := keptCache.Load(key); ok {
		return v.(map[uint32]bool)
	}
	var keep map[uint32]bool
	for _, m := range parse.Markers(toolName, reasoningName) {
		if ids := tok.Encode(m); len(ids) == 1 && tok.IsSpecial(ids[0]) {
			if keep == nil {
				keep = map[uint32]bool{}
			}
			keep[ids[0]] = true
		}
	}
	keptCache.Store(key, keep)
	return keep
}

// keepSpecial is a tokenizer whose kept special tokens decode as text, so that a
// detokenizer skipping special tokens still writes them.
type keepSpecial struct {
	model.Tokenizer
	keep map[uint32]bool
}

func (k keepSpecial) IsSpecial(id uint32) bool {
	return !k.keep[id] && k.Tokenizer.IsSpecial(id)
}

// templateKwargs are the request's chat_template_kwargs plus reasoning_effort (gpt-oss's
// template reads it) when the request set it and the kwargs do not.
func templateKwargs(req *chatRequest) map[string]any {
	if req.ReasoningEffort == "" {
		return req.TemplateKwargs
	}
	if _, set := req.TemplateKwargs["reasoning_effort"]; set {
		return req.TemplateKwargs
	}
	kw := maps.Clone(req.TemplateKwargs)
	if kw == nil {
		kw = map[string]any{}
	}
	kw["reasoning_effort"] = req.ReasoningEffort
	return kw
}
