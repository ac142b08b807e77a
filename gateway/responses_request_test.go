package gateway

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/turbine-llm/turbine/gateway/parse"
)

const responsesPath = "/v1/responses"

// TestResponsesTranslate checks what Responses bodies become: the chat request every API
// shares (messages, tools for the template, tool choice, constraint, sampling).
func TestResponsesTranslate(t *testing.T) {
	fn := `{"type":"function","name":"get_weather","parameters":{"type":"object","properties":{"city":{"type":"string"},"unit":{"enum":["C","F"]}},"required":["city"]}}`
	fn2 := `{"type":"function","name":"get_time","description":"Time in a zone"}`
	cases := []struct {
		name, body string
		// messages is the chat messages as JSON.
		messages string
		check    func(t *testing.T, r *responsesRequest)
	}{
		{"string input and instructions", `{"model":"m","input":"hi","instructions":"be brief"}`,
			`[{"Role":"system","Content":"be brief"},{"Role":"user","Content":"hi"}]`, nil},
		{"empty instructions add nothing", `{"model":"m","input":"hi","instructions":""}`,
			`[{"Role":"user","Content":"hi"}]`, nil},
		{"message items", `{"model":"m","input":[{"role":"developer","content":"rules"},{"type":"message","role":"user","content":[{"type":"input_text","text":"a"},{"type":"input_text","text":"b"}]},` +
			`{"type":"message","role":"assistant","id":"msg_1","status":"completed","content":[{"type":"output_text","text":"c","annotations":[]}]},{"role":"user","content":"d"}]}`,
			`[{"Role":"developer","Content":"rules"},{"Role":"user","Content":"a\nb"},{"Role":"assistant","Content":"c"},{"Role":"user","Content":"d"}]`, nil},
		{"an agent's turns", `{"model":"m","tools":[` + fn + `],"input":[{"role":"user","content":"weather in Paris and Rome?"},` +
			`{"type":"reasoning","id":"rs_1","summary":[],"content":[{"type":"reasoning_text","text":"two calls"}]},` +
			`{"type":"message","role":"assistant","content":[{"type":"output_text","text":"Checking."}]},` +
			`{"type":"function_call","call_id":"c1","name":"get_weather","arguments":"{\"city\":\"Paris\"}"},` +
			`{"type":"function_call","call_id":"c2","name":"get_weather","arguments":"{\"city\":\"Rome\"}"},` +
			`{"type":"function_call_output","call_id":"c1","output":"sunny"},` +
			`{"type":"function_call_output","call_id":"c2","output":[{"type":"input_text","text":"rain"}]},` +
			`{"type":"reasoning","id":"rs_2","summary":[{"type":"summary_text","text":"one more"}]},` +
			`{"type":"function_call","call_id":"c3","name":"get_weather","arguments":"{}"},` +
			`{"type":"function_call_output","call_id":"c3","output":""}]}`,
			`[{"Role":"user","Content":"weather in Paris and Rome?"},` +
				`{"Role":"assistant","Content":"Checking.","ToolCalls":[{"function":{"arguments":"{\"city\":\"Paris\"}","name":"get_weather"},"id":"c1","type":"function"},{"function":{"arguments":"{\"city\":\"Rome\"}","name":"get_weather"},"id":"c2","type":"function"}],"Reasoning":"two calls"},` +
				`{"Role":"tool","Content":"sunny","ToolCallID":"c1"},{"Role":"tool","Content":"rain","ToolCallID":"c2"},` +
				`{"Role":"assistant","ToolCalls":[{"function":{"arguments":"{}","name":"get_weather"},"id":"c3","type":"function"}],"Reasoning":"one more"},` +
				`{"Role":"tool","ToolCallID":"c3"}]`, nil},
		{"reasoning items of one turn join", `{"model":"m","input":[{"role":"user","content":"q"},{"type":"reasoning","summary":[{"type":"summary_text","text":"a"}]},` +
			`{"type":"reasoning","content":[{"type":"reasoning_text","text":"b"}],"encrypted_content":"opaque"},{"role":"assistant","content":"x"},{"role":"assistant","content":"y"}]}`,
			`[{"Role":"user","Content":"q"},{"Role":"assistant","Content":"x","Reasoning":"a\nb"},{"Role":"assistant","Content":"y"}]`, nil},
		{"tools reach the template in the chat shape", `{"model":"m","input":"hi","tools":[` + fn + `,` + fn2 + `]}`, "", func(t *testing.T, r *responsesRequest) {
			want := `[{"type":"function","function":{"name":"get_weather","parameters":{"type":"object","properties":{"city":{"type":"string"},"unit":{"enum":["C","F"]}},"required":["city"]}}},` +
				`{"type":"function","function":{"name":"get_time","description":"Time in a zone"}}]`
			if string(r.chat.Tools) != want {
				t.Errorf("tools %s", r.chat.Tools)
			}
			if len(r.chat.ToolList) != 2 || r.chat.ToolList[0].Name != "get_weather" || r.chat.ToolList[0].Parameters["required"] == nil ||
				r.chat.ToolList[1].Parameters != nil || r.chat.ToolChoice.Mode != "auto" || r.chat.Structured != nil || !r.chat.ParallelToolCalls {
				t.Errorf("chat %+v", r.chat)
			}
		}},
		{"tool_choice none drops the tools", `{"model":"m","input":"hi","tools":[` + fn + `],"tool_choice":"none"}`, "", func(t *testing.T, r *responsesRequest) {
			if r.chat.Tools != nil || r.chat.ToolChoice.Mode != "none" || r.echo.ToolChoice != "none" || len(r.echo.Tools) != 1 {
				t.Errorf("tools %s choice %+v", r.chat.Tools, r.chat.ToolChoice)
			}
		}},
		{"named tool_choice constrains to its parameters", `{"model":"m","input":"hi","tools":[` + fn + `,` + fn2 + `],"tool_choice":{"type":"function","name":"get_weather"}}`, "", func(t *testing.T, r *responsesRequest) {
			if r.chat.ToolChoice != (toolChoice{Mode: "function", Name: "get_weather"}) || r.chat.Structured == nil ||
				r.chat.Structured.JsonSchema != `{"type":"object","properties":{"city":{"type":"string"},"unit":{"enum":["C","F"]}},"required":["city"]}` {
				t.Errorf("choice %+v structured %v", r.chat.ToolChoice, r.chat.Structured)
			}
			if b, _ := json.Marshal(r.echo.ToolChoice); string(b) != `{"type":"function","name":"get_weather"}` {
				t.Errorf("echo %s", b)
			}
		}},
		{"required tool_choice constrains to calls", `{"model":"m","input":"hi","tools":[` + fn2 + `],"tool_choice":"required","parallel_tool_calls":false}`, "", func(t *testing.T, r *responsesRequest) {
			want := `{"type":"array","minItems":1,"items":{"type":"object","anyOf":[{"properties":{"name":{"type":"string","enum":["get_time"]},"parameters":{"type":"object","properties":{}}},"required":["name","parameters"]}]}}`
			if r.chat.ToolChoice.Mode != "required" || r.chat.Structured == nil || r.chat.Structured.JsonSchema != want || r.chat.ParallelToolCalls || r.echo.ParallelToolCalls {
				t.Errorf("choice %+v structured %v", r.chat.ToolChoice, r.chat.Structured)
			}
		}},
		{"json_schema format keeps the key order", `{"model":"m","input":"hi","text":{"format":{"type":"json_schema","name":"city","strict":true,"schema":{"type":"object","properties":{"z":{"type":"string"},"a":{"type":"number"}},"required":["z","a"]}},"verbosity":"low"}}`, "", func(t *testing.T, r *responsesRequest) {
			if r.chat.Structured == nil || r.chat.Structured.JsonSchema != `{"type":"object","properties":{"z":{"type":"string"},"a":{"type":"number"}},"required":["z","a"]}` {
				t.Errorf("structured %v", r.chat.Structured)
			}
			if b, _ := json.Marshal(r.echo.Text); string(b) != `{"format":{"type":"json_schema","name":"city","schema":{"type":"object","properties":{"z":{"type":"string"},"a":{"type":"number"}},"required":["z","a"]},"strict":true},"verbosity":"low"}` {
				t.Errorf("echo %s", b)
			}
		}},
		{"json_object format", `{"model":"m","input":"hi","text":{"format":{"type":"json_object"}}}`, "", func(t *testing.T, r *responsesRequest) {
			if r.chat.Structured == nil || !r.chat.Structured.JsonObject {
				t.Errorf("structured %v", r.chat.Structured)
			}
		}},
		{"sampling and echoed fields", `{"model":"m","input":"hi","max_output_tokens":64,"temperature":0.2,"top_p":0.5,"stream":true,"store":true,` +
			`"reasoning":{"effort":"high","summary":"auto"},"metadata":{"a":"1"},"user":"u","seed":3,"chat_template_kwargs":{"enable_thinking":false},` +
			`"truncation":"disabled","include":["reasoning.encrypted_content"],"service_tier":"auto","prompt_cache_key":"k","previous_response_id":null}`, "", func(t *testing.T, r *responsesRequest) {
			c := r.chat
			if c.MaxTokens != 64 || c.MaxTokensParam != "max_output_tokens" || *c.Temperature != 0.2 || *c.TopP != 0.5 || !c.Stream || *c.Seed != 3 ||
				c.ReasoningEffort != "high" || c.TemplateKwargs["enable_thinking"] != false || !c.AddGenerationPrompt {
				t.Errorf("chat %+v", c)
			}
			b, _ := json.Marshal(r.echo)
			if want := `{"instructions":null,"max_output_tokens":64,"parallel_tool_calls":true,"reasoning":{"effort":"high","summary":"auto"},"temperature":0.2,"text":{"format":{"type":"text"}},"tool_choice":"auto","tools":[],"top_p":0.5,"metadata":{"a":"1"},"user":"u"}`; string(b) != want {
				t.Errorf("echo %s\nwant %s", b, want)
			}
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r, aerr := parseResponsesRequest([]byte(c.body))
			if aerr != nil {
				t.Fatalf("refused: %v", aerr)
			}
			if c.messages != "" {
				b, _ := json.Marshal(r.chat.Messages)
				// Empty fields are left out for readability.
				got := strings.NewReplacer(`,"Name":""`, "", `,"ToolCallID":""`, "", `,"ToolCalls":null`, "", `,"Reasoning":""`, "", `,"Content":""`, "").Replace(string(b))
				if got != c.messages {
					t.Errorf("messages\n got %s\nwant %s", got, c.messages)
				}
			}
			if c.check != nil {
				c.check(t, r)
			}
		})
	}
}

