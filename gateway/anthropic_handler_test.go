package gateway

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/turbine-llm/turbine/model"
)

// POST /v1/messages and /v1/messages/count_tokens through the fake Backend, whose model
// "agent" has Qwen3's parsers (hermes tool calls, qwen3 reasoning): the answer a
// Claude-Code-style client gets (golden: testdata/anthropic/messages_*), the prompt the
// engine gets, and the API key in Anthropic's header.

// anthAgentTools is the weather and time tools in the Messages API's shape.
const anthAgentTools = `"tools": [{"name": "get_weather", "description": "Weather in a city", "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}},
	{"name": "get_time", "input_schema": {"type": "object", "properties": {"tz": {"type": "string"}}}}]`

func TestMessagesToolCallsAndThinking(t *testing.T) {
	for _, c := range []struct {
		name, body, golden string
	}{
		{"full", `{"model": "agent", "max_tokens": 256, "messages": [{"role": "user", "content": "Weather in Paris?"}], ` + anthAgentTools + `}`,
			"anthropic/messages_tools.json"},
		{"stream", `{"model": "agent", "max_tokens": 256, "stream": true, "messages": [{"role": "user", "content": "Weather in Paris?"}], ` + anthAgentTools + `}`,
			"anthropic/messages_tools_stream.txt"},
		{"one call only", `{"model": "agent", "max_tokens": 256, "tool_choice": {"type": "auto", "disable_parallel_tool_use": true}, "messages": [{"role": "user", "content": "Weather in Paris?"}], ` + anthAgentTools + `}`,
			"anthropic/messages_tools_one_call.json"},
		{"tool_choice none keeps the text", `{"model": "agent", "max_tokens": 256, "tool_choice": {"type": "none"}, "messages": [{"role": "user", "content": "Weather in Paris?"}], ` + anthAgentTools + `}`,
			"anthropic/messages_tools_none.json"},
	} {
		t.Run(c.name, func(t *testing.T) {
			b := agentBackend(agentAnswer...)
			rr := serve(newTestServer(t, b), http.MethodPost, anthMessagesPath, c.body)
			if rr.Code != http.StatusOK {
				t.Fatalf("status %d: %s", rr.Code, rr.Body)
			}
			checkGolden(t, c.golden, rr.Body.Bytes())
			b.checkClosed(t)
		})
	}
}

// TestMessagesStreamMatchesBody: the stream, accumulated as Anthropic's SDKs do, is the
// non-streaming message.
func TestMessagesStreamMatchesBody(t *testing.T) {
	body := `{"model": "agent", "max_tokens": 256, "messages": [{"role": "user", "content": "Weather?"}], ` + anthAgentTools
	full := serve(newTestServer(t, agentBackend(agentAnswer...)), http.MethodPost, anthMessagesPath, body+`}`)
	stream := serve(newTestServer(t, agentBackend(agentAnswer...)), http.MethodPost, anthMessagesPath, body+`, "stream": true}`)
	if full.Code != 200 || stream.Code != 200 {
		t.Fatalf("status %d / %d", full.Code, stream.Code)
	}
	if ct := stream.Header().Get("Content-Type"); ct != "text/event-stream" {
		t.Errorf("stream Content-Type %q", ct)
	}
	var want map[string]any
	if err := json.Unmarshal(full.Body.Bytes(), &want); err != nil {
		t.Fatal(err)
	}
	got := anthAccumulate(t, anthropicEvents(t, stream.Body.String()))
	if !reflect.DeepEqual(got, want) {
		a, _ := json.Marshal(got)
		t.Errorf("the stream accumulates to\n%s\nthe body is\n%s", a, full.Body)
	}
	if want["stop_reason"] != "tool_use" || len(want["content"].([]any)) != 4 {
		t.Errorf("body %s", full.Body)
	}
}

