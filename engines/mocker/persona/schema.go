package persona

import (
	"encoding/json"
	"math"
	"regexp"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Instance generation from a JSON Schema (decoded with encoding/json: objects are
// map[string]any, numbers float64). The generator covers the keywords tools and
// structured-output requests use: type (a name or a list; null is taken last), const,
// enum, properties, required, additionalProperties, minProperties, items, prefixItems
// (and draft-7 tuple items), minItems, maxItems, uniqueItems, contains, minimum,
// maximum, exclusiveMinimum, exclusiveMaximum (numbers, or draft-4 booleans),
// multipleOf, minLength, maxLength, pattern, format, anyOf (a branch chosen by the
// generator), oneOf (the first branch), allOf (merged), $ref to the same document
// (#, #/$defs/..., #/definitions/...) and nullable. Optional properties are included
// or not at random. Keywords outside that list (not, if/then/else, dependencies,
// patternProperties, propertyNames) are ignored, so an instance of a schema that relies
// on them may not validate. Given the user's message (instanceAsked), strings and enum
// values come from it where the schema allows (see asked.go).

// maxDepth bounds the nesting of generated values (recursive $ref schemas): below it
// objects get only their required properties and arrays only their minimum items.
const maxDepth = 12

type generator struct {
	r    *rng
	root any
	// name is the property being generated ("" at the top), for values that read well
	// (a "city" property gets a city).
	name string
	// user is what the user's message offers (nil: nothing); used marks the mentions
	// already given in this call; patterns caches compiled patterns (nil: unreadable).
	user     *asked
	used     []bool
	patterns map[string]*regexp.Regexp
}

// instance returns a value valid against schema (as far as the keywords above go).
func instance(r *rng, schema any) any { return instanceAsked(r, schema, nil) }

// instanceAsked is instance with strings and enum values taken from the user's message
// where the schema allows (nil: none).
func instanceAsked(r *rng, schema any, user *asked) any {
	g := &generator{r: r, root: schema, user: user}
	g.resetAsked()
	return g.value(schema, 0)
}

func (g *generator) value(s any, depth int) any {
	if depth > 3*maxDepth {
		return nil // a schema that requires itself without end
	}
	switch x := s.(type) {
	case bool:
		if !x {
			return nil // false admits nothing; null is as good as anything
		}
		return g.str(nil)
	case map[string]any:
		return g.schema(x, depth)
	}
	return g.str(nil)
}

func (g *generator) schema(m map[string]any, depth int) any {
	m = g.resolve(m, depth)
	if c, ok := m["const"]; ok {
		return fromJSON(c)
	}
	if e, ok := m["enum"].([]any); ok && len(e) > 0 {
		if v, ok := g.namedEnum(e); ok {
			return v
		}
		return fromJSON(e[g.r.intn(len(e))])
	}
	switch typeOf(m) {
	case "null":
		return nil
	case "boolean":
		return g.r.chance(1, 2)
	case "integer":
		return g.integer(m)
	case "number":
		return g.number(m)
	case "array":
		return g.array(m, depth)
	case "object":
		return g.object(m, depth)
	}
	return g.str(m)
}

// resolve follows $ref and merges allOf, anyOf (one branch) and oneOf (the first) into
// one schema map.
func (g *generator) resolve(m map[string]any, depth int) map[string]any {
	for range 32 { // a chain of $refs, bounded
		ref, ok := m["$ref"].(string)
		if !ok {
			break
		}
		target, ok := g.lookup(ref).(map[string]any)
		if !ok {
			break
		}
		merged := merge(target, m)
		delete(merged, "$ref")
		m = merged
	}
	if all, ok := m["allOf"].([]any); ok {
		merged := without(m, "allOf")
		for _, b := range all {
			if bm, ok := b.(map[string]any); ok {
				merged = mergeDeep(merged, g.resolve(bm, depth))
			}
		}
		m = merged
	}
	for _, kw := range []string{"anyOf", "oneOf"} {
		branches, ok := m[kw].([]any)
		if !ok || len(branches) == 0 {
			continue
		}
		i := 0
		if kw == "anyOf" {
			i = g.pickBranch(branches, depth)
		}
		bm, ok := branches[i].(map[string]any)
		if !ok {
			continue
		}
		m = mergeDeep(without(m, kw), g.resolve(bm, depth))
	}
	return m
}

// pickBranch picks an anyOf branch at random, preferring one that is not null (an
// optional value is more useful present) and, deep in a recursive schema, one without
// a $ref.
func (g *generator) pickBranch(branches []any, depth int) int {
	var ok []int
	for i, b := range branches {
		bm, _ := b.(map[string]any)
		if bm != nil && bm["type"] == "null" {
			continue
		}
		if depth > maxDepth/2 && bm != nil && bm["$ref"] != nil {
			continue
		}
		ok = append(ok, i)
	}
	if len(ok) == 0 {
		return 0
	}
	return ok[g.r.intn(len(ok))]
}

// lookup resolves a reference within the root document ("#", "#/$defs/a", JSON
// pointer escapes ~0 and ~1); nil when it does not resolve.
func (g *generator) lookup(ref string) any {
	if ref == "#" {
		return g.root
	}
	if !strings.HasPrefix(ref, "#/") {
		return nil
	}
	cur := g.root
	for _, part := range strings.Split(ref[2:], "/") {
		part = strings.ReplaceAll(strings.ReplaceAll(part, "~1", "/"), "~0", "~")
		switch c := cur.(type) {
		case map[string]any:
			cur = c[part]
		case []any:
			i, err := strconv.Atoi(part)
			if err != nil || i < 0 || i >= len(c) {
				return nil
			}
			cur = c[i]
		default:
			return nil
		}
	}
	return cur
}

// typeOf is the type to generate: the schema's type (the first non-null of a list),
// else what its keywords imply, else string.
func typeOf(m map[string]any) string {
	switch t := m["type"].(type) {
	case string:
		return t
	case []any:
		first := ""
		for _, e := range t {
			s, _ := e.(string)
			if s != "" && s != "null" {
				return s
			}
			if first == "" {
				first = s
			}
		}
		if first != "" {
			return first
		}
	}
	has := func(keys ...string) bool {
		for _, k := range keys {
			if _, ok := m[k]; ok {
				return true
			}
		}
		return false
	}
	switch {
	case has("properties", "required", "additionalProperties", "minProperties", "maxProperties"):
		return "object"
	case has("items", "prefixItems", "minItems", "maxItems", "contains", "uniqueItems"):
		return "array"
	case has("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf"):
		return "number"
	}
	return "string"
}

func (g *generator) object(m map[string]any, depth int) any {
	props, _ := m["properties"].(map[string]any)
	required := map[string]bool{}
	var requiredOrder []string
	if req, ok := m["required"].([]any); ok {
		for _, r := range req {
			if s, ok := r.(string); ok && !required[s] {
				required[s] = true
				requiredOrder = append(requiredOrder, s)
			}
		}
	}
	keys := keysInOrder(props)
	maxProps := intKeyword(m, "maxProperties", math.MaxInt)
	var out object
	name := g.name
	defer func() { g.name = name }()
	for _, k := range keys {
		if !required[k] && (depth >= maxDepth || len(out)+len(requiredOrder) >= maxProps || !g.r.chance(1, 2)) {
			continue
		}
		g.name = k
		out = append(out, member{k, g.value(props[k], depth+1)})
	}
	// Required names without a property schema take additionalProperties' schema.
	extra := m["additionalProperties"]
	for _, k := range requiredOrder {
		if _, ok := props[k]; ok {
			continue
		}
		g.name = k
		out = append(out, member{k, g.value(orTrue(extra), depth+1)})
	}
	if minProps := intKeyword(m, "minProperties", 0); len(out) < minProps && extra != false {
		for i := 1; len(out) < minProps; i++ {
			k := "key" + strconv.Itoa(i)
			if _, clash := props[k]; clash || required[k] {
				continue
			}
			g.name = k
			out = append(out, member{k, g.value(orTrue(extra), depth+1)})
		}
	}
	if out == nil {
		out = object{}
	}
	return out
}

func orTrue(s any) any {
	if s == nil || s == false {
		return true
	}
	return s
}

func (g *generator) array(m map[string]any, depth int) any {
	minItems := intKeyword(m, "minItems", 0)
	maxItems := intKeyword(m, "maxItems", math.MaxInt)
	var prefix []any
	if p, ok := m["prefixItems"].([]any); ok {
		prefix = p
	} else if p, ok := m["items"].([]any); ok { // draft-7 tuple
		prefix = p
	}
	var itemSchema any = true
	if it, ok := m["items"]; ok {
		if _, tuple := it.([]any); !tuple {
			itemSchema = it
		}
	} else if it, ok := m["additionalItems"]; ok && prefix != nil {
		itemSchema = it
	}
	n := 1 + g.r.intn(2)
	if depth >= maxDepth {
		n = 0
	}
	if len(prefix) > 0 {
		n = len(prefix)
	}
	n = max(n, minItems)
	n = min(n, maxItems)
	if itemSchema == false {
		n = min(n, len(prefix))
	}
	out := make([]any, 0, n)
	contains, hasContains := m["contains"]
	unique := m["uniqueItems"] == true
	var enum []any // uniqueItems of an enum: its values in turn
	if im, ok := itemSchema.(map[string]any); ok && unique {
		enum, _ = g.resolve(im, depth)["enum"].([]any)
	}
	seen := map[string]bool{}
	for i := 0; i < n; i++ {
		s := itemSchema
		switch {
		case i < len(prefix):
			s = prefix[i]
		case i == 0 && hasContains:
			s = contains
		}
		if sm, ok := s.(map[string]any); ok && depth == 0 && typeOf(sm) == "object" {
			g.resetAsked() // each of tool_choice "required"'s calls draws on the mentions afresh
		}
		v := g.value(s, depth+1)
		if seen[jsonText(v)] && len(enum) > 0 && i >= len(prefix) {
			start := g.r.intn(len(enum))
			for j := range enum {
				if c := fromJSON(enum[(start+j)%len(enum)]); !seen[jsonText(c)] {
					v = c
					break
				}
			}
		}
		for try := 0; unique && seen[jsonText(v)] && try < 8; try++ {
			v = g.value(s, depth+1)
		}
		if unique && seen[jsonText(v)] {
			v = distinct(v, i)
		}
		seen[jsonText(v)] = true
		out = append(out, v)
	}
	return out
}

// distinct makes a repeated value different where its type allows (a suffix for
// strings, an offset for numbers), for uniqueItems.
func distinct(v any, i int) any {
	switch x := v.(type) {
	case string:
		return x + " " + strconv.Itoa(i+1)
	case int64:
		return x + int64(i)
	case float64:
		return x + float64(i)
	}
	return v
}

// bounds reads minimum/maximum and their exclusive forms (draft 2020 numbers or
// draft-4 booleans).
func bounds(m map[string]any) (lo, hi float64, hasLo, hasHi, exLo, exHi bool) {
	lo, hasLo = num(m["minimum"])
	hi, hasHi = num(m["maximum"])
	switch x := m["exclusiveMinimum"].(type) {
	case bool:
		exLo = x && hasLo
	default:
		if v, ok := num(x); ok && (!hasLo || v >= lo) {
			lo, hasLo, exLo = v, true, true
		}
	}
	switch x := m["exclusiveMaximum"].(type) {
	case bool:
		exHi = x && hasHi
	default:
		if v, ok := num(x); ok && (!hasHi || v <= hi) {
			hi, hasHi, exHi = v, true, true
		}
	}
	return
}

func num(v any) (float64, bool) {
	switch x := v.(type) {
	case float64:
		return x, true
	case json.Number:
		f, err := x.Float64()
		return f, err == nil
	case int:
		return float64(x), true
	case int64:
		return float64(x), true
	}
	return 0, false
}

// span fills in missing bounds: a range of 100 from the one given, else 1..100.
func span(lo, hi float64, hasLo, hasHi bool) (float64, float64) {
	switch {
	case hasLo && hasHi:
	case hasLo:
		hi = lo + 100
	case hasHi:
		lo = math.Min(hi-100, 1)
		if lo > hi {
			lo = hi - 100
		}
	default:
		lo, hi = 1, 100
	}
	return lo, hi
}

func (g *generator) integer(m map[string]any) any {
	lo, hi, hasLo, hasHi, exLo, exHi := bounds(m)
	lo, hi = span(lo, hi, hasLo, hasHi)
	a, b := math.Ceil(lo), math.Floor(hi)
	if exLo && a == lo {
		a++
	}
	if exHi && b == hi {
		b--
	}
	if mul, ok := num(m["multipleOf"]); ok && mul > 0 && mul == math.Trunc(mul) {
		a, b = math.Ceil(a/mul)*mul, math.Floor(b/mul)*mul
		if a > b {
			return int64(a)
		}
		k := g.r.intn(int(math.Min((b-a)/mul, 1e6)) + 1)
		return int64(a + float64(k)*mul)
	}
	if a > b {
		return int64(a)
	}
	return int64(a) + int64(g.r.intn(int(math.Min(b-a, 1e6))+1))
}

func (g *generator) number(m map[string]any) any {
	lo, hi, hasLo, hasHi, exLo, exHi := bounds(m)
	lo, hi = span(lo, hi, hasLo, hasHi)
	if mul, ok := num(m["multipleOf"]); ok && mul > 0 {
		a, b := math.Ceil(lo/mul), math.Floor(hi/mul)
		if exLo && a*mul == lo {
			a++
		}
		if exHi && b*mul == hi {
			b--
		}
		k := a
		if b > a {
			k += float64(g.r.intn(int(math.Min(b-a, 1e6)) + 1))
		}
		v := k * mul
		if v == math.Trunc(v) && math.Abs(v) < 1<<53 {
			return int64(v) // a multiple of an integer step reads best as one
		}
		return v
	}
	if lo == hi {
		return lo
	}
	// A value strictly inside the range, with at most two decimals when that fits.
	fracs := []float64{0.25, 0.5, 0.75}
	v := lo + (hi-lo)*fracs[g.r.intn(len(fracs))]
	if r := math.Round(v*100) / 100; r > lo && r < hi {
		v = r
	}
	return v
}

// str generates a string for m (nil: any string): its format, or a mention of the
// user's that its pattern admits, or its pattern, or what the user's message gives a
// property of its name (asked.go), or a word that suits the property's name, fitted to
// minLength and maxLength (in characters).
func (g *generator) str(m map[string]any) any {
	var s string
	gen := false
	minLen, maxLen := 0, math.MaxInt
	_, hasFormat := m["format"]
	_, hasPattern := m["pattern"]
	if m != nil {
		minLen = intKeyword(m, "minLength", 0)
		maxLen = intKeyword(m, "maxLength", math.MaxInt)
		if f, ok := m["format"].(string); ok {
			s, gen = formatSample(f)
		}
		if p, ok := m["pattern"].(string); !gen && ok {
			if v, ok := g.matching(p, minLen, maxLen); ok {
				return v
			}
			if v, ok := generateRegex(g.r, p); ok {
				return v // the pattern decides; lengths are not adjusted
			}
		}
	}
	if !gen && !hasFormat && !hasPattern {
		s, gen = g.fromAsked(minLen, maxLen)
	}
	if !gen {
		s = g.word()
	}
	for n := utf8.RuneCountInString(s); n < minLen; n = utf8.RuneCountInString(s) {
		w := fillerWords[g.r.intn(len(fillerWords))]
		if n+1+len(w) > minLen {
			s += strings.Repeat("x", minLen-n) // exactly the minimum
			break
		}
		s += " " + w
	}
	if utf8.RuneCountInString(s) > maxLen {
		rs := []rune(s)
		s = strings.TrimRight(string(rs[:maxLen]), " ")
		for utf8.RuneCountInString(s) < minLen {
			s += "x"
		}
	}
	return s
}

func intKeyword(m map[string]any, key string, def int) int {
	v, ok := num(m[key])
	if !ok || v < 0 {
		return def
	}
	if v > 1e6 {
		return 1e6
	}
	return int(v)
}

// formatSample returns a valid example of a JSON Schema format (false for an unknown
// format, which the generator treats as a plain string).
func formatSample(f string) (string, bool) {
	switch f {
	case "date":
		return "2025-06-28", true
	case "date-time":
		return "2025-06-28T12:00:00Z", true
	case "time":
		return "12:00:00Z", true
	case "duration":
		return "P1D", true
	case "email", "idn-email":
		return "alice@example.com", true
	case "hostname", "idn-hostname":
		return "example.com", true
	case "ipv4":
		return "192.0.2.1", true
	case "ipv6":
		return "2001:db8::1", true
	case "uri", "iri", "url":
		return "https://example.com/a", true
	case "uri-reference", "iri-reference":
		return "/a", true
	case "uri-template":
		return "https://example.com/{id}", true
	case "uuid":
		return "123e4567-e89b-42d3-a456-426614174000", true
	case "json-pointer":
		return "/a/0", true
	case "relative-json-pointer":
		return "0/a", true
	case "regex":
		return "^[a-z]+$", true
	}
	return "", false
}

// fromJSON converts a decoded JSON value (a const or enum entry) to the generator's
// value types, object keys in the order they were written.
func fromJSON(v any) any {
	switch x := v.(type) {
	case float64:
		if x == math.Trunc(x) && math.Abs(x) < 1<<53 {
			return int64(x)
		}
		return x
	case json.Number:
		if i, err := x.Int64(); err == nil {
			return i
		}
		f, _ := x.Float64()
		return f
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = fromJSON(e)
		}
		return out
	case map[string]any:
		keys := keysInOrder(x)
		out := make(object, 0, len(x))
		for _, k := range keys {
			out = append(out, member{k, fromJSON(x[k])})
		}
		return out
	}
	return v
}

// merge returns base's keys overridden by over's.
func merge(base, over map[string]any) map[string]any {
	out := make(map[string]any, len(base)+len(over))
	for k, v := range base {
		out[k] = v
	}
	for k, v := range over {
		out[k] = v
	}
	return out
}

// mergeDeep is merge, except that properties are united and required lists joined, so
// that a branch adds to its parent's object rather than replacing it.
func mergeDeep(base, over map[string]any) map[string]any {
	out := merge(base, over)
	bp, _ := base["properties"].(map[string]any)
	op, _ := over["properties"].(map[string]any)
	if bp != nil && op != nil {
		out["properties"] = merge(bp, op)
	}
	br, _ := base["required"].([]any)
	or, _ := over["required"].([]any)
	if br != nil && or != nil {
		out["required"] = append(append([]any{}, br...), or...)
	}
	return out
}

func without(m map[string]any, key string) map[string]any {
	out := make(map[string]any, len(m))
	for k, v := range m {
		if k != key {
			out[k] = v
		}
	}
	return out
}
