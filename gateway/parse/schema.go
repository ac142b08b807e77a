package parse

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
)

// The JSON Schemas an engine is constrained with when a request forces a tool call, in
// vLLM's shapes (docs/reference.md §16 shows them), so that the engine's output is what
// NewNamedCall and NewRequiredCalls read: for a named function its parameters schema
// (the output is the arguments object), for "required" an array of one or more
// {"name", "parameters"} objects, one anyOf branch per function. A function without
// parameters (absent, null or {}) stands for {"type":"object","properties":{}}. Each
// function's "$defs" (and "definitions", which vLLM leaves in place) move to the root,
// so that "#/$defs/X" references keep resolving; two functions that define the same
// name differently are an error, as in vLLM. Key order is kept: engines generate an
// object's properties in the order its schema lists them.

// ToolSchema is one offered function as RequiredSchema reads it: its name and its
// parameters JSON Schema as JSON text (nil, null or {}: none).
type ToolSchema struct {
	Name       string
	Parameters json.RawMessage
}

// emptyParameters is the schema of a function without parameters.
const emptyParameters = `{"type":"object","properties":{}}`

// hoisted are the members of a parameters schema that RequiredSchema moves to the root.
var hoisted = []string{"$defs", "definitions"}

// NamedSchema returns the JSON Schema (compact JSON text) that constrains an engine to
// call the function with these parameters: the parameters schema itself, or
// {"type":"object","properties":{}} when there is none. Errors: parameters that are not
// a JSON object.
func NamedSchema(parameters json.RawMessage) ([]byte, error) {
	ms, err := members(parameters)
	if err != nil {
		return nil, err
	}
	if len(ms) == 0 {
		return []byte(emptyParameters), nil
	}
	return appendObject(nil, ms), nil
}

// appendObject appends the JSON object of members ms.
func appendObject(b []byte, ms []member) []byte {
	b = append(b, '{')
	for i, m := range ms {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, m.rawKey...)
		b = append(b, ':')
		b = append(b, m.value...)
	}
	return append(b, '}')
}

// RequiredSchema returns the JSON Schema (compact JSON text) that constrains an engine to
// answer with one or more calls of these functions (tool_choice "required"), in the
// shape above. Errors: no tools, parameters that are not a JSON object (naming the
// function), or two functions whose $defs (or definitions) give one name different
// schemas.
func RequiredSchema(tools []ToolSchema) ([]byte, error) {
	if len(tools) == 0 {
		return nil, errors.New("tool_choice required: no functions to call")
	}
	defs := make([]defTable, len(hoisted))
	for i, k := range hoisted {
		defs[i].key = k
	}
	b := []byte(`{"type":"array","minItems":1,"items":{"type":"object","anyOf":[`)
	for i, t := range tools {
		ms, err := members(t.Parameters)
		if err != nil {
			return nil, fmt.Errorf("function %q: %w", t.Name, err)
		}
		if ref, ok := rootRef(t.Parameters); ok {
			// Nested in the array of calls, "#" would name the array, not the function's
			// parameters: the engine would be held to another schema.
			return nil, fmt.Errorf("function %q: its parameters refer to their own root ($ref %q), which a tool_choice \"required\" constraint cannot keep; refer through $defs instead", t.Name, ref)
		}
		if i > 0 {
			b = append(b, ',')
		}
		name, _ := json.Marshal(t.Name) // a string always encodes
		b = append(b, `{"properties":{"name":{"type":"string","enum":[`...)
		b = append(b, name...)
		b = append(b, `]},"parameters":`...)
		if len(ms) == 0 {
			b = append(b, emptyParameters...)
		} else {
			kept := make([]member, 0, len(ms))
			for _, m := range ms {
				if d := defTableFor(defs, m.key); d != nil {
					if err := d.add(t.Name, m.value); err != nil {
						return nil, err
					}
					continue
				}
				kept = append(kept, m)
			}
			b = appendObject(b, kept)
		}
		b = append(b, `},"required":["name","parameters"]}`...)
	}
	b = append(b, "]}"...)
	for _, d := range defs {
		if len(d.names) == 0 {
			continue
		}
		key, _ := json.Marshal(d.key)
		b = append(b, ',')
		b = append(b, key...)
		b = append(b, ':')
		b = appendObject(b, d.names)
	}
	return append(b, '}'), nil
}

