package parse

import (
	"strings"
	"testing"
)

// DeepSeek's markers, spelled out (not the package's constants) so that a typo there
// fails here.
const (
	dsTestCallsBegin = "<｜tool▁calls▁begin｜>"
	dsTestCallsEnd   = "<｜tool▁calls▁end｜>"
	dsTestCallBegin  = "<｜tool▁call▁begin｜>"
	dsTestCallEnd    = "<｜tool▁call▁end｜>"
	dsTestSep        = "<｜tool▁sep｜>"
)

// dsV3Call is one call as DeepSeek-V3's template writes it.
func dsV3Call(name, args string) string {
	return dsTestCallBegin + "function" + dsTestSep + name + "\n```json\n" + args + "\n```" + dsTestCallEnd
}

// dsV31Call is one call as DeepSeek-V3.1's template writes it.
func dsV31Call(name, args string) string {
	return dsTestCallBegin + name + dsTestSep + args + dsTestCallEnd
}

func dsSection(calls ...string) string {
	return dsTestCallsBegin + strings.Join(calls, "") + dsTestCallsEnd
}

func dsCalls(calls ...Call) []Call {
	for i := range calls {
		if calls[i].ID == "" {
			calls[i].ID = "call_" + string(rune('0'+i))
		}
	}
	return calls
}

var dsTools = tokenTestTools("get_weather", "search_hotels", "test_function",
	"get_current_time", "send_message", "write_file", "foo", "bar")

