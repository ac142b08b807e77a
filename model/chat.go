package model

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"sort"
	"strings"

	"github.com/ardanlabs/jinja"
)

// ChatTemplateInput is everything a chat template is rendered with.
type ChatTemplateInput struct {
	Messages []ChatMessage
	// Tools is the OpenAI tools array as received (JSON); objects keep their key order,
	// so tojson in the template writes them as HF transformers would. nil when absent.
	Tools json.RawMessage
	// ToolMaps is the tools array as Go maps (objects reach the template with sorted
	// keys); used when Tools is nil.
	ToolMaps            []map[string]any
	AddGenerationPrompt bool
	// Kwargs are extra template variables (vLLM's chat_template_kwargs, e.g. Qwen3's
	// enable_thinking). They cannot replace messages, tools, documents or
	// add_generation_prompt.
	Kwargs map[string]any
	// Template, when not nil, is rendered instead of the model's chat template (a
	// request's chat_template, ParseChatTemplate).
	Template *ChatTemplate
	// ContinueFinalMessage leaves the last message open: the rendered prompt ends with
	// that message's content, so that the model continues it (vLLM's and HF
	// transformers' continue_final_message). Use with AddGenerationPrompt false.
	ContinueFinalMessage bool
	// Documents are the template's `documents` (vLLM's and HF transformers' documents
	// for retrieval-augmented generation: objects with, by convention, a title and a
	// text); none when nil.
	Documents []map[string]any
}

// ChatTemplate is a compiled chat template.
type ChatTemplate struct{ t *jinja.Template }

// ParseChatTemplate compiles src, a Jinja chat template (as a request's chat_template),
// with the template engine the models' own templates use. Errors: src does not parse.
func ParseChatTemplate(src string) (*ChatTemplate, error) {
	t, err := compileTemplate(src)
	if err != nil {
		return nil, err
	}
	return &ChatTemplate{t: t}, nil
}

// reservedTemplateVars are the variables RenderChat sets itself.
var reservedTemplateVars = map[string]bool{"messages": true, "tools": true, "documents": true, "add_generation_prompt": true}

func (m *Model) setChatTemplate(src string) error {
	m.ChatTemplate = src
	if src == "" {
		return nil
	}
	t, err := compileTemplate(src)
	if err != nil {
		return fmt.Errorf("chat template: %v", err)
	}
	m.template = t
	return nil
}

// RenderChat renders in with the model's chat template into the prompt text. The
// template gets the variables HF transformers passes: messages (role, content, and name,
// tool_call_id, tool_calls, reasoning_content and reasoning when set; tool-call
// arguments given as a JSON string are parsed into an object, as vLLM does), tools (none
// when absent), documents (none when absent), add_generation_prompt, the special-token
// strings of tokenizer_config.json (bos_token, eos_token, ..., additional_special_tokens),
// then in.Kwargs.
func (m *Model) RenderChat(in ChatTemplateInput) (string, error) {
	template := m.template
	if in.Template != nil {
		template = in.Template.t
	}
	if template == nil {
		return "", fmt.Errorf("model: model %s has no chat template", m.Source)
	}
	if in.ContinueFinalMessage && in.AddGenerationPrompt {
		return "", errors.New("model: continue_final_message and add_generation_prompt cannot both be set")
	}
	vars := make(map[string]jinja.Value, 8+len(m.tokenVars)+len(in.Kwargs))
	for k, v := range in.Kwargs {
		if reservedTemplateVars[k] {
			return "", fmt.Errorf("model: chat template kwarg %q cannot be set by a request", k)
		}
		jv, err := toJinja(v)
		if err != nil {
			return "", fmt.Errorf("model: chat template kwarg %q: %v", k, err)
		}
		vars[k] = jv
	}
	for k, v := range m.tokenVars {
		if _, set := vars[k]; !set {
			vars[k] = jinja.NewString(v)
		}
	}
	if _, set := vars["additional_special_tokens"]; !set && m.additionalTokens != nil {
		items := make([]jinja.Value, len(m.additionalTokens))
		for i, s := range m.additionalTokens {
			items[i] = jinja.NewString(s)
		}
		vars["additional_special_tokens"] = jinja.NewList(items)
	}

	msgs := make([]jinja.Value, len(in.Messages))
	for i, msg := range in.Messages {
		v, err := messageValue(msg)
		if err != nil {
			return "", fmt.Errorf("model: messages[%d]: %v", i, err)
		}
		msgs[i] = v
	}
	vars["messages"] = jinja.NewList(msgs)

	tools := jinja.None()
	switch {
	case len(in.Tools) > 0 && !isNull(in.Tools):
		v, err := jsonToJinja(in.Tools)
		if err != nil {
			return "", fmt.Errorf("model: tools: %v", err)
		}
		if !v.IsList() {
			return "", errors.New("model: tools: not a JSON array")
		}
		tools = v
	case in.ToolMaps != nil:
		v, err := toJinja(in.ToolMaps)
		if err != nil {
			return "", fmt.Errorf("model: tools: %v", err)
		}
		tools = v
	}
	vars["tools"] = tools
	vars["documents"] = jinja.None()
	if in.Documents != nil {
		v, err := toJinja(in.Documents)
		if err != nil {
			return "", fmt.Errorf("model: documents: %v", err)
		}
		vars["documents"] = v
	}
	vars["add_generation_prompt"] = jinja.NewBool(in.AddGenerationPrompt)

	out, err := renderTemplate(template, vars)
	if err != nil {
		return "", fmt.Errorf("model: chat template: %v", err)
	}
	if in.ContinueFinalMessage {
		return continueFinal(out, in.Messages)
	}
	return out, nil
}

