package parse

import (
	"fmt"
	"strings"
	"testing"
)

// Reasoning and harmony parser benchmarks: a streamed answer of 1,000 and 32,000 tokens
// fed token by token (about 4 bytes a token, a marker one token), reported in ns/token;
// the two sizes show the per-token cost does not grow with the answer.

// rbenchWords are the tokens the answers are made of.
var rbenchWords = []string{" the", " cat", " sat", " on", " mat", ",", " and", " then", " 42", " 東京", " é", "\n"}

// rbenchText appends n word tokens to toks.
func rbenchText(toks []string, n int) []string {
	for i := range n {
		toks = append(toks, rbenchWords[i%len(rbenchWords)])
	}
	return toks
}

// rbenchArgs appends a JSON arguments object of about n tokens to toks.
func rbenchArgs(toks []string, n int) []string {
	toks = append(toks, `{"`, "query", `":`, ` "`)
	for i := range max(0, n-8) {
		toks = append(toks, strings.TrimSpace(rbenchWords[i%len(rbenchWords)])+" ")
	}
	return append(toks, `",`, ` "n`, `": `, `7}`)
}

// rbenchThink is a think-tag answer of about n tokens: 60 % reasoning, then the close
// marker and the content.
func rbenchThink(start, end string, n int) []string {
	toks := []string{start}
	toks = rbenchText(toks, n*6/10)
	toks = append(toks, end)
	return rbenchText(toks, n-len(toks))
}

// rbenchHarmony is a gpt-oss answer of about n tokens: analysis, a preamble, two tool
// calls and a final message.
func rbenchHarmony(n int) []string {
	toks := []string{"<|channel|>", "analysis", "<|message|>"}
	toks = rbenchText(toks, n/2)
	toks = append(toks, "<|end|>", "<|start|>", "assistant", "<|channel|>", "commentary", "<|message|>")
	toks = rbenchText(toks, n/20)
	for _, name := range []string{"get_weather", "get_location"} {
		toks = append(toks, "<|end|>", "<|start|>", "assistant", "<|channel|>", "commentary", " to",
			"=functions", "."+name, " ", "<|constrain|>", "json", "<|message|>")
		toks = rbenchArgs(toks, n/8)
		toks = append(toks, "<|call|>")
	}
	toks = append(toks, "<|start|>", "assistant", "<|channel|>", "final", "<|message|>")
	return rbenchText(toks, n-len(toks))
}

func rbench(b *testing.B, mk func() Parser, answer func(n int) []string) {
	for _, n := range []int{1000, 32000} {
		toks := answer(n)
		b.Run(fmt.Sprintf("%dtokens", n), func(b *testing.B) {
			var out []Event
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				p := mk()
				for _, t := range toks {
					out = p.Push(t, out[:0])
				}
				out = p.Finish(out[:0])
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(toks)), "ns/token")
		})
	}
}

func rbenchReasoning(b *testing.B, name, start, end string) {
	o := Options{Prompt: "<|im_start|>assistant\n"}
	rbench(b, func() Parser {
		p, err := NewReasoningParser(name, o)
		if err != nil {
			b.Fatal(err)
		}
		return p
	}, func(n int) []string { return rbenchThink(start, end, n) })
}

func BenchmarkParserReasoningDeepSeekR1(b *testing.B) {
	rbenchReasoning(b, "deepseek_r1", "<think>", "</think>")
}

func BenchmarkParserReasoningQwen3(b *testing.B) {
	rbenchReasoning(b, "qwen3", "<think>", "</think>")
}

func BenchmarkParserReasoningMistral(b *testing.B) {
	rbenchReasoning(b, "mistral", "[THINK]", "[/THINK]")
}

func BenchmarkParserReasoningKimiK2(b *testing.B) {
	rbenchReasoning(b, "kimi_k2", "<think>", "</think>")
}

func BenchmarkParserReasoningGLM45(b *testing.B) {
	rbenchReasoning(b, "glm45", "<think>", "</think>")
}

// BenchmarkParserHarmony: the openai tool parser (gpt-oss), reasoning and two tool calls.
func BenchmarkParserHarmony(b *testing.B) {
	o := Options{Prompt: "<|start|>user<|message|>hi<|end|><|start|>assistant",
		Tools: []Tool{{Name: "get_weather"}, {Name: "get_location"}}}
	rbench(b, func() Parser {
		p, err := NewToolParser("openai", o)
		if err != nil {
			b.Fatal(err)
		}
		return p
	}, rbenchHarmony)
}

// TestRbenchAnswers checks that the benchmark answers parse as intended.
func TestRbenchAnswers(t *testing.T) {
	p, _ := NewToolParser("openai", Options{Prompt: "<|start|>assistant",
		Tools: []Tool{{Name: "get_weather"}, {Name: "get_location"}}})
	r, _, bad := run(func() Parser { return p }, rbenchHarmony(1000))
	if len(r.Calls) != 2 || bad != 0 || r.Reasoning == "" || r.Content == "" {
		t.Fatalf("harmony benchmark answer parses to %d calls, malformed %d, reasoning %d bytes, content %d bytes",
			len(r.Calls), bad, len(r.Reasoning), len(r.Content))
	}
	q, _ := NewReasoningParser("qwen3", Options{})
	r, _, _ = run(func() Parser { return q }, rbenchThink("<think>", "</think>", 1000))
	if r.Reasoning == "" || r.Content == "" || strings.Contains(r.Content, "think>") {
		t.Fatalf("think benchmark answer parses to %+v", r)
	}
}
