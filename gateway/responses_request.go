package gateway

import (
	"encoding/json"
	"slices"
	"strings"

	"github.com/turbine-llm/turbine/gateway/parse"
	"github.com/turbine-llm/turbine/messages"
	"github.com/turbine-llm/turbine/model"
)

// A Responses API request (POST /v1/responses, docs/reference.md §17) is translated into
// the chatRequest every API shares: instructions become the first system message, the
// input items become chat messages (an assistant turn's reasoning, message and
// function_call items one assistant message, a function_call_output a tool message),
// function tools the OpenAI chat tools the template reads, text.format the structured
// output constraint. The server is stateless: previous_response_id and conversation are
// refused, store is accepted and ignored.

// responsesRequest is a validated POST /v1/responses body.
type responsesRequest struct {
	chat *chatRequest
	// echo holds the request fields the Response object repeats.
	echo responsesEcho
}

// responsesEcho are the request's fields as a Response object repeats them (JSON null
// where the request left them out, as OpenAI writes them).
type responsesEcho struct {
	Instructions      *string            `json:"instructions"`
	MaxOutputTokens   *int64             `json:"max_output_tokens"`
	ParallelToolCalls bool               `json:"parallel_tool_calls"`
	Reasoning         responsesReasoning `json:"reasoning"`
	Temperature       *float64           `json:"temperature"`
	Text              responsesText      `json:"text"`
	// ToolChoice is "auto", "none", "required" or a responsesNamedChoice.
	ToolChoice any               `json:"tool_choice"`
	Tools      []responsesTool   `json:"tools"`
	TopP       *float64          `json:"top_p"`
	Metadata   map[string]string `json:"metadata"`
	User       *string           `json:"user"`
}

// responsesReasoning is the request's reasoning object.
type responsesReasoning struct {
	Effort  *string `json:"effort"`
	Summary *string `json:"summary"`
}

// responsesText is the request's text object: the output format and verbosity.
type responsesText struct {
	Format    responsesFormat `json:"format"`
	Verbosity *string         `json:"verbosity,omitempty"`
}

// responsesFormat is text.format: {"type": "text"}, {"type": "json_object"} or
// {"type": "json_schema", "name", "schema", "description", "strict"}.
type responsesFormat struct {
	Type        string          `json:"type"`
	Name        string          `json:"name,omitempty"`
	Schema      json.RawMessage `json:"schema,omitempty"`
	Description *string         `json:"description,omitempty"`
	Strict      *bool           `json:"strict,omitempty"`
}

// responsesTool is one function tool, as the request gave it.
type responsesTool struct {
	Type        string          `json:"type"` // "function"
	Name        string          `json:"name"`
	Description *string         `json:"description"`
	Parameters  json.RawMessage `json:"parameters"`
	Strict      *bool           `json:"strict"`
}

// responsesNamedChoice is a tool_choice naming a function.
type responsesNamedChoice struct {
	Type string `json:"type"` // "function"
	Name string `json:"name"`
}

// templateTool is one tool in OpenAI's chat shape, the one chat templates read.
type templateTool struct {
	Type     string           `json:"type"` // "function"
	Function templateFunction `json:"function"`
}

type templateFunction struct {
	Name        string          `json:"name"`
	Description *string         `json:"description,omitempty"`
	Parameters  json.RawMessage `json:"parameters,omitempty"`
}

// hostedToolTypes are the Responses API's tool and tool_choice types other than
// function (OpenAI's hosted tools, custom tools): legal, but this server runs none.
var hostedToolTypes = map[string]bool{
	"file_search": true, "web_search": true, "web_search_preview": true, "web_search_2025_08_26": true,
	"web_search_preview_2025_03_11": true, "computer_use_preview": true, "computer_use": true,
	"code_interpreter": true, "image_generation": true, "mcp": true, "local_shell": true,
	"shell": true, "custom": true, "apply_patch": true, "allowed_tools": true, "tool_search": true,
	"namespace": true,
}

