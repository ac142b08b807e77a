package parse

import (
	"encoding/json"
	"strconv"
	"strings"
	"testing"
)

// Parser benchmarks, one function per parser family (BenchmarkParser<Family>): an
// answer of about 1,000 and 32,000 tokens streamed in 4-byte chunks (about a token
// each), reported in ns/token. The two sizes show that a parser's cost per token does
// not grow with the length of the answer (no re-parse of what it already consumed);
// the target is at most 2 µs per token.
//
//	go test -run '^$' -bench BenchmarkParser ./gateway/parse/

// The tool-call answers: prose (half the answer, where the format allows text before
// the calls), then two calls: a small one and a coding agent's file write whose content
// is the rest of the answer.
const (
	benchProse = "The forecast for Paris shows light rain, so an umbrella helps. "
	benchCode  = "func main() {\n\tfmt.Println(\"hello, {world}\") // 東京\n}\n"
)

// benchParts returns prose and file content of about tokens 4-byte tokens in all.
func benchParts(tokens int) (prose, content string) {
	half := tokens * 4 / 2
	prose = strings.Repeat(benchProse, half/len(benchProse)+1)[:half]
	content = strings.Repeat(benchCode, half/len(benchCode)+1)[:half]
	return prose, strings.ToValidUTF8(content, "")
}

func benchJSON(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// benchTool runs one family's benchmark at both sizes; answer builds the answer from the
// prose and the file content.
func benchTool(b *testing.B, mk func() Parser, calls int, answer func(prose, content string) string) {
	for _, n := range []int{1000, 32000} {
		b.Run(strconv.Itoa(n/1000)+"k", func(b *testing.B) {
			benchStream(b, mk, calls, answer(benchParts(n)))
		})
	}
}

// benchStream streams answer through a new parser per iteration in 4-byte chunks and
// reports ns per chunk (ns/token). The answer must parse into calls calls, none
// malformed.
func benchStream(b *testing.B, mk func() Parser, calls int, answer string) {
	var chunks []string
	for rest := answer; rest != ""; {
		n := min(4, len(rest))
		chunks = append(chunks, rest[:n])
		rest = rest[n:]
	}
	p := mk()
	var all []Event
	for _, c := range chunks {
		all = p.Push(c, all)
	}
	r := Collect(p.Finish(all))
	if len(r.Calls) != calls || p.Malformed() != 0 {
		b.Fatalf("the benchmark answer parses to %d calls, %d malformed: %.300q", len(r.Calls), p.Malformed(), answer)
	}
	for _, c := range r.Calls {
		if !json.Valid([]byte(c.Arguments)) {
			b.Fatalf("call %s: arguments %.200q are not JSON", c.Name, c.Arguments)
		}
	}
	b.SetBytes(int64(len(answer)))
	b.ReportAllocs()
	b.ResetTimer()
	var evs []Event
	for range b.N {
		p := mk()
		for _, c := range chunks {
			evs = p.Push(c, evs[:0])
		}
		evs = p.Finish(evs[:0])
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(chunks)), "ns/token")
}

func benchToolParser(b *testing.B, name string) func() Parser {
	if _, err := NewToolParser(name, callTools()); err != nil {
		b.Fatal(err)
	}
	return func() Parser {
		p, _ := NewToolParser(name, callTools())
		return p
	}
}

func BenchmarkParserHermes(b *testing.B) {
	benchTool(b, benchToolParser(b, "hermes"), 2, func(prose, content string) string {
		return prose + "\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"unit\": \"celsius\"}}\n</tool_call>\n" +
			"<tool_call>\n{\"name\": \"write_file\", \"arguments\": {\"path\": \"main.go\", \"content\": " + benchJSON(content) + "}}\n</tool_call>"
	})
}

func BenchmarkParserQwen3Coder(b *testing.B) {
	benchTool(b, benchToolParser(b, "qwen3_coder"), 2, func(prose, content string) string {
		return prose + "\n<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n<parameter=days>\n3\n</parameter>\n</function>\n</tool_call>\n" +
			"<tool_call>\n<function=write_file>\n<parameter=path>\nmain.go\n</parameter>\n<parameter=content>\n" + content + "\n</parameter>\n</function>\n</tool_call>"
	})
}

