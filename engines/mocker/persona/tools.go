package persona

import (
	"encoding/json"
	"sort"
	"strings"
)

// tool is a function the prompt offers the model.
type tool struct {
	name string
	// params is the function's parameters JSON Schema as the prompt gives it (decoded
	// by decodeOrdered); nil when it declares none.
	params map[string]any
}

// findTools finds the functions a chat template rendered into prompt, in order of first
// appearance (a name seen twice keeps its first schema). Templates write the OpenAI
// tools in one of three ways (docs/reference.md §15), all read here whatever text
// surrounds them:
//   - as JSON (Qwen3 and Hermes one object per line inside <tools></tools>, Llama 3.1
//     and 4 indented objects in the first user turn, Mistral a JSON array after
//     [AVAILABLE_TOOLS], DeepSeek, Kimi K2 and GLM-4.5 similar): every JSON object in
//     the text that has a "name" and a "parameters" schema, at any depth, or a
//     "function" object with a "name" ({"type": "function", "function": {...}});
//     DeepSeek V3.1's "### NAME ... Parameters: {schema}" names the schema by its
//     heading;
//   - as Qwen3-Coder's XML (<function><name>N</name><parameters><parameter>...);
//   - as harmony's TypeScript namespace (gpt-oss: namespace functions { type N = (_: {
//     field: string, ... }) => any; }), whose types map back to a schema (number becomes
//     integer: an integer is valid for either).
func findTools(prompt string) []tool {
	f := toolFinder{seen: map[string]bool{}}
	f.scanJSON(prompt)
	f.scanXML(prompt)
	f.scanTypeScript(prompt)
	return f.out
}

// jsonBudget bounds the bytes JSON scanning may examine per byte of prompt: text of
// unclosed objects nested in each other would otherwise be read once per brace.
const jsonBudget = 16

type toolFinder struct {
	out  []tool
	seen map[string]bool
	// work counts the bytes JSON scanning examined.
	work int
}

func (f *toolFinder) add(name string, params map[string]any) {
	if name == "" || f.seen[name] {
		return
	}
	f.seen[name] = true
	f.out = append(f.out, tool{name: name, params: params})
}

// scanJSON decodes every JSON object that starts in s and looks through it for tools.
// An object that decodes is skipped whole; an opening brace not followed by a key or
// a closing brace is not tried, so prose and code cost one look each. Decoding stops
// once it has examined jsonBudget times the text (objects left open inside each other).
func (f *toolFinder) scanJSON(s string) {
	budget := jsonBudget*len(s) + 1<<20
	for i := 0; i < len(s) && f.work < budget; {
		j := strings.IndexByte(s[i:], '{')
		if j < 0 {
			return
		}
		i += j
		if !startsObject(s[i+1:]) {
			i++
			continue
		}
		n, examined := valueEnd(s[i:])
		f.work += examined
		if n < 0 {
			i++
			continue
		}
		if span := s[i : i+n]; !strings.Contains(span, `"name"`) && !strings.Contains(span, `"type"`) &&
			!strings.Contains(span, `"properties"`) {
			i += n // neither a tool nor a schema
			continue
		}
		v, err := decodeOrdered(json.NewDecoder(strings.NewReader(s[i : i+n])))
		if err != nil { // the scan is looser than encoding/json (numbers, escapes)
			i++
			continue
		}
		end := i + n
		found := len(f.out)
		f.walk(v)
		if m, ok := v.(map[string]any); ok && len(f.out) == found && isSchema(m) {
			f.add(headingName(s[:i]), m) // DeepSeek V3.1: ### NAME ... Parameters: {...}
		}
		i = end
	}
}

// jsonScan checks JSON syntax by recursive descent and stops at the first byte that
// cannot continue a JSON value, so that a brace of prose or code costs a few bytes.
type jsonScan struct {
	s     string
	i     int
	depth int
}

// valueEnd returns the length of the JSON value s starts with (after whitespace), and
// how many bytes were examined; -1 when s does not start with one.
func valueEnd(s string) (end, examined int) {
	p := jsonScan{s: s}
	if !p.value() {
		return -1, p.i + 1
	}
	return p.i, p.i
}

func (p *jsonScan) ws() {
	for p.i < len(p.s) && (p.s[p.i] == ' ' || p.s[p.i] == '\t' || p.s[p.i] == '\n' || p.s[p.i] == '\r') {
		p.i++
	}
}

func (p *jsonScan) value() bool {
	p.ws()
	if p.i >= len(p.s) || p.depth > 512 {
		return false
	}
	switch c := p.s[p.i]; {
	case c == '{':
		return p.container('}', true)
	case c == '[':
		return p.container(']', false)
	case c == '"':
		return p.str()
	case c == 't':
		return p.lit("true")
	case c == 'f':
		return p.lit("false")
	case c == 'n':
		return p.lit("null")
	case c == '-' || c >= '0' && c <= '9':
		return p.number()
	}
	return false
}

