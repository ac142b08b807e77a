package parse

import "testing"

// Outputs in the format of Meta's Llama 3.1/3.2 JSON tool calling (llama-models
// prompt_format.md) and the cases of vLLM's llama3_json tests
// (tests/tool_parsers/test_llama3_json_tool_parser.py).
func TestLlama3JSONGolden(t *testing.T) {
	mk := toolParser(t, "llama3_json")
	for _, g := range []golden{
		{name: "text", output: "The weather in Paris is sunny {mostly}.", want: Result{Content: "The weather in Paris is sunny {mostly}."}},
		{name: "text with leading space", output: "  Hello", want: Result{Content: "  Hello"}},
		{name: "parameters", output: `{"name": "search", "parameters": {"query": "test query", "limit": 10}}`,
			want: Result{Calls: []Call{call(0, "search", `{"query": "test query", "limit": 10}`)}}},
		{name: "arguments and python tag", output: "<|python_tag|>{\"name\": \"search\", \"arguments\": {\"query\": \"test\"}}",
			want: Result{Calls: []Call{call(0, "search", `{"query": "test"}`)}}},
		{name: "leading whitespace", output: "\n\n  {\"name\": \"get_time\", \"parameters\": {}}",
			want: Result{Calls: []Call{call(0, "get_time", `{}`)}}},
		{name: "three calls", output: `{"name": "search", "parameters": {"query": "test1"}}; {"name": "get_time", "parameters": {}} ; {"name": "search", "parameters": {"query": "test2"}}`,
			want: Result{Calls: []Call{call(0, "search", `{"query": "test1"}`), call(1, "get_time", `{}`), call(2, "search", `{"query": "test2"}`)}}},
		{name: "separators", output: "{\"name\": \"get_time\", \"parameters\": {}};{\"name\": \"get_time\", \"parameters\": {}};\n{\"name\": \"get_time\", \"parameters\": {}}\n{\"name\": \"get_time\", \"parameters\": {}}",
			want: Result{Calls: []Call{call(0, "get_time", `{}`), call(1, "get_time", `{}`), call(2, "get_time", `{}`), call(3, "get_time", `{}`)}}},
		{name: "nested, quotes and brackets", output: `{"name": "write_file", "parameters": {"content": "He said \"Hello {world}\" [x]", "meta": {"l1": {"l2": {"l3": {"v": "deep ☃"}}}}}}`,
			want: Result{Calls: []Call{call(0, "write_file", `{"content": "He said \"Hello {world}\" [x]", "meta": {"l1": {"l2": {"l3": {"v": "deep ☃"}}}}}`)}}},
		{name: "type key (Llama 4 with the JSON template)", output: `{"type": "function", "name": "search", "parameters": {"query": "echo hello"}}`,
			want: Result{Calls: []Call{call(0, "search", `{"query": "echo hello"}`)}}},
		{name: "trailing text", output: `{"name": "search", "parameters": {"query": "test"}} I used {search} for this.`,
			want: Result{Content: "I used {search} for this.", Calls: []Call{call(0, "search", `{"query": "test"}`)}}},
		{name: "text before is not a call", output: `Here is the result: {"name": "get_time", "parameters": {}}`,
			want: Result{Content: `Here is the result: {"name": "get_time", "parameters": {}}`}},
		{name: "missing name", output: `{"parameters": {}}`, want: Result{Content: `{"parameters": {}}`}, malformed: 1},
		{name: "missing arguments", output: `{"name": "get_time"}`, want: Result{Content: `{"name": "get_time"}`}, malformed: 1},
		{name: "unknown name then a call", output: `{"name": "nope", "parameters": {"a": "}"}}; {"name": "get_time", "parameters": {}}`,
			want: Result{Content: `{"name": "nope", "parameters": {"a": "}"}}`, Calls: []Call{call(0, "get_time", `{}`)}}, malformed: 1},
		{name: "invalid json", output: `{"name": "invalidTool", "parameters": {invalid json}`,
			want: Result{Content: `{"name": "invalidTool", "parameters": {invalid json}`}, malformed: 1},
		{name: "not json", output: "{not json at all} says the model",
			want: Result{Content: "{not json at all} says the model"}, malformed: 1},
		{name: "python tag with code", output: "<|python_tag|>brave_search.call(query=\"x\")",
			want: Result{Content: "brave_search.call(query=\"x\")"}, malformed: 1},
		{name: "cut before the arguments", output: `{"name": "search", "param`,
			want: Result{Content: `{"name": "search", "param`}, malformed: 1},
		{name: "partial tag", output: "<|python", want: Result{Content: "<|python"}},
	} {
		checkGolden(t, mk, g)
	}
	checkCut(t, mk, golden{name: "cut in the arguments", output: `{"name": "search", "parameters": {"query": "ca`,
		want: Result{Calls: []Call{call(0, "search", `{"query": "ca`)}}, malformed: 1})
}
