package gateway

import (
	"context"
	"net/http"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/turbine-llm/turbine/gateway/parse"
)

// The OpenAI Responses API (POST /v1/responses; docs/reference.md §17 gives the body,
// the stream's event sequence, item ids and usage). The request is translated into a
// chat request (responses_request.go) and runs the shared generation path; this file
// renders its answer as a Response object, or as the stream of named events, each with
// its type and a sequence_number from 0, without [DONE]. A failure after the header is a
// response.failed event whose error has the catalogue's code; errors before it are
// OpenAI error bodies (writeError). A stream's items follow the model's order
// (whitespace before a tool call makes no message item, as vLLM streams it; other text
// after a call opens a new one), while a body puts the reasoning, then the text, then
// the calls.

// responsesAPI renders one request's answer in the Responses API's shape; the handler's
// prepare fills req.
type responsesAPI struct{ req *responsesRequest }

func (*responsesAPI) endpoint() string { return endpointResponses }

func (*responsesAPI) writeError(w http.ResponseWriter, e *APIError, retryAfter time.Duration) {
	writeError(w, e, retryAfter)
}

func (a *responsesAPI) answer(i answerInfo) answer {
	return &responsesAnswer{req: a.req, info: i, id: "resp_" + i.ID, callItems: map[int]*outItem{}}
}

// handleResponses serves POST /v1/responses.
func (s *Server) handleResponses(w http.ResponseWriter, r *http.Request) {
	a := &responsesAPI{}
	s.handleAPI(w, r, a, func(ctx context.Context, rec *requestRecord, body []byte) (*prepared, *APIError) {
		req, aerr := parseResponsesRequest(body)
		if aerr != nil {
			return nil, aerr
		}
		a.req = req
		rec.stream = req.chat.Stream
		useBodyRequestID(w, r, rec, req.chat.RequestID)
		return s.prepareChat(ctx, rec.id, req.chat)
	})
}

// ---- shapes ----

// responseObject is a Response: the body of a non-streaming answer, and the `response`
// of the stream's lifecycle events.
type responseObject struct {
	ID                 string              `json:"id"` // "resp_<request id>"
	Object             string              `json:"object"`
	CreatedAt          int64               `json:"created_at"` // Unix seconds
	Status             string              `json:"status"`     // "in_progress", "completed", "incomplete", "failed"
	Background         bool                `json:"background"`
	Error              *responseError      `json:"error"`
	IncompleteDetails  *responseIncomplete `json:"incomplete_details"`
	Model              string              `json:"model"`
	Output             []any               `json:"output"`
	PreviousResponseID *string             `json:"previous_response_id"`
	ServiceTier        string              `json:"service_tier"`
	Store              bool                `json:"store"`
	TopLogprobs        int                 `json:"top_logprobs"`
	Truncation         string              `json:"truncation"`
	Usage              *responseUsage      `json:"usage"`
	responsesEcho                          // the request's fields, repeated
	Turbine            *TurbineInfo        `json:"turbine,omitempty"`
}

// responseError is a failed response's error: the catalogue's code and the message.
type responseError struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

// responseIncomplete says why a response is incomplete.
type responseIncomplete struct {
	Reason string `json:"reason"` // "max_output_tokens"
}

// responseUsage counts a response's tokens; output tokens include reasoning tokens.
type responseUsage struct {
	InputTokens         int                 `json:"input_tokens"`
	InputTokensDetails  inputTokensDetails  `json:"input_tokens_details"`
	OutputTokens        int                 `json:"output_tokens"`
	OutputTokensDetails outputTokensDetails `json:"output_tokens_details"`
	TotalTokens         int                 `json:"total_tokens"`
}

type inputTokensDetails struct {
	CachedTokens int `json:"cached_tokens"`
}

type outputTokensDetails struct {
	ReasoningTokens int `json:"reasoning_tokens"`
}

// reasoningItem is a reasoning output item: the chain of thought as reasoning_text
// content (no summary).
type reasoningItem struct {
	ID      string         `json:"id"`
	Type    string         `json:"type"` // "reasoning"
	Summary []struct{}     `json:"summary"`
	Content []reasoningRef `json:"content"`
	Status  string         `json:"status"`
}

type reasoningRef struct {
	Type string `json:"type"` // "reasoning_text"
	Text string `json:"text"`
}