func (p *jsonScan) container(closer byte, object bool) bool {
	p.i++ // the opener
	p.depth++
	defer func() { p.depth-- }()
	p.ws()
	if p.i < len(p.s) && p.s[p.i] == closer {
		p.i++
		return true
	}
	for {
		if object {
			p.ws()
			if p.i >= len(p.s) || p.s[p.i] != '"' || !p.str() {
				return false
			}
			p.ws()
			if p.i >= len(p.s) || p.s[p.i] != ':' {
				return false
			}
			p.i++
		}
		if !p.value() {
			return false
		}
		p.ws()
		if p.i >= len(p.s) {
			return false
		}
		switch p.s[p.i] {
		case ',':
			p.i++
		case closer:
			p.i++
			return true
		default:
			return false
		}
	}
}

func (p *jsonScan) str() bool {
	p.i++ // the quote
	for p.i < len(p.s) {
		switch c := p.s[p.i]; {
		case c == '"':
			p.i++
			return true
		case c == '\\':
			p.i += 2
		case c < 0x20:
			return false
		default:
			p.i++
		}
	}
	return false
}

func (p *jsonScan) lit(word string) bool {
	if strings.HasPrefix(p.s[p.i:], word) {
		p.i += len(word)
		return true
	}
	return false
}

func (p *jsonScan) number() bool {
	start := p.i
	for p.i < len(p.s) && strings.IndexByte("+-0123456789.eE", p.s[p.i]) >= 0 {
		p.i++
	}
	return p.i > start && (p.s[p.i-1] >= '0' && p.s[p.i-1] <= '9')
}

// startsObject reports whether the text after a '{' can continue a JSON object: a key
// or the closing brace after optional whitespace.
func startsObject(s string) bool {
	for i := 0; i < len(s) && i < 256; i++ {
		switch s[i] {
		case ' ', '\t', '\n', '\r':
			continue
		case '"', '}':
			return true
		}
		return false
	}
	return false
}

// walk collects the tools in a decoded JSON value, depth first, object keys in order.
func (f *toolFinder) walk(v any) {
	switch x := v.(type) {
	case map[string]any:
		if name, params, ok := asTool(x); ok {
			f.add(name, params)
			return
		}
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			f.walk(x[k])
		}
	case []any:
		for _, e := range x {
			f.walk(e)
		}
	}
}

// asTool reads an OpenAI function definition: {"type": "function", "function": {"name",
// "parameters"?}} or {"name", "parameters"} (also Anthropic's "input_schema"). A
// "parameters" that is not a schema (a past call's arguments in Llama's history, also
// {"name", "parameters"}) is not a tool.
func asTool(m map[string]any) (string, map[string]any, bool) {
	if fn, ok := m["function"].(map[string]any); ok {
		if name, ok := fn["name"].(string); ok {
			params, _ := fn["parameters"].(map[string]any)
			if params == nil || isSchema(params) {
				return name, params, true
			}
		}
	}
	name, ok := m["name"].(string)
	if !ok {
		return "", nil, false
	}
	for _, key := range []string{"parameters", "input_schema"} {
		if params, ok := m[key].(map[string]any); ok && isSchema(params) {
			return name, params, true
		}
	}
	return "", nil, false
}

// isSchema reports whether m reads as a JSON Schema of parameters rather than argument
// values: it has "type": "object" or "properties", or nothing at all.
func isSchema(m map[string]any) bool {
	if len(m) == 0 {
		return true
	}
	if t, ok := m["type"].(string); ok && t == "object" {
		return true
	}
	_, ok := m["properties"].(map[string]any)
	return ok
}

// headingName returns NAME when before ends with DeepSeek V3.1's
// "### NAME\n[Description: ...]\n\nParameters: " (the description may span lines).
func headingName(before string) string {
	if !strings.HasSuffix(before, "Parameters: ") {
		return ""
	}
	from := max(0, len(before)-4096)
	i := strings.LastIndex(before[from:], "\n### ")
	if i < 0 {
		return ""
	}
	line := before[from+i+5:]
	if j := strings.IndexByte(line, '\n'); j >= 0 {
		line = line[:j]
	}
	return strings.TrimSpace(line)
}

