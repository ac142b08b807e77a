package persona

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
)

// harmonyTools is a developer message as openai-harmony renders function tools (its
// docs/format.md).
const harmonyTools = `<|start|>developer<|message|># Instructions

Use a friendly tone.

# Tools

## functions

namespace functions {

// Gets the location of the user.
type get_location = () => any;

// Gets the current weather in the provided location.
type get_current_weather = (_: {
// The city and state, e.g. San Francisco, CA
location: string,
format?: "celsius" | "fahrenheit", // default: celsius
}) => any;

// Gets the current weather in the provided list of locations.
type get_multiple_weathers = (_: {
// List of city and state, e.g. ["San Francisco, CA", "New York, NY"]
locations: string[],
format?: "celsius" | "fahrenheit", // default: celsius
days: number,
detail?: {
  hourly: boolean,
  label?: string | null,
},
}) => any;

} // namespace functions<|end|><|start|>user<|message|>What is the weather like in SF?<|end|><|start|>assistant`

func TestFindTools(t *testing.T) {
	for _, c := range []struct {
		name   string
		prompt string
		want   []string
		// schemas, when set, are the expected parameters by tool name (JSON).
		schemas map[string]string
	}{
		{"none", "Hello {there} {\"a\": 1} [1, {2}]", nil, nil},
		{"openai objects in prose", `Tools: {"type": "function", "function": {"name": "a", "parameters": {"type": "object"}}} and` +
			`{"type":"function","function":{"name":"b"}} then {"name": "c", "parameters": {"properties": {}}}`, []string{"a", "b", "c"}, nil},
		{"mistral array", `[AVAILABLE_TOOLS][{"type": "function", "function": {"name": "x", "parameters": {}}}, {"type": "function", "function": {"name": "y", "parameters": {"type": "object"}}}][/AVAILABLE_TOOLS][INST]hi[/INST]`,
			[]string{"x", "y"}, nil},
		{"kimi declaration", `<|im_system|>tool_declare<|im_middle|>[{"type":"function","function":{"name":"k","parameters":{"type":"object","properties":{"q":{"type":"string"}}}}}]<|im_end|>`,
			[]string{"k"}, map[string]string{"k": `{"type":"object","properties":{"q":{"type":"string"}}}`}},
		{"anthropic input_schema", `{"name": "z", "input_schema": {"type": "object"}}`, []string{"z"}, nil},
		{"a past call is not a tool", `{"name": "get_weather", "parameters": {"city": "Paris"}}`, nil, nil},
		{"first schema of a name wins", `{"name": "d", "parameters": {"type": "object", "properties": {"a": {}}}} {"name": "d", "parameters": {"type": "object"}}`,
			[]string{"d"}, map[string]string{"d": `{"type": "object", "properties": {"a": {}}}`}},
		{"truncated JSON then a tool", `{"name": "broken", "parameters": {"type": {"name": "e", "parameters": {"type": "object"}}`, []string{"e"}, nil},
		{"deepseek v3.1 headings", "## Tools\n\n### get_time\nDescription: Time\nin a zone.\n\nParameters: {\"type\": \"object\", \"properties\": {\"tz\": {\"type\": \"string\"}}}\n\n### ping\n\nParameters: {\"type\": \"object\"}\n",
			[]string{"get_time", "ping"}, map[string]string{"ping": `{"type": "object"}`}},
		{"qwen3-coder xml", "<tools>\n<function>\n<name>f</name>\n<description>F</description>\n<parameters>\n<parameter>\n<name>n</name>\n<type>integer</type>\n<minimum>2</minimum>\n</parameter>\n" +
			"<parameter>\n<name>tags</name>\n<type>array</type>\n<items>{\"type\": \"string\"}</items>\n<uniqueItems>True</uniqueItems>\n</parameter>\n<parameter>\n<name>o</name>\n<type>['string', 'null']</type>\n</parameter>\n<required>[\"n\"]</required>\n</parameters>\n</function>\n" +
			"<function>\n<name>g</name>\n<parameters>\n</parameters>\n</function>\n</tools>",
			[]string{"f", "g"}, map[string]string{
				"f": `{"type": "object", "required": ["n"], "properties": {"n": {"type": "integer", "minimum": 2}, "tags": {"type": "array", "items": {"type": "string"}, "uniqueItems": true}, "o": {"type": ["string", "null"]}}}`,
				"g": `{"type": "object", "properties": {}}`}},
		{"harmony typescript", harmonyTools, []string{"get_location", "get_current_weather", "get_multiple_weathers"}, map[string]string{
			"get_location":        `{"type": "object", "properties": {}}`,
			"get_current_weather": `{"type": "object", "properties": {"location": {"type": "string"}, "format": {"enum": ["celsius", "fahrenheit"]}}, "required": ["location"]}`,
			"get_multiple_weathers": `{"type": "object", "required": ["locations", "days"], "properties": {"locations": {"type": "array", "items": {"type": "string"}},
				"format": {"enum": ["celsius", "fahrenheit"]}, "days": {"type": "integer"},
				"detail": {"type": "object", "required": ["hourly"], "properties": {"hourly": {"type": "boolean"}, "label": {"anyOf": [{"type": "string"}, {"type": "null"}]}}}}}`}},
	} {
		t.Run(c.name, func(t *testing.T) {
			got := findTools(c.prompt)
			var names []string
			for _, tl := range got {
				names = append(names, tl.name)
				if want, ok := c.schemas[tl.name]; ok {
					var w any
					if err := json.Unmarshal([]byte(want), &w); err != nil {
						t.Fatal(err)
					}
					if g := plainJSON(tl.params); !reflect.DeepEqual(g, w) {
						gj, _ := json.Marshal(g)
						t.Fatalf("%s parameters %s, want %s", tl.name, gj, want)
					}
				}
			}
			if !reflect.DeepEqual(names, c.want) {
				t.Fatalf("tools %v, want %v", names, c.want)
			}
		})
	}
}

// plainJSON drops the key orders decodeOrdered records, for comparing with
// encoding/json's decoding.
func plainJSON(v any) any {
	switch x := v.(type) {
	case map[string]any:
		out := map[string]any{}
		for k, e := range x {
			if k != orderKey {
				out[k] = plainJSON(e)
			}
		}
		return out
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = plainJSON(e)
		}
		return out
	}
	return v
}

// TestFindToolsBounded: JSON scanning examines a bounded multiple of the prompt, for
// code full of braces and for objects left open inside each other (which a decode
// attempt at every brace would read to the end each time).
func TestFindToolsBounded(t *testing.T) {
	for _, c := range []struct {
		name, prompt string
		want         int // tools found
	}{
		{"code", strings.Repeat("func f() { return map[string]int{} } {\"k\": ", 20000) + `{"name": "t", "parameters": {"type": "object"}}`, 1},
		{"unclosed", `{"name": "t", "parameters": {"type": "object"}} ` + strings.Repeat(`{"k": [1, 2, "x"], "v": `, 20000), 1},
	} {
		f := toolFinder{seen: map[string]bool{}}
		f.scanJSON(c.prompt)
		if len(f.out) != c.want || f.work > jsonBudget*len(c.prompt)+1<<20+64<<10 {
			t.Fatalf("%s: %d tools, scanning examined %d bytes of a %d-byte prompt", c.name, len(f.out), f.work, len(c.prompt))
		}
	}
}
