package gateway

import (
	"encoding/json"
	"net/http"
	"strings"

	"github.com/turbine-llm/turbine/gateway/parse"
)

// The Messages API's answer (docs/reference.md §17 gives the message, the event
// sequence, stop_reason and usage): content blocks thinking (the reasoning parser's
// chain of thought, signature ""), text and tool_use (input: the call's arguments
// object), in the order the model wrote them. A stream runs message_start, then per
// block content_block_start, its deltas and content_block_stop, then message_delta and
// message_stop; a failure after the header is one `error` event, which Anthropic's SDKs
// raise. The engine's prefix-cache hits are cache_read_input_tokens
// (cache_creation_input_tokens is always 0); message_start, sent before the engine has
// answered, counts the whole prompt as input_tokens, and message_delta carries the
// final split.

// anthropicMessage is a message (the body of a non-streaming answer, and message_start's
// message).
type anthropicMessage struct {
	ID           string             `json:"id"`
	Type         string             `json:"type"` // "message"
	Role         string             `json:"role"` // "assistant"
	Model        string             `json:"model"`
	Content      []anthropicContent `json:"content"`
	StopReason   *string            `json:"stop_reason"`
	StopSequence *string            `json:"stop_sequence"`
	Usage        anthropicUsage     `json:"usage"`
	Turbine      *TurbineInfo       `json:"turbine,omitempty"`
}

// anthropicContent is one content block: text {text}, thinking {thinking, signature} or
// tool_use {id, name, input}.
type anthropicContent struct {
	Type      string          `json:"type"`
	Text      *string         `json:"text,omitempty"`
	Thinking  *string         `json:"thinking,omitempty"`
	Signature *string         `json:"signature,omitempty"`
	ID        string          `json:"id,omitempty"`
	Name      string          `json:"name,omitempty"`
	Input     json.RawMessage `json:"input,omitempty"`
}

// anthropicUsage counts tokens as Anthropic does (above).
type anthropicUsage struct {
	InputTokens              int `json:"input_tokens"`
	CacheCreationInputTokens int `json:"cache_creation_input_tokens"`
	CacheReadInputTokens     int `json:"cache_read_input_tokens"`
	OutputTokens             int `json:"output_tokens"`
}

type anthropicMessageStart struct {
	Type    string           `json:"type"` // "message_start"
	Message anthropicMessage `json:"message"`
}

type anthropicBlockStart struct {
	Type         string           `json:"type"` // "content_block_start"
	Index        int              `json:"index"`
	ContentBlock anthropicContent `json:"content_block"`
}

type anthropicBlockDelta struct {
	Type  string         `json:"type"` // "content_block_delta"
	Index int            `json:"index"`
	Delta anthropicDelta `json:"delta"`
}

type anthropicDelta struct {
	Type        string  `json:"type"` // "text_delta", "thinking_delta", "input_json_delta"
	Text        *string `json:"text,omitempty"`
	Thinking    *string `json:"thinking,omitempty"`
	PartialJSON *string `json:"partial_json,omitempty"`
}

type anthropicBlockStop struct {
	Type  string `json:"type"` // "content_block_stop"
	Index int    `json:"index"`
}

type anthropicMessageDelta struct {
	Type    string              `json:"type"` // "message_delta"
	Delta   anthropicStopFields `json:"delta"`
	Usage   anthropicUsage      `json:"usage"`
	Turbine *TurbineInfo        `json:"turbine,omitempty"`
}

type anthropicStopFields struct {
	StopReason   string  `json:"stop_reason"`
	StopSequence *string `json:"stop_sequence"`
}

type anthropicType struct {
	Type string `json:"type"` // "message_stop"
}

// anthropicAnswer renders one answer. A stream's blocks open as the events come: text
// and reasoning continue the open block of their kind, anything else closes it and
// opens the next; a tool call opens its tool_use block, which its argument fragments
// fill.
type anthropicAnswer struct {
	id, model    string
	promptTokens int
	// open is the kind of the open block (0: none) and its index; next is the index of
	// the next block.
	open      parse.Kind
	openIndex int
	next      int
	openCall  int         // the tool call whose block is open (open == KindToolCall)
	callBlock map[int]int // tool call index → its block's index
}

// toolUseID is the id a tool_use block shows for a parser's call id: the gateway's own
// ids ("chatcmpl-tool-<hex>") take Anthropic's prefix ("toolu_<hex>"); ids a model
// format carries (Kimi K2's "functions.NAME:0") stay as they are. A client sends the id
// back in tool_result.tool_use_id and the assistant's tool_use.id, both passed to the
// template as they come.
func toolUseID(id string) string {
	if rest, ok := strings.CutPrefix(id, "chatcmpl-tool-"); ok {
		return "toolu_" + rest
	}
	return id
}

// toolInput is a call's arguments as a tool_use input: the arguments object, or {} when
// the arguments are empty or not a JSON object (a parser never returns such a call).
func toolInput(args string) json.RawMessage {
	a := strings.TrimSpace(args)
	if !strings.HasPrefix(a, "{") || !json.Valid([]byte(a)) {
		return json.RawMessage("{}")
	}
	return json.RawMessage(a)
}

// stopReason maps an ending onto stop_reason and stop_sequence.
func stopReason(end *ending) (string, *string) {
	switch end.Finish {
	case "length":
		return "max_tokens", nil
	case "tool_calls":
		return "tool_use", nil
	}
	if end.StopString != "" {
		s := end.StopString
		return "stop_sequence", &s
	}
	return "end_turn", nil
}

