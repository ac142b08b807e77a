package server

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/turbine-llm/turbine/messages"
)

// Output constraints (structured outputs, docs/reference.md §16) as each dialect carries
// them, read back into the messages.StructuredOutput the gateway started from
// (mocker.Request.Structured), so that the mock engine can plan an output that satisfies
// it. The shapes are the ones Turbine's engine clients send (engines/vllm, sglang, trtllm);
// what the mock engine cannot read back exactly (a list of choices sent as a regex to
// SGLang and trtllm-serve) stays in the form it arrived in.

// vllmStructuredOutputs is vLLM's structured_outputs (StructuredOutputsParams).
type vllmStructuredOutputs struct {
	JSON                        rawJSON  `json:"json"`
	Regex                       *string  `json:"regex"`
	Choice                      []string `json:"choice"`
	Grammar                     *string  `json:"grammar"`
	JSONObject                  *bool    `json:"json_object"`
	StructuralTag               *string  `json:"structural_tag"`
	DisableFallback             bool     `json:"disable_fallback"`
	DisableAnyWhitespace        bool     `json:"disable_any_whitespace"`
	DisableAdditionalProperties bool     `json:"disable_additional_properties"`
	WhitespacePattern           *string  `json:"whitespace_pattern"`
}

// vllmStructured reads structured_outputs: exactly one constraint, as vLLM requires (its
// StructuredOutputsParams refuses none and several alike); a schema is an object or its
// JSON text. nil when absent or null.
func vllmStructured(so *vllmStructuredOutputs) (*messages.StructuredOutput, *apiError) {
	if so == nil {
		return nil, nil
	}
	var out messages.StructuredOutput
	var kinds []string
	if so.JSON.set && !so.JSON.isNull() {
		kinds = append(kinds, "json")
		schema, err := schemaJSON(so.JSON.raw)
		if err != nil {
			return nil, badRequest("structured_outputs", "structured_outputs.json: %v", err)
		}
		out.JsonSchema = schema
	}
	if so.Regex != nil {
		kinds, out.Regex = append(kinds, "regex"), *so.Regex
	}
	if so.Choice != nil {
		kinds, out.Choice = append(kinds, "choice"), so.Choice
	}
	if so.Grammar != nil {
		kinds, out.Grammar = append(kinds, "grammar"), *so.Grammar
	}
	if so.JSONObject != nil && *so.JSONObject {
		kinds, out.JsonObject = append(kinds, "json_object"), true
	}
	if so.StructuralTag != nil {
		return nil, badRequest("structured_outputs", "structured_outputs.structural_tag is not supported by the mock engine.")
	}
	switch len(kinds) {
	case 0:
		return nil, badRequest("structured_outputs", "You must use one kind of structured outputs constraint but none are specified: %+v", *so)
	case 1:
		return &out, nil
	}
	return nil, badRequest("structured_outputs", "You can only use one kind of structured outputs constraint but multiple are specified: %s", strings.Join(kinds, ", "))
}

// schemaJSON reads a JSON Schema given as an object or as a string holding one, and
// returns its compact JSON text. Errors: anything else.
func schemaJSON(raw []byte) (string, error) {
	var text []byte
	var s string
	if json.Unmarshal(raw, &s) == nil {
		text = []byte(s)
	} else {
		text = raw
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(text, &m); err != nil || m == nil {
		return "", fmt.Errorf("a JSON Schema must be an object or its JSON text, got %.100s", raw)
	}
	var b bytes.Buffer
	if err := json.Compact(&b, text); err != nil {
		return "", err
	}
	return b.String(), nil
}

// sglangStructured reads sampling_params' json_schema, regex and ebnf: at most one, as
// SGLang's SamplingParams.verify requires. "" msg when fine; nil when none is set.
func sglangStructured(sp sglangSampling) (*messages.StructuredOutput, string) {
	var out messages.StructuredOutput
	n := 0
	if sp.JSONSchema != nil {
		n++
		schema, err := schemaJSON([]byte(*sp.JSONSchema))
		if err != nil {
			return nil, "json_schema: " + err.Error()
		}
		out.JsonSchema = schema
	}
	if sp.Regex != nil {
		n, out.Regex = n+1, *sp.Regex
	}
	if sp.EBNF != nil {
		n, out.Grammar = n+1, *sp.EBNF
	}
	if sp.StructuralTag != nil {
		return nil, "structural_tag is not supported by the mock engine."
	}
	switch n {
	case 0:
		return nil, ""
	case 1:
		return &out, ""
	}
	return nil, "Only one of regex, json_schema, or ebnf can be set."
}

// trtllmResponseFormat is trtllm-serve's ResponseFormat.
type trtllmResponseFormat struct {
	Type       string          `json:"type"`
	Schema     json.RawMessage `json:"schema"`
	JSONSchema json.RawMessage `json:"json_schema"`
	Regex      *string         `json:"regex"`
	EBNF       *string         `json:"ebnf"`
}

// trtllmStructured reads response_format as trtllm-serve's completions endpoint does
// (_response_format_to_guided_decoding_params): text is none; json takes schema;
// json_schema takes json_schema, unwrapping OpenAI's {"name", "schema"}; json_object;
// regex; ebnf. validation is true for failures the request model itself reports.
func trtllmStructured(rf *trtllmResponseFormat) (so *messages.StructuredOutput, validation bool, msg string) {
	if rf == nil {
		return nil, false, ""
	}
	missing := func(field string) string {
		return fmt.Sprintf("response_format.%s is required for response_format.type == '%s', but got None.", field, rf.Type)
	}
	null := func(raw json.RawMessage) bool { return len(raw) == 0 || string(raw) == "null" }
	switch rf.Type {
	case "text":
		return nil, false, ""
	case "json":
		if null(rf.Schema) {
			return nil, false, missing("schema")
		}
		s, err := schemaJSON(rf.Schema)
		if err != nil {
			return nil, false, "response_format.schema: " + err.Error()
		}
		return &messages.StructuredOutput{JsonSchema: s}, false, ""
	case "json_schema":
		if null(rf.JSONSchema) {
			return nil, false, missing("json_schema")
		}
		raw := rf.JSONSchema
		var wrapped struct {
			Schema json.RawMessage `json:"schema"`
		}
		if json.Unmarshal(raw, &wrapped) == nil && !null(wrapped.Schema) {
			raw = wrapped.Schema
		}
		s, err := schemaJSON(raw)
		if err != nil {
			return nil, false, "response_format.json_schema: " + err.Error()
		}
		return &messages.StructuredOutput{JsonSchema: s}, false, ""
	case "json_object":
		return &messages.StructuredOutput{JsonObject: true}, false, ""
	case "regex":
		if rf.Regex == nil {
			return nil, false, missing("regex")
		}
		return &messages.StructuredOutput{Regex: *rf.Regex}, false, ""
	case "ebnf":
		if rf.EBNF == nil {
			return nil, false, missing("ebnf")
		}
		return &messages.StructuredOutput{Grammar: *rf.EBNF}, false, ""
	case "structural_tag":
		return nil, false, "response_format structural_tag is not supported by the mock engine."
	}
	return nil, true, fmt.Sprintf("1 validation error for CompletionRequest\nresponse_format.type\n  Input should be 'text', 'json', 'json_schema', 'json_object', 'regex', 'ebnf' or 'structural_tag' [input_value=%q]", rf.Type)
}
