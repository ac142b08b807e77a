package gateway

import (
	"bytes"
	"encoding/json"
	"slices"
	"strings"

	"github.com/turbine-llm/turbine/gateway/parse"
	"github.com/turbine-llm/turbine/model"
)

// The Anthropic Messages API's request (POST /v1/messages and /v1/messages/count_tokens,
// docs/reference.md §17) translated into a chatRequest, so that it is prepared, run and
// parsed as a chat completion is. Every refusal is a 400 (invalid_request_error in the
// API's error shape); messages name the field in the gateway's notation
// ("messages[1].content[0].tool_use_id").

// Thinking budgets, as Anthropic checks them: at least minThinkingBudget tokens and less
// than max_tokens.
const minThinkingBudget = 1024

// anthropicBlock is one content block of a message, validated.
type anthropicBlock struct {
	typ   string // "text", "tool_use", "tool_result", "thinking", "redacted_thinking"
	param string // e.g. "messages[1].content[0]"
	// text is a text block's text, a thinking block's thinking, a tool result's content
	// (its text blocks joined with "\n").
	text string
	// id and name are a tool_use block's; id is a tool_result block's tool_use_id.
	id, name string
	// msg is the index of the block's message; block is the block's index in its
	// content (-1 for string content).
	msg, block int
}

// anthropicTurn is one message of the request (consecutive messages of one role merged
// into one turn, as Anthropic combines them).
type anthropicTurn struct {
	role   string
	param  string // the first message's: "messages[3]"
	blocks []anthropicBlock
}

// parseMessagesRequest validates a Messages API body and translates it into a chat
// request: system (a string or text blocks) becomes the first system message; each
// user turn's tool_result blocks become tool messages (they must come first and answer
// the tool_use blocks of the assistant turn just before), its text one user message;
// each assistant turn becomes one assistant message with its text, its tool_use blocks
// as OpenAI tool calls (arguments: the input object's JSON as sent, key order kept) and
// its thinking as the message's reasoning. tools ({name, description, input_schema})
// become OpenAI function tools; tool_choice auto, any, tool and none become "auto",
// "required", a named function and "none" (disable_parallel_tool_use: parallel tool
// calls off); thinking enabled (or adaptive) and disabled set the template's
// enable_thinking and thinking variables; stop_sequences become stop strings. countOnly
// reads a count_tokens body (no max_tokens, no stream, no sampling fields).
func parseMessagesRequest(body []byte, countOnly bool) (*chatRequest, *APIError) {
	o, aerr := parseBody(body)
	if aerr != nil {
		return nil, aerr
	}
	req := &chatRequest{ParallelToolCalls: true, AddGenerationPrompt: true}
	req.SkipSpecialTokens = true
	if m, ok := o.str("model"); ok && m != "" {
		req.Model = m
	} else if o.err == nil {
		o.fail(newError(KindMissingParameter, "model", "Missing required parameter: 'model'."))
	}
	if !countOnly {
		parseMessagesSampling(o, req)
	}
	if o.err != nil {
		return nil, o.err
	}
	if t, ok := o.child("turbine"); ok {
		req.Turbine = parseTurbine(t)
		o.fail(t.err)
	}
	if md, ok := o.child("metadata"); ok {
		req.User, _ = md.str("user_id")
		o.fail(md.err)
	}
	raw := &rawFields{body: body}
	thinking := parseThinking(o, req, countOnly)
	parseOutputConfig(o, req, raw)
	if o.err != nil {
		return nil, o.err
	}
	parseAnthropicTools(o, req, raw)
	if o.err != nil {
		return nil, o.err
	}
	if thinking && (req.ToolChoice.Mode == "required" || req.ToolChoice.Mode == "function") {
		return nil, newError(KindInvalidValue, "tool_choice", "Invalid 'tool_choice': thinking may not be enabled when tool_choice forces tool use ('any' or 'tool'); use 'auto' or 'none', or disable thinking.")
	}
	if system := parseSystem(o); system != "" {
		req.Messages = append(req.Messages, model.ChatMessage{Role: "system", Content: system})
	}
	if o.err != nil {
		return nil, o.err
	}
	turns := parseTurns(o)
	if o.err != nil {
		return nil, o.err
	}
	msgs, aerr := translateTurns(turns, raw)
	if aerr != nil {
		return nil, aerr
	}
	req.Messages = append(req.Messages, msgs...)
	return req, nil
}