// messageItem is the assistant's message output item.
type messageItem struct {
	ID      string       `json:"id"`
	Type    string       `json:"type"` // "message"
	Role    string       `json:"role"` // "assistant"
	Status  string       `json:"status"`
	Content []outputText `json:"content"`
}

// outputText is a message's text content part.
type outputText struct {
	Type        string     `json:"type"` // "output_text"
	Text        string     `json:"text"`
	Annotations []struct{} `json:"annotations"`
	Logprobs    []struct{} `json:"logprobs"`
}

// functionCallItem is a function_call output item.
type functionCallItem struct {
	ID        string `json:"id"`
	Type      string `json:"type"` // "function_call"
	CallID    string `json:"call_id"`
	Name      string `json:"name"`
	Arguments string `json:"arguments"` // JSON text
	Status    string `json:"status"`
}

// none is the empty array the shapes above write for summary, annotations and logprobs.
var none = []struct{}{}

// ---- stream events ----

type lifecycleEvent struct {
	Type           string          `json:"type"`
	SequenceNumber int             `json:"sequence_number"`
	Response       *responseObject `json:"response"`
}

type itemEvent struct {
	Type           string `json:"type"`
	SequenceNumber int    `json:"sequence_number"`
	OutputIndex    int    `json:"output_index"`
	Item           any    `json:"item"`
}

type partEvent struct {
	Type           string `json:"type"`
	SequenceNumber int    `json:"sequence_number"`
	ItemID         string `json:"item_id"`
	OutputIndex    int    `json:"output_index"`
	ContentIndex   int    `json:"content_index"`
	Part           any    `json:"part"`
}

type textDeltaEvent struct {
	Type           string     `json:"type"`
	SequenceNumber int        `json:"sequence_number"`
	ItemID         string     `json:"item_id"`
	OutputIndex    int        `json:"output_index"`
	ContentIndex   int        `json:"content_index"`
	Delta          string     `json:"delta"`
	Logprobs       []struct{} `json:"logprobs"`
}

type textDoneEvent struct {
	Type           string     `json:"type"`
	SequenceNumber int        `json:"sequence_number"`
	ItemID         string     `json:"item_id"`
	OutputIndex    int        `json:"output_index"`
	ContentIndex   int        `json:"content_index"`
	Text           string     `json:"text"`
	Logprobs       []struct{} `json:"logprobs"`
}

type reasoningDeltaEvent struct {
	Type           string `json:"type"`
	SequenceNumber int    `json:"sequence_number"`
	ItemID         string `json:"item_id"`
	OutputIndex    int    `json:"output_index"`
	ContentIndex   int    `json:"content_index"`
	Delta          string `json:"delta"`
}

type reasoningDoneEvent struct {
	Type           string `json:"type"`
	SequenceNumber int    `json:"sequence_number"`
	ItemID         string `json:"item_id"`
	OutputIndex    int    `json:"output_index"`
	ContentIndex   int    `json:"content_index"`
	Text           string `json:"text"`
}

type argsDeltaEvent struct {
	Type           string `json:"type"`
	SequenceNumber int    `json:"sequence_number"`
	ItemID         string `json:"item_id"`
	OutputIndex    int    `json:"output_index"`
	Delta          string `json:"delta"`
}

type argsDoneEvent struct {
	Type           string `json:"type"`
	SequenceNumber int    `json:"sequence_number"`
	ItemID         string `json:"item_id"`
	OutputIndex    int    `json:"output_index"`
	Name           string `json:"name"`
	Arguments      string `json:"arguments"`
}

// ---- rendering ----

// outItem is one output item as the answer builds it.
type outItem struct {
	kind   parse.Kind // KindReasoning, KindContent (a message) or KindToolCall
	id     string
	index  int    // output_index
	text   []byte // the reasoning, the message's text, or the call's arguments
	callID string
	name   string
	status string // "in_progress" until done
}

// json is the item in its output shape.
func (it *outItem) json() any {
	switch it.kind {
	case parse.KindReasoning:
		c := []reasoningRef{}
		if it.status != "in_progress" {
			c = append(c, reasoningRef{Type: "reasoning_text", Text: string(it.text)})
		}
		return reasoningItem{ID: it.id, Type: "reasoning", Summary: none, Content: c, Status: it.status}
	case parse.KindContent:
		c := []outputText{}
		if it.status != "in_progress" {
			c = append(c, outputText{Type: "output_text", Text: string(it.text), Annotations: none, Logprobs: none})
		}
		return messageItem{ID: it.id, Type: "message", Role: "assistant", Status: it.status, Content: c}
	default:
		return functionCallItem{ID: it.id, Type: "function_call", CallID: it.callID, Name: it.name, Arguments: string(it.text), Status: it.status}
	}
}