// deepseekV3Goldens are DeepSeek-V3 outputs: the template's format and vLLM's
// deepseek_v3 parser test cases.
var deepseekV3Goldens = []golden{
	{name: "plain text", output: "How can I help you today? I can check weather for you.",
		want: Result{Content: "How can I help you today? I can check weather for you."}},
	{name: "single call",
		output: dsSection(dsV3Call("get_weather", `{"city": "Tokyo", "unit": "celsius"}`)),
		want:   Result{Calls: dsCalls(Call{Name: "get_weather", Arguments: `{"city": "Tokyo", "unit": "celsius"}`})}},
	{name: "parallel calls",
		output: dsSection(dsV3Call("get_weather", `{"city": "Tokyo", "unit": "celsius"}`),
			dsV3Call("search_hotels", `{"location": "Tokyo", "check_in": "2025-01-15"}`)),
		want: Result{Calls: dsCalls(
			Call{Name: "get_weather", Arguments: `{"city": "Tokyo", "unit": "celsius"}`},
			Call{Name: "search_hotels", Arguments: `{"location": "Tokyo", "check_in": "2025-01-15"}`})}},
	{name: "template newline between calls",
		output: dsSection(dsV3Call("get_weather", `{"city": "Beijing"}`), "\n", dsV3Call("get_weather", `{"city": "Paris"}`)),
		want: Result{Calls: dsCalls(
			Call{Name: "get_weather", Arguments: `{"city": "Beijing"}`},
			Call{Name: "get_weather", Arguments: `{"city": "Paris"}`})}},
	{name: "data types",
		output: dsSection(dsV3Call("test_function", `{"string_field": "hello", "int_field": 42, "float_field": 3.14, "bool_field": true, "null_field": null, "array_field": ["a", "b", "c"], "object_field": {"nested": "value"}, "empty_array": [], "empty_object": {}}`)),
		want:   Result{Calls: dsCalls(Call{Name: "test_function", Arguments: `{"string_field": "hello", "int_field": 42, "float_field": 3.14, "bool_field": true, "null_field": null, "array_field": ["a", "b", "c"], "object_field": {"nested": "value"}, "empty_array": [], "empty_object": {}}`})}},
	{name: "empty arguments",
		output: dsSection(dsV3Call("get_current_time", `{}`)),
		want:   Result{Calls: dsCalls(Call{Name: "get_current_time", Arguments: `{}`})}},
	{name: "text before",
		output: "Let me check the weather for you." + dsSection(dsV3Call("get_weather", `{"city": "Paris"}`)),
		want:   Result{Content: "Let me check the weather for you.", Calls: dsCalls(Call{Name: "get_weather", Arguments: `{"city": "Paris"}`})}},
	{name: "text after the section",
		output: "Checking." + dsSection(dsV3Call("get_weather", `{"city": "Paris"}`)) + "\nDone.",
		want:   Result{Content: "Checking.Done.", Calls: dsCalls(Call{Name: "get_weather", Arguments: `{"city": "Paris"}`})}},
	{name: "escaped strings",
		output: dsSection(dsV3Call("send_message", `{"text": "He said \"hello\"", "path": "C:\\Users\\file", "newline": "line1\nline2"}`)),
		want:   Result{Calls: dsCalls(Call{Name: "send_message", Arguments: `{"text": "He said \"hello\"", "path": "C:\\Users\\file", "newline": "line1\nline2"}`})}},
	{name: "braces, fences and markup in strings, unicode",
		output: dsSection(dsV3Call("write_file", "{\"path\": \"a.go\", \"content\": \"func f() { return \\\"}\\\" }\\n```\\n<b>東京 ☀️</b>\", \"opts\": {\"deep\": [1, {\"x\": \"]\"}]}}")),
		want:   Result{Calls: dsCalls(Call{Name: "write_file", Arguments: "{\"path\": \"a.go\", \"content\": \"func f() { return \\\"}\\\" }\\n```\\n<b>東京 ☀️</b>\", \"opts\": {\"deep\": [1, {\"x\": \"]\"}]}}"})}},
	{name: "indented arguments",
		output: dsSection(dsV3Call("get_weather", "{\n  \"city\": \"Tokyo\"\n}")),
		want:   Result{Calls: dsCalls(Call{Name: "get_weather", Arguments: "{\n  \"city\": \"Tokyo\"\n}"})}},
	{name: "call without the section markers",
		output: "Sure. " + dsV3Call("get_weather", `{"city": "Oslo"}`),
		want:   Result{Content: "Sure.", Calls: dsCalls(Call{Name: "get_weather", Arguments: `{"city": "Oslo"}`})}},
	{name: "fence without a language",
		output: dsSection(dsTestCallBegin + "function" + dsTestSep + "get_weather\n```\n{\"city\": \"Rome\"}\n```" + dsTestCallEnd),
		want:   Result{Calls: dsCalls(Call{Name: "get_weather", Arguments: `{"city": "Rome"}`})}},

	// Malformed: the text comes back as content.
	{name: "unknown function",
		output:    "Hi" + dsSection(dsV3Call("delete_all", `{}`)),
		want:      Result{Content: "Hi" + dsV3Call("delete_all", `{}`)},
		malformed: 1},
	{name: "one known call, one unknown",
		output: dsSection(dsV3Call("get_weather", `{"city": "Tokyo"}`), dsV3Call("rm_rf", `{"path": "/"}`)),
		want: Result{Content: dsV3Call("rm_rf", `{"path": "/"}`),
			Calls: dsCalls(Call{Name: "get_weather", Arguments: `{"city": "Tokyo"}`})},
		malformed: 1},
	{name: "type other than function",
		output:    dsSection(dsTestCallBegin + "tool" + dsTestSep + "get_weather\n```json\n{}\n```" + dsTestCallEnd),
		want:      Result{Content: dsTestCallBegin + "tool" + dsTestSep + "get_weather\n```json\n{}\n```" + dsTestCallEnd},
		malformed: 1},
	{name: "section without call markers",
		output:    dsTestCallsBegin + "function" + dsTestSep + "get_weather\n```json\n{\"city\": \"Tokyo\"}\n```" + dsTestCallsEnd,
		want:      Result{Content: "function" + dsTestSep + "get_weather\n```json\n{\"city\": \"Tokyo\"}\n```"},
		malformed: 1},
	{name: "cut off in the name",
		output:    "Let me look." + dsTestCallsBegin + dsTestCallBegin + "function" + dsTestSep + "get_wea",
		want:      Result{Content: "Let me look." + dsTestCallBegin + "function" + dsTestSep + "get_wea"},
		malformed: 1},
	{name: "name too long to be one",
		output:    dsSection(dsV3Call(strings.Repeat("get_weather", 30), `{}`)),
		want:      Result{Content: dsV3Call(strings.Repeat("get_weather", 30), `{}`)},
		malformed: 1},
	{name: "a long text after the arguments",
		output: "Ok." + dsSection(dsV3Call("get_weather", `{"city": "Tokyo"}`+strings.Repeat(" and more", 40))) + "Done.",
		want: Result{Content: "Ok." + strings.Repeat(" and more", 40)[1:] + "\n```Done.",
			Calls: dsCalls(Call{Name: "get_weather", Arguments: `{"city": "Tokyo"}`})},
		malformed: 1},
	{name: "arguments that are not an object",
		output:    dsSection(dsTestCallBegin + "function" + dsTestSep + "get_weather\n```json\n[1, 2]\n```" + dsTestCallEnd),
		want:      Result{Content: dsTestCallBegin + "function" + dsTestSep + "get_weather\n```json\n[1, 2]\n```" + dsTestCallEnd},
		malformed: 1},
	{name: "text after the arguments",
		output: dsSection(dsTestCallBegin + "function" + dsTestSep + "get_weather\n```json\n{\"city\": \"Tokyo\"}\nand more\n```" + dsTestCallEnd),
		want: Result{Content: "and more\n```",
			Calls: dsCalls(Call{Name: "get_weather", Arguments: `{"city": "Tokyo"}`})},
		malformed: 1},
}

