package gateway

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"regexp/syntax"
	"slices"
	"strings"

	"github.com/dlclark/regexp2"
	"github.com/santhosh-tekuri/jsonschema/v6"
	"golang.org/x/text/language"
	"golang.org/x/text/message"

	"github.com/turbine-llm/turbine/gateway/parse"
	"github.com/turbine-llm/turbine/messages"
)

// Output constraints. docs/reference.md §16 lists the accepted fields (response_format,
// vLLM's structured_outputs and older guided_* fields, on chat and completions; a forced
// tool call on chat, which parseTools turns into parse.RequiredSchema or
// parse.NamedSchema), the validation and each engine's dialect. At most one constraint
// per request (400 otherwise, a forced tool call included).
//
// JSON Schemas are compiled here, draft 2020-12 unless "$schema" names another: one that
// does not compile is a 400 naming the problem; one nested deeper than MaxSchemaDepth is
// refused before it is compiled; a $ref or $schema naming another document is refused,
// never fetched. The engine gets the client's text compacted, key order kept (engines
// generate properties in schema order). A regex is refused only when neither Go's RE2
// nor dlclark/regexp2 can parse it: each engine has its own dialect, none of them Go's,
// and answers its own error for what it cannot use. A grammar must only be non-empty.

// rawFields reads the raw JSON text of a body's top-level members, once, on first use:
// the schemas a request carries keep their key order there, which the decoded body
// (maps) does not. Keys match exactly, and a repeated key keeps its last value, as the
// decoded body does.
type rawFields struct {
	body []byte
	top  map[string]json.RawMessage
	err  error
	read bool
}

// at returns the raw JSON text at path (member keys, from the top level); nil when a
// member is absent. Errors: a body that is not one JSON object (never, after
// decodeBody), or a path through something that is not an object.
func (r *rawFields) at(path ...string) (json.RawMessage, error) {
	if !r.read {
		r.read = true
		r.top, r.err = rawMembers(r.body)
	}
	if r.err != nil {
		return nil, r.err
	}
	v := r.top[path[0]]
	for _, k := range path[1:] {
		if v == nil {
			return nil, nil
		}
		m, err := rawMembers(v)
		if err != nil {
			return nil, err
		}
		v = m[k]
	}
	return v, nil
}

// rawMembers splits the JSON object data into its members' raw values.
func rawMembers(data []byte) (map[string]json.RawMessage, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return nil, errors.New("not a JSON object")
	}
	out := map[string]json.RawMessage{}
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return nil, err
		}
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return nil, err
		}
		out[t.(string)] = v
	}
	return out, nil
}

// rawElements splits the JSON array data into its elements' raw values.
func rawElements(data []byte) ([]json.RawMessage, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	if t, err := dec.Token(); err != nil || t != json.Delim('[') {
		return nil, errors.New("not a JSON array")
	}
	var out []json.RawMessage
	for dec.More() {
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, nil
}

// decodeSchemaJSON decodes JSON text as the schema compiler reads it (numbers as
// json.Number).
func decodeSchemaJSON(raw []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	if dec.More() {
		return nil, errors.New("data after the JSON value")
	}
	return v, nil
}

// compact returns raw without insignificant space, as a string.
func compact(raw []byte) string {
	var b bytes.Buffer
	if err := json.Compact(&b, raw); err != nil {
		return string(raw) // already checked to be JSON
	}
	return b.String()
}

// jsonDeeperThan reports whether the JSON text data nests objects and arrays more than
// limit levels deep (a scalar is 0 levels, {"a": 1} one, {"a": [1]} two). One pass over
// data, skipping strings and their escapes; data is JSON already checked.
func jsonDeeperThan(data []byte, limit int) bool {
	depth, inString, escaped := 0, false, false
	for _, c := range data {
		switch {
		case escaped:
			escaped = false
		case inString:
			switch c {
			case '\\':
				escaped = true
			case '"':
				inString = false
			}
		case c == '"':
			inString = true
		case c == '{' || c == '[':
			if depth++; depth > limit {
				return true
			}
		case c == '}' || c == ']':
			depth--
		}
	}
	return false
}

// toolNameError checks a tool's name, present and not empty, against the rule of
// OpenAI's API (functions, maxLen MaxToolNameLength) or Anthropic's (tools, maxLen
// MaxAnthropicToolNameLength): 1 to maxLen characters of a-z, A-Z, 0-9, '_' and '-'.
// Other names could not come back as calls: the output parsers drop calls whose name
// holds markup, quotes or white space. Errors: 400 invalid_value naming param; nil for
// a valid name.
func toolNameError(param, name string, maxLen int) *APIError {
	for _, r := range name {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' || r == '-') {
			return newError(KindInvalidValue, param, "Invalid '%s': the name holds %q; a tool name must be 1 to %d characters, each a letter (a-z, A-Z), a digit, '_' or '-' (the pattern '^[a-zA-Z0-9_-]{1,%d}$').",
				param, r, maxLen, maxLen)
		}
	}
	if len(name) > maxLen {
		return newError(KindInvalidValue, param, "Invalid '%s': the name is %d characters long; a tool name must be 1 to %d characters, each a letter (a-z, A-Z), a digit, '_' or '-' (the pattern '^[a-zA-Z0-9_-]{1,%d}$').",
			param, len(name), maxLen, maxLen)
	}
	return nil
}

