package gateway

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"unicode/utf8"
)

// A single-pass JSON (RFC 8259) decoder for request bodies. It builds the same tree that
// encoding/json builds into an `any` with UseNumber (map[string]any, []any, string, bool,
// json.Number, nil; a repeated key keeps its last value; invalid UTF-8 in strings becomes
// U+FFFD), except that an array made only of integers in [0, 2^32) written as plain
// digits, such as a token-id prompt, becomes an idArray: the ids as []uint32, with no
// per-element allocation. Readers get a generic []any from it through arrayOf.

// idArray is a decoded JSON array of token-id-like integers (see above).
type idArray []uint32

// maxJSONDepth bounds the nesting of arrays and objects, as encoding/json does.
const maxJSONDepth = 10000

type jsonDecoder struct {
	b     []byte
	i     int
	depth int
}

func (d *jsonDecoder) errorf(format string, args ...any) error {
	return fmt.Errorf("gateway: JSON offset %d: %s", d.i, fmt.Sprintf(format, args...))
}

func (d *jsonDecoder) skipSpace() {
	for d.i < len(d.b) {
		switch d.b[d.i] {
		case ' ', '\t', '\n', '\r':
			d.i++
		default:
			return
		}
	}
}

// value decodes the value at d.i (no leading space).
func (d *jsonDecoder) value() (any, error) {
	if d.i >= len(d.b) {
		return nil, d.errorf("unexpected end of input")
	}
	switch c := d.b[d.i]; {
	case c == '{':
		return d.object()
	case c == '[':
		return d.array()
	case c == '"':
		return d.str()
	case c == '-' || c >= '0' && c <= '9':
		n, err := d.number()
		return n, err
	case c == 't':
		return true, d.literal("true")
	case c == 'f':
		return false, d.literal("false")
	case c == 'n':
		return nil, d.literal("null")
	default:
		return nil, d.errorf("invalid character %q looking for a value", c)
	}
}

func (d *jsonDecoder) literal(lit string) error {
	if len(d.b)-d.i < len(lit) || string(d.b[d.i:d.i+len(lit)]) != lit {
		return d.errorf("invalid literal, want %s", lit)
	}
	d.i += len(lit)
	return nil
}

func (d *jsonDecoder) enter() error {
	d.depth++
	if d.depth > maxJSONDepth {
		return d.errorf("nested too deeply")
	}
	return nil
}

func (d *jsonDecoder) object() (any, error) {
	if err := d.enter(); err != nil {
		return nil, err
	}
	defer func() { d.depth-- }()
	d.i++ // '{'
	m := map[string]any{}
	d.skipSpace()
	if d.i < len(d.b) && d.b[d.i] == '}' {
		d.i++
		return m, nil
	}
	for {
		if d.i >= len(d.b) || d.b[d.i] != '"' {
			return nil, d.errorf("expected a string key")
		}
		k, err := d.str()
		if err != nil {
			return nil, err
		}
		d.skipSpace()
		if d.i >= len(d.b) || d.b[d.i] != ':' {
			return nil, d.errorf("expected ':' after an object key")
		}
		d.i++
		d.skipSpace()
		v, err := d.value()
		if err != nil {
			return nil, err
		}
		m[k] = v
		d.skipSpace()
		if d.i >= len(d.b) {
			return nil, d.errorf("unexpected end of input in an object")
		}
		switch d.b[d.i] {
		case ',':
			d.i++
			d.skipSpace()
		case '}':
			d.i++
			return m, nil
		default:
			return nil, d.errorf("invalid character %q after an object value", d.b[d.i])
		}
	}
}

func (d *jsonDecoder) array() (any, error) {
	if err := d.enter(); err != nil {
		return nil, err
	}
	defer func() { d.depth-- }()
	d.i++ // '['
	d.skipSpace()
	if d.i < len(d.b) && d.b[d.i] == ']' {
		d.i++
		return []any{}, nil
	}
	if d.i < len(d.b) && d.b[d.i] >= '0' && d.b[d.i] <= '9' {
		if ids, ok := d.ids(); ok {
			return ids, nil
		}
	}
	out := []any{}
	for {
		v, err := d.value()
		if err != nil {
			return nil, err
		}
		out = append(out, v)
		d.skipSpace()
		if d.i >= len(d.b) {
			return nil, d.errorf("unexpected end of input in an array")
		}
		switch d.b[d.i] {
		case ',':
			d.i++
			d.skipSpace()
		case ']':
			d.i++
			return out, nil
		default:
			return nil, d.errorf("invalid character %q after an array element", d.b[d.i])
		}
	}
}