// otherItemTypes are the Responses API's input item types other than message,
// function_call, function_call_output and reasoning: items of hosted tools, custom tools
// and stored items, which a stateless server running function tools only cannot take.
var otherItemTypes = map[string]bool{
	"item_reference": true, "file_search_call": true, "computer_call": true, "computer_call_output": true,
	"web_search_call": true, "image_generation_call": true, "code_interpreter_call": true,
	"local_shell_call": true, "local_shell_call_output": true, "shell_call": true, "shell_call_output": true,
	"apply_patch_call": true, "apply_patch_call_output": true, "mcp_list_tools": true,
	"mcp_approval_request": true, "mcp_approval_response": true, "mcp_call": true,
	"custom_tool_call": true, "custom_tool_call_output": true, "compaction": true,
	"tool_search_call": true, "tool_search_output": true, "additional_tools": true,
}

// parseResponsesRequest validates a Responses API body and translates it. Besides the
// Responses fields it reads the same vLLM and `turbine` extensions as chat completions
// (parseCommon, chat_template_kwargs). Unknown top-level fields are ignored, as OpenAI
// does. Errors are in OpenAI's shape, params in its notation ("input[2].content[0].type").
func parseResponsesRequest(body []byte) (*responsesRequest, *APIError) {
	o, err := parseBody(body)
	if err != nil {
		return nil, err
	}
	chat := &chatRequest{ParallelToolCalls: true, AddGenerationPrompt: true, PromptParam: "input"}
	parseCommon(o, &chat.commonRequest)
	if o.err != nil {
		return nil, o.err
	}
	req := &responsesRequest{chat: chat}
	e := &req.echo
	e.Temperature, e.TopP = chat.Temperature, chat.TopP
	if chat.User != "" {
		u := chat.User
		e.User = &u
	}
	if n, ok := o.integer("max_output_tokens"); ok {
		setMaxTokens(o, &chat.commonRequest, "max_output_tokens", n)
		e.MaxOutputTokens = &n
	}
	checkMinTokens(o, &chat.commonRequest)
	refuseResponsesState(o)
	parseResponsesExtras(o)
	e.Metadata = parseMetadata(o)
	chat.TemplateKwargs = parseTemplateKwargs(o)
	if r, ok := o.child("reasoning"); ok {
		e.Reasoning = parseResponsesReasoning(r)
		o.fail(r.err)
		if e.Reasoning.Effort != nil {
			chat.ReasoningEffort = *e.Reasoning.Effort
		}
	}
	if s, ok := o.str("instructions"); ok {
		e.Instructions = &s
	}
	if o.err != nil {
		return nil, o.err
	}
	chat.Messages = parseResponsesInput(o, e.Instructions)
	raw := &rawFields{body: body}
	tools, schemas := parseResponsesTools(o, raw, chat)
	e.Tools = tools
	if e.Tools == nil {
		e.Tools = []responsesTool{}
	}
	chat.ToolChoice, e.ToolChoice = parseResponsesToolChoice(o, tools)
	if v, ok := o.boolean("parallel_tool_calls"); ok {
		chat.ParallelToolCalls = v
	}
	e.ParallelToolCalls = chat.ParallelToolCalls
	e.Text = parseResponsesText(o, raw)
	chat.Structured = constraint(o, e.Text.Format, chat.ToolChoice, schemas)
	if o.err != nil {
		return nil, o.err
	}
	var aerr *APIError
	if chat.Tools, aerr = templateTools(tools, chat.ToolChoice); aerr != nil {
		return nil, aerr
	}
	return req, nil
}

// refuseResponsesState refuses the fields that need server-side state or prompts.
func refuseResponsesState(o *object) {
	if id, ok := o.str("previous_response_id"); ok && id != "" {
		o.fail(newError(KindUnsupported, "previous_response_id",
			"previous_response_id is not supported: this server is stateless and stores no responses; send the whole conversation in 'input'."))
	}
	if o.has("conversation") {
		o.fail(newError(KindUnsupported, "conversation",
			"conversation is not supported: this server is stateless and stores no conversations; send the whole conversation in 'input'."))
	}
	if b, ok := o.boolean("background"); ok && b {
		o.fail(newError(KindUnsupported, "background", "Background responses are not supported: this server stores no responses."))
	}
	if o.has("prompt") {
		o.fail(newError(KindUnsupported, "prompt", "Prompt templates are not supported by this server: send 'instructions' and 'input'."))
	}
	o.boolean("store") // accepted: nothing is stored whatever its value
}

