package gateway

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
)

// Messages API bodies translated into chat requests (golden:
// testdata/anthropic/translate.golden), and every refusal in Anthropic's error shape
// (testdata/anthropic/errors.golden).

const (
	anthMessagesPath    = "/v1/messages"
	anthCountTokensPath = "/v1/messages/count_tokens"
)

// anthWeatherTool is a custom tool whose schema lists its keys out of alphabetical order:
// the template must get them as sent.
const anthWeatherTool = `{"name":"get_weather","description":"Weather of a city","input_schema":{"type":"object","properties":{"city":{"type":"string"},"unit":{"type":"string","enum":["c","f"]}},"required":["city"]}}`

const anthTimeTool = `{"name":"get_time","input_schema":{"type":"object","properties":{"zone":{"type":"string"}}}}`

// anthTranslation is what a test shows of a translated request.
type anthTranslation struct {
	Model             string                     `json:"model"`
	MaxTokens         int64                      `json:"max_tokens,omitempty"`
	Stream            bool                       `json:"stream,omitempty"`
	Stop              []string                   `json:"stop,omitempty"`
	Temperature       *float64                   `json:"temperature,omitempty"`
	TopP              *float64                   `json:"top_p,omitempty"`
	User              string                     `json:"user,omitempty"`
	Messages          []anthTranslatedMessage    `json:"messages"`
	Tools             string                     `json:"tools,omitempty"`
	ToolList          []string                   `json:"tool_list,omitempty"`
	ToolChoice        string                     `json:"tool_choice,omitempty"`
	ParallelToolCalls bool                       `json:"parallel_tool_calls"`
	Kwargs            map[string]any             `json:"template_kwargs,omitempty"`
	ReasoningEffort   string                     `json:"reasoning_effort,omitempty"`
	Structured        string                     `json:"structured,omitempty"`
	Turbine           *anthTurbineOptionsForTest `json:"turbine,omitempty"`
}

type anthTurbineOptionsForTest struct {
	ReturnWorker bool `json:"return_worker"`
}

type anthTranslatedMessage struct {
	Role       string           `json:"role"`
	Content    string           `json:"content"`
	ToolCallID string           `json:"tool_call_id,omitempty"`
	ToolCalls  []map[string]any `json:"tool_calls,omitempty"`
	Reasoning  string           `json:"reasoning,omitempty"`
}

func anthShowTranslation(req *chatRequest) anthTranslation {
	tr := anthTranslation{Model: req.Model, MaxTokens: req.MaxTokens, Stream: req.Stream, Stop: req.Stop,
		Temperature: req.Temperature, TopP: req.TopP, User: req.User, Tools: string(req.Tools),
		ParallelToolCalls: req.ParallelToolCalls, Kwargs: req.TemplateKwargs, ReasoningEffort: req.ReasoningEffort}
	for _, m := range req.Messages {
		tr.Messages = append(tr.Messages, anthTranslatedMessage{Role: m.Role, Content: m.Content, ToolCallID: m.ToolCallID,
			ToolCalls: m.ToolCalls, Reasoning: m.Reasoning})
	}
	for _, t := range req.ToolList {
		tr.ToolList = append(tr.ToolList, t.Name)
	}
	if req.ToolChoice.Mode != "" {
		tr.ToolChoice = strings.TrimSpace(req.ToolChoice.Mode + " " + req.ToolChoice.Name)
	}
	if req.Structured != nil {
		tr.Structured = req.Structured.GetJsonSchema()
	}
	if req.Turbine.ReturnWorker {
		tr.Turbine = &anthTurbineOptionsForTest{ReturnWorker: true}
	}
	return tr
}

