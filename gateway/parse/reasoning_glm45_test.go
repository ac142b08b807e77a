package parse

import "testing"

// GLM-4.5/4.6 outputs (docs/reference.md §15): the generation prompt is "<|assistant|>";
// with enable_thinking false the template adds "\n<think></think>".
func TestReasoningGLM45(t *testing.T) {
	const (
		prompt = "[gMASK]<sop><|user|>\nWeather in Paris?<|assistant|>"
		call   = "<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Paris</arg_value>\n</tool_call>"
	)
	checkReasoning(t, "glm45", []reasoningCase{
		{prompt, golden{name: "think then answer",
			output: "\n<think>The user wants weather.</think>\nIt is sunny.",
			want:   Result{Reasoning: "The user wants weather.", Content: "\nIt is sunny."}}},
		{prompt, golden{name: "tool call after the block",
			output: "\n<think>Need a tool.</think>\n" + call,
			want:   Result{Reasoning: "Need a tool.", Content: "\n" + call}}},
		{prompt, golden{name: "tool call inside the block ends it",
			output: "<think>Need a tool." + call,
			want:   Result{Reasoning: "Need a tool.", Content: call}}},
		{prompt, golden{name: "never closed",
			output: "<think>thinking",
			want:   Result{Reasoning: "thinking"}}},
		{prompt + "\n<think></think>", golden{name: "thinking off in the prompt",
			output: "\nIt is sunny.",
			want:   Result{Content: "\nIt is sunny."}}},
		{prompt, golden{name: "a new block in the content",
			output: "<think>a</think>b<think>c</think>d",
			want:   Result{Reasoning: "ac", Content: "bd"}}},
		{prompt, golden{name: "empty block",
			output: "<think></think>answer",
			want:   Result{Content: "answer"}}},
	})
}
