package gateway

import (
	"net/http"
	"strings"
	"testing"
)

// TestToolNameRule: tool names are 1 to 64 characters of a-z, A-Z, 0-9, '_' and '-'
// (OpenAI), 1 to 128 of them for the Messages API; the error names the rule.
func TestToolNameRule(t *testing.T) {
	for _, c := range []struct {
		name   string
		maxLen int
		ok     bool
		msg    string
	}{
		{"get_weather", MaxToolNameLength, true, ""},
		{"Get-Weather_2", MaxToolNameLength, true, ""},
		{strings.Repeat("f", 64), MaxToolNameLength, true, ""},
		{strings.Repeat("f", 65), MaxToolNameLength, false, "the name is 65 characters long"},
		{strings.Repeat("f", 128), MaxAnthropicToolNameLength, true, ""},
		{strings.Repeat("f", 129), MaxAnthropicToolNameLength, false, "the name is 129 characters long"},
		{"functions.get_weather", MaxToolNameLength, false, `the name holds '.'`},
		{"météo", MaxToolNameLength, false, `the name holds 'é'`},
		{"get weather", MaxToolNameLength, false, `the name holds ' '`},
		{strings.Repeat("é", 40), MaxToolNameLength, false, `the name holds 'é'`},
	} {
		e := toolNameError("tools[0].name", c.name, c.maxLen)
		switch {
		case c.ok && e != nil:
			t.Errorf("%q (max %d) refused: %v", c.name, c.maxLen, e)
		case !c.ok && e == nil:
			t.Errorf("%q (max %d) accepted", c.name, c.maxLen)
		case !c.ok && (e.Kind != KindInvalidValue || e.Param != "tools[0].name" || !strings.Contains(e.Message, c.msg) || !strings.Contains(e.Message, "^[a-zA-Z0-9_-]{1,")):
			t.Errorf("%q (max %d): %v; want invalid_value naming tools[0].name, with %q and the pattern", c.name, c.maxLen, e, c.msg)
		}
	}
}

// TestJSONDeeperThan: the nesting depth counts objects and arrays, not brackets inside
// strings.
func TestJSONDeeperThan(t *testing.T) {
	for _, c := range []struct {
		text  string
		limit int
		want  bool
	}{
		{`1`, 0, false},
		{`{}`, 0, true},
		{`{}`, 1, false},
		{`{"a":[1]}`, 1, true},
		{`{"a":[1]}`, 2, false},
		{`{"a":[{}],"b":{}}`, 2, true},
		{`{"a":[{}],"b":{}}`, 3, false},
		{`{"a":"[[[{{{"}`, 1, false},
		{`{"a":"\"[[[","b":"\\"}`, 1, false},
		{`{"a":"\\","b":[[1]]}`, 2, true},
		{nestedSchema(31), MaxSchemaDepth, false}, // 63 levels
		{nestedSchema(32), MaxSchemaDepth, true},  // 65 levels
	} {
		if got := jsonDeeperThan([]byte(c.text), c.limit); got != c.want {
			t.Errorf("jsonDeeperThan(%.60s, %d) = %v, want %v", c.text, c.limit, got, c.want)
		}
	}
}

// TestAgentRequestsAccepted: what the stricter checks must still let through.
func TestAgentRequestsAccepted(t *testing.T) {
	for _, c := range []struct{ name, path, body string }{
		{"chat: schema at the depth limit", chatPath, `{"model":"agent","messages":[{"role":"user","content":"hi"}],
			"response_format":{"type":"json_schema","json_schema":{"name":"x","schema":` + nestedSchema(31) + `}}}`},
		{"chat: tool message answering an earlier turn's call", chatPath, `{"model":"agent","messages":[{"role":"user","content":"hi"},
			{"role":"assistant","tool_calls":[{"id":"c1","type":"function","function":{"name":"f","arguments":"{}"}}]},
			{"role":"tool","tool_call_id":"c1","content":"42"},{"role":"assistant","content":"42 it is"},
			{"role":"user","content":"again"},{"role":"tool","tool_call_id":"c1","content":"43"}]}`},
		{"chat: tool call without a type", chatPath, `{"model":"agent","messages":[{"role":"user","content":"hi"},
			{"role":"assistant","tool_calls":[{"id":"c1","function":{"name":"f","arguments":"{}"}}]},
			{"role":"tool","tool_call_id":"c1","content":"42"}]}`},
		{"responses: reasoning summary an array", responsesPath, `{"model":"agent","input":[{"type":"reasoning","summary":[{"type":"summary_text","text":"thought"}]},
			{"role":"user","content":"hi"}]}`},
		{"messages: metadata.user_id null", anthMessagesPath, `{"model":"agent","max_tokens":16,"metadata":{"user_id":null},
			"messages":[{"role":"user","content":"hi"}]}`},
		{"messages: a 128-character tool name", anthMessagesPath, `{"model":"agent","max_tokens":16,"messages":[{"role":"user","content":"hi"}],
			"tools":[{"name":"` + strings.Repeat("f", 128) + `","input_schema":{"type":"object"}}]}`},
	} {
		t.Run(c.name, func(t *testing.T) {
			rr := serve(newTestServer(t, agentBackend(helloScript()...)), http.MethodPost, c.path, c.body)
			if rr.Code != http.StatusOK {
				t.Fatalf("status %d, want 200: %.300s", rr.Code, rr.Body)
			}
		})
	}
}

