package gateway

import (
	"encoding/json"
	"net/http"
	"reflect"
	"strings"
	"testing"

	"github.com/turbine-llm/turbine/messages"
)

// responsesWeatherTools are agent_test.go's weatherTools in the Responses shape.
const responsesWeatherTools = `"tools": [{"type": "function", "name": "get_weather", "description": "Weather in a city",
	"parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}},
	{"type": "function", "name": "get_time", "parameters": {"type": "object", "properties": {"tz": {"type": "string"}}}}]`

// TestResponsesAgent runs a Qwen3-style answer (thinking, text, two hermes tool calls)
// through the Responses API, as a body and as a stream (golden files under
// testdata/responses/), and checks that the stream adds up to the body.
func TestResponsesAgent(t *testing.T) {
	for _, c := range []struct {
		name, body, golden string
	}{
		{"full", `{"model": "agent", "input": "Weather in Paris?", ` + responsesWeatherTools + `}`, "responses/agent_full.json"},
		{"stream", `{"model": "agent", "stream": true, "input": "Weather in Paris?", ` + responsesWeatherTools + `}`, "responses/agent_stream.txt"},
		{"first call only", `{"model": "agent", "parallel_tool_calls": false, "input": "Weather in Paris?", ` + responsesWeatherTools + `}`,
			"responses/agent_parallel_false.json"},
		{"tool_choice none keeps the text", `{"model": "agent", "tool_choice": "none", "input": "Weather in Paris?", ` + responsesWeatherTools + `}`,
			"responses/agent_tools_none.json"},
		{"no tools: reasoning and text", `{"model": "agent", "input": "Weather in Paris?"}`, "responses/agent_no_tools.json"},
		{"cut by max_output_tokens", `{"model": "agent", "max_output_tokens": 60, "input": "Weather in Paris?", ` + responsesWeatherTools + `}`,
			"responses/agent_incomplete.json"},
	} {
		t.Run(c.name, func(t *testing.T) {
			steps := agentAnswer
			if strings.Contains(c.name, "max_output_tokens") {
				steps = append(append([]step(nil), agentAnswer[:2]...), finish("", "length"))
			}
			b := agentBackend(steps...)
			rr := serve(newTestServer(t, b), http.MethodPost, responsesPath, c.body)
			if rr.Code != http.StatusOK {
				t.Fatalf("status %d: %s", rr.Code, rr.Body)
			}
			checkGolden(t, c.golden, rr.Body.Bytes())
			b.checkClosed(t)
		})
	}
}

// TestResponsesStreamMatchesFull: the stream's terminal response is the body, and a client
// accumulating the stream's deltas gets the same items.
func TestResponsesStreamMatchesFull(t *testing.T) {
	body := `{"model": "agent", "input": "Weather?", ` + responsesWeatherTools
	full := serve(newTestServer(t, agentBackend(agentAnswer...)), http.MethodPost, responsesPath, body+`}`)
	stream := serve(newTestServer(t, agentBackend(agentAnswer...)), http.MethodPost, responsesPath, body+`, "stream": true}`)
	if full.Code != http.StatusOK || stream.Code != http.StatusOK {
		t.Fatalf("status %d %d", full.Code, stream.Code)
	}
	if ct := stream.Header().Get("Content-Type"); ct != "text/event-stream" {
		t.Errorf("Content-Type %q", ct)
	}
	r := replay(t, responsesFrames(t, stream.Body.String()))
	var want map[string]any
	if err := json.Unmarshal(full.Body.Bytes(), &want); err != nil {
		t.Fatal(err)
	}
	if r.terminal != "response.completed" || !reflect.DeepEqual(r.final, want) {
		t.Fatalf("terminal %s response\n%v\nbody\n%v", r.terminal, r.final, want)
	}
	out := want["output"].([]any)
	if len(out) != 4 || len(r.items) != 4 {
		t.Fatalf("%d items in the body, %d done in the stream", len(out), len(r.items))
	}
	for i, it := range out {
		if !reflect.DeepEqual(it, r.items[i]) {
			t.Errorf("item %d: body %v, stream %v", i, it, r.items[i])
		}
	}
}

