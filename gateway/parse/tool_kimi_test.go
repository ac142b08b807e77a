package parse

import (
	"strings"
	"testing"
)

const (
	kimiTestSectionBegin = "<|tool_calls_section_begin|>"
	kimiTestSectionEnd   = "<|tool_calls_section_end|>"
	kimiTestCallBegin    = "<|tool_call_begin|>"
	kimiTestArgsBegin    = "<|tool_call_argument_begin|>"
	kimiTestCallEnd      = "<|tool_call_end|>"
)

// kimiCall is one call as vLLM's Kimi K2 tests write it (a space before the argument
// marker).
func kimiCall(id, args string) string {
	return kimiTestCallBegin + id + " " + kimiTestArgsBegin + args + kimiTestCallEnd
}

func kimiSection(calls ...string) string {
	return kimiTestSectionBegin + strings.Join(calls, "") + kimiTestSectionEnd
}

var kimiTools = tokenTestTools("get_weather", "get_news", "send_email", "process_html",
	"process_data", "test", "search", "valid")

// kimiGoldens are Kimi K2 outputs: Moonshot's tool-call guide's format and vLLM's
// kimi_k2 parser test cases.
var kimiGoldens = []golden{
	{name: "plain text", output: "This is a test", want: Result{Content: "This is a test"}},
	{name: "single call",
		output: "I'll check. " + kimiSection(kimiCall("functions.get_weather:0", `{"city": "Beijing"}`)),
		want: Result{Content: "I'll check.",
			Calls: []Call{{ID: "functions.get_weather:0", Name: "get_weather", Arguments: `{"city": "Beijing"}`}}}},
	{name: "parallel calls",
		output: "Compare weather. " + kimiSection(
			kimiCall("functions.get_weather:0", `{"city": "Beijing"}`),
			kimiCall("functions.get_weather:1", `{"city": "Shanghai"}`)),
		want: Result{Content: "Compare weather.", Calls: []Call{
			{ID: "functions.get_weather:0", Name: "get_weather", Arguments: `{"city": "Beijing"}`},
			{ID: "functions.get_weather:1", Name: "get_weather", Arguments: `{"city": "Shanghai"}`}}}},
	{name: "three calls",
		output: "Multiple tasks. " + kimiSection(
			kimiCall("functions.get_weather:0", `{"city": "New York"}`),
			kimiCall("functions.get_news:1", `{"topic": "technology"}`),
			kimiCall("functions.send_email:2", `{"to": "user@example.com", "subject": "Daily Update"}`)),
		want: Result{Content: "Multiple tasks.", Calls: []Call{
			{ID: "functions.get_weather:0", Name: "get_weather", Arguments: `{"city": "New York"}`},
			{ID: "functions.get_news:1", Name: "get_news", Arguments: `{"topic": "technology"}`},
			{ID: "functions.send_email:2", Name: "send_email", Arguments: `{"to": "user@example.com", "subject": "Daily Update"}`}}}},
	{name: "angle brackets in the arguments",
		output: "Process HTML. " + kimiSection(kimiCall("functions.process_html:0", `{"html": "<div>content</div><|x"}`)),
		want: Result{Content: "Process HTML.",
			Calls: []Call{{ID: "functions.process_html:0", Name: "process_html", Arguments: `{"html": "<div>content</div><|x"}`}}}},
	{name: "multi-line arguments",
		output: "Formatted. " + kimiSection(kimiCall("functions.process_data:0", "{\n  \"name\": \"test\",\n  \"value\": 123\n}")),
		want: Result{Content: "Formatted.",
			Calls: []Call{{ID: "functions.process_data:0", Name: "process_data", Arguments: "{\n  \"name\": \"test\",\n  \"value\": 123\n}"}}}},
	{name: "id without the functions prefix",
		output: "No prefix. " + kimiSection(kimiCall("get_weather:0", `{"city": "Tokyo"}`)),
		want: Result{Content: "No prefix.",
			Calls: []Call{{ID: "get_weather:0", Name: "get_weather", Arguments: `{"city": "Tokyo"}`}}}},
	{name: "empty arguments",
		output: "Empty args. " + kimiSection(kimiCall("functions.test:0", "{}")),
		want:   Result{Content: "Empty args.", Calls: []Call{{ID: "functions.test:0", Name: "test", Arguments: "{}"}}}},
	{name: "guide's layout: newlines around everything, unicode",
		output: kimiTestSectionBegin + "\n" + kimiTestCallBegin + "\nfunctions.search:0" + kimiTestArgsBegin +
			"\n{\"q\": \"天气 \\\"北京\\\"\", \"n\": {\"k\": [1, 2]}}\n" + kimiTestCallEnd + "\n" + kimiTestSectionEnd,
		want: Result{Calls: []Call{{ID: "functions.search:0", Name: "search", Arguments: `{"q": "天气 \"北京\"", "n": {"k": [1, 2]}}`}}}},
	{name: "singular section markers",
		output: "Hi. <|tool_call_section_begin|>" + kimiCall("functions.search:0", `{"q": "cats"}`) + "<|tool_call_section_end|>",
		want:   Result{Content: "Hi.", Calls: []Call{{ID: "functions.search:0", Name: "search", Arguments: `{"q": "cats"}`}}}},
	{name: "empty section",
		output: "Reasoning. " + kimiTestSectionBegin + kimiTestSectionEnd,
		want:   Result{Content: "Reasoning. "}},
	{name: "text after the section",
		output: "Before. " + kimiSection(kimiCall("functions.get_weather:0", `{"city": "Tokyo"} `)) + " After tools.",
		want: Result{Content: "Before.After tools.",
			Calls: []Call{{ID: "functions.get_weather:0", Name: "get_weather", Arguments: `{"city": "Tokyo"}`}}}},

	// Malformed: the text comes back as content.
	{name: "id without an index",
		output: "Help. " + kimiSection(kimiCall("functions.invalid.0", `{"city": "Beijing"}`), kimiCall("functions.valid:1", `{"city": "Shanghai"}`)),
		want: Result{Content: "Help. " + kimiCall("functions.invalid.0", `{"city": "Beijing"}`),
			Calls: []Call{{ID: "functions.valid:1", Name: "valid", Arguments: `{"city": "Shanghai"}`}}},
		malformed: 1},
	{name: "unknown function",
		output:    kimiSection(kimiCall("functions.launch:0", `{}`)),
		want:      Result{Content: kimiCall("functions.launch:0", `{}`)},
		malformed: 1},
	{name: "noise inside the section",
		output: "Reasoning. " + kimiTestSectionBegin + " spurious noise " + kimiCall("functions.test:0", `{"k": "v"} `) + kimiTestSectionEnd,
		want: Result{Content: "Reasoning. spurious noise",
			Calls: []Call{{ID: "functions.test:0", Name: "test", Arguments: `{"k": "v"}`}}},
		malformed: 1},
	{name: "bare counter id",
		output:    kimiSection(kimiCall("0", `{"city": "Tokyo"}`)),
		want:      Result{Content: kimiCall("0", `{"city": "Tokyo"}`)},
		malformed: 1},
	{name: "id too long to be one",
		output:    "Hm. " + kimiSection(kimiCall("functions."+strings.Repeat("x", 300)+":0", `{}`)),
		want:      Result{Content: "Hm. " + kimiCall("functions."+strings.Repeat("x", 300)+":0", `{}`)},
		malformed: 1},
	{name: "cut off in the id",
		output:    "Let me see. " + kimiTestSectionBegin + kimiTestCallBegin + "functions.get_wea",
		want:      Result{Content: "Let me see. " + kimiTestCallBegin + "functions.get_wea"},
		malformed: 1},
}

