package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/openai/openai-go/v3"
)

// completionLogprobs is a completions choice's logprobs as sent (token_logprobs and
// top_logprobs may hold nulls, which the SDK's types read as zero values).
type completionLogprobs struct {
	TextOffset    []int                 `json:"text_offset"`
	TokenLogprobs []*float64            `json:"token_logprobs"`
	Tokens        []string              `json:"tokens"`
	TopLogprobs   []map[string]*float64 `json:"top_logprobs"`
}

// checkChatLogprobs checks chat logprobs entries: top entries each, the token's bytes its
// UTF-8, logprobs at most 0, and the alternatives most likely first after the token.
func checkChatLogprobs(t *testing.T, content []openai.ChatCompletionTokenLogprob, top int) {
	t.Helper()
	for i, e := range content {
		if e.Logprob > 0 || len(e.TopLogprobs) != top || string(bytesOf(e.Bytes)) != e.Token {
			t.Fatalf("entry %d: %+v", i, e)
		}
		for j := 2; j < len(e.TopLogprobs); j++ {
			if e.TopLogprobs[j].Logprob > e.TopLogprobs[j-1].Logprob {
				t.Fatalf("entry %d: alternatives out of order %+v", i, e.TopLogprobs)
			}
		}
	}
}

func bytesOf(v []int64) []byte {
	b := make([]byte, len(v))
	for i, x := range v {
		b[i] = byte(x)
	}
	return b
}

