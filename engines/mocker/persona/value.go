package persona

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"

	"github.com/zeebo/xxh3"
)

// A generated value is one of: nil (JSON null), bool, int64, float64, string, []any
// (array) or object (members in order). Objects keep their order so that the same
// instance is written the same way in every syntax.
type object []member

type member struct {
	key string
	val any
}

// rng is a SplitMix64 stream: every choice Plan makes comes from one, seeded by the
// request's seed and a hash of the prompt.
type rng struct{ state uint64 }

func newRNG(seed uint64) *rng { return &rng{state: seed} }

func (r *rng) next() uint64 {
	r.state += 0x9e3779b97f4a7c15
	x := r.state
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}

// intn returns a number in [0, n); 0 when n <= 0.
func (r *rng) intn(n int) int {
	if n <= 0 {
		return 0
	}
	return int(r.next() % uint64(n))
}

// chance reports true with probability num/den.
func (r *rng) chance(num, den int) bool { return r.intn(den) < num }

// hashPrompt is the seed of a prompt's choices: XXH3 of s with the request's seed.
func hashPrompt(seed uint64, s string) uint64 { return xxh3.HashStringSeed(s, seed) }

// writeJSON writes v as JSON with Python's json.dumps separators (", " and ": "), the
// way models trained on such text write it. Strings are escaped as JSON requires, but
// <, > and & are kept as they are.
func writeJSON(b *strings.Builder, v any) {
	switch x := v.(type) {
	case nil:
		b.WriteString("null")
	case bool:
		b.WriteString(strconv.FormatBool(x))
	case int64:
		b.WriteString(strconv.FormatInt(x, 10))
	case float64:
		b.WriteString(formatFloat(x))
	case string:
		b.WriteString(quoteJSON(x))
	case []any:
		b.WriteByte('[')
		for i, e := range x {
			if i > 0 {
				b.WriteString(", ")
			}
			writeJSON(b, e)
		}
		b.WriteByte(']')
	case object:
		b.WriteByte('{')
		for i, m := range x {
			if i > 0 {
				b.WriteString(", ")
			}
			b.WriteString(quoteJSON(m.key))
			b.WriteString(": ")
			writeJSON(b, m.val)
		}
		b.WriteByte('}')
	}
}

// jsonText returns v written by writeJSON.
func jsonText(v any) string {
	var b strings.Builder
	writeJSON(&b, v)
	return b.String()
}

// writePython writes v as a Python literal (the pythonic tool-call format): True, False,
// None, double-quoted strings with JSON's escapes (Python reads them the same way).
func writePython(b *strings.Builder, v any) {
	switch x := v.(type) {
	case nil:
		b.WriteString("None")
	case bool:
		if x {
			b.WriteString("True")
		} else {
			b.WriteString("False")
		}
	case []any:
		b.WriteByte('[')
		for i, e := range x {
			if i > 0 {
				b.WriteString(", ")
			}
			writePython(b, e)
		}
		b.WriteByte(']')
	case object:
		b.WriteByte('{')
		for i, m := range x {
			if i > 0 {
				b.WriteString(", ")
			}
			b.WriteString(quoteJSON(m.key))
			b.WriteString(": ")
			writePython(b, m.val)
		}
		b.WriteByte('}')
	default:
		writeJSON(b, v)
	}
}

// quoteJSON returns s as a JSON string without HTML escaping.
func quoteJSON(s string) string {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(s) // a string always encodes
	return strings.TrimSuffix(buf.String(), "\n")
}

// formatFloat writes f so that JSON and Python read it back as a float: with a decimal
// point (1.5, 2.0), never as an exponent for the magnitudes generated here.
func formatFloat(f float64) string {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return "0.0"
	}
	s := strconv.FormatFloat(f, 'f', -1, 64)
	if !strings.ContainsAny(s, ".eE") {
		s += ".0"
	}
	return s
}

// plainString is how a value is written where the format has no JSON typing of its own
// (Qwen3-Coder's <parameter=...> and GLM-4.5's <arg_value> blocks): a string as it is,
// anything else as JSON. The parsers read the declared type from the tool's schema.
func plainString(v any) string {
	if s, ok := v.(string); ok {
		return s
	}
	return jsonText(v)
}

// orderKey holds, in a decoded JSON object of two keys or more, its keys in the order
// the text wrote them ([]string), so that arguments list properties in the order their
// schema does, as constrained decoding does. No JSON Schema keyword starts with a NUL.
const orderKey = "\x00order"

// decodeOrdered reads one JSON value from dec as encoding/json would into any (objects
// map[string]any, numbers float64), recording each object's key order under orderKey.
func decodeOrdered(dec *json.Decoder) (any, error) {
	tok, err := dec.Token()
	if err != nil {
		return nil, err
	}
	return decodeFrom(dec, tok, 0)
}

func decodeFrom(dec *json.Decoder, tok json.Token, depth int) (any, error) {
	if depth > 256 {
		return nil, errors.New("persona: JSON nested too deeply")
	}
	d, ok := tok.(json.Delim)
	if !ok {
		return tok, nil // string, float64, bool or nil
	}
	switch d {
	case '{':
		m := map[string]any{}
		var order []string
		for dec.More() {
			kt, err := dec.Token()
			if err != nil {
				return nil, err
			}
			k, _ := kt.(string)
			vt, err := dec.Token()
			if err != nil {
				return nil, err
			}
			v, err := decodeFrom(dec, vt, depth+1)
			if err != nil {
				return nil, err
			}
			if _, dup := m[k]; !dup {
				order = append(order, k)
			}
			m[k] = v
		}
		if _, err := dec.Token(); err != nil { // '}'
			return nil, err
		}
		if len(order) > 1 {
			m[orderKey] = order
		}
		return m, nil
	case '[':
		out := []any{}
		for dec.More() {
			vt, err := dec.Token()
			if err != nil {
				return nil, err
			}
			v, err := decodeFrom(dec, vt, depth+1)
			if err != nil {
				return nil, err
			}
			out = append(out, v)
		}
		if _, err := dec.Token(); err != nil { // ']'
			return nil, err
		}
		return out, nil
	}
	return nil, fmt.Errorf("persona: unexpected %v", d)
}

// keysInOrder returns m's keys (orderKey left out): first in its recorded order, then the
// others sorted.
func keysInOrder(m map[string]any) []string {
	out := make([]string, 0, len(m))
	seen := map[string]bool{orderKey: true}
	if order, ok := m[orderKey].([]string); ok {
		for _, k := range order {
			if _, in := m[k]; in && !seen[k] {
				seen[k] = true
				out = append(out, k)
			}
		}
	}
	start := len(out)
	for k := range m {
		if !seen[k] {
			out = append(out, k)
		}
	}
	sort.Strings(out[start:])
	return out
}
