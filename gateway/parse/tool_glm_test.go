package parse

import (
	"encoding/json"
	"strings"
	"testing"
)

// glmTools are the functions the GLM goldens offer, with the parameter types that decide
// how values convert.
var glmTools = []Tool{
	{Name: "get_current_weather", Parameters: glmSchema(`{"type": "object", "properties": {"city": {"type": "string"}, "state": {"type": "string"}, "unit": {"type": "string"}}}`)},
	{Name: "get_weather", Parameters: glmSchema(`{"type": "object", "properties": {"city": {"type": "string"}, "date": {"type": "string"}}}`)},
	{Name: "send_message", Parameters: glmSchema(`{"type": "object", "properties": {"recipient": {"type": "string"}, "message": {"type": "string"}, "priority": {"type": "string"}}}`)},
	{Name: "set_alarm", Parameters: glmSchema(`{"type": "object", "properties": {"hour": {"type": "integer"}, "repeat": {"type": "boolean"}, "days": {"type": "array"}, "label": {"type": "string"}, "extra": {"type": "object"}}}`)},
	{Name: "get_current_time"},
	{Name: "ls"},
}

func glmSchema(s string) map[string]any {
	var m map[string]any
	if err := json.Unmarshal([]byte(s), &m); err != nil {
		panic(err)
	}
	return m
}

