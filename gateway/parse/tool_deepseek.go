package parse

import "strings"

// DeepSeek's tool-call special tokens (full-width bars U+FF5C and U+2581 "▁" for spaces),
// as its tokenizer and chat templates write them (docs/reference.md §15).
const (
	dsCallsBegin = "<｜tool▁calls▁begin｜>"
	dsCallsEnd   = "<｜tool▁calls▁end｜>"
	dsCallBegin  = "<｜tool▁call▁begin｜>"
	dsCallEnd    = "<｜tool▁call▁end｜>"
	dsSep        = "<｜tool▁sep｜>"
)

// deepseekV3 is DeepSeek-V3's format (vLLM's deepseek_v3):
//
//	<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>NAME
//	```json
//	{...}
//	```<｜tool▁call▁end｜>...<｜tool▁calls▁end｜>
//
// The header is the call's type, "function"; the name line and a ```json fence come
// between the separator and the arguments, a closing fence after them.
var deepseekV3 = (&tokenFormat{
	sectionBegin: []string{dsCallsBegin},
	sectionEnd:   []string{dsCallsEnd},
	callBegin:    dsCallBegin,
	argsBegin:    dsSep,
	callEnd:      dsCallEnd,
	decode: func(header, pre string) (string, string, bool) {
		if strings.TrimSpace(header) != "function" {
			return "", "", false
		}
		pre = strings.TrimLeft(pre, " \t\r\n")
		end := strings.IndexAny(pre, " \t\r\n`")
		if end < 0 {
			end = len(pre)
		}
		name, fence := pre[:end], strings.TrimSpace(pre[end:])
		if name == "" || fence != "" && fence != "```json" && fence != "```" {
			return "", "", false
		}
		return name, "", true
	},
	postOK: func(post string) bool {
		post = strings.TrimSpace(post)
		return post == "" || post == "```"
	},
}).init()

// deepseekV31 is DeepSeek-V3.1's format (vLLM's deepseek_v31): the name, the separator,
// then the arguments object, with no type and no fence:
//
//	<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>NAME<｜tool▁sep｜>{...}<｜tool▁call▁end｜>...<｜tool▁calls▁end｜>
var deepseekV31 = (&tokenFormat{
	sectionBegin: []string{dsCallsBegin},
	sectionEnd:   []string{dsCallsEnd},
	callBegin:    dsCallBegin,
	argsBegin:    dsSep,
	callEnd:      dsCallEnd,
	decode: func(header, pre string) (string, string, bool) {
		name := strings.TrimSpace(header)
		return name, "", name != "" && isSpaces(pre)
	},
	postOK: isSpaces,
}).init()

func init() {
	marks := []string{dsCallsBegin, dsCallsEnd, dsCallBegin, dsCallEnd, dsSep}
	registerTool("deepseek_v3", func(o Options) Parser { return newTokenCalls(deepseekV3, o) }, marks...)
	registerTool("deepseek_v31", func(o Options) Parser { return newTokenCalls(deepseekV31, o) }, marks...)
}

// isSpaces reports whether s is only JSON whitespace.
func isSpaces(s string) bool { return strings.Trim(s, " \t\r\n") == "" }