// scanXML reads Qwen3-Coder's tool list: each <function> block inside <tools>...</tools>
// with <name>, and <parameters> holding one <parameter> block per property (<name>,
// <type>, and any other schema keyword as a tag whose text is JSON or a plain string)
// followed by the object's other keywords (<required>["a"]</required>).
func (f *toolFinder) scanXML(s string) {
	for {
		i := strings.Index(s, "<tools>")
		if i < 0 {
			return
		}
		s = s[i+len("<tools>"):]
		end := strings.Index(s, "</tools>")
		if end < 0 {
			end = len(s)
		}
		block := s[:end]
		s = s[end:]
		for {
			a := strings.Index(block, "<function>")
			if a < 0 {
				break
			}
			block = block[a+len("<function>"):]
			b := strings.Index(block, "</function>")
			if b < 0 {
				b = len(block)
			}
			f.xmlFunction(block[:b])
			block = block[b:]
		}
	}
}

func (f *toolFinder) xmlFunction(fn string) {
	params := strings.Index(fn, "<parameters>")
	head := fn
	if params >= 0 {
		head = fn[:params]
	}
	name, ok := tagText(head, "name")
	if !ok {
		return
	}
	schema := map[string]any{"type": "object", "properties": map[string]any{}}
	if params < 0 {
		f.add(strings.TrimSpace(name), schema)
		return
	}
	body := fn[params+len("<parameters>"):]
	if k := strings.LastIndex(body, "</parameters>"); k >= 0 {
		body = body[:k]
	}
	props := schema["properties"].(map[string]any)
	for {
		a := strings.Index(body, "<parameter>")
		if a < 0 {
			break
		}
		rest := body[a+len("<parameter>"):]
		b := strings.Index(rest, "</parameter>")
		if b < 0 {
			break
		}
		keys := xmlTags(rest[:b])
		if pname, ok := keys["name"].(string); ok {
			delete(keys, "name")
			if t, ok := keys["type"].(string); ok {
				keys["type"] = xmlType(t)
			}
			delete(keys, "description")
			props[pname] = keys
		}
		body = body[:a] + rest[b+len("</parameter>"):]
	}
	for k, v := range xmlTags(body) {
		if k != "type" && k != "properties" {
			schema[k] = v
		}
	}
	f.add(strings.TrimSpace(name), schema)
}

// tagText returns the text of the first <tag>...</tag> in s.
func tagText(s, tag string) (string, bool) {
	open, close := "<"+tag+">", "</"+tag+">"
	i := strings.Index(s, open)
	if i < 0 {
		return "", false
	}
	rest := s[i+len(open):]
	j := strings.Index(rest, close)
	if j < 0 {
		return "", false
	}
	return rest[:j], true
}

// xmlTags reads the "\n<key>value</key>" lines of a block: a value that is JSON is
// decoded, any other is a string.
func xmlTags(s string) map[string]any {
	out := map[string]any{}
	for i := 0; i < len(s); {
		j := strings.IndexByte(s[i:], '<')
		if j < 0 {
			break
		}
		i += j + 1
		k := strings.IndexByte(s[i:], '>')
		if k <= 0 || strings.ContainsAny(s[i:i+k], " /\n") {
			continue
		}
		key := s[i : i+k]
		rest := s[i+k+1:]
		e := strings.Index(rest, "</"+key+">")
		if e < 0 {
			continue
		}
		text := rest[:e]
		var v any
		switch {
		case key == "name" || key == "description" || key == "type":
			out[key] = text
		case text == "True" || text == "False": // Python's str() of a boolean
			out[key] = text == "True"
		case json.Unmarshal([]byte(text), &v) == nil:
			out[key] = v
		default:
			out[key] = text
		}
		i += k + 1 + e + len("</"+key+">")
	}
	return out
}

// xmlType reads a <type>: a type name, or a list written as Python prints it
// (['string', 'null']), of which the first non-null name is kept.
func xmlType(t string) any {
	t = strings.TrimSpace(t)
	if !strings.HasPrefix(t, "[") {
		return t
	}
	var names []any
	for _, part := range strings.Split(strings.Trim(t, "[]"), ",") {
		if n := strings.Trim(strings.TrimSpace(part), `'"`); n != "" {
			names = append(names, n)
		}
	}
	return names
}

// scanTypeScript reads harmony's "namespace functions { ... } // namespace functions".
func (f *toolFinder) scanTypeScript(s string) {
	const open = "namespace functions {"
	for {
		i := strings.Index(s, open)
		if i < 0 {
			return
		}
		s = s[i+len(open):]
		end := strings.Index(s, "} // namespace functions")
		if end < 0 {
			end = len(s)
		}
		p := tsParser{s: s[:end]}
		for p.skipTo("type ") {
			name := p.ident()
			p.space()
			if !p.eat("=") {
				continue
			}
			p.space()
			if !p.eat("(") {
				continue
			}
			p.space()
			schema := map[string]any{"type": "object", "properties": map[string]any{}}
			if p.eat("_") {
				p.space()
				if !p.eat(":") {
					continue
				}
				if t, ok := p.typ(0).(map[string]any); ok {
					schema = t
				}
			}
			f.add(name, schema)
		}
		s = s[end:]
	}
}

