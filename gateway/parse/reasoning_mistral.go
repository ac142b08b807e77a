package parse

// mistral (Magistral; docs/reference.md §15): [THINK]…[/THINK], special tokens of the
// Mistral tokenizers (v13 and later), so the detokenizer must keep them. The output
// starts as content; [THINK] opens the reasoning and [/THINK] closes it; text before
// [THINK] stays content, a reasoning block never closed runs to the end of the output, a
// stray [/THINK] is dropped, and [TOOL_CALLS] inside the reasoning ends it (vLLM's
// mistral parser).
var mistralThinkFormat = newThinkFormat(thinkFormat{
	start:       "[THINK]",
	end:         "[/THINK]",
	implicitEnd: []string{"[TOOL_CALLS]"},
	reopen:      true,
})

func init() {
	registerReasoning("mistral", func(o Options) Parser { return newThinkParser(mistralThinkFormat, o) },
		mistralThinkFormat.markers()...)
}