// constraintOf is one output constraint found in a request, and the field that gave it.
type constraintOf struct {
	param string
	so    *messages.StructuredOutput
}

// parseConstraints reads the request's output constraint (above) from response_format,
// structured_outputs and guided_*: nil for free text. Errors go to o: a malformed
// constraint, or more than one.
func parseConstraints(o *object, raw *rawFields) *messages.StructuredOutput {
	var all []constraintOf
	add := func(c *constraintOf) {
		if c != nil && c.so != nil {
			all = append(all, *c)
		}
	}
	add(parseResponseFormat(o, raw))
	add(parseStructuredOutputs(o, raw))
	for _, c := range parseGuided(o, raw) {
		add(&c)
	}
	if o.err != nil || len(all) == 0 {
		return nil
	}
	if len(all) > 1 {
		o.fail(newError(KindInvalidValue, all[1].param, "Invalid '%s': the output is already constrained by '%s'; a request may give one of response_format, structured_outputs and guided_* at most.",
			all[1].param, all[0].param))
		return nil
	}
	return all[0].so
}

// structuredKeys are the members of structured_outputs (vLLM's StructuredOutputsParams).
var structuredKeys = []string{"json", "regex", "choice", "grammar", "json_object", "structural_tag",
	"disable_fallback", "disable_any_whitespace", "disable_additional_properties", "whitespace_pattern"}

// parseStructuredOutputs reads vLLM's structured_outputs object: exactly one of json,
// regex, choice, grammar and json_object (true). The options that change the grammar
// vLLM builds (disable_any_whitespace, disable_additional_properties,
// whitespace_pattern) and structural_tag are refused as unsupported when set;
// disable_fallback (which backend may serve it) is accepted and ignored. Unknown members
// are refused, so that a misspelt constraint is not silently dropped.
func parseStructuredOutputs(o *object, raw *rawFields) *constraintOf {
	s, ok := o.child("structured_outputs")
	if !ok {
		return nil
	}
	for k := range s.m {
		if !slices.Contains(structuredKeys, k) {
			o.fail(newError(KindInvalidValue, s.param(k), "Unknown field '%s' (known: json, regex, choice, grammar, json_object).", clipName(s.param(k))))
			return nil
		}
	}
	s.boolean("disable_fallback")
	for _, k := range []string{"disable_any_whitespace", "disable_additional_properties"} {
		if v, ok := s.boolean(k); ok && v {
			s.fail(newError(KindUnsupported, s.param(k), "'%s' is not supported by this engine.", s.param(k)))
		}
	}
	if _, ok := s.str("whitespace_pattern"); ok {
		s.fail(newError(KindUnsupported, s.param("whitespace_pattern"), "'%s' is not supported by this engine.", s.param("whitespace_pattern")))
	}
	if s.has("structural_tag") {
		s.fail(newError(KindUnsupported, s.param("structural_tag"), "'%s' is not supported by this engine.", s.param("structural_tag")))
	}
	var all []constraintOf
	if s.has("json") {
		all = append(all, constraintOf{s.param("json"), jsonConstraint(s, raw, "json", "structured_outputs", "json")})
	}
	if s.has("regex") {
		all = append(all, constraintOf{s.param("regex"), regexConstraint(s, "regex")})
	}
	if s.has("choice") {
		all = append(all, constraintOf{s.param("choice"), choiceConstraint(s, "choice")})
	}
	if s.has("grammar") {
		all = append(all, constraintOf{s.param("grammar"), grammarConstraint(s, "grammar")})
	}
	if v, ok := s.boolean("json_object"); ok && v {
		all = append(all, constraintOf{s.param("json_object"), &messages.StructuredOutput{JsonObject: true}})
	}
	if s.err != nil {
		o.fail(s.err)
		return nil
	}
	switch len(all) {
	case 0:
		o.fail(newError(KindInvalidValue, "structured_outputs", "Invalid 'structured_outputs': expected one of json, regex, choice, grammar and json_object, but got none."))
		return nil
	case 1:
		return &all[0]
	}
	o.fail(newError(KindInvalidValue, all[1].param, "Invalid '%s': 'structured_outputs' takes one of json, regex, choice, grammar and json_object, but '%s' is given too.",
		all[1].param, all[0].param))
	return nil
}

