package gateway

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/turbine-llm/turbine/messages"
)

// agentBackend serves model "agent" (Qwen3-style: hermes tool calls, qwen3 reasoning)
// with the scripted steps, besides the usual models (which have no parsers).
func agentBackend(steps ...step) *fakeBackend {
	b := newFakeBackend(steps...)
	b.cards = append(b.cards, &messages.ModelCard{Model: "agent", Tokenizer: "fake", ContextLength: 4096, KvBlockSize: 16,
		EosTokenIds: []uint32{fakeEOS}, ToolCallParser: "hermes", ReasoningParser: "qwen3", ParserSource: "flag"})
	return b
}

const weatherTools = `"tools": [{"type": "function", "function": {"name": "get_weather", "description": "Weather in a city",
	"parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}},
	{"type": "function", "function": {"name": "get_time", "parameters": {"type": "object", "properties": {"tz": {"type": "string"}}}}}]`

// agentAnswer is a Qwen3-style answer: thinking, text, two tool calls.
var agentAnswer = []step{
	tokens("<think>\nThe user wants wea"),
	tokens("ther.\n</think>\n\nLet me check.<tool_call>\n{\"name\": \"get_weather\", \"argu"),
	tokens("ments\": {\"city\": \"Par"),
	tokens("is\"}}\n</tool_call>\n<tool_call>\n{\"name\": \"get_time\", \"arguments\": {\"tz\": \"CET\"}}\n</tool_"),
	finish("call>", "stop"),
}

func TestChatToolCallsAndReasoning(t *testing.T) {
	for _, c := range []struct {
		name, body, golden string
	}{
		{"full", `{"model": "agent", "messages": [{"role": "user", "content": "Weather in Paris?"}], ` + weatherTools + `}`,
			"agent/chat_tools.json"},
		{"stream", `{"model": "agent", "stream": true, "stream_options": {"include_usage": true}, "messages": [{"role": "user", "content": "Weather in Paris?"}], ` + weatherTools + `}`,
			"agent/chat_tools_stream.txt"},
		{"first call only", `{"model": "agent", "parallel_tool_calls": false, "messages": [{"role": "user", "content": "Weather in Paris?"}], ` + weatherTools + `}`,
			"agent/chat_tools_parallel_false.json"},
		{"tool_choice none keeps the text", `{"model": "agent", "tool_choice": "none", "messages": [{"role": "user", "content": "Weather in Paris?"}], ` + weatherTools + `}`,
			"agent/chat_tools_none.json"},
		{"no tools: reasoning only", `{"model": "agent", "messages": [{"role": "user", "content": "Weather in Paris?"}]}`,
			"agent/chat_reasoning_only.json"},
	} {
		t.Run(c.name, func(t *testing.T) {
			b := agentBackend(agentAnswer...)
			rr := serve(newTestServer(t, b), http.MethodPost, "/v1/chat/completions", c.body)
			if rr.Code != http.StatusOK {
				t.Fatalf("status %d: %s", rr.Code, rr.Body)
			}
			checkGolden(t, c.golden, rr.Body.Bytes())
			b.checkClosed(t)
		})
	}
}

// TestChatStreamMatchesFull: the stream's deltas, joined, give the non-streaming message.
func TestChatStreamMatchesFull(t *testing.T) {
	body := `{"model": "agent", "messages": [{"role": "user", "content": "Weather?"}], ` + weatherTools
	full := serve(newTestServer(t, agentBackend(agentAnswer...)), http.MethodPost, "/v1/chat/completions", body+`}`)
	var resp struct {
		Choices []struct {
			Message      chatRespMessage `json:"message"`
			FinishReason string          `json:"finish_reason"`
		} `json:"choices"`
	}
	if err := json.Unmarshal(full.Body.Bytes(), &resp); err != nil {
		t.Fatal(err)
	}
	rr := serve(newTestServer(t, agentBackend(agentAnswer...)), http.MethodPost, "/v1/chat/completions", body+`, "stream": true}`)
	var content, reasoning strings.Builder
	var calls []chatToolCall
	finish := ""
	for _, line := range strings.Split(rr.Body.String(), "\n") {
		data, ok := strings.CutPrefix(line, "data: ")
		if !ok || data == "[DONE]" {
			continue
		}
		var raw struct {
			Choices []struct {
				Delta        chatDelta `json:"delta"`
				FinishReason *string   `json:"finish_reason"`
			} `json:"choices"`
		}
		if err := json.Unmarshal([]byte(data), &raw); err != nil {
			t.Fatalf("chunk %s: %v", data, err)
		}
		for _, c := range raw.Choices {
			if c.Delta.Content != nil {
				content.WriteString(*c.Delta.Content)
			}
			if c.Delta.Reasoning != nil {
				reasoning.WriteString(*c.Delta.Reasoning)
				if c.Delta.ReasoningContent == nil || *c.Delta.ReasoningContent != *c.Delta.Reasoning {
					t.Fatalf("reasoning_content does not mirror reasoning in %s", data)
				}
			}
			for _, tc := range c.Delta.ToolCalls {
				i := *tc.Index
				if i == len(calls) {
					if tc.ID == "" || tc.Function.Name == "" || tc.Type != "function" {
						t.Fatalf("first delta of call %d lacks id, type or name: %s", i, data)
					}
					calls = append(calls, chatToolCall{ID: tc.ID, Type: tc.Type, Function: tc.Function})
					continue
				}
				calls[i].Function.Arguments += tc.Function.Arguments
			}
			if c.FinishReason != nil {
				finish = *c.FinishReason
			}
		}
	}
	want := resp.Choices[0]
	gotContent := content.String()
	if want.Message.Content == nil || gotContent != *want.Message.Content || reasoning.String() != *want.Message.Reasoning || finish != want.FinishReason {
		t.Fatalf("stream gave content %q reasoning %q finish %q; full gave %+v", gotContent, reasoning.String(), finish, want)
	}
	if len(calls) != len(want.Message.ToolCalls) {
		t.Fatalf("stream gave %d calls, full %d", len(calls), len(want.Message.ToolCalls))
	}
	for i := range calls {
		if calls[i].Function != want.Message.ToolCalls[i].Function {
			t.Fatalf("call %d: stream %+v, full %+v", i, calls[i].Function, want.Message.ToolCalls[i].Function)
		}
	}
}

