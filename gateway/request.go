package gateway

import (
	"encoding/json"
	"math"
	"strings"
	"unicode/utf8"

	"github.com/turbine-llm/turbine/gateway/parse"
	"github.com/turbine-llm/turbine/messages"
	"github.com/turbine-llm/turbine/model"
)

// commonRequest holds the validated fields that chat and completions requests share.
// Parsing checks types and ranges that need no model; limits that depend on the model
// (context length, vocabulary) are checked when the request is prepared.
type commonRequest struct {
	Model        string
	Stream       bool
	IncludeUsage bool // stream_options.include_usage
	// ContinuousUsage is vLLM's stream_options.continuous_usage_stats: with IncludeUsage,
	// every chunk carries the usage so far (docs/reference.md §5.1).
	ContinuousUsage bool
	// N is the number of choices per prompt (n; 1 to MaxChoices; 0 counts as 1), run as
	// N requests on one worker (choices.go, docs/reference.md §22).
	N int
	// MaxTokens is max_completion_tokens, else max_tokens; 0 when neither was given.
	MaxTokens int64
	// MaxTokensParam names the field MaxTokens came from, for error messages;
	// MaxTokensOwnName: name it alone where vLLM's message names both of OpenAI's fields
	// (an API with only that one, Anthropic's).
	MaxTokensParam    string
	MaxTokensOwnName  bool
	MinTokens         int64
	Stop              []string
	StopTokenIDs      []uint32
	IgnoreEOS         bool
	SkipSpecialTokens bool
	Seed              *int64
	Temperature       *float64
	TopP              *float64
	PresencePenalty   float64
	FrequencyPenalty  float64
	User              string
	Turbine           turbineOptions
	// Structured constrains the engine's output (response_format json_object or
	// json_schema, structured_outputs, guided_*; for chat also tool_choice required or
	// named); nil for free text (docs/reference.md §16, structured.go).
	Structured *messages.StructuredOutput
	// vLLM's other sampling and output fields (sampling.go).
	samplingExtras
	// vLLM's request fields beyond sampling (vllmfields.go).
	vllmOptions
	// Logprobs are the logprob fields (logprobs.go).
	Logprobs logprobOptions
}

// turbineOptions is the request's `turbine` extension object.
type turbineOptions struct {
	// ReturnWorker adds a `turbine` object (worker id, cached tokens) to the response.
	ReturnWorker bool
	// ExplainRoute adds the router's explained decision to that object (`route`, every
	// candidate's cost terms: explain.go); it implies ReturnWorker.
	ExplainRoute bool
	// OverlapWeight and RouterTemperature override the router's defaults (docs/reference.md §3).
	OverlapWeight     *float64
	RouterTemperature *float64
}

// chatRequest is a validated POST /v1/chat/completions body.
type chatRequest struct {
	commonRequest
	Messages []model.ChatMessage
	// PromptParam names the request's conversation in errors: "messages", or the
	// Responses API's "input" (promptParamOf).
	PromptParam string
	// Tools is the OpenAI tools array (JSON, as received) passed to the chat template;
	// nil when absent or when tool_choice is "none".
	Tools               json.RawMessage
	AddGenerationPrompt bool
	// TemplateKwargs are vLLM's chat_template_kwargs (e.g. Qwen3's enable_thinking).
	TemplateKwargs map[string]any
	// ToolList is the offered functions, decoded, for the output parsers.
	ToolList []parse.Tool
	// ToolChoice is tool_choice; its zero value is "auto" with tools, "none" without.
	ToolChoice toolChoice
	// ParallelToolCalls is parallel_tool_calls (default true): false keeps the answer's
	// first tool call only.
	ParallelToolCalls bool
	// ReasoningEffort is reasoning_effort ("" when absent), passed to the chat template.
	ReasoningEffort string
	// ContinueFinalMessage leaves the last message open for the model to continue
	// (vLLM's continue_final_message). ChatTemplateSource is the request's own
	// chat_template (nil when absent or null); ChatTemplate, its compiled form, replaces
	// the model's chat template, set only by a server that trusts requests' templates
	// (Server.requestTemplate).
	ContinueFinalMessage bool
	ChatTemplateSource   *string
	ChatTemplate         *model.ChatTemplate
	// vLLM's chat-only fields: echo, documents, include_reasoning, return_prompt_text
	// and add_special_tokens (vllmfields.go).
	chatOptions
}