// parseMessagesSampling reads max_tokens (required), stream, stop_sequences,
// temperature, top_p and top_k.
func parseMessagesSampling(o *object, req *chatRequest) {
	if n, ok := o.integer("max_tokens"); ok {
		setMaxTokens(o, &req.commonRequest, "max_tokens", n)
		req.MaxTokensOwnName = true
	} else if o.err == nil {
		o.fail(newError(KindMissingParameter, "max_tokens", "Missing required parameter: 'max_tokens'."))
	}
	req.Stream, _ = o.boolean("stream")
	if items, ok := o.array("stop_sequences"); ok {
		if len(items) > MaxAnthropicStopSequences {
			o.fail(newError(KindInvalidValue, "stop_sequences", "Invalid 'stop_sequences': expected at most %d stop sequences, but got %d.", MaxAnthropicStopSequences, len(items)))
		}
		for i, it := range items {
			s, ok := it.(string)
			if !ok {
				o.fail(typeError(indexParam("stop_sequences", i), "a string", kindOf(it)))
				return
			}
			if s != "" {
				req.Stop = append(req.Stop, s)
			}
		}
	}
	if t, ok := o.number("temperature"); ok {
		if t < 0 || t > 1 {
			o.fail(newError(KindInvalidValue, "temperature", "Invalid 'temperature': expected a value between 0 and 1, but got %g.", t))
		}
		req.Temperature = &t
	}
	if p, ok := o.number("top_p"); ok {
		if p <= 0 || p > 1 {
			o.fail(newError(KindInvalidValue, "top_p", "Invalid 'top_p': expected a value in (0, 1], but got %g.", p))
		}
		req.TopP = &p
	}
	// The engines' sampling parameters carry no top-k: only the values that mean "off"
	// (vLLM's -1 and 0) can be honoured.
	if k, ok := o.integer("top_k"); ok && k != -1 && k != 0 {
		o.fail(newError(KindUnsupported, "top_k", "Unsupported 'top_k': top-k sampling is not supported by this server; omit it (or send -1)."))
	}
}

// parseThinking reads `thinking`: {"type": "enabled", "budget_tokens": N} (N ≥ 1024 and
// below max_tokens), {"type": "adaptive"} or {"type": "disabled"}. It sets the
// template's enable_thinking (Qwen3, GLM-4.5) and thinking (DeepSeek-V3.1) variables and
// reports whether thinking is on. Without the field the template's default applies.
// The budget cannot be passed to an engine: it is checked, not enforced.
func parseThinking(o *object, req *chatRequest, countOnly bool) bool {
	th, ok := o.child("thinking")
	if !ok {
		return false
	}
	typ, ok := th.str("type")
	if th.err != nil {
		o.fail(th.err)
		return false
	}
	on := false
	switch {
	case !ok:
		o.fail(newError(KindMissingParameter, "thinking.type", "Missing required parameter: 'thinking.type'."))
		return false
	case typ == "enabled":
		on = true
		b, ok := th.integer("budget_tokens")
		switch {
		case th.err != nil:
			o.fail(th.err)
		case !ok:
			o.fail(newError(KindMissingParameter, "thinking.budget_tokens", "Missing required parameter: 'thinking.budget_tokens'."))
		case b < minThinkingBudget:
			o.fail(newError(KindInvalidValue, "thinking.budget_tokens", "Invalid 'thinking.budget_tokens': expected a value >= %d, but got %d.", minThinkingBudget, b))
		case !countOnly && req.MaxTokens > 0 && b >= req.MaxTokens:
			o.fail(newError(KindInvalidValue, "thinking.budget_tokens", "Invalid 'thinking.budget_tokens': %d must be less than max_tokens (%d).", b, req.MaxTokens))
		}
	case typ == "adaptive":
		on = true
	case typ == "disabled":
	default:
		o.fail(newError(KindInvalidValue, "thinking.type", "Invalid value for 'thinking.type': '%s'. Supported values are: 'enabled', 'adaptive' and 'disabled'.", clipName(typ)))
		return false
	}
	req.TemplateKwargs = map[string]any{"enable_thinking": on, "thinking": on}
	return on
}

