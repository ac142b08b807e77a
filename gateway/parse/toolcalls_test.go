package parse

import (
	"encoding/json"
	"reflect"
	"slices"
	"testing"
)

// callTools are the functions the tool-call golden tests offer, with parameter schemas
// for the families that read types from them (qwen3_coder, pythonic).
func callTools() Options {
	schema := func(s string) map[string]any {
		var m map[string]any
		if err := json.Unmarshal([]byte(s), &m); err != nil {
			panic(err)
		}
		return m
	}
	return Options{Tools: []Tool{
		{Name: "get_weather", Parameters: schema(`{"type":"object","properties":{
			"city":{"type":"string"},"state":{"type":"string"},"unit":{"type":"string","enum":["celsius","fahrenheit"]},
			"days":{"type":"integer"},"metric":{"type":"string"}},"required":["city"]}`)},
		{Name: "search", Parameters: schema(`{"type":"object","properties":{"query":{"type":"string"},"limit":{"type":"integer"}}}`)},
		{Name: "get_time", Parameters: schema(`{"type":"object","properties":{}}`)},
		{Name: "write_file", Parameters: schema(`{"type":"object","properties":{
			"path":{"type":"string"},"content":{"type":"string"},"mode":{"type":["integer","null"]},
			"append":{"type":"boolean"},"ratio":{"type":"number"},"tags":{"type":"array"},
			"meta":{"type":"object"},"note":{"anyOf":[{"type":"string"},{"type":"null"}]},"extra":{}}}`)},
		{Name: "register_user", Parameters: schema(`{"type":"object","properties":{"name":{"type":"string"},
			"age":{"type":"integer"},"address":{"type":"object"},"role":{"type":"string"},"passed_test":{"type":"boolean"},
			"aliases":{"type":"array","items":{"type":"string"}}}}`)},
	}}
}

// call builds an expected call with the default ids.
func call(i int, name, args string) Call {
	return Call{ID: (&Options{}).id(i), Name: name, Arguments: args}
}

// checkCut is checkGolden for the cases where a call that had started streaming broke
// (its arguments are cut or invalid, so they are not a JSON object): every chunking must
// still give the same result.
func checkCut(t *testing.T, mk func() Parser, g golden) {
	t.Helper()
	for _, cs := range chunkings(g.output) {
		got, evs, bad := run(mk, cs)
		if !reflect.DeepEqual(normalize(got), normalize(g.want)) || bad != g.malformed {
			t.Fatalf("%s: chunks %q\n got %+v (malformed %d)\nwant %+v (malformed %d)\nevents %+v",
				g.name, cs, got, bad, g.want, g.malformed, evs)
		}
		checkEventOrder(t, g.name, evs)
	}
}

// toolParser returns a constructor of the registered parser name with callTools.
func toolParser(t *testing.T, name string) func() Parser {
	t.Helper()
	if _, err := NewToolParser(name, callTools()); err != nil {
		t.Fatal(err)
	}
	return func() Parser {
		p, _ := NewToolParser(name, callTools())
		return p
	}
}

func TestToolCallsMarkers(t *testing.T) {
	for name, want := range map[string][]string{
		"hermes":      {"<tool_call>", "</tool_call>"},
		"qwen3_coder": {"<tool_call>", "</tool_call>"},
		"llama3_json": {"<|python_tag|>"},
		"pythonic":    {"<|python_start|>", "<|python_end|>"},
		"mistral":     {"[TOOL_CALLS]", "[ARGS]", "[CALL_ID]"},
	} {
		if got := Markers(name, ""); !reflect.DeepEqual(got, want) {
			t.Errorf("Markers(%q) = %q, want %q", name, got, want)
		}
	}
}

// toolCallAnswers are an answer per parser of toolcalls.go's families, each with two
// calls: the benchmark answers at a small size.
func toolCallAnswers() map[string]struct {
	mk     func() Parser
	answer string
} {
	prose, content := "Let me check that for you.", "x := \"a\\b\" // {東京}\n"
	mk := func(name string) func() Parser {
		return func() Parser { p, _ := NewToolParser(name, callTools()); return p }
	}
	return map[string]struct {
		mk     func() Parser
		answer string
	}{
		"hermes":      {mk("hermes"), prose + "\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>\n<tool_call>\n{\"name\": \"write_file\", \"arguments\": {\"content\": " + benchJSON(content) + "}}\n</tool_call>"},
		"qwen3_coder": {mk("qwen3_coder"), prose + "\n<tool_call>\n<function=get_weather>\n<parameter=days>\n3\n</parameter>\n</function>\n</tool_call>\n<tool_call>\n<function=write_file>\n<parameter=content>\n" + content + "\n</parameter>\n</function>\n</tool_call>"},
		"llama3_json": {mk("llama3_json"), "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\"}}; {\"name\": \"write_file\", \"parameters\": {\"content\": " + benchJSON(content) + "}} " + prose},
		"pythonic":    {mk("pythonic"), prose + "<|python_start|>[get_weather(city='Paris', days=3), write_file(content=" + benchJSON(content) + ")]<|python_end|>"},
		"mistral":     {mk("mistral"), prose + "[TOOL_CALLS]get_weather[ARGS]{\"city\": \"Paris\"}[TOOL_CALLS]write_file[ARGS]{\"content\": " + benchJSON(content) + "}"},
		"required": {func() Parser { return NewRequiredCalls(callTools()) },
			"[{\"name\": \"search\", \"parameters\": {\"query\": " + benchJSON(prose) + "}}, {\"name\": \"write_file\", \"parameters\": {\"content\": " + benchJSON(content) + "}}]"},
	}
}

// A parser appends to the events it is given and never changes those already there: a
// caller may pass back every event of the answer so far (merging into them would cost
// the whole answer per token). Every answer also gives its two calls in every chunking.
func TestToolParsersKeepEarlierEvents(t *testing.T) {
	for name, c := range toolCallAnswers() {
		p := c.mk()
		var evs []Event
		for i := range len(c.answer) {
			before := slices.Clone(evs)
			evs = p.Push(c.answer[i:i+1], evs)
			if !slices.Equal(evs[:len(before)], before) {
				t.Fatalf("%s: pushing byte %d changed earlier events:\n%+v\nto\n%+v", name, i, before, evs[:len(before)])
			}
		}
		r := Collect(p.Finish(evs))
		if len(r.Calls) != 2 || p.Malformed() != 0 {
			t.Fatalf("%s: %+v, malformed %d", name, r, p.Malformed())
		}
		checkGolden(t, c.mk, golden{name: name, output: c.answer, want: r})
	}
}
