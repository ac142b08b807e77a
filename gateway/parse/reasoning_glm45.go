package parse

// glm45 (GLM-4.5, 4.6, 4.7; docs/reference.md §15): <think>…</think> with thinking on by
// default: the output starts in the reasoning (a <think> the model writes is dropped) and
// one never closed is all reasoning; a prompt ending in "<think></think>" (enable_thinking
// false) makes it all content. A <tool_call> inside the reasoning ends it, and a <think>
// in the content opens a new block (GLM thinks again between tool calls), as vLLM's
// current glm45 parser does.
var glm45ThinkFormat = newThinkFormat(thinkFormat{
	start:       "<think>",
	end:         "</think>",
	implicitEnd: []string{"<tool_call>"},
	inReasoning: true,
	reopen:      true,
})

func init() {
	registerReasoning("glm45", func(o Options) Parser { return newThinkParser(glm45ThinkFormat, o) },
		glm45ThinkFormat.markers()...)
}