// anthropicEfforts maps output_config.effort onto the reasoning_effort values templates
// know (gpt-oss's low, medium, high).
var anthropicEfforts = map[string]string{"low": "low", "medium": "medium", "high": "high", "xhigh": "high", "max": "high"}

// parseOutputConfig reads output_config: effort (reasoning_effort for the template) and
// format ({"type": "json_schema", "schema": {...}}: the engine is constrained to the
// schema, docs/reference.md §16).
func parseOutputConfig(o *object, req *chatRequest, raw *rawFields) {
	oc, ok := o.child("output_config")
	if !ok {
		return
	}
	if e, ok := oc.str("effort"); ok {
		eff, known := anthropicEfforts[e]
		if !known {
			oc.fail(newError(KindInvalidValue, "output_config.effort", "Invalid value for 'output_config.effort': '%s'. Supported values are: 'low', 'medium', 'high', 'xhigh' and 'max'.", clipName(e)))
		}
		req.ReasoningEffort = eff
	}
	if f, ok := oc.child("format"); ok {
		typ, ok := f.str("type")
		switch {
		case f.err != nil:
		case !ok:
			f.fail(newError(KindMissingParameter, "output_config.format.type", "Missing required parameter: 'output_config.format.type'."))
		case typ != "json_schema":
			f.fail(newError(KindInvalidValue, "output_config.format.type", "Invalid value for 'output_config.format.type': '%s'. Supported values are: 'json_schema'.", clipName(typ)))
		case !f.has("schema"):
			f.fail(newError(KindMissingParameter, "output_config.format.schema", "Missing required parameter: 'output_config.format.schema'."))
		default:
			req.Structured = jsonConstraint(f, raw, "schema", "output_config", "format", "schema")
		}
		oc.fail(f.err)
	}
	o.fail(oc.err)
}

// parseSystem reads `system`: a string, or an array of text blocks joined with "\n".
func parseSystem(o *object) string {
	v, ok := o.value("system")
	if !ok {
		return ""
	}
	switch v := v.(type) {
	case string:
		return v
	case []any:
		texts := make([]string, 0, len(v))
		for i, it := range v {
			p := indexParam("system", i)
			b, err := objectOf(it, p)
			if err != nil {
				o.fail(err)
				return ""
			}
			typ, ok := b.str("type")
			if b.err == nil && !ok {
				b.fail(newError(KindMissingParameter, b.param("type"), "Missing required parameter: '%s'.", b.param("type")))
			} else if b.err == nil && typ != "text" {
				b.fail(newError(KindInvalidValue, b.param("type"), "Invalid value for '%s': '%s'. System blocks must be 'text' blocks.", b.param("type"), clipName(typ)))
			}
			t := blockText(b)
			if b.err != nil {
				o.fail(b.err)
				return ""
			}
			texts = append(texts, t)
		}
		return strings.Join(texts, "\n")
	default:
		o.fail(typeError("system", "a string or an array of text blocks", kindOf(v)))
		return ""
	}
}

// blockText reads a text block's required `text`.
func blockText(b *object) string {
	t, ok := b.str("text")
	if b.err == nil && !ok {
		b.fail(newError(KindMissingParameter, b.param("text"), "Missing required parameter: '%s'.", b.param("text")))
	}
	return t
}

