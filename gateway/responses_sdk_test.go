package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/responses"
	"github.com/openai/openai-go/v3/shared"
)

// The official OpenAI Go SDK's Responses client against the gateway over HTTP.

func sdkWeatherTools() []responses.ToolUnionParam {
	return []responses.ToolUnionParam{
		responses.ToolParamOfFunction("get_weather", map[string]any{"type": "object",
			"properties": map[string]any{"city": map[string]any{"type": "string"}}, "required": []string{"city"}}, true),
		responses.ToolParamOfFunction("get_time", map[string]any{"type": "object",
			"properties": map[string]any{"tz": map[string]any{"type": "string"}}}, false),
	}
}

func sdkAgentParams() responses.ResponseNewParams {
	return responses.ResponseNewParams{
		Model:           "agent",
		Input:           responses.ResponseNewParamsInputUnion{OfString: openai.String("Weather in Paris?")},
		Instructions:    openai.String("be brief"),
		Tools:           sdkWeatherTools(),
		MaxOutputTokens: openai.Int(200),
		Reasoning:       shared.ReasoningParam{Effort: shared.ReasoningEffortLow},
		Store:           openai.Bool(false),
	}
}

// checkAgentResponse checks the SDK's view of agentAnswer as a Response.
func checkAgentResponse(t *testing.T, resp *responses.Response) {
	t.Helper()
	if resp.Status != responses.ResponseStatusCompleted || !strings.HasPrefix(resp.ID, "resp_") || resp.Model != "agent" ||
		len(resp.Output) != 4 || resp.Instructions.OfString != "be brief" || resp.MaxOutputTokens != 200 ||
		resp.Reasoning.Effort != shared.ReasoningEffortLow || len(resp.Tools) != 2 || resp.Tools[0].Name != "get_weather" ||
		resp.Usage.InputTokens == 0 || resp.Usage.OutputTokens == 0 || resp.Usage.TotalTokens != resp.Usage.InputTokens+resp.Usage.OutputTokens ||
		resp.Usage.InputTokensDetails.CachedTokens != 2 || resp.Usage.OutputTokensDetails.ReasoningTokens == 0 || resp.Error.Code != "" {
		t.Fatalf("response %s", resp.RawJSON())
	}
	rs, msg := resp.Output[0].AsReasoning(), resp.Output[1].AsMessage()
	if rs.Type != "reasoning" || len(rs.Content) != 1 || rs.Content[0].Text != "\nThe user wants weather.\n" {
		t.Errorf("reasoning %s", rs.RawJSON())
	}
	if msg.Type != "message" || msg.Status != responses.ResponseOutputMessageStatusCompleted || resp.OutputText() != "\n\nLet me check." {
		t.Errorf("message %s, output text %q", msg.RawJSON(), resp.OutputText())
	}
	for i, want := range []struct{ id, name, args string }{{"call-0", "get_weather", `{"city": "Paris"}`}, {"call-1", "get_time", `{"tz": "CET"}`}} {
		fc := resp.Output[2+i].AsFunctionCall()
		if fc.Type != "function_call" || fc.CallID != want.id || fc.Name != want.name || fc.Arguments != want.args || fc.Status != responses.ResponseFunctionToolCallStatusCompleted {
			t.Errorf("call %d %s", i, fc.RawJSON())
		}
	}
}

func TestSDKResponses(t *testing.T) {
	ctx := context.Background()
	b := agentBackend(agentAnswer...)
	client := sdkClient(t, b)
	resp, err := client.Responses.New(ctx, sdkAgentParams())
	if err != nil {
		t.Fatal(err)
	}
	checkAgentResponse(t, resp)
	if sp := b.generated()[0].Sampling; sp.MaxTokens != 200 {
		t.Errorf("sampling %v", sp)
	}
	b.checkClosed(t)
}

// TestSDKResponsesStream accumulates the SDK's typed stream events into the output and
// compares it with the terminal response and with the non-streaming answer.
func TestSDKResponsesStream(t *testing.T) {
	ctx := context.Background()
	fullClient := sdkClient(t, agentBackend(agentAnswer...))
	full, err := fullClient.Responses.New(ctx, sdkAgentParams())
	if err != nil {
		t.Fatal(err)
	}
	b := agentBackend(agentAnswer...)
	client := sdkClient(t, b)
	stream := client.Responses.NewStreaming(ctx, sdkAgentParams())
	texts := map[int64]string{}
	var types []string
	var final *responses.Response
	for stream.Next() {
		ev := stream.Current()
		types = append(types, ev.Type)
		switch e := ev.AsAny().(type) {
		case responses.ResponseTextDeltaEvent:
			texts[e.OutputIndex] += e.Delta
		case responses.ResponseReasoningTextDeltaEvent:
			texts[e.OutputIndex] += e.Delta
		case responses.ResponseFunctionCallArgumentsDeltaEvent:
			texts[e.OutputIndex] += e.Delta
		case responses.ResponseOutputItemAddedEvent:
			if e.Item.Type == "function_call" && (e.Item.CallID == "" || e.Item.Name == "") {
				t.Errorf("function call added without call_id or name: %s", e.RawJSON())
			}
		case responses.ResponseCompletedEvent:
			r := e.Response
			final = &r
		}
	}
	if err := stream.Err(); err != nil {
		t.Fatal(err)
	}
	if final == nil || types[0] != "response.created" || types[1] != "response.in_progress" || types[len(types)-1] != "response.completed" {
		t.Fatalf("events %v", types)
	}
	checkAgentResponse(t, final)
	var a, c any
	_ = json.Unmarshal([]byte(final.RawJSON()), &a)
	_ = json.Unmarshal([]byte(full.RawJSON()), &c)
	if !reflect.DeepEqual(a, c) {
		t.Errorf("streamed response\n%s\nfull\n%s", final.RawJSON(), full.RawJSON())
	}
	want := map[int64]string{0: "\nThe user wants weather.\n", 1: "\n\nLet me check.", 2: `{"city": "Paris"}`, 3: `{"tz": "CET"}`}
	if !reflect.DeepEqual(texts, want) {
		t.Errorf("accumulated %v", texts)
	}
	b.checkClosed(t)
}