// toolChoice is a request's tool_choice.
type toolChoice struct {
	// Mode is "auto", "none", "required" or "function" (a named function, Name).
	Mode string
	Name string
}

// completionRequest is a validated POST /v1/completions body: one prompt, as text or as
// token ids, or a batch of them (More).
type completionRequest struct {
	commonRequest
	PromptText string
	PromptIDs  []uint32
	// TokenPrompt is true when the prompt was given as token ids.
	TokenPrompt bool
	// More are the prompts after the first of a batch (an array of several strings or
	// token-id arrays), in order; empty for one prompt.
	More []completionPrompt
}

// completionPrompt is one prompt of a batch: text, or token ids when Tokens.
type completionPrompt struct {
	Text   string
	IDs    []uint32
	Tokens bool
}

// parseBody decodes body, which must be one JSON object in UTF-8 (RFC 8259 §8.1: bytes
// that are not would reach the prompt as U+FFFD, the text lost).
func parseBody(body []byte) (*object, *APIError) {
	if !utf8.Valid(body) {
		return nil, &APIError{Kind: KindInvalidJSON, Message: "We could not parse the JSON body of your request: it is not valid UTF-8."}
	}
	v, err := decodeBody(body)
	if err != nil {
		return nil, &APIError{Kind: KindInvalidJSON, Message: "We could not parse the JSON body of your request: it is not valid JSON.", Cause: err}
	}
	return objectOf(v, "")
}

// parseChatRequest validates a chat completions body (OpenAI chat API, plus vLLM's
// min_tokens, ignore_eos, stop_token_ids, skip_special_tokens, add_generation_prompt and
// the `turbine` extension). Unknown top-level fields are ignored, as OpenAI does.
func parseChatRequest(body []byte) (*chatRequest, *APIError) {
	o, err := parseBody(body)
	if err != nil {
		return nil, err
	}
	o.trackReads()
	req := &chatRequest{ParallelToolCalls: true}
	parseCommon(o, &req.commonRequest)
	if o.err != nil {
		return nil, o.err
	}
	// Chat-only sampling fields.
	parseChatLogprobs(o, &req.commonRequest)
	if max, ok := o.integer("max_completion_tokens"); ok {
		setMaxTokens(o, &req.commonRequest, "max_completion_tokens", max)
	}
	checkMinTokens(o, &req.commonRequest)
	raw := &rawFields{body: body}
	req.Structured = parseConstraints(o, raw)
	req.AddGenerationPrompt = true
	v, agpSet := o.boolean("add_generation_prompt")
	if agpSet {
		req.AddGenerationPrompt = v
	}
	chatTemplateFields(o, req, agpSet)
	req.TemplateKwargs = parseTemplateKwargs(o)
	req.ReasoningEffort = parseReasoningEffort(o, "reasoning_effort")
	req.Messages = parseMessages(o)
	req.Tools = parseTools(o, raw, req)
	parseChatVLLMFields(o, req)
	if o.err != nil {
		return nil, o.err
	}
	req.Ignored = o.unread()
	return req, nil
}

