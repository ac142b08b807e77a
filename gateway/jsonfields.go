package gateway

import (
	"bytes"
	"encoding/json"
	"math"
	"strconv"
)

// jsonKind is the JSON type of a raw value, from its first byte.
type jsonKind int

const (
	kindNull jsonKind = iota
	kindBool
	kindNumber
	kindString
	kindArray
	kindObject
)

func (k jsonKind) String() string {
	return [...]string{"null", "boolean", "number", "string", "array", "object"}[k]
}

// kindOf returns the JSON type of a syntactically valid raw value.
func kindOf(raw json.RawMessage) jsonKind {
	raw = bytes.TrimLeft(raw, " \t\r\n")
	if len(raw) == 0 {
		return kindNull
	}
	switch raw[0] {
	case 'n':
		return kindNull
	case 't', 'f':
		return kindBool
	case '"':
		return kindString
	case '[':
		return kindArray
	case '{':
		return kindObject
	default:
		return kindNumber
	}
}

// object reads the fields of one JSON object, recording the first error it meets
// (OpenAI-style param names: "messages[0].content"). Null fields read as absent, as
// OpenAI treats them.
type object struct {
	m      map[string]json.RawMessage
	prefix string // "" at the top level, else "messages[0]." etc.
	err    *APIError
}

