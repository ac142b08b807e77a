package parse

import "strings"

// Detection is the parsers a model folder implies.
type Detection struct {
	ToolParser, ReasoningParser string
	// Why says what decided, for the log line ("" when nothing matched).
	Why string
}

// detectRule matches a model family by its config.json architectures and by strings of
// its chat template (all of template must hold, none of not).
type detectRule struct {
	arch     []string // any of these architectures ("" entries never match); empty: any
	template []string
	not      []string
	tool     string
	why      string
}

// toolRules are tried in order; the first match wins. Several families share an
// architecture (Kimi K2 and DeepSeek V3 are DeepseekV3ForCausalLM), so the template
// decides (docs/reference.md §15).
var toolRules = []detectRule{
	{arch: []string{"GptOssForCausalLM"}, tool: "openai", why: "gpt-oss (harmony format)"},
	{template: []string{"<|tool_calls_section_begin|>"}, tool: "kimi_k2", why: "Kimi K2 tool-call tokens in the chat template"},
	{template: []string{"<｜tool▁calls▁begin｜>", "<｜tool▁sep｜>", "```json"}, tool: "deepseek_v3", why: "DeepSeek V3 tool-call format in the chat template"},
	{template: []string{"<｜tool▁calls▁begin｜>", "<｜tool▁sep｜>"}, not: []string{"```json"}, tool: "deepseek_v31", why: "DeepSeek V3.1 tool-call format in the chat template"},
	{template: []string{"<arg_key>", "<arg_value>"}, tool: "glm45", why: "GLM-4.5 tool-call format in the chat template"},
	{template: []string{"<tool_call>", "<function=", "<parameter="}, tool: "qwen3_coder", why: "Qwen3-Coder XML tool calls in the chat template"},
	{template: []string{"<tool_call>"}, tool: "hermes", why: "Hermes <tool_call> format in the chat template"},
	{template: []string{"[TOOL_CALLS]"}, tool: "mistral", why: "Mistral [TOOL_CALLS] in the chat template"},
	{arch: []string{"Llama4ForConditionalGeneration", "Llama4ForCausalLM"}, tool: "pythonic", why: "Llama 4 (pythonic tool calls)"},
	{template: []string{"<|python_tag|>"}, tool: "llama3_json", why: "Llama 3 JSON tool calls (<|python_tag|>) in the chat template"},
	{template: []string{"Environment: ipython"}, tool: "llama3_json", why: "Llama 3 JSON tool calls (ipython environment) in the chat template"},
}

var reasoningRules = []detectRule{
	{arch: []string{"GptOssForCausalLM"}, tool: "openai_gptoss", why: "gpt-oss (harmony analysis channel)"},
	{template: []string{"[THINK]"}, tool: "mistral", why: "Mistral [THINK] in the chat template"},
	{arch: []string{"Glm4MoeForCausalLM"}, template: []string{"<think>"}, tool: "glm45", why: "GLM-4.5 <think> in the chat template"},
	{template: []string{"<|tool_calls_section_begin|>", "<think>"}, tool: "kimi_k2", why: "Kimi K2 <think> in the chat template"},
	{template: []string{"<think>", "enable_thinking"}, tool: "qwen3", why: "Qwen3 <think> and enable_thinking in the chat template"},
	{arch: []string{"Qwen3ForCausalLM", "Qwen3MoeForCausalLM"}, template: []string{"<think>"}, tool: "qwen3", why: "Qwen3 <think> in the chat template"},
	{template: []string{"<｜Assistant｜>", "<think>"}, tool: "deepseek_r1", why: "DeepSeek <think> in the chat template"},
}

// Detect returns the parsers the model folder implies from its architectures
// (config.json) and chat template, when the match is unambiguous; an empty Detection
// otherwise. Flags always win over it.
func Detect(architectures []string, chatTemplate string) Detection {
	var d Detection
	var why []string
	if r, ok := match(toolRules, architectures, chatTemplate); ok {
		d.ToolParser = r.tool
		why = append(why, "tool calls: "+r.why)
	}
	if r, ok := match(reasoningRules, architectures, chatTemplate); ok {
		d.ReasoningParser = r.tool
		why = append(why, "reasoning: "+r.why)
	}
	d.Why = strings.Join(why, "; ")
	return d
}

func match(rules []detectRule, archs []string, tmpl string) (detectRule, bool) {
	for _, r := range rules {
		if len(r.arch) > 0 && !anyOf(archs, r.arch) {
			continue
		}
		if len(r.arch) == 0 && len(r.template) == 0 {
			continue
		}
		ok := true
		for _, s := range r.template {
			ok = ok && strings.Contains(tmpl, s)
		}
		for _, s := range r.not {
			ok = ok && !strings.Contains(tmpl, s)
		}
		if ok {
			return r, true
		}
	}
	return detectRule{}, false
}

func anyOf(have, want []string) bool {
	for _, h := range have {
		for _, w := range want {
			if h == w && h != "" {
				return true
			}
		}
	}
	return false
}
