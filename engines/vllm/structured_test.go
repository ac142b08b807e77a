package vllm

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/turbine-llm/turbine/messages"
)

func TestStructuredOutputs(t *testing.T) {
	cases := []struct {
		name string
		so   *messages.StructuredOutput
		want string // "" for none
	}{
		{"none", nil, ""},
		{"empty", &messages.StructuredOutput{}, ""},
		{"json schema, key order kept", &messages.StructuredOutput{JsonSchema: `{"type":"object","properties":{"z":{},"a":{}}}`},
			`{"json":{"type":"object","properties":{"z":{},"a":{}}}}`},
		{"json object", &messages.StructuredOutput{JsonObject: true}, `{"json_object":true}`},
		{"regex", &messages.StructuredOutput{Regex: `\d+<`}, `{"regex":"\\d+\u003c"}`},
		{"choice", &messages.StructuredOutput{Choice: []string{"yes", "no"}}, `{"choice":["yes","no"]}`},
		{"grammar", &messages.StructuredOutput{Grammar: `root ::= "a"`}, `{"grammar":"root ::= \"a\""}`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := StructuredOutputs(c.so)
			if err != nil || string(got) != c.want {
				t.Fatalf("got %s, %v; want %s", got, err, c.want)
			}
			if got == nil {
				return
			}
			// In the completion body, as Extra carries it.
			b, err := completionBody(CompletionRequest{PromptTokenIDs: []uint32{1}, MaxTokens: 1,
				Extra: map[string]any{"structured_outputs": got}})
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(string(b), `"structured_outputs":`+c.want) {
				t.Errorf("body %s lacks %s", b, c.want)
			}
			var body map[string]json.RawMessage
			if err := json.Unmarshal(b, &body); err != nil {
				t.Fatalf("%s: %v", b, err)
			}
		})
	}
	if _, err := StructuredOutputs(&messages.StructuredOutput{JsonSchema: `{"type":`}); err == nil {
		t.Error("a schema that is not JSON was accepted")
	}
}