// parseResponsesExtras checks the remaining fields that have no effect here.
func parseResponsesExtras(o *object) {
	if t, ok := o.str("truncation"); ok {
		switch t {
		case "disabled":
		case "auto":
			o.fail(newError(KindUnsupported, "truncation", "truncation 'auto' is not supported by this server: the input must fit the model's context."))
		default:
			o.fail(newError(KindInvalidValue, "truncation", "Invalid value for 'truncation': '%s'. Supported values are: 'auto' and 'disabled'.", t))
		}
	}
	if n, ok := o.integer("top_logprobs"); ok {
		switch {
		case n < 0 || n > 20:
			o.fail(newError(KindInvalidValue, "top_logprobs", "Invalid 'top_logprobs': expected a value between 0 and 20, but got %d.", n))
		case n > 0:
			o.fail(newError(KindUnsupported, "top_logprobs", "logprobs are not supported by this engine."))
		}
	}
	if inc, ok := o.strOrStrings("include"); ok {
		for i, v := range inc {
			if v == "message.output_text.logprobs" {
				o.fail(newError(KindUnsupported, indexParam("include", i), "logprobs are not supported by this engine."))
			}
		}
	}
}

// parseMetadata reads metadata: an object of strings, repeated in the response ({} when
// absent).
func parseMetadata(o *object) map[string]string {
	out := map[string]string{}
	m, ok := o.child("metadata")
	if !ok {
		return out
	}
	for k := range m.m {
		if v, ok := m.str(k); ok {
			out[k] = v
		}
	}
	o.fail(m.err)
	return out
}

func parseResponsesReasoning(r *object) responsesReasoning {
	var out responsesReasoning
	if eff := parseReasoningEffort(r, "effort"); eff != "" {
		out.Effort = &eff
	}
	if s, ok := r.str("summary"); ok {
		switch s {
		case "auto", "concise", "detailed":
			out.Summary = &s
		default:
			r.fail(newError(KindInvalidValue, r.param("summary"),
				"Invalid value for '%s': '%s'. Supported values are: 'auto', 'concise' and 'detailed'.", r.param("summary"), s))
		}
	}
	r.str("generate_summary")
	return out
}

// ---- input ----

// inputTurn builds the chat messages of the input items: an assistant turn spans its
// reasoning, message and function_call items.
type inputTurn struct {
	msgs []model.ChatMessage
	// calls are the call_ids of the function_call items so far.
	calls map[string]bool
}

// assistant returns the last message when it is an assistant message (nil otherwise).
func (t *inputTurn) assistant() *model.ChatMessage {
	if n := len(t.msgs); n > 0 && t.msgs[n-1].Role == "assistant" {
		return &t.msgs[n-1]
	}
	return nil
}

// thinking returns the last message when it is an assistant message holding reasoning
// only: the reasoning items of a turn come before its message and function calls.
func (t *inputTurn) thinking() *model.ChatMessage {
	if a := t.assistant(); a != nil && a.Content == "" && len(a.ToolCalls) == 0 {
		return a
	}
	return nil
}

// parseResponsesInput reads input (a string: one user message; or an array of items)
// after the instructions' system message.
func parseResponsesInput(o *object, instructions *string) []model.ChatMessage {
	t := &inputTurn{calls: map[string]bool{}}
	if instructions != nil && *instructions != "" {
		t.msgs = append(t.msgs, model.ChatMessage{Role: "system", Content: *instructions})
	}
	v, ok := o.value("input")
	if !ok {
		o.fail(newError(KindMissingParameter, "input", "Missing required parameter: 'input'."))
		return nil
	}
	switch v := v.(type) {
	case string:
		if v == "" {
			o.fail(newError(KindInvalidValue, "input", "Invalid 'input': empty string. Expected a non-empty string or an array of input items."))
			return nil
		}
		t.msgs = append(t.msgs, model.ChatMessage{Role: "user", Content: v})
	case []any, idArray:
		items, _ := arrayOf(v)
		if len(items) == 0 {
			o.fail(newError(KindInvalidValue, "input", "Invalid 'input': empty array. Expected an array with at least one item."))
			return nil
		}
		for i, it := range items {
			if err := t.item(it, indexParam("input", i)); err != nil {
				o.fail(err)
				return nil
			}
		}
	default:
		o.fail(typeError("input", "a string or an array of input items", kindOf(v)))
		return nil
	}
	return t.msgs
}

