package trtllm

import (
	"strings"
	"testing"

	"github.com/turbine-llm/turbine/messages"
)

func TestResponseFormat(t *testing.T) {
	cases := []struct {
		name string
		so   *messages.StructuredOutput
		want string // "" for none
	}{
		{"none", nil, ""},
		{"empty", &messages.StructuredOutput{}, ""},
		{"json schema, key order kept", &messages.StructuredOutput{JsonSchema: `{"type":"object","properties":{"z":{},"a":{}}}`},
			`{"type":"json","schema":{"type":"object","properties":{"z":{},"a":{}}}}`},
		{"json object", &messages.StructuredOutput{JsonObject: true}, `{"type":"json_object"}`},
		{"regex", &messages.StructuredOutput{Regex: `[a-z]+`}, `{"type":"regex","regex":"[a-z]+"}`},
		{"choice", &messages.StructuredOutput{Choice: []string{"yes", "no?"}}, `{"type":"regex","regex":"(yes|no\\?)"}`},
		{"grammar", &messages.StructuredOutput{Grammar: `root ::= "a"`}, `{"type":"ebnf","ebnf":"root ::= \"a\""}`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := ResponseFormat(c.so)
			if err != nil || string(got) != c.want {
				t.Fatalf("got %s, %v; want %s", got, err, c.want)
			}
			if got == nil {
				return
			}
			b, err := completionBody(CompletionRequest{Model: "m", PromptTokenIDs: []uint32{1}, MaxTokens: 1,
				Extra: map[string]any{"response_format": got}})
			if err != nil {
				t.Fatal(err)
			}
			if !strings.HasPrefix(string(b), `{"response_format":`+c.want+`,"model":"m"`) {
				t.Errorf("body %s lacks %s", b, c.want)
			}
		})
	}
	if _, err := ResponseFormat(&messages.StructuredOutput{JsonSchema: `{`}); err == nil {
		t.Error("a schema that is not JSON was accepted")
	}
}