// responsesAnswer renders one answer; as a stream it is a state machine over the parsed
// events (the item being written, the whitespace held back).
type responsesAnswer struct {
	req  *responsesRequest
	info answerInfo
	id   string // "resp_<request id>"
	seq  int    // the next event's sequence_number

	items []*outItem
	open  *outItem // the item being streamed (nil: none)
	// held is content made only of whitespace that no message item holds yet: it opens
	// one with the next text, and is dropped when a tool call comes first.
	held      string
	callItems map[int]*outItem // function_call items by tool call index
	frame     []byte           // the delta frame being written, reused
}

// itemID is the id of the item at output index n.
func (a *responsesAnswer) itemID(prefix string, n int) string {
	return prefix + "_" + a.info.ID + "_" + strconv.Itoa(n)
}

// response is the Response object with status and output.
func (a *responsesAnswer) response(status string, output []any) *responseObject {
	return &responseObject{ID: a.id, Object: "response", CreatedAt: a.info.Created, Status: status,
		Model: a.info.Model, Output: output, ServiceTier: "default", Truncation: "disabled",
		responsesEcho: a.req.echo}
}

// finished completes r from how the answer ended.
func (a *responsesAnswer) finished(r *responseObject, end *ending) {
	if end.Finish == "length" {
		r.Status, r.IncompleteDetails = "incomplete", &responseIncomplete{Reason: "max_output_tokens"}
	}
	u := end.Usage
	r.Usage = &responseUsage{InputTokens: u.PromptTokens, InputTokensDetails: inputTokensDetails{CachedTokens: u.PromptTokensDetails.CachedTokens},
		OutputTokens: u.CompletionTokens, OutputTokensDetails: outputTokensDetails{ReasoningTokens: end.ReasoningTokens},
		TotalTokens: u.PromptTokens + u.CompletionTokens}
	r.Turbine = end.Info
}

// lastStatus is the status of an answer's last item: cut by the token limit or done.
func lastStatus(end *ending) string {
	if end.Finish == "length" {
		return "incomplete"
	}
	return "completed"
}

// respond writes the Response of a finished answer: its reasoning, text and calls.
func (a *responsesAnswer) respond(w http.ResponseWriter, end *ending) error {
	res := end.Result
	var items []*outItem
	add := func(it *outItem) {
		it.index, it.status = len(items), "completed"
		items = append(items, it)
	}
	if res.Reasoning != "" {
		add(&outItem{kind: parse.KindReasoning, text: []byte(res.Reasoning)})
	}
	if res.Content != "" && !(len(res.Calls) > 0 && isSpace(res.Content)) {
		add(&outItem{kind: parse.KindContent, text: []byte(res.Content)})
	}
	for _, c := range res.Calls {
		add(&outItem{kind: parse.KindToolCall, text: []byte(c.Arguments), callID: c.ID, name: c.Name})
	}
	out := make([]any, len(items))
	for i, it := range items {
		it.id = a.itemID(itemPrefix(it.kind), i)
		if i == len(items)-1 {
			it.status = lastStatus(end)
		}
		out[i] = it.json()
	}
	r := a.response("completed", out)
	a.finished(r, end)
	return writeJSON(w, http.StatusOK, r)
}

func itemPrefix(k parse.Kind) string {
	switch k {
	case parse.KindReasoning:
		return "rs"
	case parse.KindContent:
		return "msg"
	}
	return "fc"
}

// isSpace reports whether s is only white space.
func isSpace(s string) bool { return strings.TrimSpace(s) == "" }

// next returns the next event's sequence_number.
func (a *responsesAnswer) next() int {
	n := a.seq
	a.seq++
	return n
}

func (a *responsesAnswer) streamStart(s *sseWriter) error {
	if err := s.event("response.created", lifecycleEvent{Type: "response.created", SequenceNumber: a.next(),
		Response: a.response("in_progress", []any{})}); err != nil {
		return err
	}
	return s.event("response.in_progress", lifecycleEvent{Type: "response.in_progress", SequenceNumber: a.next(),
		Response: a.response("in_progress", []any{})})
}