// anthropicTranslations are accepted bodies; count marks count_tokens bodies.
var anthropicTranslations = []struct {
	name  string
	count bool
	body  string
}{
	{"minimal", false, `{"model":"tiny","max_tokens":16,"messages":[{"role":"user","content":"hi"}]}`},
	{"sampling and system string", false, `{"model":"tiny","max_tokens":64,"stream":true,"system":"be brief","stop_sequences":["\n\nHuman:","","END"],
		"temperature":0.5,"top_p":0.9,"top_k":-1,"metadata":{"user_id":"u-42"},"messages":[{"role":"user","content":"hi"}],"turbine":{"return_worker":true}}`},
	{"system and content blocks", false, `{"model":"tiny","max_tokens":16,"system":[{"type":"text","text":"rule one"},{"type":"text","text":"rule two","cache_control":{"type":"ephemeral"}}],
		"messages":[{"role":"user","content":[{"type":"text","text":"first"},{"type":"text","text":"second"}]}]}`},
	{"tools, choice absent is auto", false, `{"model":"tiny","max_tokens":16,"tools":[` + anthWeatherTool + `,` + anthTimeTool + `],"messages":[{"role":"user","content":"weather?"}]}`},
	{"tools auto, no parallel calls", false, `{"model":"tiny","max_tokens":16,"tools":[` + anthWeatherTool + `],"tool_choice":{"type":"auto","disable_parallel_tool_use":true},"messages":[{"role":"user","content":"weather?"}]}`},
	{"tool_choice any is required", false, `{"model":"tiny","max_tokens":16,"tools":[` + anthWeatherTool + `,` + anthTimeTool + `],"tool_choice":{"type":"any"},"messages":[{"role":"user","content":"weather?"}]}`},
	{"tool_choice tool is a named function", false, `{"model":"tiny","max_tokens":16,"tools":[` + anthWeatherTool + `,` + anthTimeTool + `],"tool_choice":{"type":"tool","name":"get_time"},"messages":[{"role":"user","content":"time?"}]}`},
	{"tool_choice none keeps tools from the template", false, `{"model":"tiny","max_tokens":16,"tools":[` + anthWeatherTool + `],"tool_choice":{"type":"none"},"messages":[{"role":"user","content":"weather?"}]}`},
	{"tool round trip", false, `{"model":"tiny","max_tokens":16,"tools":[` + anthWeatherTool + `],"messages":[
		{"role":"user","content":"weather in Paris and Oslo?"},
		{"role":"assistant","content":[{"type":"thinking","thinking":"Two cities.","signature":"sig"},{"type":"text","text":"Checking."},
			{"type":"tool_use","id":"toolu_1","name":"get_weather","input":{"unit":"c","city":"Paris"}},
			{"type":"tool_use","id":"toolu_2","name":"get_weather","input":{"city": "Oslo"}}]},
		{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_2","content":"-3 C"},
			{"type":"tool_result","tool_use_id":"toolu_1","content":[{"type":"text","text":"18 C"},{"type":"text","text":"sunny"}],"is_error":false},
			{"type":"text","text":"Thanks, and tomorrow?"}]}]}`},
	{"tool result with no content", false, `{"model":"tiny","max_tokens":16,"tools":[` + anthWeatherTool + `],"messages":[
		{"role":"user","content":"weather?"},
		{"role":"assistant","content":[{"type":"tool_use","id":"t1","name":"get_weather","input":{}}]},
		{"role":"user","content":[{"type":"tool_result","tool_use_id":"t1","is_error":true}]}]}`},
	{"consecutive turns merge", false, `{"model":"tiny","max_tokens":16,"messages":[{"role":"user","content":"one"},{"role":"user","content":[{"type":"text","text":"two"}]},
		{"role":"assistant","content":"a"},{"role":"assistant","content":[{"type":"redacted_thinking","data":"xyz"},{"type":"text","text":"b"}]},{"role":"user","content":"three"}]}`},
	{"system message in messages", false, `{"model":"tiny","max_tokens":16,"messages":[{"role":"system","content":[{"type":"text","text":"sys"}]},{"role":"user","content":"hi"}]}`},
	{"thinking enabled", false, `{"model":"tiny","max_tokens":4096,"thinking":{"type":"enabled","budget_tokens":1024},"messages":[{"role":"user","content":"think"}]}`},
	{"thinking adaptive", false, `{"model":"tiny","max_tokens":16,"thinking":{"type":"adaptive"},"messages":[{"role":"user","content":"think"}]}`},
	{"thinking disabled", false, `{"model":"tiny","max_tokens":16,"thinking":{"type":"disabled"},"messages":[{"role":"user","content":"quick"}]}`},
	{"output format and effort", false, `{"model":"tiny","max_tokens":16,"output_config":{"effort":"max","format":{"type":"json_schema","schema":{"type":"object","properties":{"b":{"type":"integer"},"a":{"type":"string"}},"required":["b"]}}},"messages":[{"role":"user","content":"json"}]}`},
	{"count tokens body", true, `{"model":"tiny","system":"s","tools":[` + anthWeatherTool + `],"thinking":{"type":"enabled","budget_tokens":2048},"messages":[{"role":"user","content":"hi"}]}`},
}

