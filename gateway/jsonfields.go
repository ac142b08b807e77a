package gateway

import (
	"encoding/json"
	"math"
	"slices"
	"strconv"
)

// Request bodies are decoded once (decodeBody) into a tree of plain values
// (map[string]any, []any or idArray, string, bool, json.Number, nil) and read field by
// field from it, so that every type
// error names its field in OpenAI's notation ("messages[0].content").

// jsonKind is the JSON type of a decoded value.
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

// kindOf returns the JSON type of a decoded value.
func kindOf(v any) jsonKind {
	switch v.(type) {
	case bool:
		return kindBool
	case json.Number:
		return kindNumber
	case string:
		return kindString
	case []any, idArray:
		return kindArray
	case map[string]any:
		return kindObject
	default:
		return kindNull
	}
}

// object reads the fields of one JSON object, recording the first error it meets. Null
// fields read as absent, as OpenAI treats them.
type object struct {
	m      map[string]any
	prefix string // "" at the top level, else "messages[0]." etc.
	err    *APIError
	// read, when not nil, records the fields looked at (trackReads).
	read map[string]bool
}

// trackReads makes o record the fields it is asked for, for unread.
func (o *object) trackReads() { o.read = make(map[string]bool, len(o.m)) }

// unread returns the fields of o nothing asked for since trackReads, sorted; nil when
// reads are not tracked.
func (o *object) unread() []string {
	if o.read == nil {
		return nil
	}
	var out []string
	for k := range o.m {
		if !o.read[k] {
			out = append(out, k)
		}
	}
	slices.Sort(out)
	return out
}

// objectOf wraps a decoded value that must be an object; param names it in errors ("" for
// the body itself).
func objectOf(v any, param string) (*object, *APIError) {
	m, ok := v.(map[string]any)
	if !ok {
		if param == "" {
			return nil, newError(KindInvalidJSON, "", "The request body must be a JSON object, got %s.", kindOf(v))
		}
		return nil, typeError(param, "an object", kindOf(v))
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
	if o.err == nil && e != nil {
		o.err = e
	}
}

// value returns the field's value; ok is false when absent or null.
func (o *object) value(key string) (any, bool) {
	if o.read != nil {
		o.read[key] = true
	}
	v, ok := o.m[key]
	if !ok || v == nil {
		return nil, false
	}
	return v, true
}

// has reports whether the field is present and not null.
func (o *object) has(key string) bool {
	_, ok := o.value(key)
	return ok
}

func (o *object) expect(key string, want jsonKind, wantText string) (any, bool) {
	v, ok := o.value(key)
	if !ok {
		return nil, false
	}
	if k := kindOf(v); k != want {
		o.fail(typeError(o.param(key), wantText, k))
		return nil, false
	}
	return v, true
}

func (o *object) str(key string) (string, bool) {
	v, ok := o.expect(key, kindString, "a string")
	if !ok {
		return "", false
	}
	return v.(string), true
}

func (o *object) boolean(key string) (bool, bool) {
	v, ok := o.expect(key, kindBool, "a boolean")
	if !ok {
		return false, false
	}
	return v.(bool), true
}

func (o *object) number(key string) (float64, bool) {
	v, ok := o.expect(key, kindNumber, "a number")
	if !ok {
		return 0, false
	}
	f, err := strconv.ParseFloat(string(v.(json.Number)), 64)
	if err != nil || math.IsInf(f, 0) || math.IsNaN(f) {
		o.fail(newError(KindInvalidValue, o.param(key), "Invalid '%s': number out of range.", o.param(key)))
		return 0, false
	}
	return f, true
}

// integer reads an integer field; integral numbers written with a fraction or exponent
// (2.0, 1e3) are accepted.
func (o *object) integer(key string) (int64, bool) {
	v, ok := o.expect(key, kindNumber, "an integer")
	if !ok {
		return 0, false
	}
	n, err := parseInteger(v.(json.Number))
	if err != nil {
		o.fail(newError(KindInvalidType, o.param(key), "Invalid type for '%s': expected an integer, but got %s.", o.param(key), v))
		return 0, false
	}
	return n, true
}

func parseInteger(n json.Number) (int64, error) {
	if v, err := strconv.ParseInt(string(n), 10, 64); err == nil {
		return v, nil
	}
	f, err := strconv.ParseFloat(string(n), 64)
	if err != nil || f != math.Trunc(f) || math.Abs(f) > 1<<53 {
		return 0, strconv.ErrSyntax
	}
	return int64(f), nil
}

func (o *object) array(key string) ([]any, bool) {
	v, ok := o.expect(key, kindArray, "an array")
	if !ok {
		return nil, false
	}
	return arrayOf(v)
}

// child reads a nested object field.
func (o *object) child(key string) (*object, bool) {
	v, ok := o.expect(key, kindObject, "an object")
	if !ok {
		return nil, false
	}
	c, _ := objectOf(v, o.param(key))
	return c, true
}

// strOrStrings reads a field that is a string or an array of strings.
func (o *object) strOrStrings(key string) ([]string, bool) {
	v, ok := o.value(key)
	if !ok {
		return nil, false
	}
	switch v := v.(type) {
	case string:
		return []string{v}, true
	case []any, idArray:
		items, _ := arrayOf(v)
		out := make([]string, 0, len(items))
		for i, it := range items {
			s, ok := it.(string)
			if !ok {
				o.fail(typeError(indexParam(o.param(key), i), "a string", kindOf(it)))
				return nil, false
			}
			out = append(out, s)
		}
		return out, true
	default:
		o.fail(typeError(o.param(key), "a string or an array of strings", kindOf(v)))
		return nil, false
	}
}

// tokenIDs reads an array of token ids (non-negative integers below 2^32): a decoded
// []any, or an idArray, which holds ids already.
func tokenIDs(v any, param string) ([]uint32, *APIError) {
	if ids, ok := v.(idArray); ok {
		return ids, nil
	}
	items, _ := v.([]any)
	out := make([]uint32, 0, len(items))
	for i, it := range items {
		p := indexParam(param, i)
		n, ok := it.(json.Number)
		if !ok {
			return nil, typeError(p, "an integer token id", kindOf(it))
		}
		v, err := parseInteger(n)
		if err != nil {
			return nil, newError(KindInvalidType, p, "Invalid type for '%s': expected an integer token id, but got %s.", p, n)
		}
		if v < 0 || v > math.MaxUint32 {
			return nil, newError(KindInvalidValue, p, "Invalid '%s': token id %d is out of range.", p, v)
		}
		out = append(out, uint32(v))
	}
	return out, nil
}

// plain converts a decoded value for a chat template: json.Number becomes int64 when
// integral, else float64; maps and slices are converted in place.
func plain(v any) any {
	switch v := v.(type) {
	case json.Number:
		if i, err := strconv.ParseInt(string(v), 10, 64); err == nil {
			return i
		}
		f, _ := strconv.ParseFloat(string(v), 64)
		return f
	case map[string]any:
		for k, x := range v {
			v[k] = plain(x)
		}
		return v
	case []any:
		for i, x := range v {
			v[i] = plain(x)
		}
		return v
	case idArray:
		out := make([]any, len(v))
		for i, id := range v {
			out[i] = int64(id)
		}
		return out
	default:
		return v
	}
}

func indexParam(param string, i int) string { return param + "[" + strconv.Itoa(i) + "]" }
