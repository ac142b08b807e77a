package parse

import "testing"

// Outputs in the format of Qwen2.5/Qwen3's chat templates and the cases of vLLM's
// hermes parser tests (tests/tool_parsers/test_hermes_tool_parser.py).
func TestHermesGolden(t *testing.T) {
	mk := toolParser(t, "hermes")
	for _, g := range []golden{
		{name: "text only", output: "This is plain text with no tool calling involved.",
			want: Result{Content: "This is plain text with no tool calling involved."}},
		{name: "text ending like a tag", output: "a <tool_ca", want: Result{Content: "a <tool_ca"}},
		{name: "one call", output: "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"unit\": \"celsius\"}}\n</tool_call>",
			want: Result{Calls: []Call{call(0, "get_weather", `{"city": "Paris", "unit": "celsius"}`)}}},
		{name: "text before and two calls",
			output: "Sure, let me check.\n\n<tool_call>\n{\"name\": \"search\", \"arguments\": {\"query\": \"cats\"}}\n</tool_call>\n<tool_call>\n{\"name\": \"search\", \"arguments\": {\"query\": \"dogs\", \"limit\": 3}}\n</tool_call>",
			want: Result{Content: "Sure, let me check.", Calls: []Call{
				call(0, "search", `{"query": "cats"}`), call(1, "search", `{"query": "dogs", "limit": 3}`)}}},
		{name: "no newlines", output: `<tool_call>{"name": "search", "arguments": {"query": "cats"}}</tool_call><tool_call>{"name": "get_time", "arguments": {}}</tool_call>`,
			want: Result{Calls: []Call{call(0, "search", `{"query": "cats"}`), call(1, "get_time", `{}`)}}},
		{name: "arguments before name", output: "<tool_call>\n{\"arguments\": {\"query\": \"x\"}, \"name\": \"search\"}\n</tool_call>",
			want: Result{Calls: []Call{call(0, "search", `{"query": "x"}`)}}},
		{name: "tricky strings", output: "<tool_call>\n{\"name\": \"write_file\", \"arguments\": {\"path\": \"a}b{c.txt\", \"content\": \"say \\\"hi\\\" </tool_call> {[\\\\\", \"meta\": {\"k\": [1, {\"z\": \"東京 🌧\"}]}}}\n</tool_call>",
			want: Result{Calls: []Call{call(0, "write_file", `{"path": "a}b{c.txt", "content": "say \"hi\" </tool_call> {[\\", "meta": {"k": [1, {"z": "東京 🌧"}]}}`)}}},
		{name: "extra keys", output: `<tool_call>{"type": "function", "name": "get_time", "id": 7, "arguments": {}, "x": [1, "]"]}</tool_call>`,
			want: Result{Calls: []Call{call(0, "get_time", `{}`)}}},
		{name: "escaped name", output: `<tool_call>{"name": "get\u005ftime", "arguments": {}}</tool_call>`,
			want: Result{Calls: []Call{call(0, "get_time", `{}`)}}},
		{name: "serialized arguments", output: "<tool_call>\n{\"name\": \"search\", \"arguments\": \"{\\\"query\\\": \\\"max_connections\\\"}\"}\n</tool_call>",
			want: Result{Calls: []Call{call(0, "search", `{"query": "max_connections"}`)}}},
		{name: "text after the calls", output: "<tool_call>\n{\"name\": \"get_time\", \"arguments\": {}}\n</tool_call>\n\nDone, waiting.",
			want: Result{Content: "Done, waiting.", Calls: []Call{call(0, "get_time", `{}`)}}},
		{name: "closing tag cut off", output: "<tool_call>\n{\"name\": \"get_time\", \"arguments\": {}}",
			want: Result{Calls: []Call{call(0, "get_time", `{}`)}}},
		{name: "closing tag half there", output: "<tool_call>\n{\"name\": \"get_time\", \"arguments\": {}}\n</tool_",
			want: Result{Content: "</tool_", Calls: []Call{call(0, "get_time", `{}`)}}},
		{name: "unknown function", output: "Hi <tool_call>\n{\"name\": \"rm_rf\", \"arguments\": {\"path\": \"/\"}}\n</tool_call> bye",
			want: Result{Content: "Hi <tool_call>\n{\"name\": \"rm_rf\", \"arguments\": {\"path\": \"/\"}}\n</tool_call> bye"}, malformed: 1},
		{name: "unknown then known", output: "<tool_call>{\"name\": \"nope\", \"arguments\": {\"a\": \"}\"}}</tool_call>\n<tool_call>{\"name\": \"get_time\", \"arguments\": {}}</tool_call>",
			want: Result{Content: "<tool_call>{\"name\": \"nope\", \"arguments\": {\"a\": \"}\"}}</tool_call>", Calls: []Call{call(0, "get_time", `{}`)}}, malformed: 1},
		{name: "not json", output: "<tool_call>\nget_weather(city=Paris)\n</tool_call>",
			want: Result{Content: "<tool_call>\nget_weather(city=Paris)\n</tool_call>"}, malformed: 1},
		{name: "arguments not an object", output: `<tool_call>{"name": "search", "arguments": "hello"}</tool_call>`,
			want: Result{Content: `<tool_call>{"name": "search", "arguments": "hello"}</tool_call>`}, malformed: 1},
		{name: "arguments missing", output: `<tool_call>{"name": "get_time"}</tool_call>`,
			want: Result{Content: `<tool_call>{"name": "get_time"}</tool_call>`}, malformed: 1},
		{name: "held arguments invalid", output: `<tool_call>{"arguments": {"a": tru}, "name": "get_time"}</tool_call>`,
			want: Result{Content: `<tool_call>{"arguments": {"a": tru}, "name": "get_time"}</tool_call>`}, malformed: 1},
		{name: "unterminated before the arguments", output: "ok <tool_call>\n{\"name\": \"get_weather\", \"argu",
			want: Result{Content: "ok <tool_call>\n{\"name\": \"get_weather\", \"argu"}, malformed: 1},
		{name: "no tools offered", output: "<tool_call>{\"name\": \"x\", \"arguments\": {}}</tool_call>",
			want: Result{Content: "<tool_call>{\"name\": \"x\", \"arguments\": {}}</tool_call>"}, malformed: 1},
	} {
		checkGolden(t, mk, g)
	}
	checkGolden(t, func() Parser { return newHermes(Options{}) }, golden{name: "no tools",
		output: `<tool_call>{"name": "get_time", "arguments": {}}</tool_call>`,
		want:   Result{Content: `<tool_call>{"name": "get_time", "arguments": {}}</tool_call>`}, malformed: 1})
}

