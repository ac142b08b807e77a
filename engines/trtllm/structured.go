package trtllm

import (
	"encoding/json"
	"errors"

	"github.com/turbine-llm/turbine/engines/internal/enginehttp"
	"github.com/turbine-llm/turbine/messages"
)

// ResponseFormat returns the response_format member of a completion body for the output
// constraint so (docs/reference.md §16), in trtllm-serve's ResponseFormat
// (tensorrt_llm/serve/openai_protocol.py), which its completions endpoint turns into
// GuidedDecodingParams:
//
//	{"type": "json", "schema": {...schema...}}   the JSON Schema, as the client wrote it
//	{"type": "json_object"}
//	{"type": "regex", "regex": "..."}            a regex; also a list of choices
//	                                             (enginehttp.ChoiceRegex)
//	{"type": "ebnf", "ebnf": "..."}              an EBNF grammar
//
// "json" (a schema given directly) is what every trtllm-serve with response_format
// takes; "json_schema" wraps it in OpenAI's {"name", "schema"} object, which some
// releases passed to the grammar backend unwrapped. regex and ebnf need a trtllm-serve
// from the second half of 2025. The server enforces any of them only when it was started
// with guided_decoding_backend set (Options, the launcher's file, sets xgrammar). nil when so is
// nil or constrains nothing. Put it in CompletionRequest.Extra. Errors: a json_schema
// that is not JSON text.
func ResponseFormat(so *messages.StructuredOutput) (json.RawMessage, error) {
	var v any
	switch {
	case so.GetJsonSchema() != "":
		s := json.RawMessage(so.GetJsonSchema())
		if !json.Valid(s) {
			return nil, errors.New("trtllm: structured output: the JSON Schema is not JSON")
		}
		v = struct {
			Type   string          `json:"type"`
			Schema json.RawMessage `json:"schema"`
		}{"json", s}
	case so.GetJsonObject():
		v = map[string]string{"type": "json_object"}
	case so.GetRegex() != "":
		v = regexFormat{"regex", so.GetRegex()}
	case len(so.GetChoice()) > 0:
		v = regexFormat{"regex", enginehttp.ChoiceRegex(so.GetChoice())}
	case so.GetGrammar() != "":
		v = struct {
			Type string `json:"type"`
			EBNF string `json:"ebnf"`
		}{"ebnf", so.GetGrammar()}
	default:
		return nil, nil
	}
	b, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	return b, nil
}

type regexFormat struct {
	Type  string `json:"type"`
	Regex string `json:"regex"`
}
