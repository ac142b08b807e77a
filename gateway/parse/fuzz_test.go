package parse

import (
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"testing"
)

// The fuzz targets run every registered parser on outputs the fuzzer derives from the
// families' golden outputs, whole and cut into chunks where the fuzzer says, and check:
// no panic; the same result (and Malformed count) for both; events in order; and no
// word of the output lost (accounted) outside the family's markers and format words.
//
//	go test -run '^$' -fuzz FuzzToolParsers -fuzztime 60s ./gateway/parse/
//	go test -run '^$' -fuzz FuzzReasoningParsers -fuzztime 60s ./gateway/parse/

// fuzzFormatWords are, by "tool:NAME" / "reasoning:NAME", the words of a family's
// format besides its markers (Markers) that a parser drops: JSON keys that frame a call,
// channel names, Python literals it re-encodes.
var fuzzFormatWords = map[string][]string{
	"tool:deepseek_v3":        {"function", "json"},
	"tool:hermes":             {"name", "arguments", "parameters"},
	"tool:llama3_json":        {"name", "arguments", "parameters", "type", "function"},
	"tool:llama4_json":        {"name", "arguments", "parameters", "type", "function"},
	"tool:mistral":            {"name", "arguments", "id"},
	"tool:pythonic":           {"True", "False", "None"},
	"tool:llama4_pythonic":    {"True", "False", "None"},
	"tool:qwen3_coder":        {"function", "parameter", "tool_call"},
	"tool:openai":             harmonyWords,
	"reasoning:openai_gptoss": harmonyWords,
}

var harmonyWords = []string{"assistant", "analysis", "final", "commentary", "to", "functions", "json", "constrain", "channel", "message"}

// fuzzToolSeeds are, by parser name, outputs in each family's documented format (the
// goldens of the families whose tests keep them in package variables are added too).
var fuzzToolSeeds = map[string][]string{
	"hermes": {
		"Sure.\n\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>\n<tool_call>\n{\"name\": \"search\", \"arguments\": {\"query\": \"dogs\", \"limit\": 3}}\n</tool_call>",
		"<tool_call>{\"arguments\": {\"q\": \"a}b\"}, \"name\": \"search\"}</tool_call>",
		"<tool_call>\n{\"name\": \"nope\", \"arguments\": {}}\n</tool_call>",
		"<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Par",
	},
	"llama3_json": {
		`{"name": "search", "parameters": {"query": "test query", "limit": 10}}`,
		"<|python_tag|>{\"name\": \"search\", \"arguments\": {\"query\": \"東京\"}}; {\"name\": \"get_time\", \"parameters\": {}}",
		"The weather in Paris is sunny {mostly}.",
		`{"name": "search", "param`,
	},
	"mistral": {
		`[TOOL_CALLS][{"name": "get_weather", "arguments": {"city": "Paris"}}, {"name": "search", "arguments": {"query": "x"}}]`,
		`Sure.[TOOL_CALLS]get_weather[ARGS]{"city": "Paris"}[TOOL_CALLS]search[ARGS]{"query": "[x]"}`,
		`[TOOL_CALLS][{"name": "nope", "arguments": {}}]`,
	},
	"pythonic": {
		`[get_weather(city="Paris", days=3), search(query='it\'s', exact=True, limit=None)]`,
		`<|python_start|>[get_time()]<|python_end|>`,
		`Not a call: [1, 2]`,
		`[search(query="unterminated`,
	},
	"qwen3_coder": {
		"<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n<parameter=days>\n3\n</parameter>\n</function>\n</tool_call>",
		"Sure.<tool_call>\n<function=search>\n<parameter=query>\na < b && c\n</parameter>\n</function>\n</tool_call>",
		"<tool_call>\n<function=nope>\n</function>\n</tool_call>",
	},
	"openai": {
		`<|channel|>analysis<|message|>Need weather.<|end|><|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{"city":"Paris"}<|call|>`,
		`<|channel|>analysis<|message|>Simple.<|end|><|start|>assistant<|channel|>final<|message|>4.<|return|>`,
		`<|start|>assistant to=functions.search<|channel|>commentary json<|message|>{"query":"x"}`,
		`<|channel|>commentary to=functions.nope <|constrain|>json<|message|>{}<|call|>`,
	},
}

// fuzzReasoningSeeds are reasoning outputs in each family's format.
var fuzzReasoningSeeds = map[string][]string{
	"deepseek_r1": {"Let me think.\n</think>\n\nThe answer is 4.", "<think>\nHmm</think>4", "still thinking"},
	"qwen3":       {"<think>\nOkay, 2+2 is 4.\n</think>\n\nThe answer is 4.", "The answer</think> is 4.", "<think>\nlet me"},
	"glm45":       {"<think>Plan.</think>\n<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Paris</arg_value>\n</tool_call>", "<think>a</think>b<think>c</think>d"},
	"kimi_k2":     {"<think>Check.</think>" + kimiSection(kimiCall("functions.get_weather:0", `{"city": "Paris"}`)), "<think>never closed"},
	"mistral":     {"[THINK]Simple.[/THINK]4.", "Before [THINK]x[/THINK] after", "[THINK]open"},
	"openai_gptoss": {
		`<|channel|>analysis<|message|>Simple.<|end|><|start|>assistant<|channel|>final<|message|>4.<|return|>`,
		`<|channel|>analysis<|message|>用户问天气。<|end|><|start|>assistant<|channel|>final<|message|>晴天 ☀️`,
	},
}