// Llama 3's calls come first; the prose follows them.
func BenchmarkParserLlama3JSON(b *testing.B) {
	benchTool(b, benchToolParser(b, "llama3_json"), 2, func(prose, content string) string {
		return "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\", \"unit\": \"celsius\"}}; " +
			"{\"name\": \"write_file\", \"parameters\": {\"path\": \"main.go\", \"content\": " + benchJSON(content) + "}} " + prose
	})
}

func BenchmarkParserPythonic(b *testing.B) {
	benchTool(b, benchToolParser(b, "pythonic"), 2, func(prose, content string) string {
		// A Python string literal of content: JSON's escapes are Python's too.
		return prose + "<|python_start|>[get_weather(city='Paris', days=3), write_file(path=\"main.go\", content=" +
			benchJSON(content) + ")]<|python_end|>"
	})
}

func BenchmarkParserMistral(b *testing.B) {
	benchTool(b, benchToolParser(b, "mistral"), 2, func(prose, content string) string {
		return prose + "[TOOL_CALLS]get_weather[ARGS]{\"city\": \"Paris\", \"unit\": \"celsius\"}" +
			"[TOOL_CALLS]write_file[ARGS]{\"path\": \"main.go\", \"content\": " + benchJSON(content) + "}"
	})
}

// The tool_choice parsers: the whole answer is JSON (one call for a named function).
func BenchmarkParserNamed(b *testing.B) {
	benchTool(b, func() Parser { return NewNamedCall("write_file", callTools()) }, 1, func(prose, content string) string {
		return "{\"path\": \"main.go\", \"content\": " + benchJSON(prose+content) + "}"
	})
}

func BenchmarkParserRequired(b *testing.B) {
	benchTool(b, func() Parser { return NewRequiredCalls(callTools()) }, 2, func(prose, content string) string {
		return "[{\"name\": \"search\", \"parameters\": {\"query\": " + benchJSON(prose) + "}}, " +
			"{\"name\": \"write_file\", \"parameters\": {\"path\": \"main.go\", \"content\": " + benchJSON(content) + "}}]"
	})
}

func BenchmarkParserDeepSeekV3(b *testing.B) {
	benchTool(b, benchToolParser(b, "deepseek_v3"), 2, func(prose, content string) string {
		return prose + dsSection(dsV3Call("get_weather", `{"city": "Paris", "unit": "celsius"}`), "\n",
			dsV3Call("write_file", `{"path": "main.go", "content": `+benchJSON(content)+`}`))
	})
}

func BenchmarkParserDeepSeekV31(b *testing.B) {
	benchTool(b, benchToolParser(b, "deepseek_v31"), 2, func(prose, content string) string {
		return prose + dsSection(dsV31Call("get_weather", `{"city": "Paris", "unit": "celsius"}`),
			dsV31Call("write_file", `{"path": "main.go", "content": `+benchJSON(content)+`}`))
	})
}

func BenchmarkParserKimiK2(b *testing.B) {
	benchTool(b, benchToolParser(b, "kimi_k2"), 2, func(prose, content string) string {
		return prose + kimiSection(kimiCall("functions.get_weather:0", `{"city": "Paris", "unit": "celsius"}`),
			kimiCall("functions.write_file:1", `{"path": "main.go", "content": `+benchJSON(content)+`}`))
	})
}

// GLM writes string values raw: the file content streams as JSON-escaped fragments.
func BenchmarkParserGLM45(b *testing.B) {
	benchTool(b, benchToolParser(b, "glm45"), 2, func(prose, content string) string {
		return prose + "<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Paris</arg_value>\n<arg_key>unit</arg_key>\n<arg_value>celsius</arg_value>\n</tool_call>\n" +
			"<tool_call>write_file\n<arg_key>path</arg_key>\n<arg_value>main.go</arg_value>\n<arg_key>content</arg_key>\n<arg_value>" + content + "</arg_value>\n</tool_call>"
	})
}