// TestMessagesPrompt checks what the engine is asked: the template's view of a tool
// round trip (tools, the assistant's calls with their arguments as sent, the results in
// call order, the thinking kwargs) and the sampling parameters.
func TestMessagesPrompt(t *testing.T) {
	b := agentBackend(helloScript()...)
	body := `{"model": "agent", "max_tokens": 2000, "temperature": 0.25, "stop_sequences": ["END"], "system": "be brief",
		"thinking": {"type": "disabled"}, ` + anthAgentTools + `, "tool_choice": {"type": "any"},
		"messages": [{"role": "user", "content": "Weather and time?"},
		{"role": "assistant", "content": [{"type": "thinking", "thinking": "Both.", "signature": "x"}, {"type": "tool_use", "id": "toolu_a", "name": "get_weather", "input": {"city": "Paris"}},
			{"type": "tool_use", "id": "toolu_b", "name": "get_time", "input": {"tz": "CET"}}]},
		{"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_b", "content": "10:00"}, {"type": "tool_result", "tool_use_id": "toolu_a", "content": [{"type": "text", "text": "18 C"}]}]}]}`
	rr := serve(newTestServer(t, b), http.MethodPost, anthMessagesPath, body)
	if rr.Code != http.StatusOK {
		t.Fatalf("status %d: %s", rr.Code, rr.Body)
	}
	gen := b.generated()[0]
	prompt := fakeTokenizer{}.Decode(gen.TokenIDs)
	want := `<|im_start|>system
# Tools
[{"type":"function","function":{"name":"get_weather","description":"Weather in a city","parameters":{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}}},{"type":"function","function":{"name":"get_time","parameters":{"type":"object","properties":{"tz":{"type":"string"}}}}}]<|im_end|>
<|im_start|>system
# Kwargs
{"enable_thinking":false,"thinking":false}<|im_end|>
<|im_start|>system
be brief<|im_end|>
<|im_start|>user
Weather and time?<|im_end|>
<|im_start|>assistant
<|im_end|>
<|im_start|>tool
18 C<|im_end|>
<|im_start|>tool
10:00<|im_end|>
<|im_start|>assistant
`
	if prompt != want {
		t.Errorf("prompt\n%s\nwant\n%s", prompt, want)
	}
	sp := gen.Sampling
	if sp.MaxTokens != 2000 || sp.Temperature == nil || *sp.Temperature != 0.25 || sp.GetStructured().GetJsonSchema() == "" {
		t.Errorf("sampling %v", sp)
	}
	b.checkClosed(t)
}

func TestMessagesStopReasons(t *testing.T) {
	for _, c := range []struct {
		name, extra    string
		steps          []step
		reason, stop   string
		text           string
		outputTokens   float64
		inputTokens    float64
		cacheReadInput float64
	}{
		{"end_turn", ``, helloScript(), "end_turn", "", "Hello world", 11, 19, 2},
		{"stop_sequence", `"stop_sequences": ["lo w"], `, helloScript(), "stop_sequence", "lo w", "Hel", 7, 19, 2},
		{"max_tokens", ``, []step{tokens("Hel"), finish("lo", "length")}, "max_tokens", "", "Hello", 5, 19, 2},
	} {
		t.Run(c.name, func(t *testing.T) {
			b := newFakeBackend(c.steps...)
			// The real stop matcher: it names the stop string it met.
			s, err := New(Config{Now: func() time.Time { return testTime }}, b, append(fakeOptions(fakePreprocessor{eos: []uint32{fakeEOS}}),
				WithStopMatcher(func(stops []string) StopMatcher { return model.NewStopMatcher(stops) }))...)
			if err != nil {
				t.Fatal(err)
			}
			rr := serve(s, http.MethodPost, anthMessagesPath, `{"model": "tiny", "max_tokens": 64, `+c.extra+`"messages": [{"role": "user", "content": "hi"}]}`)
			if rr.Code != http.StatusOK {
				t.Fatalf("status %d: %s", rr.Code, rr.Body)
			}
			var m struct {
				ID           string             `json:"id"`
				Content      []anthropicContent `json:"content"`
				StopReason   string             `json:"stop_reason"`
				StopSequence *string            `json:"stop_sequence"`
				Usage        map[string]float64 `json:"usage"`
			}
			if err := json.Unmarshal(rr.Body.Bytes(), &m); err != nil {
				t.Fatal(err)
			}
			stop := ""
			if m.StopSequence != nil {
				stop = *m.StopSequence
			}
			if m.ID != "msg_req-1" || m.StopReason != c.reason || stop != c.stop || len(m.Content) != 1 || *m.Content[0].Text != c.text {
				t.Errorf("message %s", rr.Body)
			}
			if m.Usage["output_tokens"] != c.outputTokens || m.Usage["input_tokens"] != c.inputTokens || m.Usage["cache_read_input_tokens"] != c.cacheReadInput {
				t.Errorf("usage %v", m.Usage)
			}
			b.checkClosed(t)
		})
	}
}