// item translates one input item.
func (t *inputTurn) item(v any, param string) *APIError {
	m, err := objectOf(v, param)
	if err != nil {
		return err
	}
	typ, hasType := m.str("type")
	if m.err != nil {
		return m.err
	}
	if !hasType {
		if !m.has("role") {
			return newError(KindMissingParameter, m.param("type"), "Missing required parameter: '%s'.", m.param("type"))
		}
		typ = "message"
	}
	switch typ {
	case "message":
		return t.message(m)
	case "function_call":
		return t.functionCall(m)
	case "function_call_output":
		return t.functionOutput(m)
	case "reasoning":
		return t.reasoning(m)
	}
	if otherItemTypes[typ] {
		return newError(KindUnsupported, m.param("type"),
			"Input items of type '%s' are not supported by this server: it is stateless and runs function tools only.", typ)
	}
	return newError(KindInvalidValue, m.param("type"),
		"Invalid value for '%s': '%s'. Supported values are: 'message', 'function_call', 'function_call_output' and 'reasoning'.", m.param("type"), typ)
}

// responsesRoles are the roles of message items.
var responsesRoles = map[string]bool{"user": true, "system": true, "developer": true, "assistant": true}

func (t *inputTurn) message(m *object) *APIError {
	role, ok := m.str("role")
	if m.err != nil {
		return m.err
	}
	if !ok {
		return newError(KindMissingParameter, m.param("role"), "Missing required parameter: '%s'.", m.param("role"))
	}
	if !responsesRoles[role] {
		return newError(KindInvalidValue, m.param("role"),
			"Invalid value for '%s': '%s'. Supported values are: 'user', 'system', 'developer' and 'assistant'.", m.param("role"), role)
	}
	text, err := itemText(m, "content")
	if err != nil {
		return err
	}
	if role == "assistant" {
		if a := t.thinking(); a != nil {
			a.Content = text
			return nil
		}
		t.msgs = append(t.msgs, model.ChatMessage{Role: "assistant", Content: text})
		return nil
	}
	if text == "" {
		return newError(KindInvalidValue, m.param("content"), "Invalid '%s': a %s message needs non-empty content.", m.param("content"), role)
	}
	t.msgs = append(t.msgs, model.ChatMessage{Role: role, Content: text})
	return nil
}

// itemText reads a field that is a string or an array of text content parts (input_text,
// output_text, refusal), joined with "\n" as chat content parts are.
func itemText(m *object, key string) (string, *APIError) {
	v, ok := m.value(key)
	if !ok {
		if m.err != nil {
			return "", m.err
		}
		return "", newError(KindMissingParameter, m.param(key), "Missing required parameter: '%s'.", m.param(key))
	}
	switch v := v.(type) {
	case string:
		return v, nil
	case []any, idArray:
		parts, _ := arrayOf(v)
		texts := make([]string, 0, len(parts))
		for j, p := range parts {
			po, err := objectOf(p, indexParam(m.param(key), j))
			if err != nil {
				return "", err
			}
			typ, ok := po.str("type")
			if po.err != nil {
				return "", po.err
			}
			if !ok {
				return "", newError(KindMissingParameter, po.param("type"), "Missing required parameter: '%s'.", po.param("type"))
			}
			field := "text"
			switch typ {
			case "input_text", "output_text", "summary_text", "reasoning_text":
			case "refusal":
				field = "refusal"
			case "input_image", "input_file", "input_audio":
				return "", newError(KindUnsupported, po.param("type"),
					"Content part type '%s' is not supported by this engine: only text parts are.", typ)
			default:
				return "", newError(KindInvalidValue, po.param("type"),
					"Invalid value for '%s': '%s'. Supported values are: 'input_text', 'output_text' and 'refusal'.", po.param("type"), typ)
			}
			s, ok := po.str(field)
			if po.err != nil {
				return "", po.err
			}
			if !ok {
				return "", newError(KindMissingParameter, po.param(field), "Missing required parameter: '%s'.", po.param(field))
			}
			texts = append(texts, s)
		}
		return strings.Join(texts, "\n"), nil
	default:
		return "", typeError(m.param(key), "a string or an array of content parts", kindOf(v))
	}
}

// requiredStr reads a required non-empty string field.
func requiredStr(m *object, key string) (string, *APIError) {
	s, ok := m.str(key)
	if m.err != nil {
		return "", m.err
	}
	if !ok || s == "" {
		return "", newError(KindMissingParameter, m.param(key), "Missing required parameter: '%s'.", m.param(key))
	}
	return s, nil
}