// parseAnthropicTools reads `tools` and `tool_choice`. Each input_schema must compile
// (as the chat API's parameters do) and reaches the template, and a forced call's
// constraint, with its keys in the client's order. Each name must be unique and of 1 to
// MaxAnthropicToolNameLength characters of a-z, A-Z, 0-9, '_' and '-'.
func parseAnthropicTools(o *object, req *chatRequest, raw *rawFields) {
	items, _ := o.array("tools")
	if o.err != nil {
		return
	}
	var rawItems []json.RawMessage
	if len(items) > 0 {
		r, err := raw.at("tools")
		if err == nil {
			rawItems, err = rawElements(r)
		}
		if err != nil || len(rawItems) != len(items) {
			o.fail(newError(KindInvalidJSON, "tools", "Invalid 'tools': its JSON could not be read again."))
			return
		}
	}
	var buf bytes.Buffer // the tools as OpenAI function tools, for the template
	var schemas []parse.ToolSchema
	seen := make(map[string]int, len(items)) // name → index
	buf.WriteByte('[')
	for i, it := range items {
		t, err := objectOf(it, indexParam("tools", i))
		if err != nil {
			o.fail(err)
			return
		}
		if typ, ok := t.str("type"); ok && typ != "custom" {
			t.fail(newError(KindUnsupported, t.param("type"), "Unsupported '%s': tools of type '%s' are not supported by this server; only custom tools ({name, description, input_schema}) are.", t.param("type"), clipName(typ)))
		}
		name, ok := t.str("name")
		if t.err == nil && (!ok || name == "") {
			t.fail(newError(KindMissingParameter, t.param("name"), "Missing required parameter: '%s'.", t.param("name")))
		}
		if t.err == nil {
			t.fail(toolNameError(t.param("name"), name, MaxAnthropicToolNameLength))
		}
		if j, dup := seen[name]; dup && t.err == nil {
			t.fail(newError(KindInvalidValue, t.param("name"), "Invalid '%s': the tool name '%s' is also tools[%d]'s; tool names must be unique.", t.param("name"), clipName(name), j))
		}
		seen[name] = i
		desc, hasDesc := t.str("description")
		schema, ok := t.child("input_schema")
		if t.err == nil && !ok {
			t.fail(newError(KindMissingParameter, t.param("input_schema"), "Missing required parameter: '%s'.", t.param("input_schema")))
		}
		if t.err == nil {
			if typ, _ := schema.m["type"].(string); typ != "object" {
				t.fail(newError(KindInvalidValue, t.param("input_schema.type"), "Invalid '%s': a tool's input_schema must have type 'object'.", t.param("input_schema.type")))
			}
		}
		var text string
		if t.err == nil {
			var src json.RawMessage
			if m, err := rawMembers(rawItems[i]); err == nil {
				src = m["input_schema"]
			}
			text, _ = schemaText(t, t.param("input_schema"), src)
		}
		if t.err != nil {
			o.fail(t.err)
			return
		}
		v, _ := decodeSchemaJSON([]byte(text))
		req.ToolList = append(req.ToolList, parse.Tool{Name: name, Parameters: v.(map[string]any)})
		schemas = append(schemas, parse.ToolSchema{Name: name, Parameters: json.RawMessage(text)})
		if i > 0 {
			buf.WriteByte(',')
		}
		buf.WriteString(`{"type":"function","function":{"name":`)
		nb, _ := encodeJSON(name)
		buf.Write(nb)
		if hasDesc {
			buf.WriteString(`,"description":`)
			db, _ := encodeJSON(desc)
			buf.Write(db)
		}
		buf.WriteString(`,"parameters":`)
		buf.WriteString(text)
		buf.WriteString("}}")
	}
	buf.WriteByte(']')
	parseAnthropicToolChoice(o, req)
	if o.err != nil {
		return
	}
	if forced := forcedCall(o, req.ToolChoice, schemas); forced != nil {
		if req.Structured != nil {
			o.fail(newError(KindInvalidValue, "output_config.format", "Invalid 'output_config.format': an output format cannot be combined with a tool_choice that forces tool use ('any' or 'tool')."))
			return
		}
		req.Structured = forced
	}
	if len(items) > 0 && req.ToolChoice.Mode != "none" {
		req.Tools = buf.Bytes()
	}
}