// parseCompletionRequest validates a completions body (OpenAI legacy completions API plus
// the same vLLM extras and `turbine` extension as chat). A batch of prompts is refused.
func parseCompletionRequest(body []byte) (*completionRequest, *APIError) {
	o, err := parseBody(body)
	if err != nil {
		return nil, err
	}
	o.trackReads()
	req := &completionRequest{}
	echoOnly := echoWithoutGeneration(o)
	parseCommon(o, &req.commonRequest)
	if o.err != nil {
		return nil, o.err
	}
	parseCompletionLogprobs(o, &req.commonRequest, echoOnly)
	if s, ok := o.str("suffix"); ok && s != "" {
		o.fail(newError(KindUnsupported, "suffix", "suffix is not supported by this engine."))
	}
	if b, ok := o.integer("best_of"); ok {
		checkBestOf(o, b, req.N)
	}
	checkMinTokens(o, &req.commonRequest)
	req.Structured = parseConstraints(o, &rawFields{body: body})
	parseCompletionVLLMFields(o, req)
	parsePrompt(o, req)
	if o.err != nil {
		return nil, o.err
	}
	req.Ignored = o.unread()
	return req, nil
}

// parseCommon reads the fields shared by both endpoints. `model` is optional, as in
// vLLM: absent, null or "" leaves Model "", resolved to the one model served
// (Server.resolveModel, docs/reference.md §5.1).
func parseCommon(o *object, c *commonRequest) {
	c.Model, _ = o.str("model")
	c.Stream, _ = o.boolean("stream")
	if so, ok := o.child("stream_options"); ok {
		if !c.Stream {
			o.fail(newError(KindInvalidValue, "stream_options", "The 'stream_options' parameter is only allowed when 'stream' is enabled."))
		}
		c.IncludeUsage, _ = so.boolean("include_usage")
		c.ContinuousUsage, _ = so.boolean("continuous_usage_stats")
		o.fail(so.err)
	}
	c.N = 1
	if n, ok := o.integer("n"); ok {
		if n < 1 || n > MaxChoices {
			o.fail(newError(KindInvalidValue, "n", "Invalid 'n': expected a value between 1 and %d, but got %d.", MaxChoices, n))
		} else {
			c.N = int(n)
		}
	}
	if max, ok := o.integer("max_tokens"); ok {
		setMaxTokens(o, c, "max_tokens", max)
	}
	if min, ok := o.integer("min_tokens"); ok {
		if min < 0 {
			o.fail(newError(KindInvalidValue, "min_tokens", "Invalid 'min_tokens': expected a value >= 0, but got %d.", min))
		}
		c.MinTokens = min
	}
	if stops, ok := o.strOrStrings("stop"); ok {
		// Any number, none empty, as vLLM (docs/reference.md §20).
		for i, s := range stops {
			if s == "" {
				p := "stop"
				if kindOf(o.m["stop"]) == kindArray {
					p = indexParam("stop", i)
				}
				o.fail(newError(KindInvalidValue, p, "Invalid '%s': stop cannot contain an empty string.", p))
			}
		}
		c.Stop = stops
	}
	if items, ok := o.array("stop_token_ids"); ok {
		ids, err := tokenIDs(items, "stop_token_ids")
		o.fail(err)
		c.StopTokenIDs = ids
	}
	c.IgnoreEOS, _ = o.boolean("ignore_eos")
	c.SkipSpecialTokens = true
	if v, ok := o.boolean("skip_special_tokens"); ok {
		c.SkipSpecialTokens = v
	}
	if s, ok := o.integer("seed"); ok {
		c.Seed = &s
	}
	if t, ok := o.number("temperature"); ok {
		if t < 0 || t > 2 {
			o.fail(newError(KindInvalidValue, "temperature", "Invalid 'temperature': expected a value between 0 and 2, but got %g.", t))
		}
		c.Temperature = &t
	}
	if p, ok := o.number("top_p"); ok {
		if p <= 0 || p > 1 {
			o.fail(newError(KindInvalidValue, "top_p", "Invalid 'top_p': expected a value in (0, 1], but got %g.", p))
		}
		c.TopP = &p
	}
	c.PresencePenalty = penalty(o, "presence_penalty")
	c.FrequencyPenalty = penalty(o, "frequency_penalty")
	c.User, _ = o.str("user")
	if t, ok := o.child("turbine"); ok {
		c.Turbine = parseTurbine(t)
		o.fail(t.err)
	}
	parseSamplingExtras(o, c)
	parseVLLMFields(o, c)
}