// Logprobs through `turbine serve` (the mock engine) with the OpenAI Go SDK
// (docs/reference.md §21): chat logprobs with top_logprobs, completions logprobs,
// streamed and not, the same values both ways; echo with logprobs and max_tokens 0,
// lm-eval-harness's loglikelihood request.
func TestE2ELogprobsSDK(t *testing.T) {
	s := startServe(t, 1, "--speedup-ratio", "20")
	c := sdk(s)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()

	t.Run("chat", func(t *testing.T) {
		p := openai.ChatCompletionNewParams{
			Model:       model,
			Messages:    []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Tell me about rivers.")},
			MaxTokens:   openai.Int(12),
			Seed:        openai.Int(5),
			Logprobs:    openai.Bool(true),
			TopLogprobs: openai.Int(3),
		}
		resp, err := c.Chat.Completions.New(ctx, p)
		if err != nil {
			t.Fatal(err)
		}
		body := resp.Choices[0].Logprobs.Content
		if len(body) == 0 || int64(len(body)) > resp.Usage.CompletionTokens {
			t.Fatalf("%d entries for %d tokens: %s", len(body), resp.Usage.CompletionTokens, resp.RawJSON())
		}
		checkChatLogprobs(t, body, 3)
		var text strings.Builder
		for _, e := range body {
			text.WriteString(e.Token)
		}
		if text.String() != resp.Choices[0].Message.Content {
			t.Errorf("tokens %q, content %q", text.String(), resp.Choices[0].Message.Content)
		}

		stream := c.Chat.Completions.NewStreaming(ctx, p)
		var streamed []openai.ChatCompletionTokenLogprob
		for stream.Next() {
			for _, ch := range stream.Current().Choices {
				streamed = append(streamed, ch.Logprobs.Content...)
			}
		}
		if err := stream.Err(); err != nil {
			t.Fatal(err)
		}
		if len(streamed) != len(body) {
			t.Fatalf("streamed %d entries, %d in the body", len(streamed), len(body))
		}
		for i := range body {
			if streamed[i].Token != body[i].Token || streamed[i].Logprob != body[i].Logprob {
				t.Fatalf("entry %d: streamed %+v, body %+v", i, streamed[i], body[i])
			}
		}
	})

	t.Run("completions", func(t *testing.T) {
		p := openai.CompletionNewParams{
			Model:     openai.CompletionNewParamsModel(model),
			Prompt:    openai.CompletionNewParamsPromptUnion{OfString: openai.String("The capital of France is")},
			MaxTokens: openai.Int(8),
			Seed:      openai.Int(9),
			Logprobs:  openai.Int(2),
		}
		resp, err := c.Completions.New(ctx, p)
		if err != nil {
			t.Fatal(err)
		}
		var lp completionLogprobs
		if err := json.Unmarshal([]byte(resp.Choices[0].Logprobs.RawJSON()), &lp); err != nil {
			t.Fatal(err)
		}
		n := len(lp.Tokens)
		if n == 0 || len(lp.TokenLogprobs) != n || len(lp.TopLogprobs) != n || len(lp.TextOffset) != n {
			t.Fatalf("logprobs %s", resp.Choices[0].Logprobs.RawJSON())
		}
		off := 0
		for i := range n {
			if lp.TokenLogprobs[i] == nil || *lp.TokenLogprobs[i] > 0 || len(lp.TopLogprobs[i]) < 2 || len(lp.TopLogprobs[i]) > 3 ||
				lp.TextOffset[i] != off {
				t.Fatalf("position %d: %s", i, resp.Choices[0].Logprobs.RawJSON())
			}
			off += utf8.RuneCountInString(lp.Tokens[i])
		}
		if strings.Join(lp.Tokens, "") != resp.Choices[0].Text {
			t.Errorf("tokens %q, text %q", lp.Tokens, resp.Choices[0].Text)
		}

		stream := c.Completions.NewStreaming(ctx, p)
		var tokens []string
		var offsets []int
		for stream.Next() {
			for _, ch := range stream.Current().Choices {
				var l completionLogprobs
				if raw := ch.Logprobs.RawJSON(); raw != "" && raw != "null" {
					if err := json.Unmarshal([]byte(raw), &l); err != nil {
						t.Fatal(err)
					}
				}
				tokens, offsets = append(tokens, l.Tokens...), append(offsets, l.TextOffset...)
			}
		}
		if err := stream.Err(); err != nil {
			t.Fatal(err)
		}
		if strings.Join(tokens, "\x00") != strings.Join(lp.Tokens, "\x00") || len(offsets) != n {
			t.Fatalf("streamed tokens %q, body %q", tokens, lp.Tokens)
		}
		for i := range offsets {
			if offsets[i] != lp.TextOffset[i] {
				t.Fatalf("streamed text_offset %v, body %v", offsets, lp.TextOffset)
			}
		}
	})

	t.Run("echo max_tokens 0", func(t *testing.T) {
		const prompt = "The capital of France is Paris"
		resp, err := c.Completions.New(ctx, openai.CompletionNewParams{
			Model:     openai.CompletionNewParamsModel(model),
			Prompt:    openai.CompletionNewParamsPromptUnion{OfString: openai.String(prompt)},
			MaxTokens: openai.Int(0),
			Echo:      openai.Bool(true),
			Logprobs:  openai.Int(1),
		})
		if err != nil {
			t.Fatal(err)
		}
		ch := resp.Choices[0]
		var lp completionLogprobs
		if err := json.Unmarshal([]byte(ch.Logprobs.RawJSON()), &lp); err != nil {
			t.Fatal(err)
		}
		if ch.Text != prompt || int64(len(lp.Tokens)) != resp.Usage.PromptTokens || strings.Join(lp.Tokens, "") != prompt {
			t.Fatalf("echo: text %q, %d tokens for %d prompt tokens: %s", ch.Text, len(lp.Tokens), resp.Usage.PromptTokens, resp.RawJSON())
		}
		// The first prompt token has no logprob; the others have one, with the token
		// and at most one alternative: the loglikelihood of the continuation is their sum.
		if lp.TokenLogprobs[0] != nil || lp.TopLogprobs[0] != nil {
			t.Fatalf("first position: %s", ch.Logprobs.RawJSON())
		}
		sum := 0.0
		for i := 1; i < len(lp.Tokens); i++ {
			if lp.TokenLogprobs[i] == nil || *lp.TokenLogprobs[i] > 0 || len(lp.TopLogprobs[i]) < 1 || len(lp.TopLogprobs[i]) > 2 {
				t.Fatalf("position %d: %s", i, ch.Logprobs.RawJSON())
			}
			sum += *lp.TokenLogprobs[i]
		}
		if sum >= 0 {
			t.Fatalf("loglikelihood %v", sum)
		}
	})
	s.waitIdle(t)
}