func (t *inputTurn) functionCall(m *object) *APIError {
	callID, err := requiredStr(m, "call_id")
	if err != nil {
		return err
	}
	name, err := requiredStr(m, "name")
	if err != nil {
		return err
	}
	args, ok := m.str("arguments")
	if m.err != nil {
		return m.err
	}
	if !ok {
		return newError(KindMissingParameter, m.param("arguments"), "Missing required parameter: '%s'.", m.param("arguments"))
	}
	if !json.Valid([]byte(args)) {
		return newError(KindInvalidValue, m.param("arguments"), "Invalid '%s': the arguments are not valid JSON.", m.param("arguments"))
	}
	t.calls[callID] = true
	call := map[string]any{"id": callID, "type": "function", "function": map[string]any{"name": name, "arguments": args}}
	if a := t.assistant(); a != nil {
		a.ToolCalls = append(a.ToolCalls, call)
		return nil
	}
	t.msgs = append(t.msgs, model.ChatMessage{Role: "assistant", ToolCalls: []map[string]any{call}})
	return nil
}

func (t *inputTurn) functionOutput(m *object) *APIError {
	callID, err := requiredStr(m, "call_id")
	if err != nil {
		return err
	}
	if !t.calls[callID] {
		return newError(KindInvalidValue, m.param("call_id"),
			"No tool call found for function call output with call_id %s: a function_call item with that call_id must come before it in 'input'.", clipName(callID))
	}
	out, err := itemText(m, "output")
	if err != nil {
		return err
	}
	t.msgs = append(t.msgs, model.ChatMessage{Role: "tool", Content: out, ToolCallID: callID})
	return nil
}

// reasoning takes a reasoning item's text (content, else summary: each, when given, an
// array of text parts) as the chain of thought of the assistant turn it opens.
func (t *inputTurn) reasoning(m *object) *APIError {
	text := ""
	for _, key := range []string{"content", "summary"} {
		if !m.has(key) {
			continue
		}
		if _, ok := m.expect(key, kindArray, "an array of text parts"); !ok {
			return m.err
		}
		s, err := itemText(m, key)
		if err != nil {
			return err
		}
		if s != "" {
			text = s
			break
		}
	}
	if m.err != nil {
		return m.err
	}
	if enc, _ := m.str("encrypted_content"); enc != "" && text == "" {
		return newError(KindUnsupported, m.param("encrypted_content"),
			"Encrypted reasoning is not supported by this server: send the reasoning's text in 'content'.")
	}
	if m.err != nil {
		return m.err
	}
	if a := t.thinking(); a != nil {
		if a.Reasoning != "" && text != "" {
			a.Reasoning += "\n"
		}
		a.Reasoning += text
		return nil
	}
	t.msgs = append(t.msgs, model.ChatMessage{Role: "assistant", Reasoning: text})
	return nil
}

// ---- tools, tool_choice, text ----