// parseObject decodes raw (a syntactically valid JSON value) as an object. param names
// raw in errors ("" for the body itself).
func parseObject(raw json.RawMessage, param string) (*object, *APIError) {
	if k := kindOf(raw); k != kindObject {
		if param == "" {
			return nil, newError(KindInvalidJSON, "", "The request body must be a JSON object, got %s.", k)
		}
		return nil, typeError(param, "an object", k)
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil {
		return nil, newError(KindInvalidJSON, param, "Could not parse the JSON body of the request: %v.", err)
	}
	prefix := ""
	if param != "" {
		prefix = param + "."
	}
	return &object{m: m, prefix: prefix}, nil
}

func typeError(param, want string, got jsonKind) *APIError {
	return newError(KindInvalidType, param, "Invalid type for '%s': expected %s, but got %s.", param, want, got)
}

func (o *object) param(key string) string { return o.prefix + key }

func (o *object) fail(e *APIError) {
	if o.err == nil {
		o.err = e
	}
}

// raw returns the field's raw value; ok is false when absent or null.
func (o *object) raw(key string) (json.RawMessage, bool) {
	r, ok := o.m[key]
	if !ok || kindOf(r) == kindNull {
		return nil, false
	}
	return r, true
}

// has reports whether the field is present and not null.
func (o *object) has(key string) bool {
	_, ok := o.raw(key)
	return ok
}

func (o *object) expect(key string, want jsonKind, wantText string) (json.RawMessage, bool) {
	r, ok := o.raw(key)
	if !ok {
		return nil, false
	}
	if k := kindOf(r); k != want {
		o.fail(typeError(o.param(key), wantText, k))
		return nil, false
	}
	return r, true
}

func (o *object) str(key string) (string, bool) {
	r, ok := o.expect(key, kindString, "a string")
	if !ok {
		return "", false
	}
	var s string
	if err := json.Unmarshal(r, &s); err != nil {
		o.fail(typeError(o.param(key), "a string", kindString))
		return "", false
	}
	return s, true
}

func (o *object) boolean(key string) (bool, bool) {
	r, ok := o.expect(key, kindBool, "a boolean")
	if !ok {
		return false, false
	}
	return bytes.HasPrefix(bytes.TrimLeft(r, " \t\r\n"), []byte("true")), true
}

func (o *object) number(key string) (float64, bool) {
	r, ok := o.expect(key, kindNumber, "a number")
	if !ok {
		return 0, false
	}
	f, err := strconv.ParseFloat(string(bytes.TrimSpace(r)), 64)
	if err != nil || math.IsInf(f, 0) || math.IsNaN(f) {
		o.fail(newError(KindInvalidValue, o.param(key), "Invalid '%s': number out of range.", o.param(key)))
		return 0, false
	}
	return f, true
}

// integer reads an integer field; integral numbers written with a fraction or exponent
// (2.0, 1e3) are accepted.
func (o *object) integer(key string) (int64, bool) {
	r, ok := o.expect(key, kindNumber, "an integer")
	if !ok {
		return 0, false
	}
	v, err := parseInteger(r)
	if err != nil {
		o.fail(newError(KindInvalidType, o.param(key), "Invalid type for '%s': expected an integer, but got %s.", o.param(key), bytes.TrimSpace(r)))
		return 0, false
	}
	return v, true
}

func parseInteger(r json.RawMessage) (int64, error) {
	s := string(bytes.TrimSpace(r))
	if v, err := strconv.ParseInt(s, 10, 64); err == nil {
		return v, nil
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil || f != math.Trunc(f) || math.Abs(f) > 1<<53 {
		return 0, strconv.ErrSyntax
	}
	return int64(f), nil
}

func (o *object) array(key string) ([]json.RawMessage, bool) {
	r, ok := o.expect(key, kindArray, "an array")
	if !ok {
		return nil, false
	}
	var a []json.RawMessage
	if err := json.Unmarshal(r, &a); err != nil {
		o.fail(typeError(o.param(key), "an array", kindArray))
		return nil, false
	}
	return a, true
}

// child reads a nested object field.
func (o *object) child(key string) (*object, bool) {
	r, ok := o.expect(key, kindObject, "an object")
	if !ok {
		return nil, false
	}
	c, err := parseObject(r, o.param(key))
	if err != nil {
		o.fail(err)
		return nil, false
	}
	return c, true
}

// anyValue decodes a field into plain Go values (maps, slices, float64, string, bool).
func (o *object) anyValue(key string) (any, bool) {
	r, ok := o.raw(key)
	if !ok {
		return nil, false
	}
	var v any
	if err := json.Unmarshal(r, &v); err != nil {
		o.fail(newError(KindInvalidJSON, o.param(key), "Invalid '%s': %v.", o.param(key), err))
		return nil, false
	}
	return v, true
}

// strOrStrings reads a field that is a string or an array of strings.
func (o *object) strOrStrings(key string) ([]string, bool) {
	r, ok := o.raw(key)
	if !ok {
		return nil, false
	}
	switch kindOf(r) {
	case kindString:
		s, _ := o.str(key)
		return []string{s}, true
	case kindArray:
		items, ok := o.array(key)
		if !ok {
			return nil, false
		}
		out := make([]string, 0, len(items))
		for i, it := range items {
			var s string
			if kindOf(it) != kindString || json.Unmarshal(it, &s) != nil {
				o.fail(typeError(indexParam(o.param(key), i), "a string", kindOf(it)))
				return nil, false
			}
			out = append(out, s)
		}
		return out, true
	default:
		o.fail(typeError(o.param(key), "a string or an array of strings", kindOf(r)))
		return nil, false
	}
}

// tokenIDs reads an array of token ids (non-negative integers below 2^32).
func tokenIDs(items []json.RawMessage, param string) ([]uint32, *APIError) {
	out := make([]uint32, 0, len(items))
	for i, it := range items {
		p := indexParam(param, i)
		if k := kindOf(it); k != kindNumber {
			return nil, typeError(p, "an integer token id", k)
		}
		v, err := parseInteger(it)
		if err != nil {
			return nil, newError(KindInvalidType, p, "Invalid type for '%s': expected an integer token id, but got %s.", p, bytes.TrimSpace(it))
		}
		if v < 0 || v > math.MaxUint32 {
			return nil, newError(KindInvalidValue, p, "Invalid '%s': token id %d is out of range.", p, v)
		}
		out = append(out, uint32(v))
	}
	return out, nil
}

func indexParam(param string, i int) string { return param + "[" + strconv.Itoa(i) + "]" }