func TestChatToolsNeedAParser(t *testing.T) {
	b := agentBackend(agentAnswer...)
	rr := serve(newTestServer(t, b), http.MethodPost, "/v1/chat/completions",
		`{"model": "tiny", "messages": [{"role": "user", "content": "hi"}], `+weatherTools+`}`)
	if rr.Code != http.StatusBadRequest || !strings.Contains(rr.Body.String(), "--tool-call-parser") ||
		!strings.Contains(rr.Body.String(), `"param":"tools"`) {
		t.Fatalf("got %d %s, want a 400 naming --tool-call-parser", rr.Code, rr.Body)
	}
	if len(b.generated()) != 0 {
		t.Fatal("the request reached the backend")
	}
	// tool_choice none needs no parser.
	rr = serve(newTestServer(t, b), http.MethodPost, "/v1/chat/completions",
		`{"model": "tiny", "tool_choice": "none", "messages": [{"role": "user", "content": "hi"}], `+weatherTools+`}`)
	if rr.Code != http.StatusOK {
		t.Fatalf("tool_choice none: %d %s", rr.Code, rr.Body)
	}
}

// TestChatMalformedToolCallIsContent: a call naming no offered function comes back as
// text, finish_reason stop, and is counted.
func TestChatMalformedToolCallIsContent(t *testing.T) {
	b := agentBackend(tokens("<think>x</think>Try: <tool_call>\n{\"name\": \"rm_rf\", \"arguments\": {}}\n</tool_call>"), finish("", "stop"))
	s := newTestServer(t, b)
	rr := serve(s, http.MethodPost, "/v1/chat/completions", `{"model": "agent", "messages": [{"role": "user", "content": "go"}], `+weatherTools+`}`)
	if rr.Code != http.StatusOK || !strings.Contains(rr.Body.String(), `rm_rf`) || !strings.Contains(rr.Body.String(), `"finish_reason":"stop"`) ||
		strings.Contains(rr.Body.String(), `"tool_calls"`) {
		t.Fatalf("got %d %s", rr.Code, rr.Body)
	}
	var m strings.Builder
	s.Metrics().WritePrometheus(&m)
	if !strings.Contains(m.String(), `turbine_frontend_malformed_tool_calls_total{model="agent"} 1`) {
		t.Fatalf("malformed call not counted:\n%s", m.String())
	}
}

// TestChatReasoningHistoryReachesTemplate: an assistant message's reasoning (either name)
// and reasoning_effort reach the template.
func TestChatReasoningHistoryReachesTemplate(t *testing.T) {
	for _, field := range []string{"reasoning", "reasoning_content"} {
		req, aerr := parseChatRequest([]byte(`{"model": "m", "reasoning_effort": "high", "messages": [{"role": "user", "content": "a"},
			{"role": "assistant", "content": "b", "` + field + `": "thought"}, {"role": "user", "content": "c"}]}`))
		if aerr != nil {
			t.Fatal(aerr)
		}
		if req.Messages[1].Reasoning != "thought" || req.ReasoningEffort != "high" || templateKwargs(req)["reasoning_effort"] != "high" {
			t.Fatalf("%s: got %+v, effort %q", field, req.Messages[1], req.ReasoningEffort)
		}
	}
	if _, aerr := parseChatRequest([]byte(`{"model": "m", "reasoning_effort": "extreme", "messages": [{"role": "user", "content": "a"}]}`)); aerr == nil || aerr.Param != "reasoning_effort" {
		t.Fatalf("bad reasoning_effort: %v", aerr)
	}
}