// deepseekV3Broken are outputs whose call was emitted before its arguments broke.
var deepseekV3Broken = []golden{
	{name: "unterminated object before the end marker (vLLM's malformed case)",
		output:    dsSection(dsV3Call("get_weather", `{"city": "Tokyo"`)),
		want:      Result{Calls: dsCalls(Call{Name: "get_weather", Arguments: "{\"city\": \"Tokyo\"\n```"})},
		malformed: 1},
	{name: "output ends inside the arguments",
		output:    "On it." + dsTestCallsBegin + dsTestCallBegin + "function" + dsTestSep + "get_weather\n```json\n{\"city\": \"Bei",
		want:      Result{Content: "On it.", Calls: dsCalls(Call{Name: "get_weather", Arguments: `{"city": "Bei`})},
		malformed: 1},
	{name: "invalid JSON inside the object",
		output:    dsSection(dsV3Call("get_weather", `{"city" "Tokyo"}`), dsV3Call("get_weather", `{"city": "Oslo"}`)),
		want:      Result{Calls: dsCalls(Call{Name: "get_weather", Arguments: `{"city" "Tokyo"}`}, Call{Name: "get_weather", Arguments: `{"city": "Oslo"}`})},
		malformed: 1},
}

func newDeepSeekV3() Parser {
	p, err := NewToolParser("deepseek_v3", Options{Tools: dsTools})
	if err != nil {
		panic(err)
	}
	return p
}

func newDeepSeekV31() Parser {
	p, err := NewToolParser("deepseek_v31", Options{Tools: dsTools})
	if err != nil {
		panic(err)
	}
	return p
}

func TestToolDeepSeekV3(t *testing.T) {
	for _, g := range deepseekV3Goldens {
		t.Run(g.name, func(t *testing.T) { checkGolden(t, newDeepSeekV3, g) })
	}
	for _, g := range deepseekV3Broken {
		t.Run(g.name, func(t *testing.T) { checkStreamedBroken(t, newDeepSeekV3, g) })
	}
}

