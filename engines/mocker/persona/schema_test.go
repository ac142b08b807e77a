package persona

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

// compileSchema compiles raw (JSON text) with format assertions on, so that a "date"
// must be a date.
func compileSchema(t *testing.T, raw []byte) *jsonschema.Schema {
	t.Helper()
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
	if err != nil {
		t.Fatal(err)
	}
	c := jsonschema.NewCompiler()
	c.AssertFormat()
	if err := c.AddResource("schema.json", doc); err != nil {
		t.Fatal(err)
	}
	sch, err := c.Compile("schema.json")
	if err != nil {
		t.Fatalf("schema %s: %v", raw, err)
	}
	return sch
}

// validate checks that text is JSON valid against sch.
func validate(t *testing.T, sch *jsonschema.Schema, text string) {
	t.Helper()
	v, err := jsonschema.UnmarshalJSON(strings.NewReader(text))
	if err != nil {
		t.Fatalf("%s is not JSON: %v", text, err)
	}
	if err := sch.Validate(v); err != nil {
		t.Fatalf("%s is not valid: %v", text, err)
	}
}

// TestInstanceValid: for every schema of testdata/schemas.json and 64 seeds, the
// generated instance is valid (github.com/santhosh-tekuri/jsonschema, formats asserted),
// and the same seed gives the same instance.
func TestInstanceValid(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("testdata", "schemas.json"))
	if err != nil {
		t.Fatal(err)
	}
	var cases []struct {
		Name   string          `json:"name"`
		Schema json.RawMessage `json:"schema"`
	}
	if err := json.Unmarshal(data, &cases); err != nil {
		t.Fatal(err)
	}
	for _, c := range cases {
		t.Run(c.Name, func(t *testing.T) {
			sch := compileSchema(t, c.Schema)
			schema, err := decodeOrdered(json.NewDecoder(bytes.NewReader(c.Schema)))
			if err != nil {
				t.Fatal(err)
			}
			distinct := map[string]bool{}
			for seed := range uint64(64) {
				text := jsonText(instance(newRNG(seed), schema))
				validate(t, sch, text)
				if again := jsonText(instance(newRNG(seed), schema)); again != text {
					t.Fatalf("seed %d gave %s, then %s", seed, text, again)
				}
				distinct[text] = true
			}
			t.Logf("%d distinct instances, e.g. %s", len(distinct), jsonText(instance(newRNG(0), schema)))
		})
	}
}

// TestInstanceOrder: properties come in the order the schema lists them.
func TestInstanceOrder(t *testing.T) {
	schema, err := decodeOrdered(json.NewDecoder(strings.NewReader(
		`{"type":"object","properties":{"zeta":{"const":1},"alpha":{"const":2},"mid":{"const":3}},"required":["mid","zeta","alpha"]}`)))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := jsonText(instance(newRNG(1), schema)), `{"zeta": 1, "alpha": 2, "mid": 3}`; got != want {
		t.Fatalf("instance %s, want %s", got, want)
	}
}

func TestWriters(t *testing.T) {
	v := object{{"s", "a\"b<c>\n"}, {"i", int64(-3)}, {"f", 2.0}, {"g", 0.25}, {"b", true}, {"n", nil},
		{"a", []any{false, object{}}}}
	for _, c := range []struct {
		name, got, want string
	}{
		{"json", jsonText(v), `{"s": "a\"b<c>\n", "i": -3, "f": 2.0, "g": 0.25, "b": true, "n": null, "a": [false, {}]}`},
		{"python", func() string { var b strings.Builder; writePython(&b, v); return b.String() }(),
			`{"s": "a\"b<c>\n", "i": -3, "f": 2.0, "g": 0.25, "b": True, "n": None, "a": [False, {}]}`},
		{"plain string", plainString("x y"), "x y"},
		{"plain number", plainString(int64(7)), "7"},
		{"plain object", plainString(object{{"k", "v"}}), `{"k": "v"}`},
	} {
		if c.got != c.want {
			t.Errorf("%s: %s, want %s", c.name, c.got, c.want)
		}
	}
	var back map[string]any
	if err := json.Unmarshal([]byte(jsonText(v)), &back); err != nil || back["s"] != "a\"b<c>\n" {
		t.Fatalf("JSON does not read back: %v %v", back, err)
	}
	if s := strconv.Quote(formatFloat(1e21)); !strings.Contains(s, "1") {
		t.Fatalf("large float %s", s)
	}
}