// glmGoldens are GLM-4.5/4.6 outputs: the chat template's format (and GLM-4.7's, with no
// newline after the name) and vLLM's glm45 parser test cases.
var glmGoldens = []golden{
	{name: "plain text", output: "This is a test", want: Result{Content: "This is a test"}},
	{name: "single call, indented",
		output: "<tool_call>get_current_weather\n    <arg_key>city</arg_key>\n    <arg_value>Dallas</arg_value>\n    <arg_key>state</arg_key>\n    <arg_value>TX</arg_value>\n    <arg_key>unit</arg_key>\n    <arg_value>fahrenheit</arg_value>\n    </tool_call>",
		want: Result{Calls: []Call{{ID: "call_0", Name: "get_current_weather",
			Arguments: `{"city": "Dallas", "state": "TX", "unit": "fahrenheit"}`}}}},
	{name: "two calls",
		output: "<tool_call>get_current_weather\n<arg_key>city</arg_key>\n<arg_value>Dallas</arg_value>\n</tool_call>\n<tool_call>get_current_weather\n<arg_key>city</arg_key>\n<arg_value>Orlando</arg_value>\n</tool_call>",
		want: Result{Calls: []Call{
			{ID: "call_0", Name: "get_current_weather", Arguments: `{"city": "Dallas"}`},
			{ID: "call_1", Name: "get_current_weather", Arguments: `{"city": "Orlando"}`}}}},
	{name: "text before and between calls",
		output: "I will help you get the weather info.\n\n<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Beijing</arg_value>\n<arg_key>date</arg_key>\n<arg_value>2025-08-01</arg_value>\n</tool_call>\n\nmeaningwhile, I will also check the weather in Shanghai.\n\n<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Shanghai</arg_value>\n<arg_key>date</arg_key>\n<arg_value>2025-08-01</arg_value>\n</tool_call>",
		want: Result{Content: "I will help you get the weather info.meaningwhile, I will also check the weather in Shanghai.", Calls: []Call{
			{ID: "call_0", Name: "get_weather", Arguments: `{"city": "Beijing", "date": "2025-08-01"}`},
			{ID: "call_1", Name: "get_weather", Arguments: `{"city": "Shanghai", "date": "2025-08-01"}`}}}},
	{name: "empty arguments",
		output: "<tool_call>get_current_time\n</tool_call>",
		want:   Result{Calls: []Call{{ID: "call_0", Name: "get_current_time", Arguments: "{}"}}}},
	{name: "GLM-4.7 layout, no newlines",
		output: "Sure.<tool_call>get_weather<arg_key>city</arg_key><arg_value>Beijing</arg_value></tool_call>",
		want:   Result{Content: "Sure.", Calls: []Call{{ID: "call_0", Name: "get_weather", Arguments: `{"city": "Beijing"}`}}}},
	{name: "one line, spaces between tags (GLM-4.5-Air seen in the wild)",
		output: "Let me search the backend directory: <tool_call>ls <arg_key>dirPath</arg_key> <arg_value>backend</arg_value> </tool_call>",
		want: Result{Content: "Let me search the backend directory:",
			Calls: []Call{{ID: "call_0", Name: "ls", Arguments: `{"dirPath": "backend"}`}}}},
	{name: "typed values follow the schema",
		output: "<tool_call>set_alarm\n<arg_key>hour</arg_key>\n<arg_value> 7 </arg_value>\n<arg_key>repeat</arg_key>\n<arg_value>true</arg_value>\n<arg_key>days</arg_key>\n<arg_value>[\"mon\", \"tue\"]</arg_value>\n<arg_key>label</arg_key>\n<arg_value>123</arg_value>\n<arg_key>extra</arg_key>\n<arg_value>{\"snooze\": 5}</arg_value>\n</tool_call>",
		want: Result{Calls: []Call{{ID: "call_0", Name: "set_alarm",
			Arguments: `{"hour": 7, "repeat": true, "days": ["mon", "tue"], "label": "123", "extra": {"snooze": 5}}`}}}},
	{name: "a non-string value that is not JSON stays a string",
		output: "<tool_call>set_alarm\n<arg_key>hour</arg_key>\n<arg_value>seven o'clock</arg_value>\n<arg_key>undeclared</arg_key>\n<arg_value>42</arg_value>\n</tool_call>",
		want: Result{Calls: []Call{{ID: "call_0", Name: "set_alarm",
			Arguments: `{"hour": "seven o'clock", "undeclared": 42}`}}}},
	{name: "string values keep quotes, backslashes, newlines, unicode and markup",
		output: "<tool_call>send_message\n<arg_key>recipient</arg_key>\n<arg_value>李雷</arg_value>\n<arg_key>message</arg_key>\n<arg_value>He said \"hi\"\n\tC:\\path <b>☀️</b> {\"not\": json}</arg_value>\n</tool_call>",
		want: Result{Calls: []Call{{ID: "call_0", Name: "send_message",
			Arguments: `{"recipient": "李雷", "message": "He said \"hi\"\n\tC:\\path <b>☀️</b> {\"not\": json}"}`}}}},
	{name: "thinking text before the call stays content",
		output: "<think>I want to get the weather.</think>\n\nI will help you get the weather.\n<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Beijing</arg_value>\n</tool_call>",
		want: Result{Content: "<think>I want to get the weather.</think>\n\nI will help you get the weather.",
			Calls: []Call{{ID: "call_0", Name: "get_weather", Arguments: `{"city": "Beijing"}`}}}},
	{name: "missing </arg_key> is forgiven",
		output: "<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Seattle</arg_value>\n<arg_key>incomplete_arg\n<arg_value>value</arg_value>\n</tool_call>",
		want: Result{Calls: []Call{{ID: "call_0", Name: "get_weather",
			Arguments: `{"city": "Seattle", "incomplete_arg": "value"}`}}}},
	{name: "missing </arg_value> before </tool_call> is forgiven",
		output: "<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Oslo</tool_call>",
		want:   Result{Calls: []Call{{ID: "call_0", Name: "get_weather", Arguments: `{"city": "Oslo"}`}}}},
	{name: "tags outside a call are text",
		output: "Use </tool_call> and <arg_key>x</arg_key> like this.",
		want:   Result{Content: "Use </tool_call> and <arg_key>x</arg_key> like this."}},

	// Malformed.
	{name: "unknown function",
		output:    "Ok. <tool_call>format_disk\n<arg_key>drive</arg_key>\n<arg_value>C</arg_value>\n</tool_call> Done.",
		want:      Result{Content: "Ok. <tool_call>format_disk\n<arg_key>drive</arg_key>\n<arg_value>C</arg_value>\n</tool_call> Done."},
		malformed: 1},
	{name: "no name",
		output:    "<tool_call><arg_key>a</arg_key><arg_value>b</arg_value></tool_call>",
		want:      Result{Content: "<tool_call><arg_key>a</arg_key><arg_value>b</arg_value></tool_call>"},
		malformed: 1},
	{name: "name too long to be one",
		output:    "<tool_call>" + strings.Repeat("get_weather", 30) + "\n<arg_key>city</arg_key>\n<arg_value>Oslo</arg_value>\n</tool_call>",
		want:      Result{Content: "<tool_call>" + strings.Repeat("get_weather", 30) + "\n<arg_key>city</arg_key>\n<arg_value>Oslo</arg_value>\n</tool_call>"},
		malformed: 1},
	{name: "leading spaces count toward the name's bound",
		output:    "<tool_call>" + strings.Repeat(" ", 300) + "get_weather</tool_call>",
		want:      Result{Content: "<tool_call>" + strings.Repeat(" ", 300) + "get_weather</tool_call>"},
		malformed: 1},
	{name: "cut off in the name",
		output:    "Checking <tool_call>get_wea",
		want:      Result{Content: "Checking <tool_call>get_wea"},
		malformed: 1},
	{name: "a key without a value",
		output: "<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_key>date</arg_key>\n<arg_value>today</arg_value>\n</tool_call>",
		want: Result{Content: "<arg_key>city</arg_key>\n",
			Calls: []Call{{ID: "call_0", Name: "get_weather", Arguments: `{"date": "today"}`}}},
		malformed: 1},
	{name: "words between a key and its value run to the next tag",
		output: "<tool_call>get_weather\n<arg_key>city</arg_key> stray  words  <arg_key>city</arg_key><arg_value>Rome</arg_value></tool_call>",
		want: Result{Content: "<arg_key>city</arg_key> stray  words  ",
			Calls: []Call{{ID: "call_0", Name: "get_weather", Arguments: `{"city": "Rome"}`}}},
		malformed: 1},
	{name: "words between arguments",
		output: "<tool_call>get_weather\nplease <arg_key>city</arg_key><arg_value>Rome</arg_value></tool_call>",
		want: Result{Content: "please ",
			Calls: []Call{{ID: "call_0", Name: "get_weather", Arguments: `{"city": "Rome"}`}}},
		malformed: 1},
}