// TestSDKResponsesToolResultTurn sends the first answer's items back, as an agent loop
// does (the SDK's ToParam), with the function outputs.
func TestSDKResponsesToolResultTurn(t *testing.T) {
	ctx := context.Background()
	firstClient := sdkClient(t, agentBackend(agentAnswer...))
	first, err := firstClient.Responses.New(ctx, sdkAgentParams())
	if err != nil {
		t.Fatal(err)
	}
	input := responses.ResponseInputParam{responses.ResponseInputItemParamOfMessage("Weather in Paris?", responses.EasyInputMessageRoleUser)}
	var outputs responses.ResponseInputParam
	for _, it := range first.Output {
		switch it.Type {
		case "reasoning":
			p := it.AsReasoning().ToParam()
			input = append(input, responses.ResponseInputItemUnionParam{OfReasoning: &p})
		case "message":
			p := it.AsMessage().ToParam()
			input = append(input, responses.ResponseInputItemUnionParam{OfOutputMessage: &p})
		case "function_call":
			fc := it.AsFunctionCall()
			p := fc.ToParam()
			out := responses.ResponseInputItemParamOfFunctionCallOutput("result of " + fc.Name)
			out.OfFunctionCallOutput.CallID = openai.String(fc.CallID)
			input = append(input, responses.ResponseInputItemUnionParam{OfFunctionCall: &p})
			outputs = append(outputs, out)
		}
	}
	input = append(input, outputs...)
	b := agentBackend(tokens("<think>done</think>"), finish("Sunny, 24C.", "stop"))
	params := sdkAgentParams()
	params.Input = responses.ResponseNewParamsInputUnion{OfInputItemList: input}
	client := sdkClient(t, b)
	resp, err := client.Responses.New(ctx, params)
	if err != nil {
		t.Fatal(err)
	}
	if resp.OutputText() != "Sunny, 24C." || len(resp.Output) != 2 || resp.Output[0].AsReasoning().Content[0].Text != "done" {
		t.Errorf("response %s", resp.RawJSON())
	}
	prompt := fakeTokenizer{}.Decode(b.generated()[0].TokenIDs)
	for _, want := range []string{"assistant\n\n\nLet me check.", "tool\nresult of get_weather", "tool\nresult of get_time"} {
		if !strings.Contains(prompt, want) {
			t.Errorf("prompt lacks %q:\n%s", want, prompt)
		}
	}
	b.checkClosed(t)
}

func TestSDKResponsesJSONSchema(t *testing.T) {
	ctx := context.Background()
	b := agentBackend(tokens("<think>ok</think>"), finish(`{"city": "Paris", "temp": 24}`, "stop"))
	client := sdkClient(t, b)
	resp, err := client.Responses.New(ctx, responses.ResponseNewParams{
		Model: "agent",
		Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("Weather as JSON")},
		Text: responses.ResponseTextConfigParam{Format: responses.ResponseFormatTextConfigParamOfJSONSchema("weather", map[string]any{
			"type": "object", "properties": map[string]any{"city": map[string]any{"type": "string"}, "temp": map[string]any{"type": "number"}},
			"required": []string{"city", "temp"}})},
	})
	if err != nil {
		t.Fatal(err)
	}
	var v struct {
		City string  `json:"city"`
		Temp float64 `json:"temp"`
	}
	if err := json.Unmarshal([]byte(resp.OutputText()), &v); err != nil || v.City != "Paris" || resp.Text.Format.Type != "json_schema" || resp.Text.Format.Name != "weather" {
		t.Errorf("output %q (%v), text %s", resp.OutputText(), err, resp.Text.RawJSON())
	}
	if s := b.generated()[0].Sampling.GetStructured().GetJsonSchema(); !strings.Contains(s, `"required":["city","temp"]`) {
		t.Errorf("constraint %q", s)
	}
	b.checkClosed(t)
}

func TestSDKResponsesErrors(t *testing.T) {
	ctx := context.Background()
	b := agentBackend(agentAnswer...)
	client := sdkClient(t, b)
	params := sdkAgentParams()
	params.PreviousResponseID = openai.String("resp_1")
	_, err := client.Responses.New(ctx, params)
	var apiErr *openai.Error
	if !errors.As(err, &apiErr) || apiErr.StatusCode != 400 || apiErr.Code != "unsupported_parameter" || apiErr.Param != "previous_response_id" {
		t.Errorf("previous_response_id: %v", err)
	}

	b = agentBackend(tokens("<think>x</think>Hel"), chunk(nil, "error", "engine died"))
	client = sdkClient(t, b)
	stream := client.Responses.NewStreaming(ctx, sdkAgentParams())
	var last responses.ResponseStreamEventUnion
	for stream.Next() {
		last = stream.Current()
	}
	if err := stream.Err(); err != nil {
		t.Fatal(err)
	}
	failed := last.AsResponseFailed()
	if last.Type != "response.failed" || failed.Response.Status != responses.ResponseStatusFailed || failed.Response.Error.Code != "engine_error" ||
		strings.Contains(failed.Response.Error.Message, "engine died") {
		t.Errorf("last event %s", last.RawJSON())
	}
	b.checkClosed(t)
}