// parseAnthropicToolChoice reads tool_choice: {"type": "auto" | "any" | "tool" | "none",
// "name" (tool), "disable_parallel_tool_use"}. "any" and "tool" constrain the engine to
// the calls' JSON, as the chat API's "required" and named function do.
func parseAnthropicToolChoice(o *object, req *chatRequest) {
	tc, ok := o.child("tool_choice")
	if !ok {
		if len(req.ToolList) > 0 {
			req.ToolChoice.Mode = "auto"
		}
		return
	}
	typ, ok := tc.str("type")
	if tc.err != nil {
		o.fail(tc.err)
		return
	}
	if !ok {
		o.fail(newError(KindMissingParameter, "tool_choice.type", "Missing required parameter: 'tool_choice.type'."))
		return
	}
	if d, ok := tc.boolean("disable_parallel_tool_use"); ok && d {
		req.ParallelToolCalls = false
	}
	switch typ {
	case "auto":
		req.ToolChoice.Mode = "auto"
	case "none":
		req.ToolChoice.Mode = "none"
	case "any":
		req.ToolChoice.Mode = "required"
	case "tool":
		name, ok := tc.str("name")
		if tc.err == nil && (!ok || name == "") {
			tc.fail(newError(KindMissingParameter, "tool_choice.name", "Missing required parameter: 'tool_choice.name'."))
		}
		req.ToolChoice = toolChoice{Mode: "function", Name: name}
	default:
		tc.fail(newError(KindInvalidValue, "tool_choice.type", "Invalid value for 'tool_choice.type': '%s'. Supported values are: 'auto', 'any', 'tool' and 'none'.", clipName(typ)))
	}
	if tc.err != nil {
		o.fail(tc.err)
		return
	}
	mode := req.ToolChoice.Mode
	if (mode == "required" || mode == "function") && len(req.ToolList) == 0 {
		o.fail(newError(KindInvalidValue, "tool_choice", "Invalid 'tool_choice': type '%s' needs at least one tool in 'tools'.", typ))
		return
	}
	if mode == "function" && !slices.ContainsFunc(req.ToolList, func(t parse.Tool) bool { return t.Name == req.ToolChoice.Name }) {
		o.fail(newError(KindInvalidValue, "tool_choice.name", "Invalid 'tool_choice.name': '%s' is not among the tools.", clipName(req.ToolChoice.Name)))
	}
}

// parseTurns reads `messages` into turns, merging consecutive messages of one role.
func parseTurns(o *object) []anthropicTurn {
	if !o.has("messages") {
		o.fail(newError(KindMissingParameter, "messages", "Missing required parameter: 'messages'."))
		return nil
	}
	items, ok := o.array("messages")
	if !ok {
		return nil
	}
	if len(items) == 0 {
		o.fail(newError(KindInvalidValue, "messages", "Invalid 'messages': empty array. Expected an array with at least one message."))
		return nil
	}
	var turns []anthropicTurn
	for i, it := range items {
		p := indexParam("messages", i)
		m, err := objectOf(it, p)
		if err != nil {
			o.fail(err)
			return nil
		}
		role, ok := m.str("role")
		if m.err == nil && !ok {
			m.fail(newError(KindMissingParameter, m.param("role"), "Missing required parameter: '%s'.", m.param("role")))
		}
		if m.err == nil && role != "user" && role != "assistant" && role != "system" {
			m.fail(newError(KindInvalidValue, m.param("role"), "Invalid value for '%s': '%s'. Supported values are: 'user', 'assistant' and 'system'.", m.param("role"), clipName(role)))
		}
		var blocks []anthropicBlock
		if m.err == nil {
			blocks = parseBlocks(m, role)
		}
		if m.err != nil {
			o.fail(m.err)
			return nil
		}
		for k := range blocks {
			blocks[k].msg = i
		}
		if n := len(turns); n > 0 && turns[n-1].role == role && role != "system" {
			turns[n-1].blocks = append(turns[n-1].blocks, blocks...)
			continue
		}
		turns = append(turns, anthropicTurn{role: role, param: p, blocks: blocks})
	}
	return turns
}

