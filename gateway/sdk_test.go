package gateway

import (
	"context"
	"errors"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
)

// The official OpenAI Go SDK against the gateway over HTTP: proof that the shapes we
// write are the ones clients parse.

func sdkClient(t *testing.T, b *fakeBackend) openai.Client {
	t.Helper()
	srv := httptest.NewServer(newTestServer(t, b))
	t.Cleanup(srv.Close)
	return openai.NewClient(option.WithBaseURL(srv.URL+"/v1/"), option.WithAPIKey("unused"), option.WithMaxRetries(0))
}

func helloScript() []step { return []step{tokens("Hel"), tokens("lo"), finish(" world", "stop")} }

func TestSDKChat(t *testing.T) {
	ctx := context.Background()
	b := newFakeBackend(helloScript()...)
	client := sdkClient(t, b)
	resp, err := client.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{
		Model:     "tiny",
		Messages:  []openai.ChatCompletionMessageParamUnion{openai.SystemMessage("be brief"), openai.UserMessage("hi")},
		MaxTokens: openai.Int(20),
		Stop:      openai.ChatCompletionNewParamsStopUnion{OfStringArray: []string{"\n\n"}},
		Seed:      openai.Int(7),
	})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(resp.ID, "chatcmpl-") || resp.Object != "chat.completion" ||
		len(resp.Choices) != 1 || resp.Choices[0].Message.Content != "Hello world" || resp.Choices[0].FinishReason != "stop" ||
		resp.Usage.CompletionTokens != 11 || resp.Usage.TotalTokens != resp.Usage.PromptTokens+11 || resp.Usage.PromptTokensDetails.CachedTokens != 2 {
		t.Errorf("response %s", resp.RawJSON())
	}
	if sp := b.generated()[0].Sampling; sp.MaxTokens != 20 || sp.Seed == nil || *sp.Seed != 7 {
		t.Errorf("sampling %v", sp)
	}
	b.checkClosed(t)
}

func TestSDKChatStream(t *testing.T) {
	ctx := context.Background()
	b := newFakeBackend(helloScript()...)
	client := sdkClient(t, b)
	stream := client.Chat.Completions.NewStreaming(ctx, openai.ChatCompletionNewParams{
		Model:         "tiny",
		Messages:      []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hi")},
		StreamOptions: openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)},
	})
	acc := openai.ChatCompletionAccumulator{}
	chunks := 0
	for stream.Next() {
		if !acc.AddChunk(stream.Current()) {
			t.Fatalf("accumulator refused chunk %s", stream.Current().RawJSON())
		}
		chunks++
	}
	if err := stream.Err(); err != nil {
		t.Fatal(err)
	}
	if chunks != 5 || len(acc.Choices) != 1 || acc.Choices[0].Message.Content != "Hello world" ||
		acc.Choices[0].FinishReason != "stop" || acc.Usage.CompletionTokens != 11 || acc.Usage.PromptTokensDetails.CachedTokens != 2 {
		t.Errorf("%d chunks, accumulated %+v", chunks, acc.ChatCompletion)
	}
	b.checkClosed(t)
}

func TestSDKCompletions(t *testing.T) {
	ctx := context.Background()
	b := newFakeBackend(helloScript()...)
	client := sdkClient(t, b)
	resp, err := client.Completions.New(ctx, openai.CompletionNewParams{
		Model:  openai.CompletionNewParamsModel("tiny"),
		Prompt: openai.CompletionNewParamsPromptUnion{OfString: openai.String("Say")},
	})
	if err != nil {
		t.Fatal(err)
	}
	if resp.Object != "text_completion" || len(resp.Choices) != 1 || resp.Choices[0].Text != "Hello world" ||
		resp.Choices[0].FinishReason != "stop" || resp.Usage.PromptTokens != 3 {
		t.Errorf("response %s", resp.RawJSON())
	}

	b2 := newFakeBackend(helloScript()...)
	client = sdkClient(t, b2)
	stream := client.Completions.NewStreaming(ctx, openai.CompletionNewParams{
		Model:         openai.CompletionNewParamsModel("tiny"),
		Prompt:        openai.CompletionNewParamsPromptUnion{OfArrayOfTokens: []int64{10, 11, 12}},
		StreamOptions: openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)},
	})
	var text, finish string
	var completion int64
	for stream.Next() {
		c := stream.Current()
		for _, ch := range c.Choices {
			text += ch.Text
			if ch.FinishReason != "" {
				finish = string(ch.FinishReason)
			}
		}
		if c.Usage.TotalTokens > 0 {
			completion = c.Usage.CompletionTokens
		}
	}
	if err := stream.Err(); err != nil {
		t.Fatal(err)
	}
	if text != "Hello world" || finish != "stop" || completion != 11 {
		t.Errorf("streamed %q finish %q completion tokens %d", text, finish, completion)
	}
	b.checkClosed(t)
	b2.checkClosed(t)
}

func TestSDKErrors(t *testing.T) {
	ctx := context.Background()
	client := sdkClient(t, newFakeBackend())
	_, err := client.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{
		Model:    "nope",
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hi")},
	})
	var apiErr *openai.Error
	if !errors.As(err, &apiErr) || apiErr.StatusCode != 404 || apiErr.Code != "model_not_found" || apiErr.Param != "model" || apiErr.Type != "invalid_request_error" {
		t.Errorf("unknown model: %v (%+v)", err, apiErr)
	}

	b := newFakeBackend(tokens("Hel"), chunk(nil, "error", "engine died"))
	client = sdkClient(t, b)
	stream := client.Chat.Completions.NewStreaming(ctx, openai.ChatCompletionNewParams{
		Model:    "tiny",
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hi")},
	})
	for stream.Next() {
	}
	// The SDK sees the engine_error frame; the engine's own words (which name internal
	// addresses in practice) stay in the server log.
	if err := stream.Err(); err == nil || !strings.Contains(err.Error(), "engine_error") || strings.Contains(err.Error(), "engine died") {
		t.Errorf("mid-stream failure surfaced as %v", err)
	}
	b.checkClosed(t)
}