// usageOf is the final usage of an answer.
func anthropicUsageOf(u Usage) anthropicUsage {
	cached := min(max(u.PromptTokensDetails.CachedTokens, 0), u.PromptTokens)
	return anthropicUsage{InputTokens: u.PromptTokens - cached, CacheReadInputTokens: cached, OutputTokens: u.CompletionTokens}
}

func strPtr(s string) *string { return &s }

func (a *anthropicAnswer) streamStart(s *sseWriter) error {
	return s.event("message_start", anthropicMessageStart{Type: "message_start", Message: anthropicMessage{
		ID: a.id, Type: "message", Role: "assistant", Model: a.model, Content: []anthropicContent{},
		Usage: anthropicUsage{InputTokens: a.promptTokens}}})
}

func (a *anthropicAnswer) streamEvents(s *sseWriter, evs []parse.Event) error {
	for i := 0; i < len(evs); i++ {
		e := evs[i]
		switch e.Kind {
		case parse.KindContent, parse.KindReasoning:
			// Consecutive text of one kind goes out as one delta.
			text := e.Text
			if i+1 < len(evs) && evs[i+1].Kind == e.Kind {
				var b strings.Builder
				for ; i < len(evs) && evs[i].Kind == e.Kind; i++ {
					b.WriteString(evs[i].Text)
				}
				i--
				text = b.String()
			}
			if text == "" {
				continue
			}
			if err := a.textDelta(s, e.Kind, text); err != nil {
				return err
			}
		case parse.KindToolCall:
			if err := a.closeBlock(s); err != nil {
				return err
			}
			a.open, a.openIndex, a.openCall = parse.KindToolCall, a.next, e.Index
			a.callBlock[e.Index] = a.next
			a.next++
			if err := s.event("content_block_start", anthropicBlockStart{Type: "content_block_start", Index: a.openIndex,
				ContentBlock: anthropicContent{Type: "tool_use", ID: toolUseID(e.ID), Name: e.Name, Input: json.RawMessage("{}")}}); err != nil {
				return err
			}
		case parse.KindToolArgs:
			if e.Text == "" {
				continue
			}
			// A call's fragments follow its start; should a parser interleave calls,
			// each fragment still goes to its own call's block.
			idx, ok := a.callBlock[e.Index]
			if !ok {
				continue
			}
			if err := s.event("content_block_delta", anthropicBlockDelta{Type: "content_block_delta", Index: idx,
				Delta: anthropicDelta{Type: "input_json_delta", PartialJSON: strPtr(e.Text)}}); err != nil {
				return err
			}
		}
	}
	return nil
}

// textDelta writes text (content or reasoning) into the open block of its kind, opening
// one when the open block is another.
func (a *anthropicAnswer) textDelta(s *sseWriter, kind parse.Kind, text string) error {
	if a.open != kind {
		if err := a.closeBlock(s); err != nil {
			return err
		}
		a.open, a.openIndex = kind, a.next
		a.next++
		block := anthropicContent{Type: "text", Text: strPtr("")}
		if kind == parse.KindReasoning {
			block = anthropicContent{Type: "thinking", Thinking: strPtr(""), Signature: strPtr("")}
		}
		if err := s.event("content_block_start", anthropicBlockStart{Type: "content_block_start", Index: a.openIndex, ContentBlock: block}); err != nil {
			return err
		}
	}
	d := anthropicDelta{Type: "text_delta", Text: &text}
	if kind == parse.KindReasoning {
		d = anthropicDelta{Type: "thinking_delta", Thinking: &text}
	}
	return s.event("content_block_delta", anthropicBlockDelta{Type: "content_block_delta", Index: a.openIndex, Delta: d})
}

// closeBlock ends the open block, if any.
func (a *anthropicAnswer) closeBlock(s *sseWriter) error {
	if a.open == 0 {
		return nil
	}
	a.open = 0
	return s.event("content_block_stop", anthropicBlockStop{Type: "content_block_stop", Index: a.openIndex})
}

func (a *anthropicAnswer) streamEnd(s *sseWriter, end *ending) error {
	if len(end.Last) > 0 {
		if err := a.streamEvents(s, end.Last); err != nil {
			return err
		}
	}
	if err := a.closeBlock(s); err != nil {
		return err
	}
	reason, seq := stopReason(end)
	if err := s.event("message_delta", anthropicMessageDelta{Type: "message_delta",
		Delta: anthropicStopFields{StopReason: reason, StopSequence: seq}, Usage: anthropicUsageOf(end.Usage), Turbine: end.Info}); err != nil {
		return err
	}
	return s.event("message_stop", anthropicType{Type: "message_stop"})
}

func (a *anthropicAnswer) streamFail(s *sseWriter, e *APIError) error {
	return s.event("error", anthropicError(e))
}

func (a *anthropicAnswer) respond(w http.ResponseWriter, end *ending) error {
	res := end.Result
	content := []anthropicContent{}
	if res.Reasoning != "" {
		content = append(content, anthropicContent{Type: "thinking", Thinking: strPtr(res.Reasoning), Signature: strPtr("")})
	}
	if res.Content != "" {
		content = append(content, anthropicContent{Type: "text", Text: strPtr(res.Content)})
	}
	for _, c := range res.Calls {
		content = append(content, anthropicContent{Type: "tool_use", ID: toolUseID(c.ID), Name: c.Name, Input: toolInput(c.Arguments)})
	}
	reason, seq := stopReason(end)
	return writeJSON(w, http.StatusOK, anthropicMessage{ID: a.id, Type: "message", Role: "assistant", Model: a.model,
		Content: content, StopReason: &reason, StopSequence: seq, Usage: anthropicUsageOf(end.Usage), Turbine: end.Info})
}