// checkMinTokens runs after every max_tokens field was read.
func checkMinTokens(o *object, c *commonRequest) {
	if c.MaxTokens > 0 && c.MinTokens > c.MaxTokens {
		o.fail(newError(KindInvalidValue, "min_tokens", "Invalid 'min_tokens': %d is larger than %s (%d).", c.MinTokens, c.MaxTokensParam, c.MaxTokens))
	}
}

func setMaxTokens(o *object, c *commonRequest, param string, v int64) {
	if v < 1 {
		o.fail(newError(KindInvalidValue, param, "Invalid '%s': expected a value >= 1, but got %d.", param, v))
		return
	}
	if v > math.MaxInt32 {
		o.fail(newError(KindInvalidValue, param, "Invalid '%s': %d is too large.", param, v))
		return
	}
	c.MaxTokens, c.MaxTokensParam = v, param
}

func penalty(o *object, key string) float64 {
	v, ok := o.number(key)
	if ok && (v < -2 || v > 2) {
		o.fail(newError(KindInvalidValue, key, "Invalid '%s': expected a value between -2 and 2, but got %g.", key, v))
	}
	return v
}

// turbineKeys are the fields of the `turbine` extension; others are refused so that a
// misspelt option is not silently ignored.
var turbineKeys = map[string]bool{"return_worker": true, "explain_route": true, "overlap_weight": true, "router_temperature": true}

func parseTurbine(t *object) turbineOptions {
	var opts turbineOptions
	for k := range t.m {
		if !turbineKeys[k] {
			t.fail(newError(KindInvalidValue, t.param(k), "Unknown field '%s' (known: return_worker, explain_route, overlap_weight, router_temperature).", t.param(k)))
			return opts
		}
	}
	opts.ReturnWorker, _ = t.boolean("return_worker")
	opts.ExplainRoute, _ = t.boolean("explain_route")
	if w, ok := t.number("overlap_weight"); ok {
		if w < 0 {
			t.fail(newError(KindInvalidValue, t.param("overlap_weight"), "Invalid 'turbine.overlap_weight': expected a value >= 0, but got %g.", w))
		}
		opts.OverlapWeight = &w
	}
	if x, ok := t.number("router_temperature"); ok {
		if x < 0 {
			t.fail(newError(KindInvalidValue, t.param("router_temperature"), "Invalid 'turbine.router_temperature': expected a value >= 0, but got %g.", x))
		}
		opts.RouterTemperature = &x
	}
	return opts
}

// parseResponseFormat reads response_format (structured.go): text (no constraint),
// json_object, or json_schema {"name", "schema", "strict", "description"} whose schema
// must compile. Problems go to o.
func parseResponseFormat(o *object, raw *rawFields) *constraintOf {
	rf, ok := o.child("response_format")
	if !ok {
		return nil
	}
	typ, ok := rf.str("type")
	switch {
	case rf.err != nil:
		o.fail(rf.err)
	case !ok:
		o.fail(newError(KindMissingParameter, "response_format.type", "Missing required parameter: 'response_format.type'."))
	case typ == "text":
	case typ == "json_object":
		return &constraintOf{"response_format", &messages.StructuredOutput{JsonObject: true}}
	case typ == "json_schema":
		js, ok := rf.child("json_schema")
		if !ok {
			rf.fail(newError(KindMissingParameter, "response_format.json_schema", "Missing required parameter: 'response_format.json_schema'."))
			o.fail(rf.err)
			return nil
		}
		if name, ok := js.str("name"); js.err == nil && (!ok || name == "") {
			js.fail(newError(KindMissingParameter, js.param("name"), "Missing required parameter: '%s'.", js.param("name")))
		}
		js.str("description")
		js.boolean("strict")
		if js.err == nil && !js.has("schema") {
			js.fail(newError(KindMissingParameter, js.param("schema"), "Missing required parameter: '%s'.", js.param("schema")))
		}
		if js.err == nil {
			if _, ok := js.expect("schema", kindObject, "a JSON Schema object"); ok {
				so := jsonConstraint(js, raw, "schema", "response_format", "json_schema", "schema")
				o.fail(js.err)
				return &constraintOf{"response_format", so}
			}
		}
		o.fail(js.err)
	case typ == "structural_tag":
		o.fail(newError(KindUnsupported, "response_format.type", "response_format type 'structural_tag' is not supported by this engine."))
	default:
		o.fail(newError(KindInvalidValue, "response_format.type", "Invalid 'response_format.type': expected 'text', 'json_object' or 'json_schema', but got '%s'.", clipName(typ)))
	}
	return nil
}

