package parse

import "testing"

// Outputs in Qwen3-Coder's chat-template format and the cases of vLLM's qwen3_coder
// tests (tests/tool_parsers/test_qwen3coder_tool_parser.py).
func TestQwen3CoderGolden(t *testing.T) {
	mk := toolParser(t, "qwen3_coder")
	for _, g := range []golden{
		{name: "text", output: "No tools needed <here>.", want: Result{Content: "No tools needed <here>."}},
		{name: "one call", output: "<tool_call>\n<function=get_weather>\n<parameter=city>\nDallas\n</parameter>\n<parameter=state>\nTX\n</parameter>\n<parameter=unit>\nfahrenheit\n</parameter>\n</function>\n</tool_call>",
			want: Result{Calls: []Call{call(0, "get_weather", `{"city": "Dallas", "state": "TX", "unit": "fahrenheit"}`)}}},
		{name: "text before, two calls, typed", output: "Let me check.\n<tool_call>\n<function=get_weather>\n<parameter=city>\nOrlando\n</parameter>\n<parameter=days>\n 3 \n</parameter>\n</function>\n</tool_call>\n<tool_call>\n<function=get_time>\n</function>\n</tool_call>",
			want: Result{Content: "Let me check.", Calls: []Call{call(0, "get_weather", `{"city": "Orlando", "days": 3}`), call(1, "get_time", `{}`)}}},
		{name: "types", output: "<tool_call>\n<function=write_file>\n<parameter=mode>\nnull\n</parameter>\n<parameter=append>\nTrue\n</parameter>\n<parameter=ratio>\n2.50\n</parameter>\n<parameter=tags>\n[1, 'a', None]\n</parameter>\n<parameter=meta>\n{\"k\": [1, 2]}\n</parameter>\n<parameter=note>\nNone\n</parameter>\n<parameter=extra>\n42\n</parameter>\n<parameter=undeclared>\n{x}\n</parameter>\n</function>\n</tool_call>",
			want: Result{Calls: []Call{call(0, "write_file", `{"mode": null, "append": true, "ratio": 2.50, "tags": [1, "a", null], "meta": {"k": [1, 2]}, "note": null, "extra": "42", "undeclared": "{x}"}`)}}},
		{name: "values that do not parse stay strings", output: "<tool_call><function=write_file><parameter=mode>007</parameter><parameter=append>yes</parameter><parameter=ratio>1/2</parameter><parameter=tags>[oops</parameter><parameter=meta>\"{'a': True}\"</parameter></function></tool_call>",
			want: Result{Calls: []Call{call(0, "write_file", `{"mode": 7, "append": "yes", "ratio": "1/2", "tags": "[oops", "meta": {"a": true}}`)}}},
		{name: "multi-line string with tags inside", output: "<tool_call>\n<function=write_file>\n<parameter=path>\nsrc/a.go\n</parameter>\n<parameter=content>\n\nfunc f() {\n\ts := \"</parameter>\\n\" // </function>\n}\n\n</parameter>\n</function>\n</tool_call>",
			want: Result{Calls: []Call{call(0, "write_file", `{"path": "src/a.go", "content": "\nfunc f() {\n\ts := \"</parameter>\\n\" // </function>\n}\n"}`)}}},
		{name: "unicode", output: "<tool_call>\n<function=search>\n<parameter=query>\n東京の天気 🌧 \"quoted\"\n</parameter>\n</function>\n</tool_call>",
			want: Result{Calls: []Call{call(0, "search", `{"query": "東京の天気 🌧 \"quoted\""}`)}}},
		{name: "no tool_call wrapper", output: "<function=get_time>\n</function>",
			want: Result{Calls: []Call{call(0, "get_time", `{}`)}}},
		{name: "missing </parameter>", output: "<tool_call>\n<function=search>\n<parameter=query>\ncats\n</function>\n</tool_call>",
			want: Result{Calls: []Call{call(0, "search", `{"query": "cats"}`)}}},
		{name: "missing </function>", output: "<tool_call>\n<function=get_time>\n</tool_call>",
			want: Result{Calls: []Call{call(0, "get_time", `{}`)}}},
		{name: "text after", output: "<tool_call>\n<function=get_time>\n</function>\n</tool_call>\nThen I will wait.",
			want: Result{Content: "Then I will wait.", Calls: []Call{call(0, "get_time", `{}`)}}},
		{name: "unknown function", output: "<tool_call>\n<function=rm>\n<parameter=path>\n/\n</parameter>\n</function>\n</tool_call>",
			want: Result{Content: "<tool_call>\n<function=rm>\n<parameter=path>\n/\n</parameter>\n</function>\n</tool_call>"}, malformed: 1},
		{name: "template text as a name", output: "<function={{ tc.name }}>x</function>",
			want: Result{Content: "<function={{ tc.name }}>x</function>"}, malformed: 1},
		{name: "json in the block", output: "<tool_call>\n{\"name\": \"get_time\"}\n</tool_call>",
			want: Result{Content: "<tool_call>\n{\"name\": \"get_time\"}\n</tool_call>"}, malformed: 1},
		{name: "cut in the name", output: "<tool_call>\n<function=get_ti",
			want: Result{Content: "<tool_call>\n<function=get_ti"}, malformed: 1},
		{name: "cut in a value", output: "<tool_call>\n<function=search>\n<parameter=query>\ncats and",
			want: Result{Calls: []Call{call(0, "search", `{"query": "cats and"}`)}}, malformed: 1},
		{name: "cut in a held value", output: "<tool_call>\n<function=search>\n<parameter=limit>\n12",
			want: Result{Calls: []Call{call(0, "search", `{"limit": 12}`)}}, malformed: 1},
		{name: "cut after a value", output: "<tool_call>\n<function=search>\n<parameter=query>\ncats\n</parameter>\n</func",
			want: Result{Content: "</func", Calls: []Call{call(0, "search", `{"query": "cats"}`)}}, malformed: 1},
		{name: "cut after the closing tag", output: "<tool_call>\n<function=search>\n<parameter=query>\ncats\n</parameter>",
			want: Result{Calls: []Call{call(0, "search", `{"query": "cats"}`)}}, malformed: 1},
		{name: "cut in a parameter name", output: "<tool_call>\n<function=search>\n<parameter=qu",
			want: Result{Content: "<parameter=qu", Calls: []Call{call(0, "search", `{}`)}}, malformed: 1},
		{name: "junk in the body", output: "<tool_call>\n<function=search>\noops\n</function>",
			want: Result{Content: "oops\n</function>", Calls: []Call{call(0, "search", `{}`)}}, malformed: 1},
	} {
		checkGolden(t, mk, g)
	}
}

func TestQwen3CoderStreamsStrings(t *testing.T) {
	p := newQwen3Coder(callTools())
	evs := p.Push("<tool_call>\n<function=write_file>\n<parameter=content>\nline one\n", nil)
	got := Collect(evs)
	if len(got.Calls) != 1 || got.Calls[0].Arguments != `{"content": "line one` {
		t.Fatalf("a string value streams up to the newline that may end it: %+v", got)
	}
	evs = p.Push("line two\n</parameter>\n</function>", evs)
	if got := Collect(evs); got.Calls[0].Arguments != `{"content": "line one\nline two"}` {
		t.Fatalf("got %+v", got)
	}
}
