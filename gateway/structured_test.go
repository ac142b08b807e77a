package gateway

import (
	"encoding/json"
	"fmt"
	"net/http"
	"reflect"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/turbine-llm/turbine/messages"
)

// chat wraps fields into a chat completions body for the tiny model.
func chat(fields string) string {
	return `{"model":"tiny","messages":[{"role":"user","content":"hi"}],` + fields + `}`
}

// comp wraps fields into a completions body for the tiny model.
func comp(fields string) string { return `{"model":"tiny","prompt":"hi",` + fields + `}` }

const (
	weatherTool = `{"type":"function","function":{"name":"get_weather","description":"Weather now","parameters":{"type": "object", "properties": {"city": {"type": "string"}, "unit": {"enum": ["c", "f"]}}, "required": ["city"]}}}`
	clockTool   = `{"type":"function","function":{"name":"get_time"}}`
)

// TestOutputConstraintsRejected runs bad output constraints and tool definitions through
// the whole handler: each is refused with the listed status, code, param and message
// before anything reaches the Backend. The answers are kept in
// testdata/structured.golden.
func TestOutputConstraintsRejected(t *testing.T) {
	cases := []struct {
		name, path, body string
		code, param, msg string
	}{
		// response_format
		{"json_schema without json_schema", chatPath, chat(`"response_format":{"type":"json_schema"}`), "missing_required_parameter", "response_format.json_schema", "Missing required"},
		{"json_schema without name", chatPath, chat(`"response_format":{"type":"json_schema","json_schema":{"schema":{"type":"object"}}}`), "missing_required_parameter", "response_format.json_schema.name", "Missing required"},
		{"json_schema without schema", chatPath, chat(`"response_format":{"type":"json_schema","json_schema":{"name":"x"}}`), "missing_required_parameter", "response_format.json_schema.schema", "Missing required"},
		{"json_schema schema not an object", chatPath, chat(`"response_format":{"type":"json_schema","json_schema":{"name":"x","schema":[1]}}`), "invalid_type", "response_format.json_schema.schema", "expected a JSON Schema object, but got array"},
		{"json_schema bad type", chatPath, chat(`"response_format":{"type":"json_schema","json_schema":{"name":"x","schema":{"type":"strin"}}}`), "invalid_value", "response_format.json_schema.schema", "not a valid JSON Schema: at '/type': value must be one of"},
		{"json_schema properties not an object", chatPath, chat(`"response_format":{"type":"json_schema","json_schema":{"name":"x","schema":{"type":"object","properties":[]}}}`), "invalid_value", "response_format.json_schema.schema", "at '/properties': got array, want object"},
		{"json_schema remote reference", chatPath, chat(`"response_format":{"type":"json_schema","json_schema":{"name":"x","schema":{"$ref":"https://example.com/s.json"}}}`), "invalid_value", "response_format.json_schema.schema", "https://example.com/s.json, which is not followed"},
		{"json_schema file reference", chatPath, chat(`"response_format":{"type":"json_schema","json_schema":{"name":"x","schema":{"$ref":"file:///etc/passwd"}}}`), "invalid_value", "response_format.json_schema.schema", "file:///etc/passwd, which is not followed"},
		{"json_schema dangling reference", chatPath, chat(`"response_format":{"type":"json_schema","json_schema":{"name":"x","schema":{"$ref":"#/$defs/nope"}}}`), "invalid_value", "response_format.json_schema.schema", "#/$defs/nope"},
		{"json_schema bad pattern", chatPath, chat(`"response_format":{"type":"json_schema","json_schema":{"name":"x","schema":{"type":"string","pattern":"(a"}}}`), "invalid_value", "response_format.json_schema.schema", "at '/pattern'"},
		{"json_schema strict not a boolean", chatPath, chat(`"response_format":{"type":"json_schema","json_schema":{"name":"x","strict":"yes","schema":{}}}`), "invalid_type", "response_format.json_schema.strict", "expected a boolean"},
		{"structural_tag", chatPath, chat(`"response_format":{"type":"structural_tag","format":{}}`), "unsupported_parameter", "response_format.type", "structural_tag"},
		{"response_format yaml", chatPath, chat(`"response_format":{"type":"yaml"}`), "invalid_value", "response_format.type", "expected 'text', 'json_object' or 'json_schema'"},

		// structured_outputs
		{"structured_outputs not an object", chatPath, chat(`"structured_outputs":"json"`), "invalid_type", "structured_outputs", "expected an object"},
		{"structured_outputs empty", chatPath, chat(`"structured_outputs":{}`), "invalid_value", "structured_outputs", "but got none"},
		{"structured_outputs json_object false only", chatPath, chat(`"structured_outputs":{"json_object":false}`), "invalid_value", "structured_outputs", "but got none"},
		{"structured_outputs two", chatPath, chat(`"structured_outputs":{"regex":"a+","choice":["b"]}`), "invalid_value", "structured_outputs.choice", "'structured_outputs.regex' is given too"},
		{"structured_outputs unknown field", chatPath, chat(`"structured_outputs":{"jsn":{}}`), "invalid_value", "structured_outputs.jsn", "Unknown field"},
		{"structured_outputs json invalid", chatPath, chat(`"structured_outputs":{"json":{"minItems":-1}}`), "invalid_value", "structured_outputs.json", "at '/minItems'"},
		{"structured_outputs json text not JSON", chatPath, chat(`"structured_outputs":{"json":"{\"type\":"}`), "invalid_value", "structured_outputs.json", "not valid JSON"},
		{"structured_outputs json text an array", chatPath, chat(`"structured_outputs":{"json":"[1]"}`), "invalid_type", "structured_outputs.json", "expected a JSON Schema object, but got array"},
		{"structured_outputs json a number", chatPath, chat(`"structured_outputs":{"json":5}`), "invalid_type", "structured_outputs.json", "expected a JSON Schema object (or its JSON text)"},
		{"structured_outputs bad regex", chatPath, chat(`"structured_outputs":{"regex":"(a"}`), "invalid_value", "structured_outputs.regex", "missing closing )"},
		{"structured_outputs empty regex", chatPath, chat(`"structured_outputs":{"regex":""}`), "invalid_value", "structured_outputs.regex", "the pattern is empty"},
		{"structured_outputs empty choice", chatPath, chat(`"structured_outputs":{"choice":[]}`), "invalid_value", "structured_outputs.choice", "at least one choice"},
		{"structured_outputs choice not strings", chatPath, chat(`"structured_outputs":{"choice":["a",1]}`), "invalid_type", "structured_outputs.choice[1]", "expected a string"},
		{"structured_outputs empty grammar", chatPath, chat(`"structured_outputs":{"grammar":" "}`), "invalid_value", "structured_outputs.grammar", "the grammar is empty"},
		{"structured_outputs structural_tag", chatPath, chat(`"structured_outputs":{"structural_tag":"{}"}`), "unsupported_parameter", "structured_outputs.structural_tag", "not supported"},
		{"structured_outputs disable_any_whitespace", chatPath, chat(`"structured_outputs":{"json_object":true,"disable_any_whitespace":true}`), "unsupported_parameter", "structured_outputs.disable_any_whitespace", "not supported"},
		{"structured_outputs whitespace_pattern", chatPath, chat(`"structured_outputs":{"json_object":true,"whitespace_pattern":" "}`), "unsupported_parameter", "structured_outputs.whitespace_pattern", "not supported"},

		// guided_*
		{"guided_regex bad range", chatPath, chat(`"guided_regex":"[z-a]"`), "invalid_value", "guided_regex", "invalid character class range"},
		{"guided_regex dangling quantifier", chatPath, chat(`"guided_regex":"*a"`), "invalid_value", "guided_regex", "missing argument to repetition operator"},
		{"guided_choice a string", chatPath, chat(`"guided_choice":"a"`), "invalid_type", "guided_choice", "expected an array"},
		{"guided_json invalid", chatPath, chat(`"guided_json":{"required":"city"}`), "invalid_value", "guided_json", "at '/required'"},
		{"guided_grammar a number", chatPath, chat(`"guided_grammar":1`), "invalid_type", "guided_grammar", "expected a string"},
		{"guided_whitespace_pattern", chatPath, chat(`"guided_json":{},"guided_whitespace_pattern":" "`), "unsupported_parameter", "guided_whitespace_pattern", "not supported"},
		{"guided_decoding_backend a number", chatPath, chat(`"guided_decoding_backend":1`), "invalid_type", "guided_decoding_backend", "expected a string"},

		// more than one constraint
		{"response_format and guided_regex", chatPath, chat(`"response_format":{"type":"json_object"},"guided_regex":"a+"`), "invalid_value", "guided_regex", "already constrained by 'response_format'"},
		{"response_format and structured_outputs", chatPath, chat(`"response_format":{"type":"json_schema","json_schema":{"name":"x","schema":{}}},"structured_outputs":{"choice":["a"]}`), "invalid_value", "structured_outputs.choice", "already constrained by 'response_format'"},
		{"structured_outputs and guided_choice", chatPath, chat(`"structured_outputs":{"grammar":"root ::= \"a\""},"guided_choice":["a"]`), "invalid_value", "guided_choice", "already constrained by 'structured_outputs.grammar'"},

		// tools
		{"parameters not an object", chatPath, chat(`"tools":[{"type":"function","function":{"name":"f","parameters":"x"}}]`), "invalid_type", "tools[0].function.parameters", "expected a JSON Schema object, but got string"},
		{"parameters not a schema", chatPath, chat(`"tools":[` + clockTool + `,{"type":"function","function":{"name":"f","parameters":{"type":"object","required":[1]}}}]`), "invalid_value", "tools[1].function.parameters", "not a valid JSON Schema: at '/required/0'"},
		{"duplicate function names", chatPath, chat(`"tools":[` + weatherTool + `,` + clockTool + `,` + weatherTool + `]`), "invalid_value", "tools[2].function.name", "also tools[0]'s"},
		{"description not a string", chatPath, chat(`"tools":[{"type":"function","function":{"name":"f","description":7}}]`), "invalid_type", "tools[0].function.description", "expected a string"},
		{"conflicting $defs with required", chatPath, chat(`"tool_choice":"required","tools":[{"type":"function","function":{"name":"a","parameters":{"$defs":{"P":{"type":"string"}}}}},{"type":"function","function":{"name":"b","parameters":{"$defs":{"P":{"type":"integer"}}}}}]`), "invalid_value", "tools", `both define $defs "P"`},
		{"parameters that only hold alone, with required", chatPath, chat(`"tool_choice":"required","tools":[{"type":"function","function":{"name":"a","parameters":{"type":"object","properties":{"x":{"type":"string"},"y":{"$ref":"#/properties/x"}}}}}]`), "invalid_value", "tools", "refer to their own root"},

		// tool_choice
		{"required without tools", chatPath, chat(`"tool_choice":"required"`), "invalid_value", "tool_choice", "'required' needs at least one function"},
		{"required with no tools", chatPath, chat(`"tools":[],"tool_choice":"required"`), "invalid_value", "tool_choice", "'required' needs at least one function"},
		{"named without tools", chatPath, chat(`"tool_choice":{"type":"function","function":{"name":"f"}}`), "invalid_value", "tool_choice", "a named function needs at least one function"},
		{"named unknown function", chatPath, chat(`"tools":[` + weatherTool + `,` + clockTool + `],"tool_choice":{"type":"function","function":{"name":"get_news"}}`), "invalid_value", "tool_choice.function.name", "'get_news' is not among the tools (get_weather, get_time)"},
		{"named without type", chatPath, chat(`"tools":[` + clockTool + `],"tool_choice":{"function":{"name":"get_time"}}`), "missing_required_parameter", "tool_choice.type", "Missing required"},
		{"named of another type", chatPath, chat(`"tools":[` + clockTool + `],"tool_choice":{"type":"tool","function":{"name":"get_time"}}`), "invalid_value", "tool_choice.type", "Supported values are: 'function'"},
		{"named without function", chatPath, chat(`"tools":[` + clockTool + `],"tool_choice":{"type":"function","name":"get_time"}`), "missing_required_parameter", "tool_choice.function", "Missing required"},
		{"named without name", chatPath, chat(`"tools":[` + clockTool + `],"tool_choice":{"type":"function","function":{}}`), "missing_required_parameter", "tool_choice.function.name", "Missing required"},
		{"named function not an object", chatPath, chat(`"tools":[` + clockTool + `],"tool_choice":{"type":"function","function":"get_time"}`), "invalid_type", "tool_choice.function", "expected an object"},
		{"tool_choice bogus", chatPath, chat(`"tools":[` + clockTool + `],"tool_choice":"any"`), "invalid_value", "tool_choice", "Supported values are: 'none', 'auto' and 'required'"},
		{"tool_choice a number", chatPath, chat(`"tools":[` + clockTool + `],"tool_choice":1`), "invalid_type", "tool_choice", "expected a string or an object"},
		{"required and response_format", chatPath, chat(`"tools":[` + clockTool + `],"tool_choice":"required","response_format":{"type":"json_object"}`), "invalid_value", "tool_choice", "cannot be combined with another output constraint"},
		{"named and guided_json", chatPath, chat(`"tools":[` + clockTool + `],"tool_choice":{"type":"function","function":{"name":"get_time"}},"guided_json":{"type":"object"}`), "invalid_value", "tool_choice", "cannot be combined with another output constraint"},
		{"parallel_tool_calls not a boolean", chatPath, chat(`"tools":[` + clockTool + `],"parallel_tool_calls":"yes"`), "invalid_type", "parallel_tool_calls", "expected a boolean"},

		// completions take the same constraints
		{"completions bad schema", compPath, comp(`"response_format":{"type":"json_schema","json_schema":{"name":"x","schema":{"type":7}}}`), "invalid_value", "response_format.json_schema.schema", "at '/type'"},
		{"completions two constraints", compPath, comp(`"guided_choice":["a"],"structured_outputs":{"regex":"b"}`), "invalid_value", "guided_choice", "already constrained by 'structured_outputs.regex'"},
		{"completions bad regex", compPath, comp(`"guided_regex":"a{2,1}"`), "invalid_value", "guided_regex", "invalid repeat count"},
	}
	var out strings.Builder
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			b := newFakeBackend(finish("ok", "stop"))
			rr := serve(newTestServer(t, b), http.MethodPost, c.path, c.body)
			var body struct {
				Error struct {
					Message string  `json:"message"`
					Param   *string `json:"param"`
					Code    string  `json:"code"`
				} `json:"error"`
			}
			if err := json.Unmarshal(rr.Body.Bytes(), &body); err != nil {
				t.Fatalf("body %q: %v", rr.Body.String(), err)
			}
			param := ""
			if body.Error.Param != nil {
				param = *body.Error.Param
			}
			if rr.Code != http.StatusBadRequest || body.Error.Code != c.code || param != c.param || !strings.Contains(body.Error.Message, c.msg) {
				t.Errorf("got %d code=%q param=%q %q; want 400 code=%q param=%q with %q",
					rr.Code, body.Error.Code, param, body.Error.Message, c.code, c.param, c.msg)
			}
			if n := len(b.generated()); n != 0 {
				t.Errorf("%d requests reached the Backend", n)
			}
			fmt.Fprintf(&out, "### %s\nPOST %s %s\n--> %d %s", c.name, c.path, abbreviate(c.body), rr.Code, rr.Body.String())
		})
	}
	checkGolden(t, "structured.golden", []byte(out.String()))
}

