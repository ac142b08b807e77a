package parse

import (
	"reflect"
	"strings"
	"testing"
)

// Harmony outputs from openai-harmony's format guide (docs/format.md) and the shapes
// vLLM's gpt-oss tests use (docs/reference.md §15).
const harmonyPrompt = "<|start|>system<|message|>You are ChatGPT, a large language model trained by OpenAI.\n" +
	"Knowledge cutoff: 2024-06\nCurrent date: 2025-06-28\n\nReasoning: high\n\n" +
	"# Valid channels: analysis, commentary, final. Channel must be included for every message.\n" +
	"Calls to these tools must go to the commentary channel: 'functions'.<|end|>" +
	"<|start|>user<|message|>What is the weather like in SF?<|end|><|start|>assistant"

var harmonyTools = []Tool{{Name: "get_weather"}, {Name: "get_location"}, {Name: "generate_file"}}

// harmonyCase is a golden case of the harmony parsers.
type harmonyCase struct {
	prompt string
	tools  []Tool
	golden
}

func checkHarmony(t *testing.T, toolParser bool, cases []harmonyCase) {
	t.Helper()
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			checkGolden(t, harmonyMaker(t, toolParser, c.prompt, c.tools), c.golden)
		})
	}
}

func harmonyMaker(t *testing.T, toolParser bool, prompt string, tools []Tool) func() Parser {
	return func() Parser {
		o := Options{Prompt: prompt, Tools: tools}
		var p Parser
		var err error
		if toolParser {
			p, err = NewToolParser("openai", o)
		} else {
			p, err = NewReasoningParser("openai_gptoss", o)
		}
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
}

func TestHarmonyTools(t *testing.T) {
	const (
		analysis = `<|channel|>analysis<|message|>Need to use function get_weather.<|end|>`
		call     = `<|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{"location":"San Francisco"}`
	)
	p := harmonyPrompt
	weather := Call{ID: "call_0", Name: "get_weather", Arguments: `{"location":"San Francisco"}`}
	checkHarmony(t, true, []harmonyCase{
		{p, harmonyTools, golden{name: "reasoning then answer",
			output: `<|channel|>analysis<|message|>User asks: "What is 2 + 2?" Simple arithmetic. Provide answer.<|end|>` +
				`<|start|>assistant<|channel|>final<|message|>2 + 2 = 4.<|return|>`,
			want: Result{Reasoning: `User asks: "What is 2 + 2?" Simple arithmetic. Provide answer.`, Content: "2 + 2 = 4."}}},
		{p, harmonyTools, golden{name: "answer without the stop token",
			output: `<|channel|>analysis<|message|>Simple.<|end|><|start|>assistant<|channel|>final<|message|>4.`,
			want:   Result{Reasoning: "Simple.", Content: "4."}}},
		{p, harmonyTools, golden{name: "tool call",
			output: analysis + call + `<|call|>`,
			want:   Result{Reasoning: "Need to use function get_weather.", Calls: []Call{weather}}}},
		{p, harmonyTools, golden{name: "tool call without the stop token",
			output: analysis + call,
			want:   Result{Reasoning: "Need to use function get_weather.", Calls: []Call{weather}}}},
		{p, harmonyTools, golden{name: "recipient before the channel",
			output: analysis + `<|start|>assistant to=functions.get_weather<|channel|>commentary json<|message|>{"location":"San Francisco"}<|call|>`,
			want:   Result{Reasoning: "Need to use function get_weather.", Calls: []Call{weather}}}},
		{p, harmonyTools, golden{name: "first message is the call, recipient in the role section",
			output: ` to=functions.get_weather<|channel|>commentary <|constrain|>json<|message|>{"location":"San Francisco"}`,
			want:   Result{Calls: []Call{weather}}}},
		{p, harmonyTools, golden{name: "constrain without a space",
			output: `<|channel|>commentary to=functions.get_weather<|constrain|>json<|message|>{"location":"San Francisco"}`,
			want:   Result{Calls: []Call{weather}}}},
		{p, harmonyTools, golden{name: "preamble then call",
			output: `<|channel|>analysis<|message|>{long chain of thought}<|end|>` +
				`<|start|>assistant<|channel|>commentary<|message|>**Action plan**:` + "\n1. Generate an HTML file\n---\nWill start executing the plan step by step<|end|>" +
				`<|start|>assistant<|channel|>commentary to=functions.generate_file<|constrain|>json<|message|>{"template": "basic_html", "path": "index.html"}<|call|>`,
			want: Result{Reasoning: "{long chain of thought}",
				Content: "**Action plan**:\n1. Generate an HTML file\n---\nWill start executing the plan step by step",
				Calls:   []Call{{ID: "call_0", Name: "generate_file", Arguments: `{"template": "basic_html", "path": "index.html"}`}}}}},
		{p, harmonyTools, golden{name: "two calls",
			output: call + `<|call|><|start|>assistant<|channel|>commentary to=functions.get_location <|constrain|>json<|message|>{}<|call|>`,
			want:   Result{Calls: []Call{weather, {ID: "call_1", Name: "get_location", Arguments: "{}"}}}}},
		{p, harmonyTools, golden{name: "empty arguments",
			output: `<|channel|>commentary to=functions.get_location <|constrain|>json<|message|><|call|>`,
			want:   Result{Calls: []Call{{ID: "call_0", Name: "get_location", Arguments: "{}"}}}}},
		{p, harmonyTools, golden{name: "arguments with braces, quotes, unicode and spaces around",
			output: `<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>` + " \n" +
				`{"q": "a}b{\"c", "n": {"x": [1, {"y": "東京 😀"}]}}` + "\n ",
			want: Result{Calls: []Call{{ID: "call_0", Name: "get_weather", Arguments: `{"q": "a}b{\"c", "n": {"x": [1, {"y": "東京 😀"}]}}`}}}}},
		{p, harmonyTools, golden{name: "call on the analysis channel",
			output: `<|channel|>analysis to=functions.get_weather <|constrain|>json<|message|>{"location":"SF"}`,
			want:   Result{Calls: []Call{{ID: "call_0", Name: "get_weather", Arguments: `{"location":"SF"}`}}}}},
		{p, harmonyTools, golden{name: "built-in tool call on the analysis channel is reasoning",
			output: `<|channel|>analysis to=browser.search <|constrain|>json<|message|>{"query":"weather SF"}<|call|>`,
			want:   Result{Reasoning: `<|channel|>analysis to=browser.search <|constrain|>json<|message|>{"query":"weather SF"}`}}},
		{p, harmonyTools, golden{name: "unknown channel is content",
			output: `<|channel|>notes<|message|>a<|end|><|start|>assistant<|channel|>final<|message|>b`,
			want:   Result{Content: `<|channel|>notes<|message|>ab`}}},
		{p, harmonyTools, golden{name: "header with stray words",
			output: `<|channel|>analysis more words here<|message|>a`,
			want:   Result{Reasoning: `<|channel|>analysis more words here<|message|>a`}}},
		{p, harmonyTools, golden{name: "unknown channel cut short",
			output: `<|channel|>fin`,
			want:   Result{Content: `<|channel|>fin`}}},
		{p, harmonyTools, golden{name: "reasoning cut short",
			output: `<|channel|>analysis<|message|>Still thinking`,
			want:   Result{Reasoning: "Still thinking"}}},
		{p, harmonyTools, golden{name: "empty analysis",
			output: `<|channel|>analysis<|message|><|end|><|start|>assistant<|channel|>final<|message|>Hi`,
			want:   Result{Content: "Hi"}}},
		{p, harmonyTools, golden{name: "unknown function is content",
			output:    `<|channel|>commentary to=functions.launch <|constrain|>json<|message|>{"x":1}<|call|>`,
			want:      Result{Content: `<|channel|>commentary to=functions.launch <|constrain|>json<|message|>{"x":1}`},
			malformed: 1}},
		{p, nil, golden{name: "no tools: every call is content",
			output:    call,
			want:      Result{Content: call},
			malformed: 1}},
		{p, harmonyTools, golden{name: "arguments that are not an object are content",
			output:    `<|channel|>commentary to=functions.get_weather json<|message|> San Francisco<|call|>`,
			want:      Result{Content: `<|channel|>commentary to=functions.get_weather json<|message|> San Francisco`},
			malformed: 1}},
		{p, harmonyTools, golden{name: "text after the arguments is content",
			output: call + ` thanks<|call|>`,
			want:   Result{Content: "thanks", Calls: []Call{weather}}}},
		{p, harmonyTools, golden{name: "whitespace between messages is dropped",
			output: `<|channel|>analysis<|message|>a<|end|>` + "\n" + `<|start|>assistant<|channel|>final<|message|>b<|return|>` + "\n",
			want:   Result{Reasoning: "a", Content: "b"}}},
		{p, harmonyTools, golden{name: "start and role skipped",
			output: `<|channel|>analysis<|message|>a<|end|><|channel|>final<|message|>b`,
			want:   Result{Reasoning: "a", Content: "b"}}},
		{p, harmonyTools, golden{name: "end skipped",
			output: `<|channel|>analysis<|message|>a<|start|>assistant<|channel|>final<|message|>b`,
			want:   Result{Reasoning: "a", Content: "b"}}},
		{p, harmonyTools, golden{name: "no channel is content",
			output: `<|message|>hello`,
			want:   Result{Content: "hello"}}},
		{p, harmonyTools, golden{name: "text without markers is content",
			output: "hello world",
			want:   Result{Content: "hello world"}}},
		{p, harmonyTools, golden{name: "header cut short",
			output: `<|channel|>analysis<|message|>a<|end|><|start|>assistant<|channel|>final`,
			want:   Result{Reasoning: "a"}}},
		{p, harmonyTools, golden{name: "header cut short in the channel",
			output: `<|channel|>analysis<|message|>a<|end|><|start|>assistant<|channel|>fin`,
			want:   Result{Reasoning: "a", Content: "<|start|>assistant<|channel|>fin"}}},
		{p, harmonyTools, golden{name: "stray text between messages is content",
			output: `<|channel|>analysis<|message|>a<|end|>oops<|start|>assistant<|channel|>final<|message|>b`,
			want:   Result{Reasoning: "a", Content: "oopsb"}}},
		{p + `<|channel|>final<|message|>`, harmonyTools, golden{name: "prompt opened the final message",
			output: "Sunny.",
			want:   Result{Content: "Sunny."}}},
		{"", harmonyTools, golden{name: "no prompt",
			output: `<|channel|>analysis<|message|>a<|end|><|start|>assistant<|channel|>final<|message|>b`,
			want:   Result{Reasoning: "a", Content: "b"}}},
		{p, harmonyTools, golden{name: "unicode",
			output: `<|channel|>analysis<|message|>用户问天气。<|end|><|start|>assistant<|channel|>final<|message|>晴天 ☀️`,
			want:   Result{Reasoning: "用户问天气。", Content: "晴天 ☀️"}}},
	})
}

// TestHarmonyReasoningOnly: openai_gptoss separates reasoning from content and gives a
// tool call's raw text back as content.
func TestHarmonyReasoningOnly(t *testing.T) {
	const call = `<|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{"location":"SF"}`
	checkHarmony(t, false, []harmonyCase{
		{harmonyPrompt, harmonyTools, golden{name: "reasoning then answer",
			output: `<|channel|>analysis<|message|>Simple.<|end|><|start|>assistant<|channel|>final<|message|>4.<|return|>`,
			want:   Result{Reasoning: "Simple.", Content: "4."}}},
		{harmonyPrompt, harmonyTools, golden{name: "tool call is content",
			output: `<|channel|>analysis<|message|>Need weather.<|end|>` + call + `<|call|>`,
			want:   Result{Reasoning: "Need weather.", Content: call}}},
	})
}

// TestHarmonyBadArguments: arguments cut short or not valid JSON stay the call's (their
// fragments were streamed) and count as malformed.
func TestHarmonyBadArguments(t *testing.T) {
	for _, c := range []struct {
		name, output, args string
	}{
		{"cut short", `{"location":"San Fr`, `{"location":"San Fr`},
		{"invalid JSON", `{"location": San Francisco}`, `{"location": San Francisco}`},
		{"mismatched bracket", `{"a":[1}`, `{"a":[1}`},
	} {
		t.Run(c.name, func(t *testing.T) {
			output := `<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>` + c.output
			want := Result{Calls: []Call{{ID: "call_0", Name: "get_weather", Arguments: c.args}}}
			mk := harmonyMaker(t, true, harmonyPrompt, harmonyTools)
			for _, cs := range chunkings(output) {
				got, evs, bad := run(mk, cs)
				if !reflect.DeepEqual(normalize(got), want) || bad != 1 {
					t.Fatalf("chunks %q\n got %+v (malformed %d)\nwant %+v (malformed 1)", cs, got, bad, want)
				}
				checkEventOrder(t, c.name, evs)
			}
		})
	}
}

// TestHarmonyLongHeader: a header that runs past maxHarmonyHeader without <|message|> is
// not one: its text is content, and the markers after it still count.
func TestHarmonyLongHeader(t *testing.T) {
	junk := strings.Repeat("x", maxHarmonyHeader+10)
	checkGolden(t, harmonyMaker(t, true, harmonyPrompt, harmonyTools), golden{name: "long header",
		output: junk + `<|message|>y<|end|><|start|>assistant<|channel|>final<|message|>z`,
		want:   Result{Content: junk + "<|message|>yz"}})
	// Header at exactly the bound is still a header.
	hdr := "<|channel|>final" + strings.Repeat(" ", maxHarmonyHeader-len("assistant<|channel|>final"))
	checkGolden(t, harmonyMaker(t, true, harmonyPrompt, harmonyTools), golden{name: "header at the bound",
		output: hdr + `<|message|>z`,
		want:   Result{Content: "z"}})
}

// TestHarmonyWhole: the tool parser separates reasoning itself, so Chain drops the
// reasoning parser in front of it.
func TestHarmonyWhole(t *testing.T) {
	tools, err := NewToolParser("openai", Options{Tools: harmonyTools})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := tools.(Whole); !ok {
		t.Fatal("the openai tool parser is not a Whole")
	}
	reasoning, err := NewReasoningParser("openai_gptoss", Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := reasoning.(Whole); ok {
		t.Fatal("the openai_gptoss reasoning parser claims to parse tool calls")
	}
	if Chain(reasoning, tools) != tools {
		t.Fatal("Chain kept the reasoning parser in front of a Whole")
	}
	for _, m := range []string{"<|start|>", "<|end|>", "<|message|>", "<|channel|>", "<|constrain|>", "<|return|>", "<|call|>"} {
		for _, ms := range [][]string{Markers("openai", ""), Markers("", "openai_gptoss")} {
			if !strings.Contains(strings.Join(ms, " "), m) {
				t.Errorf("markers %q lack %q", ms, m)
			}
		}
	}
}

func TestHarmonyHeaderFields(t *testing.T) {
	for _, c := range []struct {
		hdr   string
		want  harmonyFields
		known bool
	}{
		{"assistant<|channel|>analysis", harmonyFields{channel: "analysis"}, true},
		{"<|channel|>final", harmonyFields{channel: "final"}, true},
		{"assistant<|channel|>commentary to=functions.f <|constrain|>json",
			harmonyFields{channel: "commentary", recipient: "functions.f", contentType: "<|constrain|>json"}, true},
		{"assistant to=functions.f<|channel|>commentary json",
			harmonyFields{channel: "commentary", recipient: "functions.f", contentType: "json"}, true},
		{"assistant<|channel|>commentary to=functions.f<|constrain|>json",
			harmonyFields{channel: "commentary", recipient: "functions.f", contentType: "<|constrain|>json"}, true},
		{"assistant<|channel|>commentary to=functions.f", harmonyFields{channel: "commentary", recipient: "functions.f"}, true},
		{"functions.f to=assistant<|channel|>commentary",
			harmonyFields{channel: "commentary", recipient: "assistant", rest: "functions.f"}, false},
		{"assistant<|channel|>analysis to=python code",
			harmonyFields{channel: "analysis", recipient: "python", contentType: "code"}, false},
		{"extra words to=functions.f json",
			harmonyFields{recipient: "functions.f", contentType: "json", rest: "extra words"}, false},
		{"assistant<|channel|>finale", harmonyFields{channel: "finale"}, false},
	} {
		got := harmonyHeaderFields(c.hdr, true)
		if got != c.want || got.known() != c.known {
			t.Errorf("harmonyHeaderFields(%q) = %+v (known %v); want %+v (known %v)", c.hdr, got, got.known(), c.want, c.known)
		}
	}
}