// tsParser reads harmony's TypeScript-like types: string, number, boolean, any, null,
// string and number literals, unions (|), arrays (T[]), and object literals whose
// fields are "name?: type," lines, with // comments anywhere.
type tsParser struct {
	s string
	i int
}

func (p *tsParser) skipTo(word string) bool {
	for p.i < len(p.s) {
		p.space()
		if strings.HasPrefix(p.s[p.i:], word) {
			p.i += len(word)
			return true
		}
		if j := strings.IndexByte(p.s[p.i:], '\n'); j >= 0 {
			p.i += j + 1
		} else {
			p.i = len(p.s)
		}
	}
	return false
}

// space skips whitespace and // comments.
func (p *tsParser) space() {
	for p.i < len(p.s) {
		switch {
		case p.s[p.i] == ' ' || p.s[p.i] == '\t' || p.s[p.i] == '\n' || p.s[p.i] == '\r':
			p.i++
		case strings.HasPrefix(p.s[p.i:], "//"):
			if j := strings.IndexByte(p.s[p.i:], '\n'); j >= 0 {
				p.i += j + 1
			} else {
				p.i = len(p.s)
			}
		default:
			return
		}
	}
}

func (p *tsParser) eat(tok string) bool {
	if strings.HasPrefix(p.s[p.i:], tok) {
		p.i += len(tok)
		return true
	}
	return false
}

func (p *tsParser) ident() string {
	start := p.i
	for p.i < len(p.s) {
		c := p.s[p.i]
		if c == '_' || c == '-' || c == '.' || c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= 0x80 {
			p.i++
			continue
		}
		break
	}
	return p.s[start:p.i]
}

// typ reads a union of primaries, each with optional [] suffixes.
func (p *tsParser) typ(depth int) any {
	var alts []any
	for {
		p.space()
		t := p.primary(depth)
		for p.eat("[]") {
			t = map[string]any{"type": "array", "items": t}
		}
		alts = append(alts, t)
		p.space()
		if !p.eat("|") {
			break
		}
	}
	if len(alts) == 1 {
		return alts[0]
	}
	var enum []any
	for _, a := range alts {
		m, _ := a.(map[string]any)
		c, ok := m["const"]
		if !ok {
			enum = nil
			break
		}
		enum = append(enum, c)
	}
	if enum != nil {
		return map[string]any{"enum": enum}
	}
	return map[string]any{"anyOf": alts}
}

func (p *tsParser) primary(depth int) any {
	if p.i >= len(p.s) || depth > maxDepth {
		return map[string]any{}
	}
	switch c := p.s[p.i]; {
	case c == '"':
		j := p.i + 1
		for j < len(p.s) && p.s[j] != '"' {
			if p.s[j] == '\\' {
				j++
			}
			j++
		}
		var lit string
		if j < len(p.s) && json.Unmarshal([]byte(p.s[p.i:j+1]), &lit) == nil {
			p.i = j + 1
			return map[string]any{"const": lit}
		}
		p.i = min(j+1, len(p.s))
		return map[string]any{"type": "string"}
	case c == '-' || c >= '0' && c <= '9':
		start := p.i
		p.i++
		for p.i < len(p.s) && (p.s[p.i] >= '0' && p.s[p.i] <= '9' || p.s[p.i] == '.') {
			p.i++
		}
		var n float64
		if json.Unmarshal([]byte(p.s[start:p.i]), &n) == nil {
			return map[string]any{"const": n}
		}
		return map[string]any{"type": "number"}
	case c == '{':
		p.i++
		props := map[string]any{}
		var required []any
		for {
			p.space()
			if p.i >= len(p.s) || p.eat("}") {
				break
			}
			name := p.ident()
			if name == "" {
				p.i++ // not a field: skip a character
				continue
			}
			optional := p.eat("?")
			p.space()
			if !p.eat(":") {
				continue
			}
			props[name] = p.typ(depth + 1)
			if !optional {
				required = append(required, name)
			}
			p.space()
			p.eat(",")
		}
		m := map[string]any{"type": "object", "properties": props}
		if len(required) > 0 {
			m["required"] = required
		}
		return m
	case c == '(':
		p.i++
		t := p.typ(depth + 1)
		p.space()
		p.eat(")")
		return t
	}
	switch word := p.ident(); word {
	case "string":
		return map[string]any{"type": "string"}
	case "number":
		return map[string]any{"type": "integer"}
	case "boolean":
		return map[string]any{"type": "boolean"}
	case "null":
		return map[string]any{"type": "null"}
	case "":
		p.i++
	}
	return map[string]any{}
}