// parseGuided reads vLLM's older guided_json, guided_regex, guided_choice and
// guided_grammar (each is one constraint); guided_decoding_backend is checked to be a
// string and ignored, guided_whitespace_pattern refused as unsupported.
func parseGuided(o *object, raw *rawFields) []constraintOf {
	var all []constraintOf
	if o.has("guided_json") {
		all = append(all, constraintOf{"guided_json", jsonConstraint(o, raw, "guided_json", "guided_json")})
	}
	if o.has("guided_regex") {
		all = append(all, constraintOf{"guided_regex", regexConstraint(o, "guided_regex")})
	}
	if o.has("guided_choice") {
		all = append(all, constraintOf{"guided_choice", choiceConstraint(o, "guided_choice")})
	}
	if o.has("guided_grammar") {
		all = append(all, constraintOf{"guided_grammar", grammarConstraint(o, "guided_grammar")})
	}
	o.str("guided_decoding_backend")
	if _, ok := o.str("guided_whitespace_pattern"); ok {
		o.fail(newError(KindUnsupported, "guided_whitespace_pattern", "'guided_whitespace_pattern' is not supported by this engine."))
	}
	return all
}

// jsonConstraint reads member key of o, a JSON Schema given as an object or as its JSON
// text (a string), found at path in the body. Problems go to o.
func jsonConstraint(o *object, raw *rawFields, key string, path ...string) *messages.StructuredOutput {
	v, ok := o.value(key)
	if !ok {
		return nil
	}
	param := o.param(key)
	var text []byte
	switch v := v.(type) {
	case string:
		text = []byte(v)
	case map[string]any:
		r, err := raw.at(path...)
		if err != nil || r == nil {
			o.fail(newError(KindInvalidJSON, param, "Invalid '%s': its JSON could not be read again.", param))
			return nil
		}
		text = r
	default:
		o.fail(typeError(param, "a JSON Schema object (or its JSON text)", kindOf(v)))
		return nil
	}
	schema, ok := schemaText(o, param, text)
	if !ok {
		return nil
	}
	return &messages.StructuredOutput{JsonSchema: schema}
}

// schemaText checks that text is a JSON Schema object, nested at most MaxSchemaDepth
// levels deep, that compiles and returns it compacted. Problems go to o, naming param.
// Every schema a request carries passes here before the compiler sees it.
func schemaText(o *object, param string, text []byte) (string, bool) {
	v, err := decodeSchemaJSON(text)
	if err != nil {
		o.fail(newError(KindInvalidValue, param, "Invalid '%s': not valid JSON: %v.", param, err))
		return "", false
	}
	if _, ok := v.(map[string]any); !ok {
		o.fail(typeError(param, "a JSON Schema object", kindOf(v)))
		return "", false
	}
	if jsonDeeperThan(text, MaxSchemaDepth) {
		o.fail(newError(KindInvalidValue, param, "Invalid '%s': the schema nests deeper than %d levels of JSON objects and arrays.", param, MaxSchemaDepth))
		return "", false
	}
	if p := schemaProblem(v); p != "" {
		o.fail(newError(KindInvalidValue, param, "Invalid '%s': not a valid JSON Schema: %s.", param, p))
		return "", false
	}
	return compact(text), true
}