// parseBlocks reads one message's content: a string (one text block) or an array of
// blocks, each checked against its role.
func parseBlocks(m *object, role string) []anthropicBlock {
	v, ok := m.value("content")
	if !ok {
		m.fail(newError(KindMissingParameter, m.param("content"), "Missing required parameter: '%s'.", m.param("content")))
		return nil
	}
	if s, isStr := v.(string); isStr {
		return []anthropicBlock{{typ: "text", param: m.param("content"), text: s, block: -1}}
	}
	items, isArr := arrayOf(v)
	if !isArr {
		m.fail(typeError(m.param("content"), "a string or an array of content blocks", kindOf(v)))
		return nil
	}
	out := make([]anthropicBlock, 0, len(items))
	for j, it := range items {
		p := indexParam(m.param("content"), j)
		b, err := objectOf(it, p)
		if err != nil {
			m.fail(err)
			return nil
		}
		blk, aerr := parseBlock(b, role, p, j)
		if aerr != nil {
			m.fail(aerr)
			return nil
		}
		if blk.typ != "" {
			out = append(out, blk)
		}
	}
	return out
}

// parseBlock reads one content block; a zero typ means the block adds nothing (a
// redacted_thinking block).
func parseBlock(b *object, role, param string, j int) (anthropicBlock, *APIError) {
	blk := anthropicBlock{param: param, block: j}
	typ, ok := b.str("type")
	if b.err != nil {
		return blk, b.err
	}
	if !ok {
		return blk, newError(KindMissingParameter, b.param("type"), "Missing required parameter: '%s'.", b.param("type"))
	}
	only := func(want string) *APIError {
		if role != want {
			return newError(KindInvalidValue, b.param("type"), "Invalid '%s': %s blocks may only appear in %s messages, not in %s message.", b.param("type"), typ, want, map[string]string{"user": "a user", "assistant": "an assistant", "system": "a system"}[role])
		}
		return nil
	}
	blk.typ = typ
	switch typ {
	case "text":
		blk.text = blockText(b)
	case "image", "document", "search_result", "container_upload":
		return blk, newError(KindUnsupported, b.param("type"), "Unsupported '%s': content blocks of type '%s' are not supported by this server; only text, tool_use, tool_result and thinking blocks are.", b.param("type"), typ)
	case "tool_use":
		if err := only("assistant"); err != nil {
			return blk, err
		}
		blk.id, _ = b.str("id")
		blk.name, _ = b.str("name")
		if b.err == nil && blk.id == "" {
			b.fail(newError(KindMissingParameter, b.param("id"), "Missing required parameter: '%s'.", b.param("id")))
		}
		if b.err == nil && blk.name == "" {
			b.fail(newError(KindMissingParameter, b.param("name"), "Missing required parameter: '%s'.", b.param("name")))
		}
		if _, ok := b.child("input"); b.err == nil && !ok {
			b.fail(newError(KindMissingParameter, b.param("input"), "Missing required parameter: '%s'.", b.param("input")))
		}
	case "tool_result":
		if err := only("user"); err != nil {
			return blk, err
		}
		blk.id, _ = b.str("tool_use_id")
		if b.err == nil && blk.id == "" {
			b.fail(newError(KindMissingParameter, b.param("tool_use_id"), "Missing required parameter: '%s'.", b.param("tool_use_id")))
		}
		b.boolean("is_error")
		if b.err == nil {
			blk.text = toolResultText(b)
		}
	case "thinking":
		if err := only("assistant"); err != nil {
			return blk, err
		}
		t, ok := b.str("thinking")
		if b.err == nil && !ok {
			b.fail(newError(KindMissingParameter, b.param("thinking"), "Missing required parameter: '%s'.", b.param("thinking")))
		}
		blk.text = t
	case "redacted_thinking":
		// Another model's encrypted reasoning: nothing a template could show.
		if err := only("assistant"); err != nil {
			return blk, err
		}
		blk.typ = ""
	case "server_tool_use", "web_search_tool_result", "web_fetch_tool_result", "code_execution_tool_result",
		"bash_code_execution_tool_result", "text_editor_code_execution_tool_result", "tool_search_tool_result", "mcp_tool_use", "mcp_tool_result":
		return blk, newError(KindUnsupported, b.param("type"), "Unsupported '%s': content blocks of type '%s' are not supported by this server, which runs no server tools.", b.param("type"), typ)
	default:
		return blk, newError(KindInvalidValue, b.param("type"), "Invalid value for '%s': '%s'. Supported values are: 'text', 'tool_use', 'tool_result', 'thinking' and 'redacted_thinking'.", b.param("type"), clipName(typ))
	}
	return blk, b.err
}