// parseResponsesTools reads the function tools: each one's parameters schema is compiled
// (structured.go) and kept as JSON text in the request's key order, and decoded into the
// chat request's ToolList for the output parsers. Other tool types are refused, as is a
// name given twice or one that is not 1 to MaxToolNameLength characters of a-z, A-Z,
// 0-9, '_' and '-'.
func parseResponsesTools(o *object, raw *rawFields, chat *chatRequest) ([]responsesTool, []parse.ToolSchema) {
	if o.err != nil {
		return nil, nil
	}
	items, _ := o.array("tools")
	var out []responsesTool
	var schemas []parse.ToolSchema
	var rawItems []json.RawMessage
	seen := make(map[string]int, len(items)) // name → index
	for i, it := range items {
		to, err := objectOf(it, indexParam("tools", i))
		if err != nil {
			o.fail(err)
			return nil, nil
		}
		typ, ok := to.str("type")
		switch {
		case to.err != nil:
		case !ok:
			to.fail(newError(KindMissingParameter, to.param("type"), "Missing required parameter: '%s'.", to.param("type")))
		case hostedToolTypes[typ]:
			to.fail(newError(KindUnsupported, to.param("type"), "Tools of type '%s' are not supported by this server: only 'function' tools are.", typ))
		case typ != "function":
			to.fail(newError(KindInvalidValue, to.param("type"), "Invalid value for '%s': '%s'. Supported values are: 'function'.", to.param("type"), clipName(typ)))
		}
		name, ok := to.str("name")
		if to.err == nil && (!ok || name == "") {
			to.fail(newError(KindMissingParameter, to.param("name"), "Missing required parameter: '%s'.", to.param("name")))
		}
		if to.err == nil {
			to.fail(toolNameError(to.param("name"), name, MaxToolNameLength))
		}
		if j, dup := seen[name]; dup && to.err == nil {
			to.fail(newError(KindInvalidValue, to.param("name"), "Invalid '%s': the function name '%s' is also tools[%d]'s; function names must be unique.",
				to.param("name"), clipName(name), j))
		}
		seen[name] = i
		tool := responsesTool{Type: "function", Name: name}
		if d, ok := to.str("description"); ok {
			tool.Description = &d
		}
		if s, ok := to.boolean("strict"); ok {
			tool.Strict = &s
		}
		hasParams := to.has("parameters")
		if hasParams {
			to.expect("parameters", kindObject, "a JSON Schema object")
		}
		if to.err != nil {
			o.fail(to.err)
			return nil, nil
		}
		pt := parse.Tool{Name: name}
		if hasParams {
			if rawItems == nil {
				r, err := raw.at("tools")
				if err == nil {
					rawItems, err = rawElements(r)
				}
				if err != nil || len(rawItems) != len(items) {
					o.fail(newError(KindInvalidJSON, "tools", "Invalid 'tools': its JSON could not be read again."))
					return nil, nil
				}
			}
			var text json.RawMessage
			if m, err := rawMembers(rawItems[i]); err == nil {
				text = m["parameters"]
			}
			compacted, ok := schemaText(o, to.param("parameters"), text)
			if !ok {
				return nil, nil
			}
			v, _ := decodeSchemaJSON([]byte(compacted))
			tool.Parameters, pt.Parameters = json.RawMessage(compacted), v.(map[string]any)
		}
		out = append(out, tool)
		chat.ToolList = append(chat.ToolList, pt)
		schemas = append(schemas, parse.ToolSchema{Name: name, Parameters: tool.Parameters})
	}
	return out, schemas
}

// templateTools returns the tools in OpenAI's chat shape, the one chat templates read
// (nil when there are none or tool_choice is "none", as chat completions do).
func templateTools(tools []responsesTool, choice toolChoice) (json.RawMessage, *APIError) {
	if len(tools) == 0 || choice.Mode == "none" {
		return nil, nil
	}
	tt := make([]templateTool, len(tools))
	for i, t := range tools {
		tt[i] = templateTool{Type: "function", Function: templateFunction{Name: t.Name, Description: t.Description, Parameters: t.Parameters}}
	}
	b, err := encodeJSON(tt)
	if err != nil {
		return nil, &APIError{Kind: KindInternal, Message: "The tools could not be encoded.", Cause: err}
	}
	return b, nil
}

// parseResponsesToolChoice reads tool_choice: "auto", "none", "required" or {"type":
// "function", "name": N} naming one of the tools. It returns the choice for the chat
// request and as the response repeats it ("auto" when absent).
func parseResponsesToolChoice(o *object, tools []responsesTool) (toolChoice, any) {
	v, ok := o.value("tool_choice")
	if o.err != nil || !ok {
		return toolChoice{Mode: "auto"}, "auto"
	}
	var c toolChoice
	var echo any
	switch kindOf(v) {
	case kindString:
		switch s := v.(string); s {
		case "none", "auto", "required":
			c.Mode, echo = s, s
		default:
			o.fail(newError(KindInvalidValue, "tool_choice", "Invalid value for 'tool_choice': '%s'. Supported values are: 'none', 'auto' and 'required'.", clipName(s)))
		}
	case kindObject:
		tc, _ := o.child("tool_choice")
		typ, ok := tc.str("type")
		switch {
		case tc.err != nil:
		case !ok:
			tc.fail(newError(KindMissingParameter, "tool_choice.type", "Missing required parameter: 'tool_choice.type'."))
		case hostedToolTypes[typ]:
			tc.fail(newError(KindUnsupported, "tool_choice.type", "tool_choice of type '%s' is not supported by this server: only 'function' tools are.", typ))
		case typ != "function":
			tc.fail(newError(KindInvalidValue, "tool_choice.type", "Invalid value for 'tool_choice.type': '%s'. Supported values are: 'function'.", clipName(typ)))
		default:
			name, err := requiredStr(tc, "name")
			tc.fail(err)
			c, echo = toolChoice{Mode: "function", Name: name}, responsesNamedChoice{Type: "function", Name: name}
		}
		o.fail(tc.err)
	default:
		o.fail(typeError("tool_choice", "a string or an object", kindOf(v)))
	}
	if o.err != nil {
		return toolChoice{}, nil
	}
	switch {
	case (c.Mode == "required" || c.Mode == "function") && len(tools) == 0:
		o.fail(newError(KindInvalidValue, "tool_choice", "Invalid value for 'tool_choice': forcing a tool call needs at least one function in 'tools'."))
	case c.Mode == "function" && !slices.ContainsFunc(tools, func(t responsesTool) bool { return t.Name == c.Name }):
		names := make([]string, len(tools))
		for i, t := range tools {
			names[i] = t.Name
		}
		o.fail(newError(KindInvalidValue, "tool_choice.name", "Invalid 'tool_choice.name': '%s' is not among the tools (%s).",
			clipName(c.Name), clipName(strings.Join(names, ", "))))
	}
	return c, echo
}