func newKimi() Parser {
	p, err := NewToolParser("kimi_k2", Options{Tools: kimiTools})
	if err != nil {
		panic(err)
	}
	return p
}

func TestToolKimiK2(t *testing.T) {
	for _, g := range kimiGoldens {
		t.Run(g.name, func(t *testing.T) { checkGolden(t, newKimi, g) })
	}
	for _, g := range []golden{
		{name: "output ends inside the arguments (vLLM keeps the partial arguments too)",
			output:    "I'll check. " + kimiTestSectionBegin + kimiTestCallBegin + "functions.get_weather:0 " + kimiTestArgsBegin + `{"city": "Bei`,
			want:      Result{Content: "I'll check.", Calls: []Call{{ID: "functions.get_weather:0", Name: "get_weather", Arguments: `{"city": "Bei`}}},
			malformed: 1},
		{name: "end marker inside the arguments",
			output: kimiSection(kimiCall("functions.get_weather:0", `{"city": `), kimiCall("functions.get_weather:1", `{"city": "Oslo"}`)),
			want: Result{Calls: []Call{
				{ID: "functions.get_weather:0", Name: "get_weather", Arguments: `{"city": `},
				{ID: "functions.get_weather:1", Name: "get_weather", Arguments: `{"city": "Oslo"}`}}},
			malformed: 1},
	} {
		t.Run(g.name, func(t *testing.T) { checkStreamedBroken(t, newKimi, g) })
	}
}

// TestToolKimiK2Markers checks that the tokenizer keeps Kimi's call markers (they are
// special tokens) for the parser.
func TestToolKimiK2Markers(t *testing.T) {
	got := strings.Join(Markers("kimi_k2", ""), " ")
	for _, m := range []string{kimiTestSectionBegin, kimiTestSectionEnd, kimiTestCallBegin, kimiTestArgsBegin, kimiTestCallEnd} {
		if !strings.Contains(got, m) {
			t.Errorf("Markers(kimi_k2) = %s, lacks %s", got, m)
		}
	}
}

// TestToolKimiK2GivesUpOnLongHeaders checks that text after a call marker that cannot
// be a call's id comes out before the output ends, not held.
func TestToolKimiK2GivesUpOnLongHeaders(t *testing.T) {
	p := newKimi()
	evs := p.Push(kimiTestCallBegin+strings.Repeat("word ", 100), nil)
	if got := Collect(evs).Content; !strings.Contains(got, "word word") {
		t.Fatalf("content %q, want the text after the marker", got)
	}
}
