package parse

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

const weatherParams = `{"type": "object", "properties": {"city": {"type": "string"}, "unit": {"enum": ["c", "f"]}}, "required": ["city"]}`

func TestNamedSchema(t *testing.T) {
	cases := []struct {
		name, params, want, err string
	}{
		{"the parameters, compact, key order kept", weatherParams,
			`{"type":"object","properties":{"city":{"type":"string"},"unit":{"enum":["c","f"]}},"required":["city"]}`, ""},
		{"absent", ``, `{"type":"object","properties":{}}`, ""},
		{"null", `null`, `{"type":"object","properties":{}}`, ""},
		{"empty object", ` {} `, `{"type":"object","properties":{}}`, ""},
		{"a repeated key keeps its last value in its first place", `{"type":"object","b":1,"type":"object","a":2}`,
			`{"type":"object","b":1,"a":2}`, ""},
		{"not an object", `[1]`, "", "not a JSON object"},
		{"two values", `{} {}`, "", "data after"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := NamedSchema(json.RawMessage(c.params))
			if c.err != "" {
				if err == nil || !strings.Contains(err.Error(), c.err) {
					t.Fatalf("got %s, %v; want an error with %q", got, err, c.err)
				}
				return
			}
			if err != nil || string(got) != c.want {
				t.Fatalf("got %s, %v; want %s", got, err, c.want)
			}
		})
	}
}

func TestRequiredSchema(t *testing.T) {
	one := func(name, params string) string {
		return `{"properties":{"name":{"type":"string","enum":["` + name + `"]},"parameters":` + params + `},"required":["name","parameters"]}`
	}
	head := `{"type":"array","minItems":1,"items":{"type":"object","anyOf":[`
	cases := []struct {
		name  string
		tools []ToolSchema
		want  string
		err   string
	}{
		{"one function", []ToolSchema{{"get_weather", json.RawMessage(weatherParams)}},
			head + one("get_weather", `{"type":"object","properties":{"city":{"type":"string"},"unit":{"enum":["c","f"]}},"required":["city"]}`) + `]}}`, ""},
		{"two functions, one without parameters", []ToolSchema{{"a", json.RawMessage(`{"type":"object"}`)}, {"b", nil}},
			head + one("a", `{"type":"object"}`) + "," + one("b", `{"type":"object","properties":{}}`) + `]}}`, ""},
		{"$defs move to the root", []ToolSchema{
			{"a", json.RawMessage(`{"$defs":{"P":{"type":"integer"}},"type":"object","properties":{"x":{"$ref":"#/$defs/P"}}}`)},
			{"b", json.RawMessage(`{"type":"object","$defs":{"Q":{"type":"string"},"P":{"type":"integer"}}}`)}},
			head + one("a", `{"type":"object","properties":{"x":{"$ref":"#/$defs/P"}}}`) + "," + one("b", `{"type":"object"}`) +
				`]},"$defs":{"P":{"type":"integer"},"Q":{"type":"string"}}}`, ""},
		{"definitions too", []ToolSchema{{"a", json.RawMessage(`{"definitions":{"P":{"type":"integer"}},"properties":{"x":{"$ref":"#/definitions/P"}}}`)}},
			head + one("a", `{"properties":{"x":{"$ref":"#/definitions/P"}}}`) + `]},"definitions":{"P":{"type":"integer"}}}`, ""},
		{"the same definition written in another key order", []ToolSchema{
			{"a", json.RawMessage(`{"$defs":{"P":{"type":"integer","minimum":1}}}`)},
			{"b", json.RawMessage(`{"$defs":{"P":{"minimum":1,"type":"integer"}}}`)}},
			head + one("a", `{}`) + "," + one("b", `{}`) + `]},"$defs":{"P":{"type":"integer","minimum":1}}}`, ""},
		{"a name with quotes", []ToolSchema{{`say "hi"`, nil}}, head + one(`say \"hi\"`, `{"type":"object","properties":{}}`) + `]}}`, ""},
		{"conflicting definitions", []ToolSchema{
			{"a", json.RawMessage(`{"$defs":{"P":{"type":"integer"}}}`)},
			{"b", json.RawMessage(`{"$defs":{"P":{"type":"string"}}}`)}}, "", `functions "a" and "b" both define $defs "P"`},
		{"$defs not an object", []ToolSchema{{"a", json.RawMessage(`{"$defs":[1]}`)}}, "", `function "a": $defs: not a JSON object`},
		{"parameters not an object", []ToolSchema{{"a", json.RawMessage(`"x"`)}}, "", `function "a"`},
		{"no functions", nil, "", "no functions"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := RequiredSchema(c.tools)
			if c.err != "" {
				if err == nil || !strings.Contains(err.Error(), c.err) {
					t.Fatalf("got %s, %v; want an error with %q", got, err, c.err)
				}
				return
			}
			if err != nil || string(got) != c.want {
				t.Fatalf("got  %s, %v\nwant %s", got, err, c.want)
			}
		})
	}
}