// reasoningEfforts are the reasoning_effort values OpenAI defines.
var reasoningEfforts = []string{"none", "minimal", "low", "medium", "high", "xhigh"}

// parseReasoningEffort reads field (reasoning_effort; the Responses API's reasoning.effort)
// as one of reasoningEfforts; "" when absent or null.
func parseReasoningEffort(o *object, field string) string {
	e, ok := o.str(field)
	if !ok {
		return ""
	}
	for _, v := range reasoningEfforts {
		if e == v {
			return e
		}
	}
	o.fail(newError(KindInvalidValue, o.param(field), "Invalid value for '%s': '%s'. Supported values are: 'none', 'minimal', 'low', 'medium', 'high' and 'xhigh'.", o.param(field), e))
	return ""
}

// reservedTemplateKwargs are the template variables the gateway sets itself.
var reservedTemplateKwargs = []string{"messages", "tools", "documents", "add_generation_prompt"}

// parseTemplateKwargs reads vLLM's chat_template_kwargs: extra variables for the chat
// template.
func parseTemplateKwargs(o *object) map[string]any {
	c, ok := o.child("chat_template_kwargs")
	if !ok {
		return nil
	}
	kw := plain(c.m).(map[string]any)
	for _, k := range reservedTemplateKwargs {
		if _, ok := kw[k]; ok {
			o.fail(newError(KindInvalidValue, "chat_template_kwargs."+k, "'chat_template_kwargs.%s' cannot be set: the gateway sets it.", k))
			return nil
		}
	}
	return kw
}

// chatRoles are the message roles accepted.
var chatRoles = map[string]bool{"system": true, "developer": true, "user": true, "assistant": true, "tool": true}

// parseMessages reads the chat messages. A message with role "tool" must answer a tool
// call of an earlier assistant message (its tool_call_id is one of theirs), as OpenAI
// requires, and an assistant's tool calls are of type "function". Problems go to o.
func parseMessages(o *object) []model.ChatMessage {
	if o.err != nil {
		return nil
	}
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
	out := make([]model.ChatMessage, 0, len(items))
	calls := map[string]bool{} // the ids of the assistant messages' tool calls so far
	for i, it := range items {
		m, err := parseMessage(it, indexParam("messages", i))
		if err != nil {
			o.fail(err)
			return nil
		}
		for _, c := range m.ToolCalls {
			if id, ok := c["id"].(string); ok {
				calls[id] = true
			}
		}
		if m.Role == "tool" && !calls[m.ToolCallID] {
			p := indexParam("messages", i) + ".tool_call_id"
			o.fail(newError(KindInvalidValue, p, "Invalid '%s': no earlier assistant message has a tool call with id '%s'; messages with role 'tool' must be a response to a preceding message with 'tool_calls'.",
				p, clipName(m.ToolCallID)))
			return nil
		}
		out = append(out, m)
	}
	return out
}