func newGLM() Parser {
	p, err := NewToolParser("glm45", Options{Tools: glmTools})
	if err != nil {
		panic(err)
	}
	return p
}

func TestToolGLM45(t *testing.T) {
	for _, g := range glmGoldens {
		t.Run(g.name, func(t *testing.T) { checkGolden(t, newGLM, g) })
	}
	for _, g := range []golden{
		{name: "output ends inside a call (vLLM returns it as content)",
			output: "<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Beijing</arg_value>\n<arg_key>date</arg_key>\n<arg_value>2025-08-01</arg_value>",
			want: Result{Calls: []Call{{ID: "call_0", Name: "get_weather",
				Arguments: `{"city": "Beijing", "date": "2025-08-01"`}}},
			malformed: 1},
		{name: "output ends inside a string value",
			output:    "<tool_call>send_message\n<arg_key>message</arg_key>\n<arg_value>line one\nline tw",
			want:      Result{Calls: []Call{{ID: "call_0", Name: "send_message", Arguments: `{"message": "line one\nline tw`}}},
			malformed: 1},
		{name: "output ends inside a typed value",
			output:    "<tool_call>set_alarm\n<arg_key>days</arg_key>\n<arg_value>[\"mon\",",
			want:      Result{Calls: []Call{{ID: "call_0", Name: "set_alarm", Arguments: `{"days": ["mon",`}}},
			malformed: 1},
		{name: "a call opens inside another",
			output: "<tool_call>get_weather\n<arg_key>city</arg_key><arg_value>A</arg_value>\n<tool_call>get_weather\n<arg_key>city</arg_key><arg_value>B</arg_value></tool_call>",
			want: Result{Calls: []Call{
				{ID: "call_0", Name: "get_weather", Arguments: `{"city": "A"`},
				{ID: "call_1", Name: "get_weather", Arguments: `{"city": "B"}`}}},
			malformed: 1},
	} {
		t.Run(g.name, func(t *testing.T) { checkStreamedBroken(t, newGLM, g) })
	}
}

// TestToolGLM45StreamsStrings checks that a string value streams as it arrives, before
// its closing tag.
func TestToolGLM45StreamsStrings(t *testing.T) {
	p := newGLM()
	var evs []Event
	for _, c := range []string{"<tool_call>", "send_message\n", "<arg_key>message</arg_key>", "<arg_value>", "Hello \"w", "orld</arg"} {
		evs = p.Push(c, evs)
	}
	got := Collect(evs)
	if len(got.Calls) != 1 || got.Calls[0].Name != "send_message" || got.Calls[0].Arguments != `{"message": "Hello \"w`+"orld" {
		t.Fatalf("streamed %+v, want the call with its value so far", got)
	}
}

func TestJSONStringEscape(t *testing.T) {
	for _, s := range []string{"", "plain", `He said "hi"`, `C:\Users`, "a\nb\tc\rd", "\x00\x1f\b\f", "東京 ☀️", "<div>&</div>"} {
		got := string(appendJSONString(nil, s))
		var back string
		if err := json.Unmarshal([]byte(got), &back); err != nil || back != s {
			t.Errorf("appendJSONString(%q) = %s, decodes to %q (%v)", s, got, back, err)
		}
		// Escaping in pieces gives the same bytes.
		var pieces []byte
		for i := range len(s) {
			pieces = appendJSONStringBody(pieces, s[i:i+1])
		}
		if string(pieces) != got[1:len(got)-1] {
			t.Errorf("glmEscape byte by byte of %q = %s, want %s", s, pieces, got[1:len(got)-1])
		}
	}
}