// toolResultText reads a tool_result's content: absent, a string, or text blocks joined
// with "\n".
func toolResultText(b *object) string {
	v, ok := b.value("content")
	if !ok {
		return ""
	}
	if s, isStr := v.(string); isStr {
		return s
	}
	items, isArr := arrayOf(v)
	if !isArr {
		b.fail(typeError(b.param("content"), "a string or an array of content blocks", kindOf(v)))
		return ""
	}
	texts := make([]string, 0, len(items))
	for k, it := range items {
		p := indexParam(b.param("content"), k)
		c, err := objectOf(it, p)
		if err != nil {
			b.fail(err)
			return ""
		}
		typ, ok := c.str("type")
		switch {
		case c.err != nil:
		case !ok:
			c.fail(newError(KindMissingParameter, c.param("type"), "Missing required parameter: '%s'.", c.param("type")))
		case typ == "text":
			texts = append(texts, blockText(c))
		case typ == "image" || typ == "document" || typ == "search_result":
			c.fail(newError(KindUnsupported, c.param("type"), "Unsupported '%s': a tool result's content blocks of type '%s' are not supported by this server; only text blocks are.", c.param("type"), typ))
		default:
			c.fail(newError(KindInvalidValue, c.param("type"), "Invalid value for '%s': '%s'. A tool result's content holds 'text' blocks.", c.param("type"), clipName(typ)))
		}
		if c.err != nil {
			b.fail(c.err)
			return ""
		}
	}
	return strings.Join(texts, "\n")
}

// translateTurns turns the conversation into chat messages, checking its order: the
// first turn (after system messages) is the user's, the last is not the assistant's (a
// prefilled answer cannot be continued), every tool_result answers a tool_use of the
// assistant turn just before, each once, and every such tool_use gets its result. The
// tool_use inputs' JSON is read from raw, as sent.
func translateTurns(turns []anthropicTurn, raw *rawFields) ([]model.ChatMessage, *APIError) {
	var out []model.ChatMessage
	var rawMsgs []json.RawMessage
	input := func(b anthropicBlock) (string, *APIError) {
		bad := newError(KindInvalidJSON, b.param+".input", "Invalid '%s.input': its JSON could not be read again.", b.param)
		if rawMsgs == nil {
			r, err := raw.at("messages")
			if err == nil {
				rawMsgs, err = rawElements(r)
			}
			if err != nil {
				return "", bad
			}
		}
		if b.msg >= len(rawMsgs) || b.block < 0 {
			return "", bad
		}
		m, err := rawMembers(rawMsgs[b.msg])
		if err != nil {
			return "", bad
		}
		blocks, err := rawElements(m["content"])
		if err != nil || b.block >= len(blocks) {
			return "", bad
		}
		fields, err := rawMembers(blocks[b.block])
		if err != nil || fields["input"] == nil {
			return "", bad
		}
		return compact(fields["input"]), nil
	}
	var pending []string // tool_use ids of the previous assistant turn
	started := false
	for ti, t := range turns {
		switch t.role {
		case "system":
			var texts []string
			for _, b := range t.blocks {
				if b.typ != "text" {
					return nil, newError(KindInvalidValue, b.param, "Invalid '%s': a system message holds text blocks only.", b.param)
				}
				texts = append(texts, b.text)
			}
			out = append(out, model.ChatMessage{Role: "system", Content: strings.Join(texts, "\n")})
			continue
		case "assistant":
			if !started {
				return nil, newError(KindInvalidValue, t.param+".role", "Invalid '%s.role': the first message must use the 'user' role.", t.param)
			}
			if ti == len(turns)-1 {
				return nil, newError(KindUnsupported, t.param, "Unsupported '%s': a final assistant message (a prefilled answer to continue) is not supported by this server; end the conversation with a user message.", t.param)
			}
			msg, ids, aerr := assistantMessage(t, input)
			if aerr != nil {
				return nil, aerr
			}
			out = append(out, msg)
			pending = ids
			continue
		}
		started = true
		msgs, aerr := userMessages(t, pending)
		if aerr != nil {
			return nil, aerr
		}
		out = append(out, msgs...)
		pending = nil
	}
	if !started {
		return nil, newError(KindInvalidValue, "messages", "Invalid 'messages': the conversation needs a message with the 'user' role.")
	}
	return out, nil
}

