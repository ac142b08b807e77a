package parse

import "testing"

// Qwen3 outputs and prompts (docs/reference.md §15): the template's generation prompt is
// "<|im_start|>assistant\n"; with enable_thinking false it adds "<think>\n\n</think>\n\n";
// thinking-2507 templates add "<think>\n".
func TestReasoningQwen3(t *testing.T) {
	const (
		prompt   = "<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n"
		noThink  = prompt + "<think>\n\n</think>\n\n"
		opened   = prompt + "<think>\n"
		toolCall = "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>"
	)
	checkReasoning(t, "qwen3", []reasoningCase{
		{prompt, golden{name: "thinking on",
			output: "<think>\nOkay, 2+2 is 4.\n</think>\n\nThe answer is 4.",
			want:   Result{Reasoning: "\nOkay, 2+2 is 4.\n", Content: "\n\nThe answer is 4."}}},
		{prompt, golden{name: "no closing tag is reasoning cut short",
			output: "<think>\nOkay, let me think",
			want:   Result{Reasoning: "\nOkay, let me think"}}},
		{prompt, golden{name: "no tags at all is reasoning",
			output: "Okay, let me think",
			want:   Result{Reasoning: "Okay, let me think"}}},
		{noThink, golden{name: "enable_thinking false",
			output: "The answer is 4.",
			want:   Result{Content: "The answer is 4."}}},
		{noThink, golden{name: "enable_thinking false with a stray close",
			output: "The answer</think> is 4.",
			want:   Result{Content: "The answer is 4."}}},
		{opened, golden{name: "template opened the block",
			output: "Okay, 4.\n</think>\n\nThe answer is 4.",
			want:   Result{Reasoning: "Okay, 4.\n", Content: "\n\nThe answer is 4."}}},
		{prompt, golden{name: "empty reasoning",
			output: "<think>\n\n</think>\n\nHi!",
			want:   Result{Reasoning: "\n\n", Content: "\n\nHi!"}}},
		{prompt, golden{name: "tool call after the block",
			output: "<think>\nNeed the weather.\n</think>\n\n" + toolCall,
			want:   Result{Reasoning: "\nNeed the weather.\n", Content: "\n\n" + toolCall}}},
		{opened, golden{name: "tool call inside the block ends it",
			output: "Need the weather.\n" + toolCall,
			want:   Result{Reasoning: "Need the weather.\n", Content: toolCall}}},
		{prompt, golden{name: "unicode",
			output: "<think>让我想想…</think>答案：4 ✅",
			want:   Result{Reasoning: "让我想想…", Content: "答案：4 ✅"}}},
	})
}