// continueFinal cuts a rendered chat after the last message's content, as HF
// transformers does for continue_final_message: at its last occurrence, keeping the
// content's trailing white space only where the template kept it. Errors: no messages,
// or the template did not write the content.
func continueFinal(rendered string, msgs []ChatMessage) (string, error) {
	if len(msgs) == 0 {
		return "", errors.New("model: continue_final_message needs a message to continue")
	}
	final := msgs[len(msgs)-1].Content
	trimmed := strings.TrimSpace(final)
	at := strings.LastIndex(rendered, trimmed)
	if trimmed == "" || at < 0 {
		return "", errors.New("model: continue_final_message is set but the final message does not appear in the chat after applying the chat template")
	}
	if strings.HasPrefix(rendered[at:], final) {
		return rendered[:at+len(final)], nil // the template kept the content whole
	}
	return rendered[:at+len(trimmed)], nil
}

// compileTemplate and renderTemplate turn a panic of the template engine (a template
// it mishandles) into an error, so that one model's template cannot crash the gateway.
func compileTemplate(src string) (t *jinja.Template, err error) {
	defer func() {
		if r := recover(); r != nil {
			t, err = nil, fmt.Errorf("template engine panicked: %v", r)
		}
	}()
	return jinja.Compile(src)
}

func renderTemplate(t *jinja.Template, vars map[string]jinja.Value) (out string, err error) {
	defer func() {
		if r := recover(); r != nil {
			out, err = "", fmt.Errorf("template engine panicked: %v", r)
		}
	}()
	return t.RenderValues(vars)
}

// messageValue builds the template's view of one message.
func messageValue(msg ChatMessage) (jinja.Value, error) {
	d := jinja.NewDict()
	dict := d.AsDict()
	dict.Set("role", jinja.NewString(msg.Role))
	dict.Set("content", jinja.NewString(msg.Content))
	if msg.Name != "" {
		dict.Set("name", jinja.NewString(msg.Name))
	}
	if msg.ToolCallID != "" {
		dict.Set("tool_call_id", jinja.NewString(msg.ToolCallID))
	}
	if msg.Reasoning != "" {
		dict.Set("reasoning_content", jinja.NewString(msg.Reasoning))
		dict.Set("reasoning", jinja.NewString(msg.Reasoning))
	}
	if len(msg.ToolCalls) > 0 {
		calls := make([]jinja.Value, len(msg.ToolCalls))
		for i, tc := range msg.ToolCalls {
			v, err := toolCallValue(tc)
			if err != nil {
				return jinja.Undefined(), fmt.Errorf("tool_calls[%d]: %v", i, err)
			}
			calls[i] = v
		}
		dict.Set("tool_calls", jinja.NewList(calls))
	}
	return d, nil
}

// toolCallValue converts an OpenAI tool call, parsing function.arguments from its JSON
// string into an object (templates expect objects; vLLM does the same). Keys of the
// call are written in OpenAI's order (id, type, function), arguments in their own.
func toolCallValue(tc map[string]any) (jinja.Value, error) {
	d := jinja.NewDict()
	dict := d.AsDict()
	keys := orderedKeys(tc, []string{"id", "type", "function"})
	for _, k := range keys {
		if k != "function" {
			v, err := toJinja(tc[k])
			if err != nil {
				return jinja.Undefined(), fmt.Errorf("%s: %v", k, err)
			}
			dict.Set(k, v)
			continue
		}
		fn, ok := tc[k].(map[string]any)
		if !ok {
			v, err := toJinja(tc[k])
			if err != nil {
				return jinja.Undefined(), fmt.Errorf("function: %v", err)
			}
			dict.Set(k, v)
			continue
		}
		fd := jinja.NewDict()
		for _, fk := range orderedKeys(fn, []string{"name", "arguments"}) {
			var v jinja.Value
			var err error
			if s, isString := fn[fk].(string); fk == "arguments" && isString {
				v, err = jsonToJinja(json.RawMessage(s))
				if err != nil || !v.IsDict() {
					v, err = jinja.NewString(s), nil // not a JSON object: keep the string
				}
			} else {
				v, err = toJinja(fn[fk])
			}
			if err != nil {
				return jinja.Undefined(), fmt.Errorf("function.%s: %v", fk, err)
			}
			fd.AsDict().Set(fk, v)
		}
		dict.Set(k, fd)
	}
	return d, nil
}