// parseResponsesText reads text: format (a json_schema's schema compiled and kept as
// JSON text in the request's key order) and verbosity (repeated, no effect).
func parseResponsesText(o *object, raw *rawFields) responsesText {
	out := responsesText{Format: responsesFormat{Type: "text"}}
	t, ok := o.child("text")
	if !ok {
		return out
	}
	if f, ok := t.child("format"); ok {
		typ, ok := f.str("type")
		switch {
		case f.err != nil:
		case !ok:
			f.fail(newError(KindMissingParameter, f.param("type"), "Missing required parameter: '%s'.", f.param("type")))
		case typ == "text" || typ == "json_object":
			out.Format.Type = typ
		case typ == "json_schema":
			out.Format.Type = typ
			name, err := requiredStr(f, "name")
			if err != nil {
				f.fail(err)
				break
			}
			out.Format.Name = name
			if d, ok := f.str("description"); ok {
				out.Format.Description = &d
			}
			if s, ok := f.boolean("strict"); ok {
				out.Format.Strict = &s
			}
			if !f.has("schema") {
				f.fail(newError(KindMissingParameter, f.param("schema"), "Missing required parameter: '%s'.", f.param("schema")))
				break
			}
			if _, ok := f.expect("schema", kindObject, "a JSON Schema object"); !ok {
				break
			}
			text, err2 := raw.at("text", "format", "schema")
			if err2 != nil || text == nil {
				f.fail(newError(KindInvalidJSON, f.param("schema"), "Invalid '%s': its JSON could not be read again.", f.param("schema")))
				break
			}
			if s, ok := schemaText(f, f.param("schema"), text); ok {
				out.Format.Schema = json.RawMessage(s)
			}
		default:
			f.fail(newError(KindInvalidValue, f.param("type"),
				"Invalid value for '%s': '%s'. Supported values are: 'text', 'json_object' and 'json_schema'.", f.param("type"), clipName(typ)))
		}
		t.fail(f.err)
	}
	if v, ok := t.str("verbosity"); ok {
		switch v {
		case "low", "medium", "high":
			out.Verbosity = &v
		default:
			t.fail(newError(KindInvalidValue, t.param("verbosity"), "Invalid value for '%s': '%s'. Supported values are: 'low', 'medium' and 'high'.", t.param("verbosity"), clipName(v)))
		}
	}
	o.fail(t.err)
	return out
}

// constraint is the structured output constraint: text.format json_object or
// json_schema, or the schema of a forced tool call (tool_choice "required" or a named
// function; forcedCall), which cannot be combined. Problems go to o.
func constraint(o *object, f responsesFormat, c toolChoice, schemas []parse.ToolSchema) *messages.StructuredOutput {
	if o.err != nil {
		return nil
	}
	if forced := c.Mode == "required" || c.Mode == "function"; forced {
		if f.Type != "text" {
			o.fail(newError(KindInvalidValue, "text.format",
				"Invalid 'text.format': a %s format cannot be combined with a tool_choice that forces a tool call; both constrain the output.", f.Type))
			return nil
		}
		return forcedCall(o, c, schemas)
	}
	switch f.Type {
	case "json_object":
		return &messages.StructuredOutput{JsonObject: true}
	case "json_schema":
		return &messages.StructuredOutput{JsonSchema: string(f.Schema)}
	}
	return nil
}