// TestAgentRequestsRefused: the params and messages of the new checks' errors.
func TestAgentRequestsRefused(t *testing.T) {
	for _, c := range []struct{ name, path, body, param, msg string }{
		{"chat: deep tool parameters", chatPath, `{"model":"agent","messages":[{"role":"user","content":"hi"}],
			"tools":[{"type":"function","function":{"name":"f","parameters":` + nestedSchema(32) + `}}]}`,
			"tools[0].function.parameters", "nests deeper than 64 levels"},
		{"chat: deep guided_json text", chatPath, `{"model":"agent","messages":[{"role":"user","content":"hi"}],
			"guided_json":"` + strings.ReplaceAll(nestedSchema(32), `"`, `\"`) + `"}`,
			"guided_json", "nests deeper than 64 levels"},
		{"chat: 65-character function name", chatPath, `{"model":"agent","messages":[{"role":"user","content":"hi"}],
			"tools":[{"type":"function","function":{"name":"` + strings.Repeat("f", 65) + `"}}]}`,
			"tools[0].function.name", "1 to 64 characters"},
		{"responses: dotted function name", responsesPath, `{"model":"agent","input":"hi","tools":[{"type":"function","name":"a.b"}]}`,
			"tools[0].name", "1 to 64 characters"},
		{"chat: tool message answering no call", chatPath, `{"model":"agent","messages":[{"role":"user","content":"hi"},
			{"role":"tool","tool_call_id":"call_nope","content":"42"}]}`,
			"messages[1].tool_call_id", "must be a response to a preceding message with 'tool_calls'"},
		{"chat: tool call type a number", chatPath, `{"model":"agent","messages":[{"role":"user","content":"hi"},
			{"role":"assistant","tool_calls":[{"id":"c1","type":7,"function":{"name":"f","arguments":"{}"}}]}]}`,
			"messages[1].tool_calls[0].type", "expected a string"},
		{"chat: tool call type banana", chatPath, `{"model":"agent","messages":[{"role":"user","content":"hi"},
			{"role":"assistant","tool_calls":[{"id":"c1","type":"banana","function":{"name":"f","arguments":"{}"}}]}]}`,
			"messages[1].tool_calls[0].type", "Supported values are: 'function'"},
		{"responses: reasoning content a string", responsesPath, `{"model":"agent","input":[{"type":"reasoning","summary":[],"content":"thought"},
			{"role":"user","content":"hi"}]}`,
			"input[0].content", "expected an array of text parts"},
	} {
		t.Run(c.name, func(t *testing.T) {
			rr := serve(newTestServer(t, agentBackend(helloScript()...)), http.MethodPost, c.path, c.body)
			checkAPIError(t, c.path, rr)
			if body := rr.Body.String(); !strings.Contains(body, `"param":"`+c.param+`"`) || !strings.Contains(body, c.msg) {
				t.Errorf("want param %q and %q: %.400s", c.param, c.msg, body)
			}
		})
	}
}

// TestAnthropicRequestsRefused: the Messages API's new checks name the field in the
// message (its error shape has no param).
func TestAnthropicRequestsRefused(t *testing.T) {
	for _, c := range []struct{ name, body, msg string }{
		{"metadata.user_id a number", `{"model":"agent","max_tokens":16,"metadata":{"user_id":5},"messages":[{"role":"user","content":"hi"}]}`,
			"'metadata.user_id'"},
		{"a 129-character tool name", `{"model":"agent","max_tokens":16,"messages":[{"role":"user","content":"hi"}],
			"tools":[{"name":"` + strings.Repeat("f", 129) + `","input_schema":{"type":"object"}}]}`, "'tools[0].name'"},
		{"deep output_config.format schema", `{"model":"agent","max_tokens":16,"messages":[{"role":"user","content":"hi"}],
			"output_config":{"format":{"type":"json_schema","schema":` + nestedSchema(32) + `}}}`, "'output_config.format.schema'"},
	} {
		for _, path := range []string{anthMessagesPath, anthMessagesPath + "/count_tokens"} {
			t.Run(path+"/"+c.name, func(t *testing.T) {
				rr := serve(newTestServer(t, agentBackend(helloScript()...)), http.MethodPost, path, c.body)
				checkAPIError(t, path, rr)
				if !strings.Contains(rr.Body.String(), c.msg) {
					t.Errorf("want %q in the message: %.400s", c.msg, rr.Body)
				}
			})
		}
	}
}