// TestResponsesRejected runs bad Responses requests through the handler: each is refused
// with OpenAI's error body, the listed status, code and param, before anything reaches
// the Backend. The bodies are kept in testdata/responses/errors.golden.
func TestResponsesRejected(t *testing.T) {
	fn := `{"type":"function","name":"f","parameters":{"type":"object"}}`
	in := `"input":"hi"`
	cases := []struct {
		name, body  string
		status      int
		code, param string
	}{
		{"missing model", `{` + in + `}`, 400, "missing_required_parameter", "model"},
		{"missing input", `{"model":"tiny"}`, 400, "missing_required_parameter", "input"},
		{"empty input", `{"model":"tiny","input":""}`, 400, "invalid_value", "input"},
		{"empty input array", `{"model":"tiny","input":[]}`, 400, "invalid_value", "input"},
		{"input number", `{"model":"tiny","input":5}`, 400, "invalid_type", "input"},
		{"item not an object", `{"model":"tiny","input":["hi"]}`, 400, "invalid_type", "input[0]"},
		{"item without type or role", `{"model":"tiny","input":[{"content":"hi"}]}`, 400, "missing_required_parameter", "input[0].type"},
		{"unknown item type", `{"model":"tiny","input":[{"role":"user","content":"hi"},{"type":"banana"}]}`, 400, "invalid_value", "input[1].type"},
		{"item reference", `{"model":"tiny","input":[{"type":"item_reference","id":"msg_1"}]}`, 400, "unsupported_parameter", "input[0].type"},
		{"hosted tool call item", `{"model":"tiny","input":[{"type":"web_search_call","id":"ws_1"}]}`, 400, "unsupported_parameter", "input[0].type"},
		{"tool role message", `{"model":"tiny","input":[{"role":"tool","content":"x"}]}`, 400, "invalid_value", "input[0].role"},
		{"message without content", `{"model":"tiny","input":[{"role":"user"}]}`, 400, "missing_required_parameter", "input[0].content"},
		{"empty user message", `{"model":"tiny","input":[{"role":"user","content":""}]}`, 400, "invalid_value", "input[0].content"},
		{"image part", `{"model":"tiny","input":[{"role":"user","content":[{"type":"input_text","text":"a"},{"type":"input_image","image_url":"http://x"}]}]}`, 400, "unsupported_parameter", "input[0].content[1].type"},
		{"unknown part", `{"model":"tiny","input":[{"role":"user","content":[{"type":"text","text":"a"}]}]}`, 400, "invalid_value", "input[0].content[0].type"},
		{"part without text", `{"model":"tiny","input":[{"role":"user","content":[{"type":"input_text"}]}]}`, 400, "missing_required_parameter", "input[0].content[0].text"},
		{"function call without call_id", `{"model":"tiny","input":[{"type":"function_call","name":"f","arguments":"{}"}]}`, 400, "missing_required_parameter", "input[0].call_id"},
		{"function call arguments not json", `{"model":"tiny","input":[{"type":"function_call","call_id":"c","name":"f","arguments":"{city"}]}`, 400, "invalid_value", "input[0].arguments"},
		{"output without its call", `{"model":"tiny","input":[{"role":"user","content":"hi"},{"type":"function_call_output","call_id":"c9","output":"x"}]}`, 400, "invalid_value", "input[1].call_id"},
		{"output with a file", `{"model":"tiny","input":[{"type":"function_call","call_id":"c","name":"f","arguments":"{}"},{"type":"function_call_output","call_id":"c","output":[{"type":"input_file","file_id":"f"}]}]}`, 400, "unsupported_parameter", "input[1].output[0].type"},
		{"encrypted reasoning only", `{"model":"tiny","input":[{"type":"reasoning","summary":[],"encrypted_content":"gAAA"}]}`, 400, "unsupported_parameter", "input[0].encrypted_content"},
		{"previous_response_id", `{"model":"tiny",` + in + `,"previous_response_id":"resp_1"}`, 400, "unsupported_parameter", "previous_response_id"},
		{"conversation", `{"model":"tiny",` + in + `,"conversation":"conv_1"}`, 400, "unsupported_parameter", "conversation"},
		{"background", `{"model":"tiny",` + in + `,"background":true}`, 400, "unsupported_parameter", "background"},
		{"prompt template", `{"model":"tiny",` + in + `,"prompt":{"id":"pmpt_1"}}`, 400, "unsupported_parameter", "prompt"},
		{"truncation auto", `{"model":"tiny",` + in + `,"truncation":"auto"}`, 400, "unsupported_parameter", "truncation"},
		{"top_logprobs", `{"model":"tiny",` + in + `,"top_logprobs":2}`, 400, "unsupported_parameter", "top_logprobs"},
		{"logprobs included", `{"model":"tiny",` + in + `,"include":["message.output_text.logprobs"]}`, 400, "unsupported_parameter", "include[0]"},
		{"max_output_tokens zero", `{"model":"tiny",` + in + `,"max_output_tokens":0}`, 400, "invalid_value", "max_output_tokens"},
		{"max_output_tokens beyond context", `{"model":"tiny",` + in + `,"max_output_tokens":500}`, 400, "context_length_exceeded", "max_output_tokens"},
		{"input beyond context", `{"model":"tiny","input":"` + strings.Repeat("hello ", 400) + `"}`, 400, "context_length_exceeded", "input"},
		{"temperature high", `{"model":"tiny",` + in + `,"temperature":3}`, 400, "invalid_value", "temperature"},
		{"metadata value type", `{"model":"tiny",` + in + `,"metadata":{"a":1}}`, 400, "invalid_type", "metadata.a"},
		{"reasoning effort", `{"model":"tiny",` + in + `,"reasoning":{"effort":"max"}}`, 400, "invalid_value", "reasoning.effort"},
		{"reasoning summary", `{"model":"tiny",` + in + `,"reasoning":{"summary":"long"}}`, 400, "invalid_value", "reasoning.summary"},
		{"hosted tool", `{"model":"tiny",` + in + `,"tools":[{"type":"web_search"}]}`, 400, "unsupported_parameter", "tools[0].type"},
		{"unknown tool type", `{"model":"tiny",` + in + `,"tools":[{"type":"robot"}]}`, 400, "invalid_value", "tools[0].type"},
		{"tool without type", `{"model":"tiny",` + in + `,"tools":[{"name":"f"}]}`, 400, "missing_required_parameter", "tools[0].type"},
		{"tool without name", `{"model":"tiny",` + in + `,"tools":[{"type":"function"}]}`, 400, "missing_required_parameter", "tools[0].name"},
		{"tool name twice", `{"model":"tiny",` + in + `,"tools":[` + fn + `,` + fn + `]}`, 400, "invalid_value", "tools[1].name"},
		{"parameters not an object", `{"model":"tiny",` + in + `,"tools":[{"type":"function","name":"f","parameters":"x"}]}`, 400, "invalid_type", "tools[0].parameters"},
		{"parameters invalid schema", `{"model":"tiny",` + in + `,"tools":[{"type":"function","name":"f","parameters":{"type":5}}]}`, 400, "invalid_value", "tools[0].parameters"},
		{"tool_choice bogus", `{"model":"tiny",` + in + `,"tools":[` + fn + `],"tool_choice":"always"}`, 400, "invalid_value", "tool_choice"},
		{"tool_choice unknown function", `{"model":"tiny",` + in + `,"tools":[` + fn + `],"tool_choice":{"type":"function","name":"nope"}}`, 400, "invalid_value", "tool_choice.name"},
		{"tool_choice function without name", `{"model":"tiny",` + in + `,"tools":[` + fn + `],"tool_choice":{"type":"function"}}`, 400, "missing_required_parameter", "tool_choice.name"},
		{"tool_choice hosted", `{"model":"tiny",` + in + `,"tools":[` + fn + `],"tool_choice":{"type":"file_search"}}`, 400, "unsupported_parameter", "tool_choice.type"},
		{"tool_choice required without tools", `{"model":"tiny",` + in + `,"tool_choice":"required"}`, 400, "invalid_value", "tool_choice"},
		{"tool_choice number", `{"model":"tiny",` + in + `,"tool_choice":1}`, 400, "invalid_type", "tool_choice"},
		{"format bogus", `{"model":"tiny",` + in + `,"text":{"format":{"type":"yaml"}}}`, 400, "invalid_value", "text.format.type"},
		{"json_schema without name", `{"model":"tiny",` + in + `,"text":{"format":{"type":"json_schema","schema":{"type":"object"}}}}`, 400, "missing_required_parameter", "text.format.name"},
		{"json_schema without schema", `{"model":"tiny",` + in + `,"text":{"format":{"type":"json_schema","name":"x"}}}`, 400, "missing_required_parameter", "text.format.schema"},
		{"json_schema invalid", `{"model":"tiny",` + in + `,"text":{"format":{"type":"json_schema","name":"x","schema":{"type":"object","minProperties":-1}}}}`, 400, "invalid_value", "text.format.schema"},
		{"json format with a forced call", `{"model":"tiny",` + in + `,"tools":[` + fn + `],"tool_choice":"required","text":{"format":{"type":"json_object"}}}`, 400, "invalid_value", "text.format"},
		{"verbosity", `{"model":"tiny",` + in + `,"text":{"verbosity":"loud"}}`, 400, "invalid_value", "text.verbosity"},
		{"stream_options without stream", `{"model":"tiny",` + in + `,"stream_options":{"include_obfuscation":false}}`, 400, "invalid_value", "stream_options"},
		{"tools for a model without a tool parser", `{"model":"tiny",` + in + `,"tools":[` + fn + `]}`, 400, "invalid_value", "tools"},
		{"unknown model", `{"model":"nope",` + in + `}`, 404, "model_not_found", "model"},
	}
	var out strings.Builder
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			b := newFakeBackend(finish("ok", "stop"))
			rr := serve(newTestServer(t, b), http.MethodPost, responsesPath, c.body)
			var body struct {
				Error struct {
					Message string  `json:"message"`
					Type    string  `json:"type"`
					Param   *string `json:"param"`
					Code    string  `json:"code"`
				} `json:"error"`
			}
			if err := json.Unmarshal(rr.Body.Bytes(), &body); err != nil {
				t.Fatalf("body %q: %v", rr.Body.String(), err)
			}
			param := ""
			if body.Error.Param != nil {
				param = *body.Error.Param
			}
			if rr.Code != c.status || body.Error.Code != c.code || param != c.param || body.Error.Type != "invalid_request_error" {
				t.Errorf("got %d code=%q param=%q (%s); want %d code=%q param=%q",
					rr.Code, body.Error.Code, param, body.Error.Message, c.status, c.code, c.param)
			}
			if n := len(b.generated()); n != 0 {
				t.Errorf("%d requests reached the Backend", n)
			}
			fmt.Fprintf(&out, "### %s\nPOST %s %s\n--> %d %s", c.name, responsesPath, abbreviate(c.body), rr.Code, rr.Body.String())
		})
	}
	checkGolden(t, "responses/errors.golden", []byte(out.String()))
}