func TestAnthropicTranslation(t *testing.T) {
	var out strings.Builder
	for _, tc := range anthropicTranslations {
		req, aerr := parseMessagesRequest([]byte(tc.body), tc.count)
		if aerr != nil {
			t.Errorf("%s: refused: %v", tc.name, aerr)
			continue
		}
		b, err := json.MarshalIndent(anthShowTranslation(req), "", "  ")
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(&out, "=== %s\n%s\n\n", tc.name, b)
	}
	checkGolden(t, "anthropic/translate.golden", []byte(out.String()))
}

// TestAnthropicToolInputOrder checks that a tool_use input reaches the template with its
// keys in the order the client (and the model, earlier) wrote them: a reordered history
// would miss the engine's prefix cache from that point on.
func TestAnthropicToolInputOrder(t *testing.T) {
	body := `{"model":"tiny","max_tokens":16,"tools":[` + anthWeatherTool + `],"messages":[{"role":"user","content":"x"},
		{"role":"assistant","content":[{"type":"tool_use","id":"a","name":"get_weather","input":{"unit": "c", "city": {"z": 1, "a": [2, 1]}}}]},
		{"role":"user","content":[{"type":"tool_result","tool_use_id":"a","content":"ok"}]}]}`
	req, aerr := parseMessagesRequest([]byte(body), false)
	if aerr != nil {
		t.Fatal(aerr)
	}
	got := req.Messages[1].ToolCalls[0]["function"].(map[string]any)["arguments"]
	if want := `{"unit":"c","city":{"z":1,"a":[2,1]}}`; got != want {
		t.Errorf("arguments %q, want %q", got, want)
	}
	if !strings.Contains(string(req.Tools), `"properties":{"city":{"type":"string"},"unit":`) {
		t.Errorf("tools %s: the schema's key order was not kept", req.Tools)
	}
}