// regexConstraint reads member key of o, a regular expression (see above).
func regexConstraint(o *object, key string) *messages.StructuredOutput {
	s, ok := o.str(key)
	if !ok {
		return nil
	}
	if p := regexProblem(s); p != "" {
		o.fail(newError(KindInvalidValue, o.param(key), "Invalid '%s': not a regular expression any engine accepts: %s.", o.param(key), p))
		return nil
	}
	return &messages.StructuredOutput{Regex: s}
}

// choiceConstraint reads member key of o: one or more strings, the output being one of
// them exactly.
func choiceConstraint(o *object, key string) *messages.StructuredOutput {
	items, ok := o.array(key)
	if !ok {
		return nil
	}
	if len(items) == 0 {
		o.fail(newError(KindInvalidValue, o.param(key), "Invalid '%s': empty array. Expected at least one choice.", o.param(key)))
		return nil
	}
	out := make([]string, len(items))
	for i, it := range items {
		s, ok := it.(string)
		if !ok {
			o.fail(typeError(indexParam(o.param(key), i), "a string", kindOf(it)))
			return nil
		}
		out[i] = s
	}
	return &messages.StructuredOutput{Choice: out}
}

// grammarConstraint reads member key of o: an EBNF grammar, passed on unchecked.
func grammarConstraint(o *object, key string) *messages.StructuredOutput {
	s, ok := o.str(key)
	if !ok {
		return nil
	}
	if strings.TrimSpace(s) == "" {
		o.fail(newError(KindInvalidValue, o.param(key), "Invalid '%s': the grammar is empty.", o.param(key)))
		return nil
	}
	return &messages.StructuredOutput{Grammar: s}
}

// regexProblem returns why no engine could take pattern ("" when one may): see above.
func regexProblem(pattern string) string {
	if pattern == "" {
		return "the pattern is empty"
	}
	_, err := syntax.Parse(pattern, syntax.Perl)
	if err == nil {
		return ""
	}
	if _, err2 := regexp2.Compile(pattern, regexp2.None); err2 == nil {
		return ""
	}
	return clipName(err.Error())
}

// schemaURL names a request's schema for the compiler; nothing is fetched from it.
const schemaURL = "turbine:schema"

// noLoader refuses every document a schema refers to: a request's schema may name only
// its own parts (and the JSON Schema meta-schemas, which the compiler holds).
type noLoader struct{}

func (noLoader) Load(url string) (any, error) {
	return nil, fmt.Errorf("%s is another document", url)
}

// ecmaRegexp compiles a schema's "pattern" as ECMA-262 (what JSON Schema specifies).
func ecmaRegexp(s string) (jsonschema.Regexp, error) {
	re, err := regexp2.Compile(s, regexp2.ECMAScript)
	if err != nil {
		return nil, err
	}
	return (*ecmaRE)(re), nil
}

type ecmaRE regexp2.Regexp

func (re *ecmaRE) MatchString(s string) bool {
	ok, err := (*regexp2.Regexp)(re).MatchString(s)
	return err == nil && ok
}

func (re *ecmaRE) String() string { return (*regexp2.Regexp)(re).String() }

// schemaPrinter renders the compiler's messages.
var schemaPrinter = message.NewPrinter(language.English)

