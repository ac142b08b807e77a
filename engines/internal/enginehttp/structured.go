package enginehttp

import "strings"

// ChoiceRegex returns a regular expression that matches exactly one of choices, for
// engines that take no list of choices (SGLang, trtllm-serve) where vLLM takes
// structured_outputs.choice (docs/reference.md §16): the choices, each with the
// characters special in a regular expression escaped, as one alternation in a group.
// The escapes (\ . + * ? ( ) | [ ] { } ^ $, and \n \r \t for those control characters)
// mean the same in Python's re, xgrammar's and Rust's regex syntaxes. Engines match a
// constraint's regex against the whole output.
func ChoiceRegex(choices []string) string {
	var b strings.Builder
	b.WriteByte('(')
	for i, c := range choices {
		if i > 0 {
			b.WriteByte('|')
		}
		for _, r := range c {
			switch r {
			case '\\', '.', '+', '*', '?', '(', ')', '|', '[', ']', '{', '}', '^', '$':
				b.WriteByte('\\')
				b.WriteRune(r)
			case '\n':
				b.WriteString(`\n`)
			case '\r':
				b.WriteString(`\r`)
			case '\t':
				b.WriteString(`\t`)
			default:
				b.WriteRune(r)
			}
		}
	}
	b.WriteByte(')')
	return b.String()
}