func (a *responsesAnswer) streamEvents(s *sseWriter, evs []parse.Event) error {
	var run strings.Builder
	for i := 0; i < len(evs); {
		e := evs[i]
		if e.Kind == parse.KindToolCall {
			if err := a.call(s, e); err != nil {
				return err
			}
			i++
			continue
		}
		// A run of texts of one kind (and call) goes out as one delta.
		j := i + 1
		for j < len(evs) && evs[j].Kind == e.Kind && evs[j].Index == e.Index {
			j++
		}
		text := e.Text
		if j > i+1 {
			run.Reset()
			for _, x := range evs[i:j] {
				run.WriteString(x.Text)
			}
			text = run.String()
		}
		if err := a.text(s, e.Kind, e.Index, text); err != nil {
			return err
		}
		i = j
	}
	return nil
}

// text writes a delta of reasoning, content or tool call index's arguments.
func (a *responsesAnswer) text(s *sseWriter, kind parse.Kind, index int, text string) error {
	switch kind {
	case parse.KindReasoning:
		if a.open == nil || a.open.kind != parse.KindReasoning {
			if err := a.begin(s, parse.KindReasoning, "", ""); err != nil {
				return err
			}
		}
		it := a.open
		it.text = append(it.text, text...)
		return a.delta(s, "response.reasoning_text.delta", it, text)
	case parse.KindContent:
		if a.open == nil || a.open.kind != parse.KindContent {
			if isSpace(text) {
				a.held += text
				return nil
			}
			text, a.held = a.held+text, ""
			if err := a.begin(s, parse.KindContent, "", ""); err != nil {
				return err
			}
		}
		it := a.open
		it.text = append(it.text, text...)
		return a.delta(s, "response.output_text.delta", it, text)
	case parse.KindToolArgs:
		it := a.callItems[index]
		if it == nil {
			return nil
		}
		it.text = append(it.text, text...)
		if it != a.open {
			// Arguments of a call whose item is done (text came between): the final
			// response carries them; the stream cannot reopen the item.
			return nil
		}
		return a.delta(s, "response.function_call_arguments.delta", it, text)
	}
	return nil
}

// delta writes a delta event of item it: the one frame per output token, so it is
// written by hand into a reused buffer rather than through encoding/json, in the same
// shape (textDeltaEvent, reasoningDeltaEvent, argsDeltaEvent) and escaping (encodeJSON).
func (a *responsesAnswer) delta(s *sseWriter, name string, it *outItem, text string) error {
	b := append(a.frame[:0], "event: "...)
	b = append(b, name...)
	b = append(b, "\ndata: {\"type\":\""...)
	b = append(b, name...)
	b = append(b, `","sequence_number":`...)
	b = strconv.AppendInt(b, int64(a.next()), 10)
	b = append(b, `,"item_id":`...)
	b = appendJSONString(b, it.id)
	b = append(b, `,"output_index":`...)
	b = strconv.AppendInt(b, int64(it.index), 10)
	if it.kind != parse.KindToolCall {
		b = append(b, `,"content_index":0`...)
	}
	b = append(b, `,"delta":`...)
	b = appendJSONString(b, text)
	if it.kind == parse.KindContent {
		b = append(b, `,"logprobs":[]`...)
	}
	b = append(b, "}\n\n"...)
	a.frame = b
	return s.write(b)
}

// appendJSONString appends s as a JSON string exactly as encodeJSON writes it (no HTML
// escaping; \b \f \n \r \t and \u00XX for other control bytes; U+2028 and U+2029
// escaped; invalid UTF-8 as \ufffd).
func appendJSONString(b []byte, s string) []byte {
	const hex = "0123456789abcdef"
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		if c := s[i]; c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '"', '\\':
				b = append(b, '\\', c)
			case '\b':
				b = append(b, '\\', 'b')
			case '\f':
				b = append(b, '\\', 'f')
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default:
				b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
			i += size
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' {
			b = append(b, s[start:i]...)
			b = append(b, '\\', 'u', '2', '0', '2', hex[r&0xf])
			i += size
			start = i
			continue
		}
		i += size
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}

// call starts a function_call item; whitespace held before it is dropped.
func (a *responsesAnswer) call(s *sseWriter, e parse.Event) error {
	a.held = ""
	if err := a.begin(s, parse.KindToolCall, e.ID, e.Name); err != nil {
		return err
	}
	a.callItems[e.Index] = a.open
	return nil
}