// schemaProblem compiles schema (decoded with json.Number numbers) and returns what is
// wrong with it, "" when it compiles: the first failure against the meta-schema (where,
// and what), a reference that leads nowhere or to another document, an unknown draft.
func schemaProblem(schema any) string {
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	c.UseLoader(noLoader{})
	c.UseRegexpEngine(ecmaRegexp)
	if err := c.AddResource(schemaURL, schema); err != nil {
		return clipName(err.Error())
	}
	_, err := c.Compile(schemaURL)
	if err == nil {
		return ""
	}
	var sve *jsonschema.SchemaValidationError
	var ve *jsonschema.ValidationError
	var le *jsonschema.LoadURLError
	var pe *jsonschema.JSONPointerNotFoundError
	switch {
	case errors.As(err, &sve) && errors.As(sve.Err, &ve):
		for len(ve.Causes) > 0 {
			ve = ve.Causes[0]
		}
		return clipName(fmt.Sprintf("at '/%s': %s", strings.Join(ve.InstanceLocation, "/"), ve.ErrorKind.LocalizedString(schemaPrinter)))
	case errors.As(err, &le):
		return clipName(fmt.Sprintf("it refers to %s, which is not followed: references must stay within the schema", strings.TrimPrefix(le.URL, schemaURL)))
	case errors.As(err, &pe):
		return clipName(fmt.Sprintf("the reference %s leads nowhere in the schema", strings.TrimPrefix(pe.URL, schemaURL)))
	}
	msg := strings.ReplaceAll(err.Error(), `"`+schemaURL, `"`)
	return clipName(strings.ReplaceAll(msg, schemaURL, ""))
}

// readTools decodes the offered functions (items, the tools array already checked to
// hold objects of type "function" with a named function): each function's parameters,
// decoded for the output parsers and as JSON text (key order kept) for a forced call's
// schema. A parameters schema that does not compile, and a function name given twice,
// are refused. Problems go to o. Time linear in the number of functions (and their
// schemas' size).
func readTools(o *object, raw *rawFields, items []any) ([]parse.Tool, []parse.ToolSchema) {
	tools := make([]parse.Tool, 0, len(items))
	schemas := make([]parse.ToolSchema, 0, len(items))
	var rawItems []json.RawMessage
	seen := make(map[string]int, len(items)) // name → index
	for i, it := range items {
		p := indexParam("tools", i)
		fn, _ := objectOf(it.(map[string]any)["function"], p+".function")
		name, _ := fn.str("name")
		if j, dup := seen[name]; dup {
			o.fail(newError(KindInvalidValue, fn.param("name"), "Invalid '%s': the function name '%s' is also tools[%d]'s; function names must be unique.",
				fn.param("name"), clipName(name), j))
			return nil, nil
		}
		seen[name] = i
		t, ts := parse.Tool{Name: name}, parse.ToolSchema{Name: name}
		if fn.has("parameters") {
			if _, ok := fn.expect("parameters", kindObject, "a JSON Schema object"); !ok {
				o.fail(fn.err)
				return nil, nil
			}
			if rawItems == nil {
				r, err := raw.at("tools")
				if err == nil {
					rawItems, err = rawElements(r)
				}
				if err != nil || len(rawItems) != len(items) {
					o.fail(newError(KindInvalidJSON, "tools", "Invalid 'tools': its JSON could not be read again."))
					return nil, nil
				}
			}
			var text json.RawMessage
			if m, err := rawMembers(rawItems[i]); err == nil {
				if f, err := rawMembers(m["function"]); err == nil {
					text = f["parameters"]
				}
			}
			param := fn.param("parameters")
			if _, ok := schemaText(o, param, text); !ok {
				return nil, nil
			}
			v, _ := decodeSchemaJSON(text)
			t.Parameters, ts.Parameters = v.(map[string]any), text
		}
		tools, schemas = append(tools, t), append(schemas, ts)
	}
	return tools, schemas
}

