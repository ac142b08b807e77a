package main

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
)

// routerCounter is a per-model router counter of /metrics (0 when absent).
func (s *server) routerCounter(t *testing.T, family string) float64 {
	t.Helper()
	return s.counterBy(t, family, "model")[model]
}

// n > 1 and batched prompts through `turbine serve` with the OpenAI Go SDK
// (docs/reference.md §22).
func TestE2EChoicesSDK(t *testing.T) {
	s := startServe(t, 2, "--speedup-ratio", "5")
	c := sdk(s)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()

	t.Run("n=4 streaming", func(t *testing.T) {
		stream := c.Chat.Completions.NewStreaming(ctx, openai.ChatCompletionNewParams{
			Model:         model,
			Messages:      []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Tell me about rivers.")},
			MaxTokens:     openai.Int(24),
			N:             openai.Int(4),
			Seed:          openai.Int(11),
			StreamOptions: openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)},
		})
		texts := make([]strings.Builder, 4)
		finishes := make([]int, 4)
		var order []int64
		var usage openai.CompletionUsage
		for stream.Next() {
			ch := stream.Current()
			for _, choice := range ch.Choices {
				if choice.Index < 0 || choice.Index > 3 {
					t.Fatalf("choice index %d", choice.Index)
				}
				if choice.Delta.Content != "" {
					order = append(order, choice.Index)
				}
				texts[choice.Index].WriteString(choice.Delta.Content)
				if choice.FinishReason != "" {
					finishes[choice.Index]++
				}
			}
			if ch.Usage.TotalTokens > 0 {
				usage = ch.Usage
			}
		}
		if err := stream.Err(); err != nil {
			t.Fatal(err)
		}
		for i := range texts {
			if texts[i].Len() == 0 || finishes[i] != 1 {
				t.Errorf("choice %d: text %q, %d finishing chunks", i, texts[i].String(), finishes[i])
			}
		}
		// Interleaved: the choices' chunks are not sent choice after choice.
		switched := 0
		for i := 1; i < len(order); i++ {
			if order[i] != order[i-1] {
				switched++
			}
		}
		if switched <= 3 {
			t.Errorf("content chunks by choice %v: not interleaved", order)
		}
		// Seeded s + index: the choices are different samples.
		if texts[0].String() == texts[1].String() && texts[1].String() == texts[2].String() {
			t.Errorf("the seeded choices are all the same: %q", texts[0].String())
		}
		// Each choice's tokens (a choice may stop before its 24), the prompt once.
		if usage.CompletionTokens < 4 || usage.CompletionTokens > 4*24 || usage.PromptTokens == 0 || usage.PromptTokens > 20 || usage.TotalTokens != usage.PromptTokens+usage.CompletionTokens {
			t.Errorf("usage %+v", usage)
		}
	})

	t.Run("n=4 is one routing decision sharing the prompt's blocks", func(t *testing.T) {
		s.waitIdle(t)
		routed0 := s.routerCounter(t, "turbine_router_requests_routed_total")
		pinned0 := s.routerCounter(t, "turbine_router_requests_pinned_total")
		resp, err := s.postJSON(ctx, "/v1/chat/completions", map[string]any{
			"model": model, "n": 4, "max_tokens": 8, "turbine": map[string]any{"return_worker": true},
			"messages": []map[string]any{{"role": "user", "content": longText("basalt", 80)}},
		})
		if err != nil {
			t.Fatal(err)
		}
		raw, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("%d %s", resp.StatusCode, raw)
		}
		var body struct {
			Choices []struct {
				Index int `json:"index"`
			} `json:"choices"`
			Usage struct {
				PromptTokens        int `json:"prompt_tokens"`
				PromptTokensDetails struct {
					CachedTokens int `json:"cached_tokens"`
				} `json:"prompt_tokens_details"`
			} `json:"usage"`
			Turbine struct {
				WorkerID string `json:"worker_id"`
			} `json:"turbine"`
		}
		if err := json.Unmarshal(raw, &body); err != nil {
			t.Fatal(err)
		}
		if len(body.Choices) != 4 || body.Choices[3].Index != 3 {
			t.Fatalf("choices %s", raw)
		}
		routed := s.routerCounter(t, "turbine_router_requests_routed_total") - routed0
		pinned := s.routerCounter(t, "turbine_router_requests_pinned_total") - pinned0
		if routed != 4 || pinned != 3 || s.routerCounter(t, "turbine_router_pin_fallbacks_total") != 0 {
			t.Errorf("routed %v, pinned %v: want 4 routed, 3 of them pinned to the first's worker", routed, pinned)
		}
		// The siblings started after the first choice's prefill, on its worker: their
		// prompt was in the prefix cache (all its full 64-token blocks).
		full := (body.Usage.PromptTokens - 1) / 64 * 64
		if full == 0 || body.Usage.PromptTokensDetails.CachedTokens != full {
			t.Errorf("cached_tokens %d of a %d-token prompt, want %d", body.Usage.PromptTokensDetails.CachedTokens, body.Usage.PromptTokens, full)
		}
		if body.Turbine.WorkerID == "" {
			t.Errorf("no worker in %s", raw)
		}
	})

	t.Run("batch of 8", func(t *testing.T) {
		var prompts []string
		for _, w := range []string{"granite", "basalt", "slate", "marble", "quartz", "shale", "flint", "chalk"} {
			prompts = append(prompts, "Tell me about "+w+".")
		}
		resp, err := c.Completions.New(ctx, openai.CompletionNewParams{
			Model:     openai.CompletionNewParamsModel(model),
			Prompt:    openai.CompletionNewParamsPromptUnion{OfArrayOfStrings: prompts},
			MaxTokens: openai.Int(6),
		})
		if err != nil {
			t.Fatal(err)
		}
		if len(resp.Choices) != 8 || resp.Usage.CompletionTokens > 8*6 {
			t.Fatalf("completion %+v", resp)
		}
		for i, ch := range resp.Choices {
			if ch.Index != int64(i) || ch.Text == "" {
				t.Errorf("choice %d: %+v", i, ch)
			}
		}
		ids := [][]int64{{1, 2, 3}, {4, 5}, {6, 7, 8, 9}, {10}, {11, 12}, {13, 14, 15}, {16}, {17, 18}}
		tok, err := c.Completions.New(ctx, openai.CompletionNewParams{
			Model:     openai.CompletionNewParamsModel(model),
			Prompt:    openai.CompletionNewParamsPromptUnion{OfArrayOfTokenArrays: ids},
			MaxTokens: openai.Int(3),
		})
		if err != nil {
			t.Fatal(err)
		}
		if len(tok.Choices) != 8 || tok.Usage.PromptTokens != 18 || tok.Usage.CompletionTokens > 8*3 {
			t.Fatalf("token batch %+v", tok)
		}
	})
	s.waitIdle(t)
}