// ids reads an array (after '[' and space) made only of plain-digit integers below
// 2^32. When it meets anything else it rewinds and returns false: the generic path then
// decodes (or refuses) the array.
func (d *jsonDecoder) ids() (idArray, bool) {
	b, i := d.b, d.i
	// Grown as ids come, not sized ahead by scanning for the array's end: a body of nested
	// arrays would rescan (and allocate for) the rest of the body at every level.
	out := make(idArray, 0, 256)
	for {
		// One integer: "0", or a non-zero digit and at most 9 more.
		if i >= len(b) {
			return nil, false
		}
		c := b[i] - '0'
		if c > 9 {
			return nil, false
		}
		start, n := i, uint64(c)
		i++
		if c != 0 {
			for i < len(b) {
				c = b[i] - '0'
				if c > 9 {
					break
				}
				n = n*10 + uint64(c)
				i++
			}
			// More than 10 digits may have wrapped n: refused by length first.
			if i-start > 10 || n > math.MaxUint32 {
				return nil, false
			}
		}
		if i >= len(b) {
			return nil, false
		}
		out = append(out, uint32(n))
		c = b[i]
		for c == ' ' || c == '\t' || c == '\n' || c == '\r' {
			if i++; i >= len(b) {
				return nil, false
			}
			c = b[i]
		}
		i++
		switch c {
		case ',':
			for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
				i++
			}
		case ']':
			d.i = i
			return out, true
		default:
			return nil, false // '.', 'e', a leading zero's next digit, ...: the generic path
		}
	}
}

// number checks RFC 8259 number syntax and returns the literal.
func (d *jsonDecoder) number() (json.Number, error) {
	start := d.i
	b := d.b
	i := d.i
	if i < len(b) && b[i] == '-' {
		i++
	}
	switch {
	case i < len(b) && b[i] == '0':
		i++
	case i < len(b) && b[i] >= '1' && b[i] <= '9':
		for i < len(b) && b[i] >= '0' && b[i] <= '9' {
			i++
		}
	default:
		d.i = i
		return "", d.errorf("invalid number")
	}
	if i < len(b) && b[i] == '.' {
		i++
		if i >= len(b) || b[i] < '0' || b[i] > '9' {
			d.i = i
			return "", d.errorf("invalid number: no digit after '.'")
		}
		for i < len(b) && b[i] >= '0' && b[i] <= '9' {
			i++
		}
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		if i >= len(b) || b[i] < '0' || b[i] > '9' {
			d.i = i
			return "", d.errorf("invalid number: no digit in the exponent")
		}
		for i < len(b) && b[i] >= '0' && b[i] <= '9' {
			i++
		}
	}
	d.i = i
	return json.Number(b[start:i]), nil
}

// str decodes the string at d.i ('"'). Strings with escapes or non-ASCII bytes are
// handed to encoding/json, so that escapes and invalid UTF-8 are treated as it does.
func (d *jsonDecoder) str() (string, error) {
	start := d.i
	i := d.i + 1
	plainASCII := true
	for {
		if i >= len(d.b) {
			d.i = i
			return "", d.errorf("unterminated string")
		}
		c := d.b[i]
		if c == '"' {
			break
		}
		if c < 0x20 {
			d.i = i
			return "", d.errorf("control character %q in a string", c)
		}
		if c == '\\' {
			plainASCII = false
			i += 2 // the escaped character cannot end the string
			continue
		}
		if c >= utf8.RuneSelf {
			plainASCII = false
		}
		i++
	}
	d.i = i + 1
	if plainASCII {
		return string(d.b[start+1 : i]), nil
	}
	var s string
	if err := json.Unmarshal(d.b[start:i+1], &s); err != nil {
		d.i = start
		return "", d.errorf("invalid string: %v", err)
	}
	return s, nil
}

// decodeBody decodes one JSON value, with nothing but space after it.
func decodeBody(body []byte) (any, error) {
	d := &jsonDecoder{b: body}
	d.skipSpace()
	v, err := d.value()
	if err != nil {
		return nil, err
	}
	d.skipSpace()
	if d.i != len(d.b) {
		return nil, errors.New("gateway: data after the JSON value")
	}
	return v, nil
}

// arrayOf returns a decoded array as []any (an idArray's ids as json.Number).
func arrayOf(v any) ([]any, bool) {
	switch v := v.(type) {
	case []any:
		return v, true
	case idArray:
		out := make([]any, len(v))
		for i, id := range v {
			out[i] = json.Number(strconv.FormatUint(uint64(id), 10))
		}
		return out, true
	default:
		return nil, false
	}
}
