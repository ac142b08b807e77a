package persona

import (
	"sort"
	"strconv"
	"strings"
)

// Each model family's output syntax, by the parser names vLLM uses
// (--tool-call-parser, --reasoning-parser; docs/reference.md §15). Plan writes tool
// calls and thinking blocks exactly as gateway/parse reads them back.

// call is one tool call to write.
type call struct {
	name string
	args object
}

// toolSyntax writes calls (at least one) in a family's format. prior is the number of
// calls already in the conversation (Kimi K2's ids count them).
type toolSyntax func(b *strings.Builder, calls []call, prior int)

var toolSyntaxes = map[string]toolSyntax{
	// Hermes, Qwen2.5, Qwen3: <tool_call>\n{"name": ..., "arguments": {...}}\n</tool_call>
	"hermes": func(b *strings.Builder, calls []call, _ int) {
		for i, c := range calls {
			if i > 0 {
				b.WriteString("\n")
			}
			b.WriteString("<tool_call>\n{\"name\": ")
			b.WriteString(quoteJSON(c.name))
			b.WriteString(", \"arguments\": ")
			writeJSON(b, c.args)
			b.WriteString("}\n</tool_call>")
		}
	},
	// Qwen3-Coder: XML, one <parameter=NAME> block per argument, strings unquoted.
	"qwen3_coder": func(b *strings.Builder, calls []call, _ int) {
		for i, c := range calls {
			if i > 0 {
				b.WriteString("\n")
			}
			b.WriteString("<tool_call>\n<function=" + c.name + ">\n")
			for _, m := range c.args {
				b.WriteString("<parameter=" + m.key + ">\n")
				b.WriteString(plainString(m.val))
				b.WriteString("\n</parameter>\n")
			}
			b.WriteString("</function>\n</tool_call>")
		}
	},
	// Llama 3.1-3.3: {"name": ..., "parameters": {...}}, several joined by "; ".
	"llama3_json": func(b *strings.Builder, calls []call, _ int) {
		for i, c := range calls {
			if i > 0 {
				b.WriteString("; ")
			}
			b.WriteString("{\"name\": ")
			b.WriteString(quoteJSON(c.name))
			b.WriteString(", \"parameters\": ")
			writeJSON(b, c.args)
			b.WriteString("}")
		}
	},
	// Llama 4, Llama 3.2 pythonic: [name(key=value, ...), ...] with Python literals.
	"pythonic": func(b *strings.Builder, calls []call, _ int) {
		b.WriteString("[")
		for i, c := range calls {
			if i > 0 {
				b.WriteString(", ")
			}
			b.WriteString(c.name + "(")
			for j, m := range c.args {
				if j > 0 {
					b.WriteString(", ")
				}
				b.WriteString(m.key + "=")
				writePython(b, m.val)
			}
			b.WriteString(")")
		}
		b.WriteString("]")
	},
	// Mistral: [TOOL_CALLS] then a JSON array of {"name", "arguments"} (the format every
	// Mistral tokenizer version's parser reads).
	"mistral": func(b *strings.Builder, calls []call, _ int) {
		b.WriteString("[TOOL_CALLS][")
		for i, c := range calls {
			if i > 0 {
				b.WriteString(", ")
			}
			b.WriteString("{\"name\": ")
			b.WriteString(quoteJSON(c.name))
			b.WriteString(", \"arguments\": ")
			writeJSON(b, c.args)
			b.WriteString("}")
		}
		b.WriteString("]")
	},
	// DeepSeek V3: function<｜tool▁sep｜>NAME, then the arguments in a ```json block.
	"deepseek_v3": func(b *strings.Builder, calls []call, _ int) {
		b.WriteString("<｜tool▁calls▁begin｜>")
		for i, c := range calls {
			if i > 0 {
				b.WriteString("\n")
			}
			b.WriteString("<｜tool▁call▁begin｜>function<｜tool▁sep｜>" + c.name + "\n```json\n")
			writeJSON(b, c.args)
			b.WriteString("\n```<｜tool▁call▁end｜>")
		}
		b.WriteString("<｜tool▁calls▁end｜>")
	},
	// DeepSeek V3.1: NAME<｜tool▁sep｜>{arguments}.
	"deepseek_v31": func(b *strings.Builder, calls []call, _ int) {
		b.WriteString("<｜tool▁calls▁begin｜>")
		for _, c := range calls {
			b.WriteString("<｜tool▁call▁begin｜>" + c.name + "<｜tool▁sep｜>")
			writeJSON(b, c.args)
			b.WriteString("<｜tool▁call▁end｜>")
		}
		b.WriteString("<｜tool▁calls▁end｜>")
	},
	// Kimi K2: ids functions.NAME:INDEX, the index counting the conversation's calls.
	"kimi_k2": func(b *strings.Builder, calls []call, prior int) {
		b.WriteString("<|tool_calls_section_begin|>")
		for i, c := range calls {
			b.WriteString("<|tool_call_begin|>functions." + c.name + ":" + strconv.Itoa(prior+i) + "<|tool_call_argument_begin|>")
			writeJSON(b, c.args)
			b.WriteString("<|tool_call_end|>")
		}
		b.WriteString("<|tool_calls_section_end|>")
	},
	// GLM-4.5: <tool_call>NAME, then <arg_key>/<arg_value> pairs, strings unquoted.
	"glm45": func(b *strings.Builder, calls []call, _ int) {
		for i, c := range calls {
			if i > 0 {
				b.WriteString("\n")
			}
			b.WriteString("<tool_call>" + c.name + "\n")
			for _, m := range c.args {
				b.WriteString("<arg_key>" + m.key + "</arg_key>\n<arg_value>")
				b.WriteString(plainString(m.val))
				b.WriteString("</arg_value>\n")
			}
			b.WriteString("</tool_call>")
		}
	},
}

func init() {
	// vLLM's names for the same formats as Llama 4's.
	toolSyntaxes["llama4_json"] = toolSyntaxes["llama3_json"]
	toolSyntaxes["llama4_pythonic"] = toolSyntaxes["pythonic"]
}

// harmonyTool is gpt-oss's tool parser; its output is harmony messages, written by Plan
// itself (and the reasoning parser openai_gptoss reads the same channels).
const (
	harmonyTool      = "openai"
	harmonyReasoning = "openai_gptoss"
)

// thinkStyle is a family's thinking block.
type thinkStyle struct{ open, close string }

var thinkStyles = map[string]thinkStyle{
	"deepseek_r1": {"<think>", "</think>"},
	"qwen3":       {"<think>", "</think>"},
	"glm45":       {"<think>", "</think>"},
	"kimi_k2":     {"<think>", "</think>"},
	"mistral":     {"[THINK]", "[/THINK]"},
}

// ToolParsers lists the tool-call parser names Plan writes calls for, sorted.
func ToolParsers() []string {
	out := []string{harmonyTool}
	for n := range toolSyntaxes {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// ReasoningParsers lists the reasoning parser names Plan writes thinking for, sorted.
func ReasoningParsers() []string {
	out := []string{harmonyReasoning}
	for n := range thinkStyles {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}
