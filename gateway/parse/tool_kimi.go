package parse

import "strings"

// Kimi K2's tool-call special tokens (docs/reference.md §15). Some Kimi checkpoints write
// the section markers in the singular; vLLM accepts both.
const (
	kimiSectionBegin  = "<|tool_calls_section_begin|>"
	kimiSectionEnd    = "<|tool_calls_section_end|>"
	kimiSectionBegin1 = "<|tool_call_section_begin|>"
	kimiSectionEnd1   = "<|tool_call_section_end|>"
	kimiCallBegin     = "<|tool_call_begin|>"
	kimiArgsBegin     = "<|tool_call_argument_begin|>"
	kimiCallEnd       = "<|tool_call_end|>"
)

// kimiK2 is Kimi K2's format (vLLM's kimi_k2):
//
//	<|tool_calls_section_begin|><|tool_call_begin|>functions.NAME:IDX<|tool_call_argument_begin|>{...}<|tool_call_end|>...<|tool_calls_section_end|>
//
// The header is the call's id, which the call keeps (the template writes it back in the
// next turn); the name is the id's part before the first ':', after its last '.'
// ("functions.get_weather:0" and "get_weather:0" both name get_weather).
var kimiK2 = (&tokenFormat{
	sectionBegin: []string{kimiSectionBegin, kimiSectionBegin1},
	sectionEnd:   []string{kimiSectionEnd, kimiSectionEnd1},
	callBegin:    kimiCallBegin,
	argsBegin:    kimiArgsBegin,
	callEnd:      kimiCallEnd,
	decode: func(header, pre string) (string, string, bool) {
		id := strings.TrimSpace(header)
		name, ok := kimiName(id)
		return name, id, ok && isSpaces(pre)
	},
	postOK: isSpaces,
}).init()

// kimiName returns the function an id of the form [PREFIX.]NAME:DIGITS names.
func kimiName(id string) (string, bool) {
	colon := strings.LastIndexByte(id, ':')
	if colon < 0 || colon == len(id)-1 || strings.ContainsRune(id, '<') {
		return "", false
	}
	for _, c := range id[colon+1:] {
		if c < '0' || c > '9' {
			return "", false
		}
	}
	name, _, _ := strings.Cut(id, ":")
	if dot := strings.LastIndexByte(name, '.'); dot >= 0 {
		name = name[dot+1:]
	}
	return name, name != ""
}

func init() {
	registerTool("kimi_k2", func(o Options) Parser { return newTokenCalls(kimiK2, o) },
		kimiSectionBegin, kimiSectionEnd, kimiSectionBegin1, kimiSectionEnd1,
		kimiCallBegin, kimiArgsBegin, kimiCallEnd)
}
