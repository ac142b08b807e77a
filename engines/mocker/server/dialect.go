package server

import "fmt"

// Dialect names the HTTP surface the server speaks.
type Dialect string

const (
	DialectVLLM   Dialect = "vllm"
	DialectSGLang Dialect = "sglang"
	DialectTRTLLM Dialect = "trtllm"
)

// Dialects lists the dialects, the default first.
var Dialects = []Dialect{DialectVLLM, DialectSGLang, DialectTRTLLM}

// ParseDialect checks a dialect name. Errors name the accepted ones.
func ParseDialect(s string) (Dialect, error) {
	for _, d := range Dialects {
		if string(d) == s {
			return d, nil
		}
	}
	return "", fmt.Errorf("server: dialect %q: want vllm, sglang or trtllm", s)
}