// TestMessagesFailures: an engine failure is Anthropic's api_error, as a body before the
// answer started and as an `error` event after.
func TestMessagesFailures(t *testing.T) {
	failing := []step{tokens("Hel"), chunk(nil, "error", "engine died")}
	rr := serve(newTestServer(t, newFakeBackend(failing...)), http.MethodPost, anthMessagesPath, `{"model": "tiny", "max_tokens": 64, "messages": [{"role": "user", "content": "hi"}]}`)
	var e anthropicErrorBody
	if err := json.Unmarshal(rr.Body.Bytes(), &e); err != nil || rr.Code != 500 || e.Error.Type != "api_error" || e.RequestID != "req-1" {
		t.Errorf("non-streaming failure: %d %s", rr.Code, rr.Body)
	}
	rr = serve(newTestServer(t, newFakeBackend(failing...)), http.MethodPost, anthMessagesPath, `{"model": "tiny", "max_tokens": 64, "stream": true, "messages": [{"role": "user", "content": "hi"}]}`)
	evs := anthropicEvents(t, rr.Body.String())
	last := evs[len(evs)-1]
	if rr.Code != 200 || last.name != "error" || last.data["error"].(map[string]any)["type"] != "api_error" || strings.Contains(rr.Body.String(), "engine died") {
		t.Errorf("streaming failure: %s", rr.Body)
	}
	if evs[0].name != "message_start" || evs[1].name != "content_block_start" || evs[2].name != "content_block_delta" {
		t.Errorf("events before the failure: %v", evs)
	}
}

// TestCountTokens: count_tokens gives the length of the prompt /v1/messages sends the
// engine for the same body (tools and thinking included).
func TestCountTokens(t *testing.T) {
	msgs := `"system": "be brief", "thinking": {"type": "enabled", "budget_tokens": 1024}, ` + anthAgentTools + `, "messages": [{"role": "user", "content": "Weather in Paris?"}]}`
	b := agentBackend(helloScript()...)
	s := newTestServer(t, b)
	rr := serve(s, http.MethodPost, anthMessagesPath, `{"model": "agent", "max_tokens": 2048, `+msgs)
	if rr.Code != http.StatusOK {
		t.Fatalf("status %d: %s", rr.Code, rr.Body)
	}
	count := serve(s, http.MethodPost, anthCountTokensPath, `{"model": "agent", `+msgs)
	var c messageTokensCount
	if err := json.Unmarshal(count.Body.Bytes(), &c); err != nil || count.Code != 200 {
		t.Fatalf("count_tokens: %d %s", count.Code, count.Body)
	}
	if want := len(b.generated()[0].TokenIDs); c.InputTokens != want || want == 0 {
		t.Errorf("count_tokens %d, the message's prompt has %d tokens", c.InputTokens, want)
	}
	if len(b.generated()) != 1 {
		t.Errorf("count_tokens ran a generation")
	}
	b.checkClosed(t)
}