// orderedKeys returns m's keys: those of first that are present, in that order, then the
// rest sorted.
func orderedKeys(m map[string]any, first []string) []string {
	out := make([]string, 0, len(m))
	seen := make(map[string]bool, len(first))
	for _, k := range first {
		if _, ok := m[k]; ok {
			out = append(out, k)
			seen[k] = true
		}
	}
	rest := make([]string, 0, len(m))
	for k := range m {
		if !seen[k] {
			rest = append(rest, k)
		}
	}
	sort.Strings(rest)
	return append(out, rest...)
}

// toJinja converts a Go value (as decoded from JSON, or built by the gateway) into a
// template value. Map keys are sorted; json.RawMessage keeps its key order.
func toJinja(v any) (jinja.Value, error) {
	switch x := v.(type) {
	case nil:
		return jinja.None(), nil
	case jinja.Value:
		return x, nil
	case json.RawMessage:
		return jsonToJinja(x)
	case json.Number:
		return jinja.FromGoValue(x), nil
	case bool:
		return jinja.NewBool(x), nil
	case string:
		return jinja.NewString(x), nil
	case int:
		return jinja.NewInt(int64(x)), nil
	case int32:
		return jinja.NewInt(int64(x)), nil
	case int64:
		return jinja.NewInt(x), nil
	case uint32:
		return jinja.NewInt(int64(x)), nil
	case float32:
		return jinja.NewFloat(float64(x)), nil
	case float64:
		return jinja.NewFloat(x), nil
	case []any:
		return jinjaList(x)
	case []map[string]any:
		return jinjaList(x)
	case []string:
		items := make([]jinja.Value, len(x))
		for i, e := range x {
			items[i] = jinja.NewString(e)
		}
		return jinja.NewList(items), nil
	case map[string]any:
		d := jinja.NewDict()
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			jv, err := toJinja(x[k])
			if err != nil {
				return jinja.Undefined(), err
			}
			d.AsDict().Set(k, jv)
		}
		return d, nil
	}
	return jinja.Undefined(), fmt.Errorf("unsupported value of type %s", reflect.TypeOf(v))
}

// jsonToJinja decodes JSON into a template value, keeping object key order; integers
// stay integers (as Python's json does).
func jsonToJinja(raw json.RawMessage) (jinja.Value, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	v, err := decodeJinja(dec)
	if err != nil {
		return jinja.Undefined(), err
	}
	if _, err := dec.Token(); err != io.EOF {
		return jinja.Undefined(), errors.New("trailing data after JSON value")
	}
	return v, nil
}

func decodeJinja(dec *json.Decoder) (jinja.Value, error) {
	tok, err := dec.Token()
	if err != nil {
		return jinja.Undefined(), err
	}
	switch t := tok.(type) {
	case json.Delim:
		switch t {
		case '[':
			var items []jinja.Value
			for dec.More() {
				v, err := decodeJinja(dec)
				if err != nil {
					return jinja.Undefined(), err
				}
				items = append(items, v)
			}
			if _, err := dec.Token(); err != nil { // ']'
				return jinja.Undefined(), err
			}
			if items == nil {
				items = []jinja.Value{}
			}
			return jinja.NewList(items), nil
		case '{':
			d := jinja.NewDict()
			for dec.More() {
				kt, err := dec.Token()
				if err != nil {
					return jinja.Undefined(), err
				}
				k, ok := kt.(string)
				if !ok {
					return jinja.Undefined(), fmt.Errorf("object key %v is not a string", kt)
				}
				v, err := decodeJinja(dec)
				if err != nil {
					return jinja.Undefined(), err
				}
				d.AsDict().Set(k, v)
			}
			if _, err := dec.Token(); err != nil { // '}'
				return jinja.Undefined(), err
			}
			return d, nil
		}
		return jinja.Undefined(), fmt.Errorf("unexpected %v", t)
	case nil:
		return jinja.None(), nil
	case bool:
		return jinja.NewBool(t), nil
	case string:
		return jinja.NewString(t), nil
	case json.Number:
		return jinja.FromGoValue(t), nil
	}
	return jinja.Undefined(), fmt.Errorf("unexpected JSON token %v", tok)
}

// jinjaList converts each element with toJinja into a jinja list.
func jinjaList[T any](xs []T) (jinja.Value, error) {
	items := make([]jinja.Value, len(xs))
	for i, e := range xs {
		jv, err := toJinja(e)
		if err != nil {
			return jinja.Undefined(), err
		}
		items[i] = jv
	}
	return jinja.NewList(items), nil
}