// TestResponsesFunctionCallOutputTurn: the next turn of an agent loop (the model's items
// sent back with the tool's output) reaches the template as chat messages, and the
// reasoning effort as a template variable.
func TestResponsesFunctionCallOutputTurn(t *testing.T) {
	b := agentBackend(tokens("<think>ok</think>"), finish("It is sunny.", "stop"))
	rr := serve(newTestServer(t, b), http.MethodPost, responsesPath, `{"model": "agent", "instructions": "be brief", "reasoning": {"effort": "low"},
		"input": [{"role": "user", "content": "Weather in Paris?"},
		{"type": "reasoning", "id": "rs_1", "summary": [], "content": [{"type": "reasoning_text", "text": "call it"}]},
		{"type": "function_call", "id": "fc_1", "call_id": "call-0", "name": "get_weather", "arguments": "{\"city\": \"Paris\"}", "status": "completed"},
		{"type": "function_call_output", "call_id": "call-0", "output": "sunny, 24C"}], `+responsesWeatherTools+`}`)
	if rr.Code != http.StatusOK {
		t.Fatalf("status %d: %s", rr.Code, rr.Body)
	}
	prompt := fakeTokenizer{}.Decode(b.generated()[0].TokenIDs)
	for _, want := range []string{"system\nbe brief", `"reasoning_effort":"low"`, "user\nWeather in Paris?", "tool\nsunny, 24C", `"name":"get_weather"`} {
		if !strings.Contains(prompt, want) {
			t.Errorf("prompt lacks %q:\n%s", want, prompt)
		}
	}
	var resp struct {
		Output []map[string]any `json:"output"`
		Status string           `json:"status"`
	}
	if err := json.Unmarshal(rr.Body.Bytes(), &resp); err != nil {
		t.Fatal(err)
	}
	if resp.Status != "completed" || len(resp.Output) != 2 || resp.Output[0]["type"] != "reasoning" || resp.Output[1]["type"] != "message" {
		t.Fatalf("response %s", rr.Body)
	}
	b.checkClosed(t)
}

// TestResponsesConstraints: text.format and forced tool calls reach the engine as the
// structured output constraint; a forced call comes back as a function_call item.
func TestResponsesConstraints(t *testing.T) {
	// Qwen3 thinks first; the constraint holds from the end of the thinking on.
	b := agentBackend(tokens("<think>call it</think>"), finish(`{"city": "Paris"}`, "stop"))
	rr := serve(newTestServer(t, b), http.MethodPost, responsesPath, `{"model": "agent", "input": "Weather?", "tool_choice": {"type": "function", "name": "get_weather"}, `+responsesWeatherTools+`}`)
	if rr.Code != http.StatusOK {
		t.Fatalf("status %d: %s", rr.Code, rr.Body)
	}
	so := b.generated()[0].Sampling.GetStructured()
	if so.GetJsonSchema() != `{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}` {
		t.Errorf("constraint %v", so)
	}
	var resp struct {
		Output []functionCallItem `json:"output"`
	}
	if err := json.Unmarshal(rr.Body.Bytes(), &resp); err != nil {
		t.Fatal(err)
	}
	if len(resp.Output) != 2 || resp.Output[0].Type != "reasoning" || resp.Output[1].Type != "function_call" || resp.Output[1].Name != "get_weather" ||
		resp.Output[1].Arguments != `{"city": "Paris"}` {
		t.Errorf("output %s", rr.Body)
	}

	b = agentBackend(tokens("<think>ok</think>"), finish(`{"z": "a"}`, "stop"))
	rr = serve(newTestServer(t, b), http.MethodPost, responsesPath, `{"model": "agent", "input": "x", "text": {"format": {"type": "json_schema", "name": "o",
		"schema": {"type": "object", "properties": {"z": {"type": "string"}}}}}}`)
	if rr.Code != http.StatusOK {
		t.Fatalf("status %d: %s", rr.Code, rr.Body)
	}
	want := &messages.StructuredOutput{JsonSchema: `{"type":"object","properties":{"z":{"type":"string"}}}`}
	if got := b.generated()[0].Sampling.GetStructured(); got.GetJsonSchema() != want.JsonSchema {
		t.Errorf("constraint %v", got)
	}
}

// TestResponsesFailureMidStream: a failure after the header is a response.failed event
// with the catalogue's code, the items so far, and nothing after it.
func TestResponsesFailureMidStream(t *testing.T) {
	b := agentBackend(tokens("<think>hmm</think>Hel"), chunk(nil, "error", "engine died"))
	rr := serve(newTestServer(t, b), http.MethodPost, responsesPath, `{"model": "agent", "stream": true, "input": "hi"}`)
	frames := responsesFrames(t, rr.Body.String())
	r := replay(t, frames)
	if r.terminal != "response.failed" || r.final["status"] != "failed" {
		t.Fatalf("terminal %s: %s", r.terminal, rr.Body)
	}
	e := r.final["error"].(map[string]any)
	if e["code"] != "engine_error" || strings.Contains(e["message"].(string), "engine died") {
		t.Errorf("error %v", e)
	}
	if out := r.final["output"].([]any); len(out) != 2 || out[1].(map[string]any)["status"] != "incomplete" {
		t.Errorf("output %v", out)
	}
	checkGolden(t, "responses/agent_failed_stream.txt", rr.Body.Bytes())
	b.checkClosed(t)
}
