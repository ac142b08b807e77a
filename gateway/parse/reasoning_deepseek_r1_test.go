package parse

import "testing"

// DeepSeek-R1 outputs: the template ends the prompt with "<｜Assistant｜><think>\n"
// (docs/reference.md §15).
func TestReasoningDeepSeekR1(t *testing.T) {
	const prompt = "<｜begin▁of▁sentence｜><｜User｜>What is 2+2?<｜Assistant｜><think>\n"
	checkReasoning(t, "deepseek_r1", []reasoningCase{
		{prompt, golden{name: "only the closing tag",
			output: "The user asks 2+2.\nThat is 4.\n</think>\n\nThe answer is **4**.",
			want:   Result{Reasoning: "The user asks 2+2.\nThat is 4.\n", Content: "\n\nThe answer is **4**."}}},
		{"", golden{name: "both tags",
			output: "<think>\nsimple sum\n</think>\n\n4",
			want:   Result{Reasoning: "\nsimple sum\n", Content: "\n\n4"}}},
		{prompt, golden{name: "never closed is all reasoning",
			output: "Still thinking about it",
			want:   Result{Reasoning: "Still thinking about it"}}},
		{"", golden{name: "opened, never closed",
			output: "<think>Still thinking",
			want:   Result{Reasoning: "Still thinking"}}},
		{prompt, golden{name: "empty reasoning",
			output: "</think>Hello",
			want:   Result{Content: "Hello"}}},
		{"", golden{name: "empty block",
			output: "<think></think>Hello",
			want:   Result{Content: "Hello"}}},
		{prompt, golden{name: "empty output", output: "", want: Result{}}},
		{prompt, golden{name: "stray closing tag in the content is dropped",
			output: "a</think>b</think>c",
			want:   Result{Reasoning: "a", Content: "bc"}}},
		{prompt, golden{name: "an opening tag in the content is text",
			output: "a</think>use <think> tags",
			want:   Result{Reasoning: "a", Content: "use <think> tags"}}},
		{prompt, golden{name: "near misses are text",
			output: "1 < 2, </thinking> and <thin k> are not tags</think>ok <",
			want:   Result{Reasoning: "1 < 2, </thinking> and <thin k> are not tags", Content: "ok <"}}},
		{prompt, golden{name: "unicode",
			output: "思考：二加二等于四。</think>答案是 4。😀",
			want:   Result{Reasoning: "思考：二加二等于四。", Content: "答案是 4。😀"}}},
		{"<｜Assistant｜></think>", golden{name: "prompt closed the block",
			output: "Hello there",
			want:   Result{Content: "Hello there"}}},
		{"<｜Assistant｜></think>\n\n", golden{name: "prompt closed the block, stray close",
			output: "Hi</think>!",
			want:   Result{Content: "Hi!"}}},
		{"<｜User｜>a<｜Assistant｜><think>x</think>y<｜end▁of▁sentence｜><｜User｜>b<｜Assistant｜>",
			golden{name: "an earlier turn's block does not count",
				output: "thinking</think>answer",
				want:   Result{Reasoning: "thinking", Content: "answer"}}},
	})
}