// TestResponsesUnauthorized: with API keys, /v1/responses needs one; the 401 is OpenAI's
// error body, counted under the endpoint "responses".
func TestResponsesUnauthorized(t *testing.T) {
	var log bytes.Buffer
	s := newKeyedServer(t, agentBackend(agentAnswer...), &log, testKeyOne)
	rr := serveAuth(s, http.MethodPost, responsesPath, `{"model":"agent","input":"hi"}`, "Bearer wrong")
	if rr.Code != http.StatusUnauthorized || !strings.Contains(rr.Body.String(), `"code":"invalid_api_key"`) {
		t.Fatalf("got %d %s", rr.Code, rr.Body)
	}
	var m strings.Builder
	s.Metrics().WritePrometheus(&m)
	if !strings.Contains(m.String(), `turbine_frontend_requests_total{model="",endpoint="responses",request_type="unary",status="401"} 1`) {
		t.Errorf("the 401 is not counted under endpoint responses:\n%s", m.String())
	}
	if rr = serveAuth(s, http.MethodPost, responsesPath, `{"model":"agent","input":"hi"}`, "Bearer "+testKeyOne); rr.Code != http.StatusOK {
		t.Errorf("with the key: %d %s", rr.Code, rr.Body)
	}
}

// FuzzParseResponsesRequest: any body is refused with a well-formed 4xx, or translated
// into a chat request whose invariants hold.
func FuzzParseResponsesRequest(f *testing.F) {
	f.Add([]byte(`{"model":"m","input":"hi","instructions":"x","tools":[{"type":"function","name":"f","parameters":{"type":"object","properties":{"a":{"type":"string"}}}}],"tool_choice":"required"}`))
	f.Add([]byte(`{"model":"m","input":[{"role":"user","content":"q"},{"type":"reasoning","summary":[{"type":"summary_text","text":"r"}]},{"type":"function_call","call_id":"c","name":"f","arguments":"{}"},{"type":"function_call_output","call_id":"c","output":"o"}],"text":{"format":{"type":"json_schema","name":"n","schema":{"type":"object"}}}}`))
	if data, err := os.ReadFile(filepath.Join("testdata", "responses", "errors.golden")); err == nil {
		for _, line := range strings.Split(string(data), "\n") {
			if rest, ok := strings.CutPrefix(line, "POST "+responsesPath+" "); ok {
				f.Add([]byte(rest))
			}
		}
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		req, e := parseResponsesRequest(body)
		if e != nil {
			if req != nil {
				t.Fatal("both a request and an error")
			}
			checkParseError(t, e)
			return
		}
		c := req.chat
		checkCommon(t, body, &c.commonRequest)
		if len(c.Messages) == 0 {
			t.Fatal("accepted without messages")
		}
		calls := map[string]bool{}
		for i, m := range c.Messages {
			switch m.Role {
			case "system", "developer", "user":
				if m.Content == "" {
					t.Fatalf("message %d: empty %s content", i, m.Role)
				}
			case "assistant":
				for _, tc := range m.ToolCalls {
					calls[tc["id"].(string)] = true
				}
			case "tool":
				if !calls[m.ToolCallID] {
					t.Fatalf("message %d answers call %q, made by no earlier message", i, m.ToolCallID)
				}
			default:
				t.Fatalf("message %d: role %q", i, m.Role)
			}
		}
		if c.Tools != nil && (!json.Valid(c.Tools) || c.ToolChoice.Mode == "none") {
			t.Fatalf("tools %s with choice %+v", c.Tools, c.ToolChoice)
		}
		if c.ToolChoice.Mode == "function" && !slices.ContainsFunc(c.ToolList, func(x parse.Tool) bool { return x.Name == c.ToolChoice.Name }) {
			t.Fatalf("named choice %q not among the tools", c.ToolChoice.Name)
		}
		if s := c.Structured.GetJsonSchema(); s != "" && !json.Valid([]byte(s)) {
			t.Fatalf("schema %q", s)
		}
		if _, err := encodeJSON(req.echo); err != nil {
			t.Fatalf("echo: %v", err)
		}
	})
}