// parseToolChoice reads tool_choice: "auto", "none", "required" or {"type": "function",
// "function": {"name": N}} naming one of tools. Absent, or "auto" with no tools, leaves
// the zero value ("auto" with tools, "none" without). "required" and a named function
// need tools. Problems go to o.
func parseToolChoice(o *object, tools []parse.Tool) toolChoice {
	r, ok := o.value("tool_choice")
	if !ok {
		return toolChoice{}
	}
	var c toolChoice
	switch kindOf(r) {
	case kindString:
		c.Mode = r.(string)
		switch c.Mode {
		case "none", "auto", "required":
		default:
			o.fail(newError(KindInvalidValue, "tool_choice", "Invalid value for 'tool_choice': '%s'. Supported values are: 'none', 'auto' and 'required'.", clipName(c.Mode)))
			return toolChoice{}
		}
	case kindObject:
		tc, _ := objectOf(r, "tool_choice")
		typ, ok := tc.str("type")
		switch {
		case tc.err != nil:
		case !ok:
			tc.fail(newError(KindMissingParameter, "tool_choice.type", "Missing required parameter: 'tool_choice.type'."))
		case typ != "function":
			tc.fail(newError(KindInvalidValue, "tool_choice.type", "Invalid value for 'tool_choice.type': '%s'. Supported values are: 'function'.", clipName(typ)))
		}
		fn, ok := tc.child("function")
		if !ok && tc.err == nil {
			tc.fail(newError(KindMissingParameter, "tool_choice.function", "Missing required parameter: 'tool_choice.function'."))
		}
		if tc.err == nil {
			name, ok := fn.str("name")
			if fn.err == nil && (!ok || name == "") {
				fn.fail(newError(KindMissingParameter, "tool_choice.function.name", "Missing required parameter: 'tool_choice.function.name'."))
			}
			tc.fail(fn.err)
			c = toolChoice{Mode: "function", Name: name}
		}
		if tc.err != nil {
			o.fail(tc.err)
			return toolChoice{}
		}
	default:
		o.fail(typeError("tool_choice", "a string or an object", kindOf(r)))
		return toolChoice{}
	}
	switch {
	case c.Mode == "auto" && len(tools) == 0:
		return toolChoice{}
	case (c.Mode == "required" || c.Mode == "function") && len(tools) == 0:
		what := "'required'"
		if c.Mode == "function" {
			what = "a named function"
		}
		o.fail(newError(KindInvalidValue, "tool_choice", "Invalid value for 'tool_choice': %s needs at least one function in 'tools'.", what))
		return toolChoice{}
	case c.Mode == "function" && !slices.ContainsFunc(tools, func(t parse.Tool) bool { return t.Name == c.Name }):
		names := make([]string, len(tools))
		for i, t := range tools {
			names[i] = t.Name
		}
		o.fail(newError(KindInvalidValue, "tool_choice.function.name", "Invalid 'tool_choice.function.name': '%s' is not among the tools (%s).",
			clipName(c.Name), clipName(strings.Join(names, ", "))))
		return toolChoice{}
	}
	return c
}

// forcedCall returns the constraint of a forced tool call (tool_choice "required" or a
// named function), vLLM's schema for it (parse.RequiredSchema, parse.NamedSchema); nil
// for the other choices. The required schema combines every function's parameters, so
// it is compiled again. Problems go to o.
func forcedCall(o *object, c toolChoice, schemas []parse.ToolSchema) *messages.StructuredOutput {
	switch c.Mode {
	case "required":
		s, err := parse.RequiredSchema(schemas)
		if err != nil {
			o.fail(newError(KindInvalidValue, "tools", "Invalid 'tools' for tool_choice 'required': %s.", clipName(err.Error())))
			return nil
		}
		v, err := decodeSchemaJSON(s)
		if err == nil {
			if p := schemaProblem(v); p != "" {
				o.fail(newError(KindInvalidValue, "tools", "Invalid 'tools' for tool_choice 'required': the functions' parameters, combined into one schema as the engine is given them, are not a valid JSON Schema: %s.", p))
				return nil
			}
		}
		return &messages.StructuredOutput{JsonSchema: string(s)}
	case "function":
		for _, t := range schemas {
			if t.Name == c.Name {
				s, err := parse.NamedSchema(t.Parameters)
				if err != nil {
					o.fail(newError(KindInvalidValue, "tools", "Invalid 'tools' for tool_choice '%s': %s.", clipName(c.Name), err))
					return nil
				}
				return &messages.StructuredOutput{JsonSchema: string(s)}
			}
		}
	}
	return nil
}

// checkOutputSchema checks schema, a JSON Schema as JSON text (an output format's, or a
// function's parameters), as structured output needs it: a JSON object that compiles
// (see above). Errors: 400 invalid_value or invalid_type naming param; nil when it
// compiles.
func checkOutputSchema(param string, schema []byte) *APIError {
	o := &object{}
	schemaText(o, param, schema)
	return o.err
}