// deepseekV31Goldens are DeepSeek-V3.1 outputs: the template's format and vLLM's
// deepseek_v31 parser test cases.
var deepseekV31Goldens = []golden{
	{name: "plain text", output: "No tools needed.", want: Result{Content: "No tools needed."}},
	{name: "one call after text",
		output: "normal text" + dsSection(dsV31Call("foo", `{"x":1}`)),
		want:   Result{Content: "normal text", Calls: dsCalls(Call{Name: "foo", Arguments: `{"x":1}`})}},
	{name: "two calls, text before and after",
		output: "some prefix text" + dsSection(dsV31Call("foo", `{"x":1}`), dsV31Call("bar", `{"y":2}`)) + " some suffix text",
		want: Result{Content: "some prefix textsome suffix text",
			Calls: dsCalls(Call{Name: "foo", Arguments: `{"x":1}`}, Call{Name: "bar", Arguments: `{"y":2}`})}},
	{name: "empty arguments",
		output: dsSection(dsV31Call("get_current_time", `{}`)),
		want:   Result{Calls: dsCalls(Call{Name: "get_current_time", Arguments: `{}`})}},
	{name: "nested, quoted and unicode arguments",
		output: dsSection(dsV31Call("send_message", `{"to": "李雷", "body": "say \"}{\" ok", "meta": {"tags": ["a", {"b": null}]}}`)),
		want:   Result{Calls: dsCalls(Call{Name: "send_message", Arguments: `{"to": "李雷", "body": "say \"}{\" ok", "meta": {"tags": ["a", {"b": null}]}}`})}},
	{name: "whitespace around the arguments",
		output: dsSection(dsV31Call("foo", " \n{\"x\": 1}\n ")),
		want:   Result{Calls: dsCalls(Call{Name: "foo", Arguments: `{"x": 1}`})}},
	{name: "unknown function",
		output:    "Hm." + dsSection(dsV31Call("nope", `{"x":1}`)),
		want:      Result{Content: "Hm." + dsV31Call("nope", `{"x":1}`)},
		malformed: 1},
	{name: "cut off after the section marker",
		output:    "Let me look that up." + dsTestCallsBegin + "get_weather",
		want:      Result{Content: "Let me look that up.get_weather"},
		malformed: 1},
	{name: "section without call markers",
		output:    dsTestCallsBegin + "foo" + dsTestSep + `{"x":1}` + dsTestCallsEnd,
		want:      Result{Content: "foo" + dsTestSep + `{"x":1}`},
		malformed: 1},
	{name: "V3-style type and fence",
		output:    dsSection(dsV3Call("foo", `{"x":1}`)),
		want:      Result{Content: dsV3Call("foo", `{"x":1}`)},
		malformed: 1},
}

func TestToolDeepSeekV31(t *testing.T) {
	for _, g := range deepseekV31Goldens {
		t.Run(g.name, func(t *testing.T) { checkGolden(t, newDeepSeekV31, g) })
	}
	checkStreamedBroken(t, newDeepSeekV31, golden{
		name:      "output ends inside the arguments",
		output:    dsTestCallsBegin + dsTestCallBegin + "foo" + dsTestSep + `{"x": [1,`,
		want:      Result{Calls: dsCalls(Call{Name: "foo", Arguments: `{"x": [1,`})},
		malformed: 1,
	})
}

// TestToolDeepSeekStreamsArguments checks that a call's name comes out once its
// arguments begin, and its arguments as they arrive, before the call ends.
func TestToolDeepSeekStreamsArguments(t *testing.T) {
	p := newDeepSeekV31()
	evs := p.Push("Sure."+dsTestCallsBegin+dsTestCallBegin+"get_weather"+dsTestSep+`{"city": "Pa`, nil)
	want := []Event{
		{Kind: KindContent, Text: "Sure."},
		{Kind: KindToolCall, Index: 0, ID: "call_0", Name: "get_weather"},
		{Kind: KindToolArgs, Index: 0, Text: `{"city": "Pa`},
	}
	if len(evs) != len(want) {
		t.Fatalf("events %+v, want %+v", evs, want)
	}
	for i := range want {
		if evs[i] != want[i] {
			t.Fatalf("event %d = %+v, want %+v", i, evs[i], want[i])
		}
	}
	// A partial end marker is held; the arguments' closing brace is not.
	evs = p.Push(`ris"}<｜tool▁`, nil)
	if len(evs) != 1 || evs[0].Text != `ris"}` {
		t.Fatalf("events %+v, want the rest of the arguments", evs)
	}
}