// member is one member of a JSON object: its key decoded and as written (a JSON string),
// and its value's compact JSON text.
type member struct {
	key    string
	rawKey []byte
	value  []byte
}

// members returns the members of the JSON object raw, in order and compacted (a repeated
// key keeps its last value, in its first place). nil, null and {} have none. Errors:
// raw is not one JSON object.
func members(raw json.RawMessage) ([]member, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return nil, errors.New("parameters: not a JSON object")
	}
	var out []member
	at := map[string]int{}
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return nil, fmt.Errorf("parameters: %w", err)
		}
		k, _ := t.(string)
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return nil, fmt.Errorf("parameters: member %q: %w", k, err)
		}
		var c bytes.Buffer
		if err := json.Compact(&c, v); err != nil {
			return nil, fmt.Errorf("parameters: member %q: %w", k, err)
		}
		if i, ok := at[k]; ok {
			out[i].value = c.Bytes()
			continue
		}
		rk, _ := json.Marshal(k)
		at[k] = len(out)
		out = append(out, member{key: k, rawKey: rk, value: c.Bytes()})
	}
	if _, err := dec.Token(); err != nil {
		return nil, fmt.Errorf("parameters: %w", err)
	}
	if dec.More() {
		return nil, errors.New("parameters: data after the JSON object")
	}
	return out, nil
}

// defTable gathers the definitions (the members of one hoisted key) of every function,
// by name, in the order first seen.
type defTable struct {
	key   string
	names []member
	owner []string // the function that first defined names[i]
}

func defTableFor(defs []defTable, key string) *defTable {
	for i := range defs {
		if defs[i].key == key {
			return &defs[i]
		}
	}
	return nil
}

// add takes function fn's definitions (the value of d.key in its parameters). Errors:
// the value is not an object, or it gives a name already defined otherwise.
func (d *defTable) add(fn string, value []byte) error {
	ms, err := members(value)
	if err != nil {
		return fmt.Errorf("function %q: %s: not a JSON object", fn, d.key)
	}
	for _, m := range ms {
		i := 0
		for i < len(d.names) && d.names[i].key != m.key {
			i++
		}
		if i == len(d.names) {
			d.names = append(d.names, m)
			d.owner = append(d.owner, fn)
			continue
		}
		if !sameJSON(d.names[i].value, m.value) {
			return fmt.Errorf("functions %q and %q both define %s %q, differently: one schema cannot hold both",
				d.owner[i], fn, d.key, m.key)
		}
	}
	return nil
}

// sameJSON reports whether a and b are the same JSON value (object key order aside).
func sameJSON(a, b []byte) bool {
	if bytes.Equal(a, b) {
		return true
	}
	var x, y any
	da, db := json.NewDecoder(bytes.NewReader(a)), json.NewDecoder(bytes.NewReader(b))
	da.UseNumber()
	db.UseNumber()
	return da.Decode(&x) == nil && db.Decode(&y) == nil && reflect.DeepEqual(x, y)
}

// rootRef finds a $ref in a parameters schema that points into the schema's own root
// ("#", "#/properties/…") rather than into $defs or definitions, which RequiredSchema
// hoists to the root of the combined schema.
func rootRef(parameters json.RawMessage) (string, bool) {
	var v any
	if json.Unmarshal(parameters, &v) != nil {
		return "", false
	}
	var walk func(v any) (string, bool)
	walk = func(v any) (string, bool) {
		switch v := v.(type) {
		case map[string]any:
			if ref, ok := v["$ref"].(string); ok && (ref == "#" || strings.HasPrefix(ref, "#/")) &&
				!strings.HasPrefix(ref, "#/$defs/") && !strings.HasPrefix(ref, "#/definitions/") {
				return ref, true
			}
			for _, x := range v {
				if ref, ok := walk(x); ok {
					return ref, true
				}
			}
		case []any:
			for _, x := range v {
				if ref, ok := walk(x); ok {
					return ref, true
				}
			}
		}
		return "", false
	}
	return walk(v)
}