// TestOutputConstraintsAccepted checks what legal constraints and tool definitions
// become: the request's Structured (what the engine is sent), tool choice and tools.
func TestOutputConstraintsAccepted(t *testing.T) {
	weatherSchema := `{"type":"object","properties":{"city":{"type":"string"},"unit":{"enum":["c","f"]}},"required":["city"]}`
	required := func(anyOf ...string) string {
		return `{"type":"array","minItems":1,"items":{"type":"object","anyOf":[` + strings.Join(anyOf, ",") + `]}}`
	}
	call := func(name, params string) string {
		return `{"properties":{"name":{"type":"string","enum":["` + name + `"]},"parameters":` + params + `},"required":["name","parameters"]}`
	}
	type want struct {
		so       *messages.StructuredOutput
		mode     string // tool_choice
		name     string
		tools    []string // ToolList names
		template bool     // tools reach the template
		parallel bool
	}
	free := want{parallel: true}
	cases := []struct {
		name, body string
		want       want
	}{
		{"nothing", chat(`"max_tokens":3`), free},
		{"nulls are absent", chat(`"response_format":null,"structured_outputs":null,"guided_json":null,"guided_regex":null,"tool_choice":null,"parallel_tool_calls":null`), free},
		{"response_format text", chat(`"response_format":{"type":"text"}`), free},
		{"json_object", chat(`"response_format":{"type":"json_object"}`), want{so: &messages.StructuredOutput{JsonObject: true}, parallel: true}},
		{"json_schema keeps its key order", chat(`"response_format":{"type":"json_schema","json_schema":{"name":"answer","description":"d","strict":true,"schema":{"type": "object", "properties": {"zeta": {"type": "string"}, "alpha": {"type": "integer", "minimum": 1.5e0}}, "required": ["zeta", "alpha"]}}}`),
			want{so: &messages.StructuredOutput{JsonSchema: `{"type":"object","properties":{"zeta":{"type":"string"},"alpha":{"type":"integer","minimum":1.5e0}},"required":["zeta","alpha"]}`}, parallel: true}},
		{"json_schema of draft-07 with definitions", chat(`"response_format":{"type":"json_schema","json_schema":{"name":"x","schema":{"$schema":"http://json-schema.org/draft-07/schema#","definitions":{"n":{"type":"integer"}},"type":"array","items":{"$ref":"#/definitions/n"}}}}`),
			want{so: &messages.StructuredOutput{JsonSchema: `{"$schema":"http://json-schema.org/draft-07/schema#","definitions":{"n":{"type":"integer"}},"type":"array","items":{"$ref":"#/definitions/n"}}`}, parallel: true}},
		{"json_schema with an ECMA-262 pattern", chat(`"response_format":{"type":"json_schema","json_schema":{"name":"x","schema":{"type":"string","pattern":"^(?=a)\\w+$"}}}`),
			want{so: &messages.StructuredOutput{JsonSchema: `{"type":"string","pattern":"^(?=a)\\w+$"}`}, parallel: true}},
		{"structured_outputs json", chat(`"structured_outputs":{"json":{"type":"object","properties":{"b":{},"a":{}}},"disable_fallback":true,"disable_any_whitespace":false}`),
			want{so: &messages.StructuredOutput{JsonSchema: `{"type":"object","properties":{"b":{},"a":{}}}`}, parallel: true}},
		{"structured_outputs json as text", chat(`"structured_outputs":{"json":"{ \"type\": \"object\", \"required\": [\"b\", \"a\"] }"}`),
			want{so: &messages.StructuredOutput{JsonSchema: `{"type":"object","required":["b","a"]}`}, parallel: true}},
		{"structured_outputs regex", chat(`"structured_outputs":{"regex":"\\d{3}-\\d{4}"}`), want{so: &messages.StructuredOutput{Regex: `\d{3}-\d{4}`}, parallel: true}},
		{"structured_outputs regex Go cannot parse", chat(`"structured_outputs":{"regex":"(?=x)x+(?<!y)"}`), want{so: &messages.StructuredOutput{Regex: `(?=x)x+(?<!y)`}, parallel: true}},
		{"structured_outputs choice", chat(`"structured_outputs":{"choice":["yes","no","a|b"]}`), want{so: &messages.StructuredOutput{Choice: []string{"yes", "no", "a|b"}}, parallel: true}},
		{"structured_outputs grammar", chat(`"structured_outputs":{"grammar":"root ::= \"a\" | \"b\""}`), want{so: &messages.StructuredOutput{Grammar: `root ::= "a" | "b"`}, parallel: true}},
		{"structured_outputs json_object", chat(`"structured_outputs":{"json_object":true,"disable_additional_properties":false}`), want{so: &messages.StructuredOutput{JsonObject: true}, parallel: true}},
		{"guided_json", chat(`"guided_json":{"type":"array","maxItems":2}`), want{so: &messages.StructuredOutput{JsonSchema: `{"type":"array","maxItems":2}`}, parallel: true}},
		{"guided_regex", chat(`"guided_regex":"[a-z]+","guided_decoding_backend":"xgrammar"`), want{so: &messages.StructuredOutput{Regex: "[a-z]+"}, parallel: true}},
		{"guided_choice", chat(`"guided_choice":["x"]`), want{so: &messages.StructuredOutput{Choice: []string{"x"}}, parallel: true}},
		{"guided_grammar", chat(`"guided_grammar":"root ::= \"x\""`), want{so: &messages.StructuredOutput{Grammar: `root ::= "x"`}, parallel: true}},
		{"tools, no tool_choice", chat(`"tools":[` + weatherTool + `,` + clockTool + `]`),
			want{tools: []string{"get_weather", "get_time"}, template: true, parallel: true}},
		{"tools, auto", chat(`"tools":[` + weatherTool + `],"tool_choice":"auto","parallel_tool_calls":false`),
			want{mode: "auto", tools: []string{"get_weather"}, template: true}},
		{"auto without tools", chat(`"tool_choice":"auto"`), free},
		{"none", chat(`"tools":[` + weatherTool + `],"tool_choice":"none"`), want{mode: "none", parallel: true}},
		{"required", chat(`"tools":[` + weatherTool + `,` + clockTool + `],"tool_choice":"required"`),
			want{so: &messages.StructuredOutput{JsonSchema: required(call("get_weather", weatherSchema), call("get_time", `{"type":"object","properties":{}}`))},
				mode: "required", tools: []string{"get_weather", "get_time"}, template: true, parallel: true}},
		{"required with text format", chat(`"tools":[` + clockTool + `],"tool_choice":"required","response_format":{"type":"text"}`),
			want{so: &messages.StructuredOutput{JsonSchema: required(call("get_time", `{"type":"object","properties":{}}`))},
				mode: "required", tools: []string{"get_time"}, template: true, parallel: true}},
		{"named", chat(`"tools":[` + clockTool + `,` + weatherTool + `],"tool_choice":{"type":"function","function":{"name":"get_weather"}}`),
			want{so: &messages.StructuredOutput{JsonSchema: weatherSchema}, mode: "function", name: "get_weather", tools: []string{"get_time", "get_weather"}, template: true, parallel: true}},
		{"named without parameters", chat(`"tools":[` + clockTool + `],"tool_choice":{"type":"function","function":{"name":"get_time"}}`),
			want{so: &messages.StructuredOutput{JsonSchema: `{"type":"object","properties":{}}`}, mode: "function", name: "get_time", tools: []string{"get_time"}, template: true, parallel: true}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			req, aerr := parseChatRequest([]byte(c.body))
			if aerr != nil {
				t.Fatal(aerr)
			}
			if !proto.Equal(req.Structured, c.want.so) {
				t.Errorf("structured %v, want %v", req.Structured, c.want.so)
			}
			if req.ToolChoice.Mode != c.want.mode || req.ToolChoice.Name != c.want.name || req.ParallelToolCalls != c.want.parallel {
				t.Errorf("tool_choice %+v parallel %v, want %q %q %v", req.ToolChoice, req.ParallelToolCalls, c.want.mode, c.want.name, c.want.parallel)
			}
			var names []string
			for _, tl := range req.ToolList {
				names = append(names, tl.Name)
			}
			if !reflect.DeepEqual(names, c.want.tools) {
				t.Errorf("tools %v, want %v", names, c.want.tools)
			}
			if (req.Tools != nil) != c.want.template {
				t.Errorf("template tools %s, want them: %v", req.Tools, c.want.template)
			}
		})
	}
}