// begin closes the open item and opens a new one of kind.
func (a *responsesAnswer) begin(s *sseWriter, kind parse.Kind, callID, name string) error {
	if err := a.close(s, "completed"); err != nil {
		return err
	}
	n := len(a.items)
	it := &outItem{kind: kind, id: a.itemID(itemPrefix(kind), n), index: n, callID: callID, name: name, status: "in_progress"}
	a.items = append(a.items, it)
	a.open = it
	if err := s.event("response.output_item.added", itemEvent{Type: "response.output_item.added", SequenceNumber: a.next(),
		OutputIndex: n, Item: it.json()}); err != nil {
		return err
	}
	switch kind {
	case parse.KindReasoning:
		return s.event("response.content_part.added", partEvent{Type: "response.content_part.added", SequenceNumber: a.next(),
			ItemID: it.id, OutputIndex: n, Part: reasoningRef{Type: "reasoning_text"}})
	case parse.KindContent:
		return s.event("response.content_part.added", partEvent{Type: "response.content_part.added", SequenceNumber: a.next(),
			ItemID: it.id, OutputIndex: n, Part: outputText{Type: "output_text", Annotations: none, Logprobs: none}})
	}
	return nil
}

// close writes the done events of the open item, which ends with status.
func (a *responsesAnswer) close(s *sseWriter, status string) error {
	it := a.open
	if it == nil {
		return nil
	}
	a.open = nil
	it.status = status
	text := string(it.text)
	var err error
	switch it.kind {
	case parse.KindReasoning:
		err = s.event("response.reasoning_text.done", reasoningDoneEvent{Type: "response.reasoning_text.done", SequenceNumber: a.next(),
			ItemID: it.id, OutputIndex: it.index, Text: text})
		if err == nil {
			err = s.event("response.content_part.done", partEvent{Type: "response.content_part.done", SequenceNumber: a.next(),
				ItemID: it.id, OutputIndex: it.index, Part: reasoningRef{Type: "reasoning_text", Text: text}})
		}
	case parse.KindContent:
		err = s.event("response.output_text.done", textDoneEvent{Type: "response.output_text.done", SequenceNumber: a.next(),
			ItemID: it.id, OutputIndex: it.index, Text: text, Logprobs: none})
		if err == nil {
			err = s.event("response.content_part.done", partEvent{Type: "response.content_part.done", SequenceNumber: a.next(),
				ItemID: it.id, OutputIndex: it.index, Part: outputText{Type: "output_text", Text: text, Annotations: none, Logprobs: none}})
		}
	default:
		err = s.event("response.function_call_arguments.done", argsDoneEvent{Type: "response.function_call_arguments.done", SequenceNumber: a.next(),
			ItemID: it.id, OutputIndex: it.index, Name: it.name, Arguments: text})
	}
	if err != nil {
		return err
	}
	return s.event("response.output_item.done", itemEvent{Type: "response.output_item.done", SequenceNumber: a.next(),
		OutputIndex: it.index, Item: it.json()})
}

// output is every item so far in its output shape.
func (a *responsesAnswer) output() []any {
	out := make([]any, len(a.items))
	for i, it := range a.items {
		out[i] = it.json()
	}
	return out
}

func (a *responsesAnswer) streamEnd(s *sseWriter, end *ending) error {
	if len(end.Last) > 0 {
		if err := a.streamEvents(s, end.Last); err != nil {
			return err
		}
	}
	if a.held != "" && len(a.callItems) == 0 {
		// The answer's only text is white space: it is the message.
		text := a.held
		a.held = ""
		if err := a.begin(s, parse.KindContent, "", ""); err != nil {
			return err
		}
		a.open.text = append(a.open.text, text...)
		if err := a.delta(s, "response.output_text.delta", a.open, text); err != nil {
			return err
		}
	}
	if err := a.close(s, lastStatus(end)); err != nil {
		return err
	}
	r := a.response("completed", a.output())
	a.finished(r, end)
	name := "response.completed"
	if r.Status == "incomplete" {
		name = "response.incomplete"
	}
	return s.event(name, lifecycleEvent{Type: name, SequenceNumber: a.next(), Response: r})
}

func (a *responsesAnswer) streamFail(s *sseWriter, e *APIError) error {
	if a.open != nil {
		a.open.status = "incomplete"
		a.open = nil
	}
	r := a.response("failed", a.output())
	r.Error = &responseError{Code: catalogue[e.Kind].Code, Message: e.Message}
	return s.event("response.failed", lifecycleEvent{Type: "response.failed", SequenceNumber: a.next(), Response: r})
}
