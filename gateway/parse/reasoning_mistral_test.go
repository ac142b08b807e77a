package parse

import "testing"

// Magistral outputs (docs/reference.md §15): [THINK] and [/THINK] are control tokens.
func TestReasoningMistral(t *testing.T) {
	const call = "[TOOL_CALLS]get_weather[ARGS]{\"city\": \"Paris\"}"
	checkReasoning(t, "mistral", []reasoningCase{
		{"[INST]What is 2+2?[/INST]", golden{name: "think then answer",
			output: "[THINK]Simple sum: 4.[/THINK]The answer is 4.",
			want:   Result{Reasoning: "Simple sum: 4.", Content: "The answer is 4."}}},
		{"", golden{name: "no think block is content",
			output: "The answer is 4.",
			want:   Result{Content: "The answer is 4."}}},
		{"", golden{name: "never closed",
			output: "[THINK]Still thinking",
			want:   Result{Reasoning: "Still thinking"}}},
		{"", golden{name: "text before the block stays content",
			output: "Hmm. [THINK]x[/THINK] y",
			want:   Result{Reasoning: "x", Content: "Hmm.  y"}}},
		{"", golden{name: "leading whitespace goes with the block",
			output: "\n[THINK]x[/THINK]y",
			want:   Result{Reasoning: "x", Content: "y"}}},
		{"", golden{name: "stray close is dropped",
			output: "a[/THINK]b",
			want:   Result{Content: "ab"}}},
		{"", golden{name: "empty block",
			output: "[THINK][/THINK]answer",
			want:   Result{Content: "answer"}}},
		{"", golden{name: "tool call inside the block ends it",
			output: "[THINK]Need the weather." + call,
			want:   Result{Reasoning: "Need the weather.", Content: call}}},
		{"", golden{name: "tool call after the block",
			output: "[THINK]plan[/THINK]" + call,
			want:   Result{Reasoning: "plan", Content: call}}},
		{"[INST]q[/INST][THINK]", golden{name: "prompt opened the block",
			output: "plan[/THINK]answer",
			want:   Result{Reasoning: "plan", Content: "answer"}}},
		{"", golden{name: "near misses are text",
			output: "[THINKING] [/THIN] [x]",
			want:   Result{Content: "[THINKING] [/THIN] [x]"}}},
	})
}
