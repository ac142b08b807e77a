package persona

import "strings"

// Reading the conversation back out of a rendered prompt (docs/reference.md §15): where
// the last user turn and the last tool result begin, in any family's chat format.

// userMarkers open a user turn (with the rest of its header).
var userMarkers = []string{
	"<|im_start|>user\n",                         // ChatML: Qwen, Hermes
	"<|start_header_id|>user<|end_header_id|>\n", // Llama 3.x
	"<|header_start|>user<|header_end|>\n",       // Llama 4
	"<|start|>user<|message|>",                   // harmony (gpt-oss)
	"<｜User｜>",                                   // DeepSeek V3, R1
	"[INST]",                                     // Mistral
	"<|user|>",                                   // GLM-4.5
	"<|im_user|>user<|im_middle|>",               // Kimi K2
}

// toolMarkers open a tool result. Qwen3's template writes results inside a user turn
// (<|im_start|>user\n<tool_response>), so the marker comes after that turn's user
// marker, as a result turn's own header does in the other families.
var toolMarkers = []string{
	"<tool_response>", // Qwen, Hermes, GLM-4.5 (inside <|observation|>)
	"<|start_header_id|>ipython<|end_header_id|>\n", // Llama 3.x (tool and ipython roles)
	"<|start_header_id|>tool<|end_header_id|>\n",
	"<|header_start|>ipython<|header_end|>\n", // Llama 4
	"<|header_start|>tool<|header_end|>\n",
	"<|start|>functions.",         // harmony: <|start|>functions.NAME to=assistant<|channel|>...<|message|>
	"<｜tool▁outputs▁begin｜>",      // DeepSeek V3
	"<｜tool▁output▁begin｜>",       // DeepSeek V3, V3.1
	"[TOOL_RESULTS]",              // Mistral
	"<|observation|>",             // GLM-4.5
	"<|im_middle|>## Return of ",  // Kimi K2: <|im_system|>tool<|im_middle|>## Return of ID\n...
	"<|im_start|>tool\n",          // ChatML templates with a tool role
	"<start_of_turn>tool\n",       // generic
	"<|start_header_id|>function", // generic
}

// turnEnds end a turn's content, in any family.
var turnEnds = []string{
	"<|im_end|>", "<|eot_id|>", "<|eom_id|>", "<|eot|>", "<|end|>", "<|call|>", "<|return|>",
	"</tool_response>", "[/TOOL_RESULTS]", "[/INST]", "<｜tool▁output▁end｜>", "<｜Assistant｜>",
	"<｜end▁of▁sentence｜>", "<|user|>", "<|assistant|>", "<|observation|>", "<|im_start|>",
	"<|start_header_id|>", "<|header_start|>", "<|start|>",
}

// headerSkips end the rest of a header after a marker (the tool's name in harmony's and
// Kimi K2's, Llama's blank line).
var headerSkips = []string{"<|message|>", "\n"}

// conversation is what Plan reads of the prompt.
type conversation struct {
	// afterTool: the last turn is a tool result (its marker comes after the last user
	// turn's).
	afterTool bool
	// user is the text of the last user turn; result that of the last tool result.
	user, result string
	// calls counts the tool calls already in the prompt (Kimi K2's call ids number them).
	calls int
}

func readConversation(prompt string) conversation {
	var c conversation
	u, uEnd := lastOf(prompt, userMarkers)
	t, tEnd := lastOf(prompt, toolMarkers)
	c.afterTool = t >= 0 && t > u
	// The user's question: the last user turn that is not a tool result (Qwen3 writes
	// results as user turns), its last paragraph (Llama 3.1 puts the tool list first).
	for limit, n := u, 0; limit >= 0 && n < 64; n++ {
		text := strings.TrimSpace(turnText(prompt[uEnd:]))
		if !strings.HasPrefix(text, "<tool_response>") {
			if i := strings.LastIndex(text, "\n\n"); i >= 0 {
				text = text[i+2:]
			}
			c.user = text
			break
		}
		limit, uEnd = lastOf(prompt[:limit], userMarkers)
	}
	if t >= 0 {
		c.result = turnText(skipHeader(prompt[tEnd:]))
	}
	c.calls = strings.Count(prompt, "<|tool_call_begin|>")
	return c
}

// lastOf returns where the last occurrence of any marker starts and ends (-1, -1: none),
// scanning back from the end of s: its cost is the distance to that occurrence.
func lastOf(s string, markers []string) (int, int) {
	var first [256]bool
	for _, m := range markers {
		first[m[0]] = true
	}
	for i := len(s) - 1; i >= 0; i-- {
		if !first[s[i]] {
			continue
		}
		best := -1
		for _, m := range markers {
			if strings.HasPrefix(s[i:], m) && len(m) > best {
				best = len(m)
			}
		}
		if best >= 0 {
			return i, i + best
		}
	}
	return -1, -1
}

// skipHeader drops the rest of a tool result's header (harmony: "NAME to=assistant
// <|channel|>commentary<|message|>") when it ends within the next 200 bytes.
func skipHeader(s string) string {
	head := s[:min(len(s), 200)]
	if i := strings.Index(head, "<|message|>"); i >= 0 {
		return s[i+len("<|message|>"):]
	}
	if strings.HasPrefix(s, "<|end_header_id|>") || strings.HasPrefix(s, "<|header_end|>") {
		return s[strings.Index(s, "|>")+2:]
	}
	return s
}

// turnText returns a turn's content: s up to the first end of turn, within its first
// 16 KiB (enough for the words quoted from it).
func turnText(s string) string {
	s = s[:min(len(s), 16<<10)]
	end := len(s)
	for _, m := range turnEnds {
		if i := strings.Index(s[:end], m); i >= 0 {
			end = i
		}
	}
	return s[:end]
}

// Where the model's answer begins: the assistant header of the generation prompt.
var assistantHeaders = []string{
	"<|im_start|>assistant\n",
	"<|start_header_id|>assistant<|end_header_id|>\n\n",
	"<|header_start|>assistant<|header_end|>\n\n",
	"<|start|>assistant",
	"<｜Assistant｜>",
	"[/INST]",
	"[/TOOL_RESULTS]",
	"<|assistant|>",
	"<|im_assistant|>assistant<|im_middle|>",
	"<｜tool▁outputs▁end｜>", // DeepSeek V3 answers right after the tool results
}

// promptSuffixes are what templates write after the assistant header themselves: an
// opened or closed thinking block (Qwen3 with enable_thinking false, DeepSeek R1 and
// V3.1, GLM-4.5), or a newline.
var promptSuffixes = []string{
	"<think>\n\n</think>\n\n", "\n<think></think>", "<think></think>", "<think>\n", "<think>", "</think>",
	"[THINK]", "\n",
}

// headerEnds returns where the last n assistant headers end in s, the last first.
func headerEnds(s string, n int) []int {
	var out []int
	limit := len(s)
	for len(out) < n {
		at, end := lastOf(s[:limit], assistantHeaders)
		if at < 0 {
			break
		}
		out = append(out, end)
		limit = at
	}
	return out
}
