package parse

import "testing"

// Kimi K2 thinking outputs (docs/reference.md §15).
func TestReasoningKimiK2(t *testing.T) {
	const (
		prompt  = "<|im_user|>user<|im_middle|>Weather in Paris?<|im_end|><|im_assistant|>assistant<|im_middle|>"
		section = "<|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0<|tool_call_argument_begin|>{\"city\": \"Paris\"}<|tool_call_end|><|tool_calls_section_end|>"
	)
	checkReasoning(t, "kimi_k2", []reasoningCase{
		{prompt, golden{name: "think then answer",
			output: "<think>The user wants weather.</think>It is sunny.",
			want:   Result{Reasoning: "The user wants weather.", Content: "It is sunny."}}},
		{prompt, golden{name: "no opening tag",
			output: "The user wants weather.</think>It is sunny.",
			want:   Result{Reasoning: "The user wants weather.", Content: "It is sunny."}}},
		{prompt, golden{name: "tool section ends the reasoning",
			output: "<think>Need a tool." + section,
			want:   Result{Reasoning: "Need a tool.", Content: section}}},
		{prompt, golden{name: "tool section after the block",
			output: "<think>Need a tool.</think>" + section,
			want:   Result{Reasoning: "Need a tool.", Content: section}}},
		{prompt, golden{name: "never closed",
			output: "<think>thinking",
			want:   Result{Reasoning: "thinking"}}},
		{prompt + "<think></think>", golden{name: "thinking off in the prompt",
			output: "It is sunny.",
			want:   Result{Content: "It is sunny."}}},
	})
}
