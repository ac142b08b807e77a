package parse

// kimi_k2 (Kimi K2 thinking; docs/reference.md §15): <think>…</think>; the output starts
// in the reasoning whether or not the model writes <think> (dropped when it does), and
// the tool-call section marker <|tool_calls_section_begin|> ends the reasoning implicitly,
// beginning the content the kimi_k2 tool parser reads (vLLM's KimiK2ReasoningParser). A
// prompt that closes the block itself (thinking turned off) makes the output all content.
var kimiK2ThinkFormat = newThinkFormat(thinkFormat{
	start:       "<think>",
	end:         "</think>",
	implicitEnd: []string{"<|tool_calls_section_begin|>"},
	inReasoning: true,
})

func init() {
	registerReasoning("kimi_k2", func(o Options) Parser { return newThinkParser(kimiK2ThinkFormat, o) },
		kimiK2ThinkFormat.markers()...)
}
