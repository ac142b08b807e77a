package parse

import "testing"

// Outputs in Mistral's two tool-call formats (mistral-common's tokenizers) and the cases
// of vLLM's mistral tests (tests/tool_parsers/test_mistral_tool_parser.py).
func TestMistralGolden(t *testing.T) {
	mk := toolParser(t, "mistral")
	for _, g := range []golden{
		{name: "text", output: "This is a test", want: Result{Content: "This is a test"}},
		{name: "text with brackets", output: "[TOOL] [x] done", want: Result{Content: "[TOOL] [x] done"}},
		// Before v11: a JSON list.
		{name: "list, one call", output: `[TOOL_CALLS][{"name": "get_weather", "arguments":{"city": "San Francisco", "state": "CA", "unit": "celsius"}}]`,
			want: Result{Calls: []Call{call(0, "get_weather", `{"city": "San Francisco", "state": "CA", "unit": "celsius"}`)}}},
		{name: "list, arguments before name", output: `[TOOL_CALLS] [{"arguments":{"name": "John Doe"}, "name": "register_user"}]`,
			want: Result{Calls: []Call{call(0, "register_user", `{"name": "John Doe"}`)}}},
		{name: "list, two calls, id key", output: `[TOOL_CALLS] [{"name": "search", "arguments": {"query": "a"}, "id": "abc123def"}, {"name": "get_weather", "arguments":{"city": "Dallas"}}]`,
			want: Result{Calls: []Call{call(0, "search", `{"query": "a"}`), call(1, "get_weather", `{"city": "Dallas"}`)}}},
		{name: "list, content before", output: `Hello[TOOL_CALLS] [{"name": "search", "arguments":{"query": "b"}}]`,
			want: Result{Content: "Hello", Calls: []Call{call(0, "search", `{"query": "b"}`)}}},
		{name: "list, trailing data", output: "[TOOL_CALLS] [{\"name\": \"get_time\", \"arguments\":{}}]\nextra trailing data",
			want: Result{Content: "extra trailing data", Calls: []Call{call(0, "get_time", `{}`)}}},
		{name: "list, arguments omitted", output: `[TOOL_CALLS][{"name": "get_time"}]`,
			want: Result{Calls: []Call{call(0, "get_time", `{}`)}}},
		{name: "list, unknown function", output: `[TOOL_CALLS][{"name": "nope", "arguments": {}}, {"name": "get_time", "arguments": {}}]`,
			want: Result{Content: `{"name": "nope", "arguments": {}}`, Calls: []Call{call(0, "get_time", `{}`)}}, malformed: 1},
		{name: "list, not json", output: "[TOOL_CALLS] [not json at all",
			want: Result{Content: "not json at all"}, malformed: 1},
		// v11 and later: NAME[ARGS]{...}.
		{name: "v11, one call", output: `[TOOL_CALLS]get_weather[ARGS]{"city": "San Francisco", "state": "CA", "unit": "celsius"}`,
			want: Result{Calls: []Call{call(0, "get_weather", `{"city": "San Francisco", "state": "CA", "unit": "celsius"}`)}}},
		{name: "v11, special tokens dropped", output: `[TOOL_CALLS]search{"query": "a {b}"}[TOOL_CALLS]get_time{}`,
			want: Result{Calls: []Call{call(0, "search", `{"query": "a {b}"}`), call(1, "get_time", `{}`)}}},
		{name: "v11, text before, two calls", output: "Let me do both.[TOOL_CALLS]search[ARGS]{\"query\": \"x\", \"limit\": 2}[TOOL_CALLS]write_file[ARGS]{\"content\": \"[ARGS] \\\"é\\\"\", \"meta\": {\"a\": [1, {}]}}",
			want: Result{Content: "Let me do both.", Calls: []Call{call(0, "search", `{"query": "x", "limit": 2}`), call(1, "write_file", `{"content": "[ARGS] \"é\"", "meta": {"a": [1, {}]}}`)}}},
		{name: "v11, call id", output: `[TOOL_CALLS]get_time[CALL_ID]a1B2c3D4e[ARGS]{}`,
			want: Result{Calls: []Call{{ID: "a1B2c3D4e", Name: "get_time", Arguments: `{}`}}}},
		{name: "v11, bad call id", output: `[TOOL_CALLS]get_time[CALL_ID]x[ARGS]{}`,
			want: Result{Calls: []Call{call(0, "get_time", `{}`)}}},
		{name: "v11, unknown function", output: `[TOOL_CALLS]nope[ARGS]{"a": "}"}[TOOL_CALLS]get_time[ARGS]{}`,
			want: Result{Content: `[TOOL_CALLS]nope[ARGS]{"a": "}"}`, Calls: []Call{call(0, "get_time", `{}`)}}, malformed: 1},
		{name: "v11, no arguments", output: "[TOOL_CALLS]get_time[ARGS]oops",
			want: Result{Content: "[TOOL_CALLS]get_time[ARGS]oops"}, malformed: 1},
		{name: "v11, cut in the name", output: "[TOOL_CALLS]get_ti",
			want: Result{Content: "[TOOL_CALLS]get_ti"}, malformed: 1},
		{name: "marker alone", output: "Hi[TOOL_CALLS]", want: Result{Content: "Hi"}},
	} {
		checkGolden(t, mk, g)
	}
	checkCut(t, mk, golden{name: "v11, cut in the arguments", output: `[TOOL_CALLS]search[ARGS]{"query": "ca`,
		want: Result{Calls: []Call{call(0, "search", `{"query": "ca`)}}, malformed: 1})
	checkCut(t, mk, golden{name: "list, cut in the arguments", output: `[TOOL_CALLS][{"name": "search", "arguments": {"query": "ca`,
		want: Result{Calls: []Call{call(0, "search", `{"query": "ca`)}}, malformed: 1})
}