// assistantMessage is one assistant turn: text joined with "\n", thinking as reasoning,
// tool_use blocks as tool calls (ids returned, for the next turn's results).
func assistantMessage(t anthropicTurn, input func(anthropicBlock) (string, *APIError)) (model.ChatMessage, []string, *APIError) {
	msg := model.ChatMessage{Role: "assistant"}
	var texts, thoughts, ids []string
	for _, b := range t.blocks {
		switch b.typ {
		case "text":
			texts = append(texts, b.text)
		case "thinking":
			thoughts = append(thoughts, b.text)
		case "tool_use":
			for _, id := range ids {
				if id == b.id {
					return msg, nil, newError(KindInvalidValue, b.param+".id", "Invalid '%s.id': tool_use id '%s' is used twice in one message.", b.param, clipName(b.id))
				}
			}
			args, aerr := input(b)
			if aerr != nil {
				return msg, nil, aerr
			}
			ids = append(ids, b.id)
			msg.ToolCalls = append(msg.ToolCalls, map[string]any{"id": b.id, "type": "function",
				"function": map[string]any{"name": b.name, "arguments": args}})
		}
	}
	msg.Content = strings.Join(texts, "\n")
	msg.Reasoning = strings.Join(thoughts, "\n")
	if msg.Content == "" && msg.Reasoning == "" && len(msg.ToolCalls) == 0 {
		return msg, nil, newError(KindInvalidValue, t.param+".content", "Invalid '%s.content': an assistant message needs non-empty content.", t.param)
	}
	return msg, ids, nil
}

// userMessages is one user turn: its tool results first, as tool messages in the order
// of the calls they answer (templates that write results without ids, as Qwen's
// <tool_response>, pair them with the calls by position), then its text as one user
// message.
func userMessages(t anthropicTurn, pending []string) ([]model.ChatMessage, *APIError) {
	var out []model.ChatMessage
	results := make(map[string]string, len(pending))
	var texts []string
	for _, b := range t.blocks {
		switch b.typ {
		case "tool_result":
			if len(texts) > 0 {
				return nil, newError(KindInvalidValue, b.param, "Invalid '%s': tool_result blocks must come first in a user message, before any text.", b.param)
			}
			known := false
			for _, id := range pending {
				known = known || id == b.id
			}
			if !known {
				return nil, newError(KindInvalidValue, b.param+".tool_use_id", "Invalid '%s.tool_use_id': '%s' does not answer a tool_use block of the previous assistant message.", b.param, clipName(b.id))
			}
			if _, twice := results[b.id]; twice {
				return nil, newError(KindInvalidValue, b.param+".tool_use_id", "Invalid '%s.tool_use_id': tool_use '%s' is answered twice.", b.param, clipName(b.id))
			}
			results[b.id] = b.text
		case "text":
			texts = append(texts, b.text)
		}
	}
	for _, id := range pending {
		text, ok := results[id]
		if !ok {
			return nil, newError(KindInvalidValue, t.param+".content", "Invalid '%s.content': tool_use '%s' of the previous assistant message has no tool_result block; each tool_use needs its tool_result in the next message.", t.param, clipName(id))
		}
		out = append(out, model.ChatMessage{Role: "tool", ToolCallID: id, Content: text})
	}
	text := strings.Join(texts, "\n")
	if text != "" {
		out = append(out, model.ChatMessage{Role: "user", Content: text})
	}
	if len(out) == 0 {
		return nil, newError(KindInvalidValue, t.param+".content", "Invalid '%s.content': a user message needs non-empty content.", t.param)
	}
	return out, nil
}