func parseMessage(v any, param string) (model.ChatMessage, *APIError) {
	var msg model.ChatMessage
	m, err := objectOf(v, param)
	if err != nil {
		return msg, err
	}
	role, ok := m.str("role")
	if m.err != nil {
		return msg, m.err
	}
	if !ok {
		return msg, newError(KindMissingParameter, m.param("role"), "Missing required parameter: '%s'.", m.param("role"))
	}
	if !chatRoles[role] {
		return msg, newError(KindInvalidValue, m.param("role"), "Invalid value for '%s': '%s'. Supported values are: 'system', 'developer', 'user', 'assistant' and 'tool'.", m.param("role"), role)
	}
	msg.Role = role
	msg.Name, _ = m.str("name")
	msg.ToolCallID, _ = m.str("tool_call_id")
	if role == "assistant" {
		// An earlier turn's chain of thought, under vLLM's current name or the older one.
		for _, f := range []string{"reasoning", "reasoning_content"} {
			if r, ok := m.str(f); ok && r != "" {
				msg.Reasoning = r
			}
		}
	}
	if calls, ok := m.array("tool_calls"); ok && role == "assistant" {
		for j, c := range calls {
			call, ok := c.(map[string]any)
			if !ok {
				return msg, typeError(indexParam(m.param("tool_calls"), j), "an object", kindOf(c))
			}
			if t, ok := call["type"]; ok && t != nil && t != "function" {
				p := indexParam(m.param("tool_calls"), j) + ".type"
				if s, isStr := t.(string); isStr {
					return msg, newError(KindInvalidValue, p, "Invalid value for '%s': '%s'. Supported values are: 'function'.", p, clipName(s))
				}
				return msg, typeError(p, "a string", kindOf(t))
			}
			msg.ToolCalls = append(msg.ToolCalls, plain(call).(map[string]any))
		}
	}
	content, present := parseContent(m)
	if m.err != nil {
		return msg, m.err
	}
	msg.Content = content
	if content == "" && !(role == "assistant" && len(msg.ToolCalls) > 0) {
		if !present {
			return msg, newError(KindMissingParameter, m.param("content"), "Missing required parameter: '%s'.", m.param("content"))
		}
		// An assistant turn may be empty: a model's answer can be (EOS first, or all of
		// it reasoning), and a client sends the conversation back as it got it (OpenAI
		// and vLLM take it).
		if role != "assistant" {
			return msg, newError(KindInvalidValue, m.param("content"), "Invalid '%s': a %s message needs non-empty content.", m.param("content"), role)
		}
	}
	if role == "tool" && msg.ToolCallID == "" {
		return msg, newError(KindMissingParameter, m.param("tool_call_id"), "Missing required parameter: '%s'.", m.param("tool_call_id"))
	}
	return msg, nil
}

// parseContent reads a message's content: a string or an array of text parts (joined
// with "\n", as vLLM does). present is false when content is absent or null.
func parseContent(m *object) (text string, present bool) {
	r, ok := m.value("content")
	if !ok {
		return "", false
	}
	switch r := r.(type) {
	case string:
		return r, true
	case []any, idArray:
		parts, _ := arrayOf(r)
		texts := make([]string, 0, len(parts))
		for j, p := range parts {
			pp := indexParam(m.param("content"), j)
			po, err := objectOf(p, pp)
			if err != nil {
				m.fail(err)
				return "", true
			}
			typ, ok := po.str("type")
			if po.err != nil {
				m.fail(po.err)
				return "", true
			}
			if !ok {
				m.fail(newError(KindMissingParameter, po.param("type"), "Missing required parameter: '%s'.", po.param("type")))
				return "", true
			}
			if typ != "text" {
				m.fail(newError(KindUnsupported, po.param("type"), "Content part type '%s' is not supported by this engine: only 'text' parts are.", typ))
				return "", true
			}
			t, ok := po.str("text")
			if po.err != nil {
				m.fail(po.err)
				return "", true
			}
			if !ok {
				m.fail(newError(KindMissingParameter, po.param("text"), "Missing required parameter: '%s'.", po.param("text")))
				return "", true
			}
			texts = append(texts, t)
		}
		return strings.Join(texts, "\n"), true
	default:
		m.fail(typeError(m.param("content"), "a string or an array of content parts", kindOf(r)))
		return "", true
	}
}

