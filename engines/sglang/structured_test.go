package sglang

import (
	"testing"

	"github.com/turbine-llm/turbine/messages"
)

// TestStructuredOutputMapping checks each output constraint in SGLang's sampling_params
// (json_schema, regex or ebnf), as the body carries it.
func TestStructuredOutputMapping(t *testing.T) {
	cases := []struct {
		name string
		so   *messages.StructuredOutput
		want string // sampling_params
	}{
		{"none", nil, `{"max_new_tokens":4}`},
		{"json schema", &messages.StructuredOutput{JsonSchema: `{"type":"object","properties":{"z":{},"a":{}}}`},
			`{"max_new_tokens":4,"json_schema":"{\"type\":\"object\",\"properties\":{\"z\":{},\"a\":{}}}"}`},
		{"json object", &messages.StructuredOutput{JsonObject: true}, `{"max_new_tokens":4,"json_schema":"{\"type\":\"object\"}"}`},
		{"regex", &messages.StructuredOutput{Regex: `\d+`}, `{"max_new_tokens":4,"regex":"\\d+"}`},
		{"choice", &messages.StructuredOutput{Choice: []string{"yes", "a.b"}}, `{"max_new_tokens":4,"regex":"(yes|a\\.b)"}`},
		{"grammar", &messages.StructuredOutput{Grammar: `root ::= "a"`}, `{"max_new_tokens":4,"ebnf":"root ::= \"a\""}`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := samplingFrom(&messages.SamplingParams{MaxTokens: 4, Structured: c.so})
			b, err := samplingBody(nil, p)
			if err != nil {
				t.Fatal(err)
			}
			if string(b) != c.want {
				t.Errorf("sampling_params\n got %s\nwant %s", b, c.want)
			}
		})
	}
}
