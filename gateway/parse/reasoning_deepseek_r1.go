package parse

// deepseek_r1 (DeepSeek-R1 and its distills, docs/reference.md §15): <think>…</think>.
// R1's chat template ends the prompt with "<think>\n", so the output usually has only the
// closing </think>: everything before it is reasoning, and an output that never closes
// it is all reasoning (vLLM's DeepSeekR1ReasoningParser). A <think> the model writes
// itself is dropped.
var deepseekR1Format = newThinkFormat(thinkFormat{
	start:       "<think>",
	end:         "</think>",
	inReasoning: true,
})

func init() {
	registerReasoning("deepseek_r1", func(o Options) Parser { return newThinkParser(deepseekR1Format, o) },
		deepseekR1Format.markers()...)
}
