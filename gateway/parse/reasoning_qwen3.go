package parse

// qwen3 (Qwen3, Qwen3-2507 thinking, QwQ; docs/reference.md §15): <think>…</think> with
// thinking on by default, as vLLM's current qwen3 parser reads it: the output starts in
// the reasoning (older templates let the model write <think>, which is dropped; newer ones
// put it in the prompt), an output without </think> is all reasoning (cut short while
// thinking), and one whose prompt already holds "<think>\n\n</think>\n\n"
// (enable_thinking false) is all content. A <tool_call> inside the reasoning ends it
// (Qwen3.5 may call a tool without closing the block): the call goes to the tool parser.
// A second </think> in the content is dropped.
var qwen3Format = newThinkFormat(thinkFormat{
	start:       "<think>",
	end:         "</think>",
	implicitEnd: []string{"<tool_call>"},
	inReasoning: true,
})

func init() {
	registerReasoning("qwen3", func(o Options) Parser { return newThinkParser(qwen3Format, o) },
		qwen3Format.markers()...)
}