// TestChatNamedToolChoiceFinishesStop: a call forced by a named tool_choice finishes
// with "stop" (OpenAI's and vLLM's answer), "required" with "tool_calls".
func TestChatNamedToolChoiceFinishesStop(t *testing.T) {
	for _, c := range []struct{ choice, answer, finish string }{
		{`{"type": "function", "function": {"name": "get_weather"}}`, `{"city": "Paris"}`, "stop"},
		{`"required"`, `[{"name": "get_weather", "parameters": {"city": "Paris"}}]`, "tool_calls"},
	} {
		for _, stream := range []bool{false, true} {
			b := agentBackend(tokens("<think>x</think>"), finish(c.answer, "stop"))
			body := `{"model": "agent", "tool_choice": ` + c.choice + `, "messages": [{"role": "user", "content": "Weather?"}], ` + weatherTools
			if stream {
				body += `, "stream": true`
			}
			rr := serve(newTestServer(t, b), http.MethodPost, "/v1/chat/completions", body+`}`)
			if rr.Code != http.StatusOK || !strings.Contains(rr.Body.String(), `"finish_reason":"`+c.finish+`"`) ||
				!strings.Contains(rr.Body.String(), `get_weather`) {
				t.Fatalf("tool_choice %s (stream %v): %d %s, want a call and finish %q", c.choice, stream, rr.Code, rr.Body, c.finish)
			}
		}
	}
}

// TestChatCutCallComesBackAsContent: a call cut by max_tokens inside its arguments is,
// in a non-streaming answer, the model's text as content with no tool_calls (the
// arguments are not JSON); the stream has already sent the call's first fragments.
func TestChatCutCallComesBackAsContent(t *testing.T) {
	steps := []step{tokens("<think>plan</think>Checking.<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"ci"), finish("ty\": \"Pa", "length")}
	body := `{"model": "agent", "max_tokens": 40, "messages": [{"role": "user", "content": "Weather?"}], ` + weatherTools
	rr := serve(newTestServer(t, agentBackend(steps...)), http.MethodPost, "/v1/chat/completions", body+`}`)
	var resp struct {
		Choices []struct {
			Message      chatRespMessage `json:"message"`
			FinishReason string          `json:"finish_reason"`
		} `json:"choices"`
	}
	if err := json.Unmarshal(rr.Body.Bytes(), &resp); err != nil {
		t.Fatal(err)
	}
	m := resp.Choices[0].Message
	want := "Checking.<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Pa"
	if len(m.ToolCalls) != 0 || m.Content == nil || *m.Content != want || *m.Reasoning != "plan" || resp.Choices[0].FinishReason != "length" {
		t.Fatalf("got %s, want the text as content and finish length", rr.Body)
	}
	rr = serve(newTestServer(t, agentBackend(steps...)), http.MethodPost, "/v1/chat/completions", body+`, "stream": true}`)
	if !strings.Contains(rr.Body.String(), `"tool_calls":[{"index":0`) || !strings.Contains(rr.Body.String(), `"finish_reason":"length"`) {
		t.Fatalf("stream: %s", rr.Body)
	}
}

// TestChatEmptyAssistantTurn: an assistant turn with empty content (a model's answer can
// be empty, or all reasoning) is taken back as the client sends it; one with no content
// at all and no tool calls, or an empty user turn, is refused.
func TestChatEmptyAssistantTurn(t *testing.T) {
	for _, c := range []struct {
		assistant, param string
	}{
		{`{"role": "assistant", "content": ""}`, ""},
		{`{"role": "assistant", "content": "", "reasoning": "thought"}`, ""},
		{`{"role": "assistant", "content": []}`, ""},
		{`{"role": "assistant", "content": null}`, "messages[1].content"},
		{`{"role": "assistant"}`, "messages[1].content"},
		{`{"role": "user", "content": ""}`, "messages[1].content"},
	} {
		_, aerr := parseChatRequest([]byte(`{"model": "m", "messages": [{"role": "user", "content": "a"}, ` + c.assistant +
			`, {"role": "user", "content": "b"}]}`))
		switch {
		case c.param == "" && aerr != nil:
			t.Errorf("%s: refused: %v", c.assistant, aerr)
		case c.param != "" && (aerr == nil || aerr.Param != c.param):
			t.Errorf("%s: %v, want an error on %s", c.assistant, aerr, c.param)
		}
	}
}