// A call that started streaming and then broke keeps what streamed.
func TestHermesCut(t *testing.T) {
	mk := toolParser(t, "hermes")
	for _, g := range []golden{
		{name: "cut in the arguments", output: "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Par",
			want: Result{Calls: []Call{call(0, "get_weather", `{"city": "Par`)}}, malformed: 1},
		{name: "invalid arguments", output: "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": Paris}}\n</tool_call>",
			want: Result{Calls: []Call{call(0, "get_weather", `{"city": Paris}`)}}, malformed: 1},
		{name: "syntax error after the arguments", output: "<tool_call>{\"name\": \"get_time\", \"arguments\": {} oops}</tool_call> after",
			want: Result{Content: "oops}</tool_call> after", Calls: []Call{call(0, "get_time", `{}`)}}, malformed: 1},
	} {
		checkCut(t, mk, g)
	}
}

func TestHermesStreamsArguments(t *testing.T) {
	p := newHermes(callTools())
	var evs []Event
	evs = p.Push("Let me look.\n<tool_call>\n{\"name\": \"search\", \"arguments\": {\"query\": \"ca", evs)
	want := []Event{{Kind: KindContent, Text: "Let me look."},
		{Kind: KindToolCall, Index: 0, ID: "call_0", Name: "search"},
		{Kind: KindToolArgs, Index: 0, Text: `{"query": "ca`}}
	if len(evs) != len(want) {
		t.Fatalf("events %+v, want %+v", evs, want)
	}
	for i := range want {
		if evs[i] != want[i] {
			t.Fatalf("event %d = %+v, want %+v", i, evs[i], want[i])
		}
	}
	evs = p.Push("ts\"}}\n</tool_call>", evs[:0])
	if len(evs) != 1 || evs[0].Text != `ts"}` {
		t.Fatalf("second push: %+v", evs)
	}
}