// parseTools reads `tools`, `tool_choice` and `parallel_tool_calls` into req and returns
// the tools array as sent, for the chat template (nil when absent or when tool_choice is
// "none"). Each function's parameters must be a JSON Schema that compiles, and names must
// be unique and of 1 to MaxToolNameLength characters of a-z, A-Z, 0-9, '_' and '-'
// (structured.go); req.ToolList gets the functions, decoded (nil with "none").
// tool_choice "required" or a named function becomes req.Structured, vLLM's JSON Schema
// for a forced call, which cannot be combined with another output constraint.
func parseTools(o *object, raw *rawFields, req *chatRequest) json.RawMessage {
	if o.err != nil {
		return nil
	}
	items, hasTools := o.array("tools")
	for i, it := range items {
		p := indexParam("tools", i)
		to, err := objectOf(it, p)
		if err != nil {
			o.fail(err)
			return nil
		}
		typ, ok := to.str("type")
		if to.err == nil && !ok {
			to.fail(newError(KindMissingParameter, to.param("type"), "Missing required parameter: '%s'.", to.param("type")))
		} else if to.err == nil && typ != "function" {
			to.fail(newError(KindInvalidValue, to.param("type"), "Invalid value for '%s': '%s'. Supported values are: 'function'.", to.param("type"), clipName(typ)))
		}
		if fn, ok := to.child("function"); ok {
			if name, ok := fn.str("name"); fn.err == nil && (!ok || name == "") {
				fn.fail(newError(KindMissingParameter, fn.param("name"), "Missing required parameter: '%s'.", fn.param("name")))
			} else if fn.err == nil {
				fn.fail(toolNameError(fn.param("name"), name, MaxToolNameLength))
			}
			fn.str("description")
			fn.boolean("strict")
			to.fail(fn.err)
		} else if to.err == nil {
			to.fail(newError(KindMissingParameter, to.param("function"), "Missing required parameter: '%s'.", to.param("function")))
		}
		if to.err != nil {
			o.fail(to.err)
			return nil
		}
	}
	tools, schemas := readTools(o, raw, items)
	if o.err != nil {
		return nil
	}
	req.ToolChoice = parseToolChoice(o, tools)
	if v, ok := o.boolean("parallel_tool_calls"); ok {
		req.ParallelToolCalls = v
	}
	if o.err != nil {
		return nil
	}
	if forced := forcedCall(o, req.ToolChoice, schemas); forced != nil {
		if req.Structured != nil {
			o.fail(newError(KindInvalidValue, "tool_choice", "Invalid 'tool_choice': a forced tool call ('required' or a named function) cannot be combined with another output constraint (response_format, structured_outputs or guided_*): each constrains the whole output."))
			return nil
		}
		req.Structured = forced
	}
	if req.ToolChoice.Mode == "none" {
		hasTools = false
	}
	if !hasTools || o.err != nil {
		return nil
	}
	req.ToolList = tools
	// The template gets the tools as sent: their raw JSON keeps the request's key order.
	t, err := raw.at("tools")
	if err != nil || t == nil {
		o.fail(newError(KindInvalidJSON, "tools", "Invalid 'tools': its JSON could not be read again."))
		return nil
	}
	return t
}