// anthropicRefusals are bodies every one of which is a 400 (or the status the golden
// file shows) in Anthropic's error shape.
var anthropicRefusals = []struct {
	name, path, body string
}{
	{"invalid JSON", anthMessagesPath, `{"model":`},
	{"not an object", anthMessagesPath, `[1]`},
	{"missing model", anthMessagesPath, `{"max_tokens":16,"messages":[{"role":"user","content":"hi"}]}`},
	{"missing max_tokens", anthMessagesPath, `{"model":"tiny","messages":[{"role":"user","content":"hi"}]}`},
	{"max_tokens zero", anthMessagesPath, `{"model":"tiny","max_tokens":0,"messages":[{"role":"user","content":"hi"}]}`},
	{"max_tokens a string", anthMessagesPath, `{"model":"tiny","max_tokens":"16","messages":[{"role":"user","content":"hi"}]}`},
	{"temperature above 1", anthMessagesPath, `{"model":"tiny","max_tokens":16,"temperature":1.5,"messages":[{"role":"user","content":"hi"}]}`},
	{"top_p zero", anthMessagesPath, `{"model":"tiny","max_tokens":16,"top_p":0,"messages":[{"role":"user","content":"hi"}]}`},
	{"top_k", anthMessagesPath, `{"model":"tiny","max_tokens":16,"top_k":40,"messages":[{"role":"user","content":"hi"}]}`},
	{"stop_sequences a string", anthMessagesPath, `{"model":"tiny","max_tokens":16,"stop_sequences":"END","messages":[{"role":"user","content":"hi"}]}`},
	{"stop_sequences holding a number", anthMessagesPath, `{"model":"tiny","max_tokens":16,"stop_sequences":["a",1],"messages":[{"role":"user","content":"hi"}]}`},
	{"too many stop_sequences", anthMessagesPath, `{"model":"tiny","max_tokens":16,"stop_sequences":["1","2","3","4","5","6","7","8","9","10","11","12","13","14","15","16","17"],"messages":[{"role":"user","content":"hi"}]}`},
	{"metadata a string", anthMessagesPath, `{"model":"tiny","max_tokens":16,"metadata":"x","messages":[{"role":"user","content":"hi"}]}`},
	{"system a number", anthMessagesPath, `{"model":"tiny","max_tokens":16,"system":1,"messages":[{"role":"user","content":"hi"}]}`},
	{"system image block", anthMessagesPath, `{"model":"tiny","max_tokens":16,"system":[{"type":"image"}],"messages":[{"role":"user","content":"hi"}]}`},
	{"missing messages", anthMessagesPath, `{"model":"tiny","max_tokens":16}`},
	{"empty messages", anthMessagesPath, `{"model":"tiny","max_tokens":16,"messages":[]}`},
	{"messages an object", anthMessagesPath, `{"model":"tiny","max_tokens":16,"messages":{}}`},
	{"unknown role", anthMessagesPath, `{"model":"tiny","max_tokens":16,"messages":[{"role":"tool","content":"hi"}]}`},
	{"missing content", anthMessagesPath, `{"model":"tiny","max_tokens":16,"messages":[{"role":"user"}]}`},
	{"content a number", anthMessagesPath, `{"model":"tiny","max_tokens":16,"messages":[{"role":"user","content":5}]}`},
	{"empty user content", anthMessagesPath, `{"model":"tiny","max_tokens":16,"messages":[{"role":"user","content":""}]}`},
	{"first message the assistant's", anthMessagesPath, `{"model":"tiny","max_tokens":16,"messages":[{"role":"assistant","content":"hello"},{"role":"user","content":"hi"}]}`},
	{"prefilled answer", anthMessagesPath, `{"model":"tiny","max_tokens":16,"messages":[{"role":"user","content":"hi"},{"role":"assistant","content":"The answer is"}]}`},
	{"only system messages", anthMessagesPath, `{"model":"tiny","max_tokens":16,"messages":[{"role":"system","content":"s"}]}`},
	{"block without type", anthMessagesPath, `{"model":"tiny","max_tokens":16,"messages":[{"role":"user","content":[{"text":"hi"}]}]}`},
	{"text block without text", anthMessagesPath, `{"model":"tiny","max_tokens":16,"messages":[{"role":"user","content":[{"type":"text"}]}]}`},
	{"image block", anthMessagesPath, `{"model":"tiny","max_tokens":16,"messages":[{"role":"user","content":[{"type":"image","source":{"type":"base64","media_type":"image/png","data":"AA=="}}]}]}`},
	{"document block", anthMessagesPath, `{"model":"tiny","max_tokens":16,"messages":[{"role":"user","content":[{"type":"document","source":{"type":"text","data":"x"}}]}]}`},
	{"unknown block type", anthMessagesPath, `{"model":"tiny","max_tokens":16,"messages":[{"role":"user","content":[{"type":"video"}]}]}`},
	{"server tool block", anthMessagesPath, `{"model":"tiny","max_tokens":16,"messages":[{"role":"user","content":"q"},{"role":"assistant","content":[{"type":"server_tool_use","id":"s","name":"web_search","input":{}}]},{"role":"user","content":"more"}]}`},
	{"tool_use in a user message", anthMessagesPath, `{"model":"tiny","max_tokens":16,"messages":[{"role":"user","content":[{"type":"tool_use","id":"t1","name":"get_weather","input":{}}]}]}`},
	{"tool_result in an assistant message", anthMessagesPath, `{"model":"tiny","max_tokens":16,"messages":[{"role":"user","content":"q"},{"role":"assistant","content":[{"type":"tool_result","tool_use_id":"t1","content":"x"}]},{"role":"user","content":"more"}]}`},
	{"thinking in a user message", anthMessagesPath, `{"model":"tiny","max_tokens":16,"messages":[{"role":"user","content":[{"type":"thinking","thinking":"hm","signature":""}]}]}`},
	{"tool_result answering nothing", anthMessagesPath, `{"model":"tiny","max_tokens":16,"messages":[{"role":"user","content":[{"type":"tool_result","tool_use_id":"t9","content":"x"}]}]}`},
	{"tool_result answering another turn", anthMessagesPath, `{"model":"tiny","max_tokens":16,"messages":[{"role":"user","content":"q"},
		{"role":"assistant","content":[{"type":"tool_use","id":"t1","name":"get_weather","input":{}}]},
		{"role":"user","content":[{"type":"tool_result","tool_use_id":"t1","content":"x"}]},
		{"role":"assistant","content":"done"},
		{"role":"user","content":[{"type":"tool_result","tool_use_id":"t1","content":"again"}]}]}`},
	{"tool_result twice", anthMessagesPath, `{"model":"tiny","max_tokens":16,"messages":[{"role":"user","content":"q"},
		{"role":"assistant","content":[{"type":"tool_use","id":"t1","name":"get_weather","input":{}}]},
		{"role":"user","content":[{"type":"tool_result","tool_use_id":"t1","content":"x"},{"type":"tool_result","tool_use_id":"t1","content":"y"}]}]}`},
	{"tool_result after text", anthMessagesPath, `{"model":"tiny","max_tokens":16,"messages":[{"role":"user","content":"q"},
		{"role":"assistant","content":[{"type":"tool_use","id":"t1","name":"get_weather","input":{}}]},
		{"role":"user","content":[{"type":"text","text":"here"},{"type":"tool_result","tool_use_id":"t1","content":"x"}]}]}`},
	{"tool_use left unanswered", anthMessagesPath, `{"model":"tiny","max_tokens":16,"messages":[{"role":"user","content":"q"},
		{"role":"assistant","content":[{"type":"tool_use","id":"t1","name":"get_weather","input":{}},{"type":"tool_use","id":"t2","name":"get_weather","input":{}}]},
		{"role":"user","content":[{"type":"tool_result","tool_use_id":"t1","content":"x"}]}]}`},
	{"tool_use without id", anthMessagesPath, `{"model":"tiny","max_tokens":16,"messages":[{"role":"user","content":"q"},{"role":"assistant","content":[{"type":"tool_use","name":"get_weather","input":{}}]},{"role":"user","content":"r"}]}`},
	{"tool_use input a string", anthMessagesPath, `{"model":"tiny","max_tokens":16,"messages":[{"role":"user","content":"q"},{"role":"assistant","content":[{"type":"tool_use","id":"t1","name":"get_weather","input":"{}"}]},{"role":"user","content":"r"}]}`},
	{"tool_use id twice", anthMessagesPath, `{"model":"tiny","max_tokens":16,"messages":[{"role":"user","content":"q"},
		{"role":"assistant","content":[{"type":"tool_use","id":"t1","name":"get_weather","input":{}},{"type":"tool_use","id":"t1","name":"get_weather","input":{}}]},
		{"role":"user","content":[{"type":"tool_result","tool_use_id":"t1","content":"x"}]}]}`},
	{"tool_result image", anthMessagesPath, `{"model":"tiny","max_tokens":16,"messages":[{"role":"user","content":"q"},
		{"role":"assistant","content":[{"type":"tool_use","id":"t1","name":"get_weather","input":{}}]},
		{"role":"user","content":[{"type":"tool_result","tool_use_id":"t1","content":[{"type":"image","source":{}}]}]}]}`},
	{"tool_result is_error a string", anthMessagesPath, `{"model":"tiny","max_tokens":16,"messages":[{"role":"user","content":"q"},
		{"role":"assistant","content":[{"type":"tool_use","id":"t1","name":"get_weather","input":{}}]},
		{"role":"user","content":[{"type":"tool_result","tool_use_id":"t1","content":"x","is_error":"yes"}]}]}`},
	{"empty assistant message", anthMessagesPath, `{"model":"tiny","max_tokens":16,"messages":[{"role":"user","content":"q"},{"role":"assistant","content":[]},{"role":"user","content":"r"}]}`},
	{"server tool", anthMessagesPath, `{"model":"tiny","max_tokens":16,"tools":[{"type":"web_search_20250305","name":"web_search"}],"messages":[{"role":"user","content":"hi"}]}`},
	{"tool without name", anthMessagesPath, `{"model":"tiny","max_tokens":16,"tools":[{"input_schema":{"type":"object"}}],"messages":[{"role":"user","content":"hi"}]}`},
	{"tool name twice", anthMessagesPath, `{"model":"tiny","max_tokens":16,"tools":[` + anthWeatherTool + `,` + anthWeatherTool + `],"messages":[{"role":"user","content":"hi"}]}`},
	{"tool without input_schema", anthMessagesPath, `{"model":"tiny","max_tokens":16,"tools":[{"name":"f"}],"messages":[{"role":"user","content":"hi"}]}`},
	{"input_schema not of type object", anthMessagesPath, `{"model":"tiny","max_tokens":16,"tools":[{"name":"f","input_schema":{"type":"array"}}],"messages":[{"role":"user","content":"hi"}]}`},
	{"invalid input_schema", anthMessagesPath, `{"model":"tiny","max_tokens":16,"tools":[{"name":"f","input_schema":{"type":"object","properties":{"a":{"type":"nope"}}}}],"messages":[{"role":"user","content":"hi"}]}`},
	{"tool_choice without type", anthMessagesPath, `{"model":"tiny","max_tokens":16,"tools":[` + anthWeatherTool + `],"tool_choice":{"name":"get_weather"},"messages":[{"role":"user","content":"hi"}]}`},
	{"tool_choice a string", anthMessagesPath, `{"model":"tiny","max_tokens":16,"tools":[` + anthWeatherTool + `],"tool_choice":"auto","messages":[{"role":"user","content":"hi"}]}`},
	{"unknown tool_choice type", anthMessagesPath, `{"model":"tiny","max_tokens":16,"tools":[` + anthWeatherTool + `],"tool_choice":{"type":"required"},"messages":[{"role":"user","content":"hi"}]}`},
	{"tool_choice any without tools", anthMessagesPath, `{"model":"tiny","max_tokens":16,"tool_choice":{"type":"any"},"messages":[{"role":"user","content":"hi"}]}`},
	{"tool_choice tool without name", anthMessagesPath, `{"model":"tiny","max_tokens":16,"tools":[` + anthWeatherTool + `],"tool_choice":{"type":"tool"},"messages":[{"role":"user","content":"hi"}]}`},
	{"tool_choice naming an unknown tool", anthMessagesPath, `{"model":"tiny","max_tokens":16,"tools":[` + anthWeatherTool + `],"tool_choice":{"type":"tool","name":"get_time"},"messages":[{"role":"user","content":"hi"}]}`},
	{"thinking without type", anthMessagesPath, `{"model":"tiny","max_tokens":4096,"thinking":{"budget_tokens":2048},"messages":[{"role":"user","content":"hi"}]}`},
	{"unknown thinking type", anthMessagesPath, `{"model":"tiny","max_tokens":4096,"thinking":{"type":"on"},"messages":[{"role":"user","content":"hi"}]}`},
	{"thinking without budget", anthMessagesPath, `{"model":"tiny","max_tokens":4096,"thinking":{"type":"enabled"},"messages":[{"role":"user","content":"hi"}]}`},
	{"thinking budget too small", anthMessagesPath, `{"model":"tiny","max_tokens":4096,"thinking":{"type":"enabled","budget_tokens":1000},"messages":[{"role":"user","content":"hi"}]}`},
	{"thinking budget not below max_tokens", anthMessagesPath, `{"model":"tiny","max_tokens":2048,"thinking":{"type":"enabled","budget_tokens":2048},"messages":[{"role":"user","content":"hi"}]}`},
	{"thinking with a forced tool", anthMessagesPath, `{"model":"tiny","max_tokens":4096,"thinking":{"type":"enabled","budget_tokens":1024},"tools":[` + anthWeatherTool + `],"tool_choice":{"type":"any"},"messages":[{"role":"user","content":"hi"}]}`},
	{"unknown effort", anthMessagesPath, `{"model":"tiny","max_tokens":16,"output_config":{"effort":"extreme"},"messages":[{"role":"user","content":"hi"}]}`},
	{"unknown output format", anthMessagesPath, `{"model":"tiny","max_tokens":16,"output_config":{"format":{"type":"json_object"}},"messages":[{"role":"user","content":"hi"}]}`},
	{"output format without schema", anthMessagesPath, `{"model":"tiny","max_tokens":16,"output_config":{"format":{"type":"json_schema"}},"messages":[{"role":"user","content":"hi"}]}`},
	{"output format with a forced tool", anthMessagesPath, `{"model":"tiny","max_tokens":16,"output_config":{"format":{"type":"json_schema","schema":{"type":"object"}}},"tools":[` + anthWeatherTool + `],"tool_choice":{"type":"any"},"messages":[{"role":"user","content":"hi"}]}`},
	{"unknown model", anthMessagesPath, `{"model":"nope","max_tokens":16,"messages":[{"role":"user","content":"hi"}]}`},
	{"context exceeded", anthMessagesPath, `{"model":"tiny","max_tokens":127,"messages":[{"role":"user","content":"hi"}]}`},
	{"count: missing messages", anthCountTokensPath, `{"model":"tiny"}`},
	{"count: unknown model", anthCountTokensPath, `{"model":"nope","messages":[{"role":"user","content":"hi"}]}`},
	{"count: prefilled answer", anthCountTokensPath, `{"model":"tiny","messages":[{"role":"user","content":"hi"},{"role":"assistant","content":"x"}]}`},
}