// TestToolListDecoded checks the functions handed to the output parsers: each one's
// parameters decoded, nil when absent; and the tools the template gets, as sent.
func TestToolListDecoded(t *testing.T) {
	body := chat(`"tools":[` + weatherTool + `,` + clockTool + `]`)
	req, aerr := parseChatRequest([]byte(body))
	if aerr != nil {
		t.Fatal(aerr)
	}
	if len(req.ToolList) != 2 || req.ToolList[1].Parameters != nil {
		t.Fatalf("tools %+v", req.ToolList)
	}
	p := req.ToolList[0].Parameters
	props, _ := p["properties"].(map[string]any)
	city, _ := props["city"].(map[string]any)
	if p["type"] != "object" || city["type"] != "string" || !reflect.DeepEqual(p["required"], []any{"city"}) {
		t.Errorf("parameters %v", p)
	}
	if string(req.Tools) != `[`+weatherTool+`,`+clockTool+`]` {
		t.Errorf("template tools %s", req.Tools)
	}
}

// TestCompletionConstraints checks that completions take the same constraints as chat
// and that the engine gets them (SamplingParams.structured), from chat as well.
func TestCompletionConstraints(t *testing.T) {
	cases := []struct {
		name, path, body string
		want             *messages.StructuredOutput
	}{
		{"completions json_object", compPath, comp(`"response_format":{"type":"json_object"}`), &messages.StructuredOutput{JsonObject: true}},
		{"completions json_schema", compPath, comp(`"response_format":{"type":"json_schema","json_schema":{"name":"n","schema":{"type":"integer"}}}`), &messages.StructuredOutput{JsonSchema: `{"type":"integer"}`}},
		{"completions structured_outputs choice", compPath, comp(`"structured_outputs":{"choice":["left","right"]}`), &messages.StructuredOutput{Choice: []string{"left", "right"}}},
		{"completions guided_grammar", compPath, comp(`"guided_grammar":"root ::= \"a\""`), &messages.StructuredOutput{Grammar: `root ::= "a"`}},
		{"completions free", compPath, comp(`"max_tokens":2`), nil},
		{"chat guided_regex", chatPath, chat(`"guided_regex":"a+"`), &messages.StructuredOutput{Regex: "a+"}},
		{"chat json_schema", chatPath, chat(`"response_format":{"type":"json_schema","json_schema":{"name":"n","schema":{"type":"object","required":["b","a"]}}}`), &messages.StructuredOutput{JsonSchema: `{"type":"object","required":["b","a"]}`}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			b := newFakeBackend(finish("ok", "stop"))
			rr := serve(newTestServer(t, b), http.MethodPost, c.path, c.body)
			if rr.Code != http.StatusOK {
				t.Fatalf("status %d: %s", rr.Code, rr.Body.String())
			}
			gens := b.generated()
			if len(gens) != 1 {
				t.Fatalf("%d Generate calls", len(gens))
			}
			if got := gens[0].Sampling.GetStructured(); !proto.Equal(got, c.want) {
				t.Errorf("sampling structured %v, want %v", got, c.want)
			}
		})
	}
}

func TestRegexProblem(t *testing.T) {
	for _, c := range []struct {
		pattern string
		ok      bool
	}{
		{`[a-z]+@[a-z]+\.com`, true},
		{`(?P<year>\d{4})-\d{2}`, true},
		{`(?=a)a`, true},      // lookahead: not RE2, a .NET/Python construct
		{`(a)\1`, true},       // back reference
		{`(?<!x)y`, true},     // lookbehind
		{`\d+(?#note)`, true}, // inline comment
		{``, false},
		{`(a`, false},
		{`a)`, false},
		{`[b-a]`, false},
		{`+a`, false},
		{`a{3,2}`, false},
		{`\`, false},
	} {
		if got := regexProblem(c.pattern); (got == "") != c.ok {
			t.Errorf("regexProblem(%q) = %q, want ok %v", c.pattern, got, c.ok)
		}
	}
}