// parsePrompt reads the completions prompt: a string, an array of token ids (one
// prompt), or a batch: an array of strings or of token-id arrays (docs/reference.md §22).
func parsePrompt(o *object, req *completionRequest) {
	if o.err != nil {
		return
	}
	r, ok := o.value("prompt")
	if !ok {
		o.fail(newError(KindMissingParameter, "prompt", "Missing required parameter: 'prompt'."))
		return
	}
	switch r := r.(type) {
	case string:
		req.PromptText = r
	case idArray:
		ids, err := tokenIDs(r, "prompt")
		o.fail(err)
		req.PromptIDs, req.TokenPrompt = ids, true
	case []any:
		items := r
		if len(items) == 0 {
			o.fail(newError(KindInvalidValue, "prompt", "Invalid 'prompt': empty array."))
			return
		}
		switch kindOf(items[0]) {
		case kindNumber:
			ids, err := tokenIDs(items, "prompt")
			o.fail(err)
			req.PromptIDs, req.TokenPrompt = ids, true
		case kindString, kindArray:
			if len(items) == 1 {
				if s, ok := items[0].(string); ok {
					req.PromptText = s
					break
				}
				ids, err := tokenIDs(items[0], "prompt[0]")
				o.fail(err)
				req.PromptIDs, req.TokenPrompt = ids, true
				break
			}
			batch := parseBatch(o, items, req.N)
			if o.err != nil {
				return
			}
			req.PromptText, req.PromptIDs, req.TokenPrompt = batch[0].Text, batch[0].IDs, batch[0].Tokens
			req.More = batch[1:]
		default:
			o.fail(typeError("prompt[0]", "a string, a token id or an array of token ids", kindOf(items[0])))
		}
	default:
		o.fail(typeError("prompt", "a string or an array", kindOf(r)))
	}
	if o.err == nil && req.PromptText == "" && len(req.PromptIDs) == 0 {
		o.fail(newError(KindInvalidValue, "prompt", "Invalid 'prompt': the prompt is empty."))
	}
}

// parseBatch reads the prompts of a batch (items, non-empty): each a string or an array
// of token ids, none empty, at most MaxBatchChoices choices in all (n each).
func parseBatch(o *object, items []any, n int) []completionPrompt {
	if len(items)*max(n, 1) > MaxBatchChoices {
		o.fail(newError(KindInvalidValue, "prompt", "Invalid 'prompt': %d prompts with n = %d make %d choices; at most %d are served per request.",
			len(items), max(n, 1), len(items)*max(n, 1), MaxBatchChoices))
		return nil
	}
	out := make([]completionPrompt, len(items))
	for i, it := range items {
		param := indexParam("prompt", i)
		switch it := it.(type) {
		case string:
			out[i].Text = it
			if it == "" {
				o.fail(newError(KindInvalidValue, param, "Invalid '%s': the prompt is empty.", param))
			}
		case idArray, []any:
			ids, err := tokenIDs(it, param)
			o.fail(err)
			out[i].IDs, out[i].Tokens = ids, true
			if err == nil && len(ids) == 0 {
				o.fail(newError(KindInvalidValue, param, "Invalid '%s': the prompt is empty.", param))
			}
		default:
			o.fail(typeError(param, "a string or an array of token ids", kindOf(it)))
		}
		if o.err != nil {
			return nil
		}
	}
	return out
}

// checkBestOf validates best_of against n. vLLM's V1 engine serves no best_of above 1,
// so only best_of = n (the same request: n candidates, all returned) is served;
// docs/reference.md §22.
func checkBestOf(o *object, b int64, n int) {
	n = max(n, 1)
	switch {
	case b < 1:
		o.fail(newError(KindInvalidValue, "best_of", "Invalid 'best_of': expected a value >= 1, but got %d.", b))
	case b < int64(n):
		o.fail(newError(KindInvalidValue, "best_of", "best_of must be greater than or equal to n, got n=%d and best_of=%d.", n, b))
	case b > int64(n):
		o.fail(newError(KindUnsupported, "best_of", "best_of greater than n is not supported (vLLM V1 does not support best_of): got n=%d and best_of=%d; set best_of to n or leave it out.", n, b))
	}
}

// promptParamOf is the parameter an error about req's prompt names.
func promptParamOf(req *chatRequest) string {
	if req.PromptParam != "" {
		return req.PromptParam
	}
	return "messages"
}