// TestMessagesAPIKey: with API keys, "x-api-key" opens /v1/ as "Authorization: Bearer"
// does; a missing or wrong key gets 401 in Anthropic's shape under /v1/messages, and in
// OpenAI's elsewhere.
func TestMessagesAPIKey(t *testing.T) {
	const msg = `{"model":"tiny","max_tokens":16,"messages":[{"role":"user","content":"hi"}]}`
	for _, tc := range []struct {
		name, path, body string
		headers          map[string][]string
		code             int
		shape            string // "anthropic" or "openai" for a 401
	}{
		{"x-api-key", anthMessagesPath, msg, map[string][]string{"X-Api-Key": {testKeyOne}, "Anthropic-Version": {"2023-06-01"}}, 200, ""},
		{"bearer", anthMessagesPath, msg, map[string][]string{"Authorization": {"Bearer " + testKeyTwo}}, 200, ""},
		{"x-api-key on chat", chatPath, `{"model":"tiny","messages":[{"role":"user","content":"hi"}]}`, map[string][]string{"X-Api-Key": {testKeyTwo}}, 200, ""},
		{"x-api-key on count_tokens", anthCountTokensPath, `{"model":"tiny","messages":[{"role":"user","content":"hi"}]}`, map[string][]string{"X-Api-Key": {testKeyOne}}, 200, ""},
		{"wrong x-api-key", anthMessagesPath, msg, map[string][]string{"X-Api-Key": {"sk-nope"}}, 401, "anthropic"},
		{"no key", anthMessagesPath, msg, nil, 401, "anthropic"},
		{"no key, count_tokens", anthCountTokensPath, msg, nil, 401, "anthropic"},
		{"two x-api-key headers", anthMessagesPath, msg, map[string][]string{"X-Api-Key": {testKeyOne, testKeyOne}}, 401, "anthropic"},
		{"empty x-api-key", anthMessagesPath, msg, map[string][]string{"X-Api-Key": {""}}, 401, "anthropic"},
		{"wrong key on chat", chatPath, msg, map[string][]string{"X-Api-Key": {"sk-nope"}}, 401, "openai"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newKeyedServer(t, newFakeBackend(helloScript()...), new(bytes.Buffer), testKeyOne, testKeyTwo)
			req := httptest.NewRequest(http.MethodPost, tc.path, strings.NewReader(tc.body))
			for k, vs := range tc.headers {
				for _, v := range vs {
					req.Header.Add(k, v)
				}
			}
			rr := httptest.NewRecorder()
			s.ServeHTTP(rr, req)
			if rr.Code != tc.code {
				t.Fatalf("status %d, want %d: %s", rr.Code, tc.code, rr.Body)
			}
			switch tc.shape {
			case "anthropic":
				var e anthropicErrorBody
				if err := json.Unmarshal(rr.Body.Bytes(), &e); err != nil || e.Type != "error" || e.Error.Type != "authentication_error" || rr.Header().Get("WWW-Authenticate") != "Bearer" {
					t.Errorf("401 %s", rr.Body)
				}
			case "openai":
				if !strings.Contains(rr.Body.String(), `"code":"invalid_api_key"`) {
					t.Errorf("401 %s", rr.Body)
				}
			}
		})
	}
}

// TestMessagesRequestIDHeader: Anthropic's SDKs read the request id from request-id.
func TestMessagesRequestIDHeader(t *testing.T) {
	s := newTestServer(t, agentBackend(finish("hi", "stop")))
	for _, path := range []string{"/v1/messages", "/v1/messages/count_tokens"} {
		rr := serve(s, http.MethodPost, path, `{"model": "agent", "max_tokens": 8, "messages": [{"role": "user", "content": "hi"}]}`)
		if rr.Code != http.StatusOK || rr.Header().Get("Request-Id") != "req-1" {
			t.Fatalf("%s: %d, request-id %q", path, rr.Code, rr.Header().Get("Request-Id"))
		}
	}
	if rr := serve(s, http.MethodPost, "/v1/chat/completions", `{"model": "agent", "messages": [{"role": "user", "content": "hi"}]}`); rr.Header().Get("Request-Id") != "" {
		t.Fatal("request-id set outside the Messages API")
	}
}

// TestCountTokensAdmission: count_tokens is refused while the server drains and when
// every request slot is taken, in Anthropic's error shape, like a generation.
func TestCountTokensAdmission(t *testing.T) {
	body := `{"model": "agent", "messages": [{"role": "user", "content": "hi"}]}`
	s := newTestServer(t, agentBackend())
	s.Drain()
	rr := serve(s, http.MethodPost, "/v1/messages/count_tokens", body)
	if rr.Code != http.StatusServiceUnavailable || !strings.Contains(rr.Body.String(), `"type":"overloaded_error"`) {
		t.Fatalf("draining: %d %s", rr.Code, rr.Body)
	}
	cfg := Config{Now: func() time.Time { return testTime }, NewRequestID: func() string { return "id" }, MaxConcurrentRequests: 1}
	s, err := New(cfg, agentBackend(), fakeOptions(fakePreprocessor{eos: []uint32{fakeEOS}})...)
	if err != nil {
		t.Fatal(err)
	}
	held, aerr := s.admitRequest() // the only slot
	if aerr != nil {
		t.Fatal(aerr)
	}
	if rr := serve(s, http.MethodPost, "/v1/messages/count_tokens", body); rr.Code != http.StatusServiceUnavailable {
		t.Fatalf("no slot free: %d %s", rr.Code, rr.Body)
	}
	held.release()
	if rr := serve(s, http.MethodPost, "/v1/messages/count_tokens", body); rr.Code != http.StatusOK {
		t.Fatalf("slot free again: %d %s", rr.Code, rr.Body)
	}
}