// fuzzCommonSeeds go to every parser: near misses of markers, odd bytes.
var fuzzCommonSeeds = []string{
	"", "plain text", "a <tool_ca", "<|", "<｜tool▁", "\xff\xfe<think", "東京 ☀️ </think> [TOOL_CALLS",
}

// fuzzPrompts are prompt ends the reasoning parsers read (Options.Prompt).
var fuzzPrompts = []string{
	"", "<|im_start|>assistant\n", "<|im_start|>assistant\n<think>\n", "<|im_start|>assistant\n<think>\n\n</think>\n\n",
	"<｜Assistant｜><think>\n", "<｜Assistant｜></think>", "[/INST]", "<|start|>assistant",
}

func init() {
	add := func(name string, gs ...[]golden) {
		for _, set := range gs {
			for _, g := range set {
				fuzzToolSeeds[name] = append(fuzzToolSeeds[name], g.output)
			}
		}
	}
	add("deepseek_v3", deepseekV3Goldens, deepseekV3Broken)
	add("deepseek_v31", deepseekV31Goldens)
	add("kimi_k2", kimiGoldens)
	add("glm45", glmGoldens)
	fuzzToolSeeds["llama4_json"] = fuzzToolSeeds["llama3_json"]
	fuzzToolSeeds["llama4_pythonic"] = fuzzToolSeeds["pythonic"]
}

// fuzzTools are the functions offered while fuzzing: every name the seeds call, GLM's
// with their parameter types.
func fuzzTools() []Tool {
	tools := append([]Tool{}, glmTools...)
	tools = append(tools, dsTools...)
	tools = append(tools, kimiTools...)
	return append(tools, tokenTestTools("search", "get_time", "get_location", "get_current_weather")...)
}

func FuzzToolParsers(f *testing.F) {
	names := ToolParserNames()
	for i, n := range names {
		for _, s := range append(fuzzToolSeeds[n], fuzzCommonSeeds...) {
			f.Add(byte(i), byte(0), s, []byte{3, 1, 4, 1, 5, 9, 2, 6})
		}
	}
	tools := fuzzTools()
	f.Fuzz(func(t *testing.T, which, prompt byte, output string, cuts []byte) {
		name := names[int(which)%len(names)]
		o := Options{Tools: tools, Prompt: fuzzPrompts[int(prompt)%len(fuzzPrompts)]}
		mk := func() Parser {
			p, err := NewToolParser(name, o)
			if err != nil {
				t.Fatal(err)
			}
			return p
		}
		checkFuzz(t, "tool:"+name, mk, output, cuts)
	})
}

func FuzzReasoningParsers(f *testing.F) {
	names := ReasoningParserNames()
	for i, n := range names {
		for _, s := range append(fuzzReasoningSeeds[n], fuzzCommonSeeds...) {
			for p := range fuzzPrompts {
				f.Add(byte(i), byte(p), s, []byte{2, 7, 1, 8, 2, 8})
			}
		}
	}
	f.Fuzz(func(t *testing.T, which, prompt byte, output string, cuts []byte) {
		name := names[int(which)%len(names)]
		o := Options{Prompt: fuzzPrompts[int(prompt)%len(fuzzPrompts)]}
		mk := func() Parser {
			p, err := NewReasoningParser(name, o)
			if err != nil {
				t.Fatal(err)
			}
			return p
		}
		checkFuzz(t, "reasoning:"+name, mk, output, cuts)
	})
}

// checkFuzz checks one parser (key "tool:NAME" or "reasoning:NAME") on one output.
func checkFuzz(t *testing.T, key string, mk func() Parser, output string, cuts []byte) {
	t.Helper()
	whole, evs, bad := run(mk, []string{output})
	checkEventOrder(t, key, evs)
	chunks := fuzzChunks(output, cuts)
	got, evs, bad2 := run(mk, chunks)
	checkEventOrder(t, key, evs)
	if !reflect.DeepEqual(normalize(whole), normalize(got)) || bad != bad2 {
		t.Fatalf("%s: output %q\nwhole:  %+v (malformed %d)\nchunks %q: %+v (malformed %d)",
			key, output, whole, bad, chunks, got, bad2)
	}
	marks := append(append([]string{}, markers[key]...), fuzzFormatWords[key]...)
	// A call id the model wrote (Kimi K2's functions.NAME:IDX) carries its text too.
	for i, c := range whole.Calls {
		if c.ID != fmt.Sprintf("call_%d", i) {
			whole.Content += " " + c.ID
		}
	}
	accounted(t, output, append(marks, skippedMembers(output, whole.Calls)...), whole)
}

// skippedMembers returns the members a JSON-framed family skips by design, as vLLM's
// parsers do: in every JSON object of output that names one of calls, each member
// besides "name", "arguments" and "parameters" (an "id", a "type", anything the model
// added), as the member's key and its value's JSON encoding.
func skippedMembers(output string, calls []Call) []string {
	named := map[string]bool{}
	for _, c := range calls {
		named[c.Name] = true
	}
	var out []string
	for i := strings.IndexByte(output, '{'); i >= 0; {
		var obj map[string]json.RawMessage
		if json.NewDecoder(strings.NewReader(output[i:])).Decode(&obj) == nil {
			var name string
			if json.Unmarshal(obj["name"], &name) == nil && named[name] {
				for k, v := range obj {
					if k != "name" && k != "arguments" && k != "parameters" {
						out = append(out, string(v))
						if k != "" {
							out = append(out, k)
						}
					}
				}
			}
		}
		j := strings.IndexByte(output[i+1:], '{')
		if j < 0 {
			break
		}
		i += 1 + j
	}
	return out
}