func TestAnthropicRefusals(t *testing.T) {
	s := newTestServer(t, newFakeBackend(helloScript()...))
	var out strings.Builder
	for _, tc := range anthropicRefusals {
		rr := serve(s, http.MethodPost, tc.path, tc.body)
		if rr.Code < 400 {
			t.Errorf("%s: status %d, want a refusal: %s", tc.name, rr.Code, rr.Body)
			continue
		}
		var e anthropicErrorBody
		if err := json.Unmarshal(rr.Body.Bytes(), &e); err != nil || e.Type != "error" || e.Error.Type == "" || e.Error.Message == "" || e.RequestID != "req-1" {
			t.Errorf("%s: not Anthropic's error shape: %s", tc.name, rr.Body)
		}
		if rr.Code == http.StatusBadRequest && e.Error.Type != "invalid_request_error" {
			t.Errorf("%s: 400 of type %q", tc.name, e.Error.Type)
		}
		fmt.Fprintf(&out, "=== %s\nHTTP %d\n%s\n", tc.name, rr.Code, rr.Body)
	}
	checkGolden(t, "anthropic/errors.golden", []byte(out.String()))
}

// TestAnthropicErrorTypes checks the mapping of every catalogue status onto Anthropic's
// error types, and Retry-After on the kinds that carry it.
func TestAnthropicErrorTypes(t *testing.T) {
	want := map[int]string{400: "invalid_request_error", 401: "authentication_error", 403: "permission_error",
		404: "not_found_error", 405: "invalid_request_error", 413: "request_too_large", 415: "invalid_request_error",
		429: "rate_limit_error", 499: "invalid_request_error", 500: "api_error", 502: "api_error", 503: "overloaded_error",
		504: "timeout_error"}
	for _, ent := range Catalogue() {
		typ, ok := want[ent.Status]
		if !ok {
			t.Errorf("status %d (%s) has no expected Anthropic type", ent.Status, ent.Name)
			continue
		}
		rr := newRecorder()
		rr.Header().Set("X-Request-Id", "r-9")
		writeAnthropicError(rr, &APIError{Kind: ent.Kind, Message: "m"}, 0)
		var e anthropicErrorBody
		if err := json.Unmarshal(rr.Body.Bytes(), &e); err != nil {
			t.Fatal(err)
		}
		if rr.Code != ent.Status || e.Error.Type != typ || e.RequestID != "r-9" || e.Error.Message != "m" {
			t.Errorf("%s: status %d body %s, want %d %s", ent.Name, rr.Code, rr.Body, ent.Status, typ)
		}
		if got := rr.Header().Get("Retry-After"); (got != "") != ent.RetryAfter {
			t.Errorf("%s: Retry-After %q", ent.Name, got)
		}
	}
}