// TestRequiredSchemaValidates compiles the required schema with a JSON Schema library and
// checks the calls it admits: what NewRequiredCalls reads.
func TestRequiredSchemaValidates(t *testing.T) {
	s, err := RequiredSchema([]ToolSchema{
		{"get_weather", json.RawMessage(weatherParams)},
		{"count", json.RawMessage(`{"$defs":{"N":{"type":"integer","minimum":0}},"type":"object","properties":{"n":{"$ref":"#/$defs/N"}},"required":["n"]}`)},
	})
	if err != nil {
		t.Fatal(err)
	}
	doc, err := jsonschema.UnmarshalJSON(strings.NewReader(string(s)))
	if err != nil {
		t.Fatal(err)
	}
	c := jsonschema.NewCompiler()
	if err := c.AddResource("required.json", doc); err != nil {
		t.Fatal(err)
	}
	sch, err := c.Compile("required.json")
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range []struct {
		instance string
		ok       bool
	}{
		{`[{"name":"get_weather","parameters":{"city":"Paris"}}]`, true},
		{`[{"name":"count","parameters":{"n":3}},{"name":"get_weather","parameters":{"city":"Oslo","unit":"c"}}]`, true},
		{`[]`, false},
		{`[{"name":"get_weather","parameters":{"unit":"c"}}]`, false},
		{`[{"name":"count","parameters":{"n":-1}}]`, false},
		{`[{"name":"other","parameters":{}}]`, false},
		{`[{"name":"get_weather"}]`, false},
		{`{"name":"get_weather","parameters":{"city":"Paris"}}`, false},
	} {
		inst, err := jsonschema.UnmarshalJSON(strings.NewReader(v.instance))
		if err != nil {
			t.Fatal(err)
		}
		if err := sch.Validate(inst); (err == nil) != v.ok {
			t.Errorf("%s: valid %v, want %v (%v)", v.instance, err == nil, v.ok, err)
		}
	}
}

// TestRequiredSchemaRefusesRootRefs: a parameters schema that refers to its own root
// cannot be nested in the array of calls (its "#" would name the array); one that refers
// through $defs can.
func TestRequiredSchemaRefusesRootRefs(t *testing.T) {
	for _, c := range []struct {
		params string
		ok     bool
	}{
		{`{"type":"object","properties":{"child":{"$ref":"#"}}}`, false},
		{`{"type":"object","properties":{"a":{"type":"string"},"b":{"$ref":"#/properties/a"}}}`, false},
		{`{"type":"object","properties":{"n":{"$ref":"#/$defs/node"}},"$defs":{"node":{"type":"object"}}}`, true},
		{`{"type":"object","properties":{"n":{"$ref":"#/definitions/node"}},"definitions":{"node":{"type":"object"}}}`, true},
	} {
		_, err := RequiredSchema([]ToolSchema{{Name: "f", Parameters: json.RawMessage(c.params)}})
		if (err == nil) != c.ok {
			t.Errorf("%s: err %v, want ok=%v", c.params, err, c.ok)
		}
	}
}
