package vllm

import (
	"encoding/json"
	"errors"

	"github.com/turbine-llm/turbine/messages"
)

// StructuredOutputs returns the structured_outputs member of a completion body for the
// output constraint so (docs/reference.md §16), as vLLM reads it from 0.10.2 on (the
// guided_* fields it replaced are gone from 0.12): exactly one of
//
//	{"json": {...schema...}}   the JSON Schema, as the object the client wrote
//	{"json_object": true}
//	{"regex": "..."}
//	{"choice": ["...", ...]}
//	{"grammar": "..."}         EBNF (xgrammar's dialect)
//
// nil when so is nil or constrains nothing. Put it in CompletionRequest.Extra. Errors: a
// json_schema that is not JSON text.
func StructuredOutputs(so *messages.StructuredOutput) (json.RawMessage, error) {
	var v any
	switch {
	case so.GetJsonSchema() != "":
		s := json.RawMessage(so.GetJsonSchema())
		if !json.Valid(s) {
			return nil, errors.New("vllm: structured output: the JSON Schema is not JSON")
		}
		v = map[string]json.RawMessage{"json": s}
	case so.GetJsonObject():
		v = map[string]bool{"json_object": true}
	case so.GetRegex() != "":
		v = map[string]string{"regex": so.GetRegex()}
	case len(so.GetChoice()) > 0:
		v = map[string][]string{"choice": so.GetChoice()}
	case so.GetGrammar() != "":
		v = map[string]string{"grammar": so.GetGrammar()}
	default:
		return nil, nil
	}
	b, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	return b, nil
}