// TestAnthropicMethodNotAllowed: a GET is refused in Anthropic's shape.
func TestAnthropicMethodNotAllowed(t *testing.T) {
	s := newTestServer(t, newFakeBackend())
	for _, path := range []string{anthMessagesPath, anthCountTokensPath} {
		rr := serve(s, http.MethodGet, path, "")
		if rr.Code != http.StatusMethodNotAllowed || rr.Header().Get("Allow") != "POST" || !strings.Contains(rr.Body.String(), `"type":"error"`) {
			t.Errorf("GET %s: %d %s", path, rr.Code, rr.Body)
		}
	}
}

// TestAnthropicNotFound: an unknown path under /v1/messages/ is a 404 in Anthropic's
// shape (its SDK reads error.type), with the Request-Id header; elsewhere OpenAI's.
func TestAnthropicNotFound(t *testing.T) {
	s := newTestServer(t, newFakeBackend())
	for _, tc := range []struct{ method, path, want string }{
		{http.MethodPost, "/v1/messages/batches", `"type":"error","error":{"type":"not_found_error"`},
		{http.MethodGet, "/v1/messages/msg_1", `"type":"error","error":{"type":"not_found_error"`},
		{http.MethodPost, "/v1/messagesx", `"code":"unknown_url"`},
	} {
		rr := serve(s, tc.method, tc.path, "{}")
		if rr.Code != http.StatusNotFound || !strings.Contains(rr.Body.String(), tc.want) {
			t.Errorf("%s %s: %d %s, want 404 with %s", tc.method, tc.path, rr.Code, rr.Body, tc.want)
		}
		if anth := strings.HasPrefix(tc.path, "/v1/messages/"); (rr.Header().Get("Request-Id") != "") != anth {
			t.Errorf("%s %s: Request-Id %q", tc.method, tc.path, rr.Header().Get("Request-Id"))
		}
	}
}
