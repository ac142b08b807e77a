package main

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
)

const model = "turbine-mock"

func sdk(s *server) openai.Client {
	return openai.NewClient(option.WithBaseURL(s.url+"/v1"), option.WithAPIKey("unused"), option.WithMaxRetries(0))
}

// longText is a prompt of roughly n words, distinct per seed word.
func longText(seed string, n int) string {
	var b strings.Builder
	for i := 0; i < n; i++ {
		b.WriteString(seed)
		b.WriteString(" river stone ")
	}
	return b.String()
}

func TestE2EChatSDK(t *testing.T) {
	s := startServe(t, 2, "--speedup-ratio", "20")
	c := sdk(s)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	t.Run("streaming", func(t *testing.T) {
		stream := c.Chat.Completions.NewStreaming(ctx, openai.ChatCompletionNewParams{
			Model:         model,
			Messages:      []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Tell me about rivers.")},
			MaxTokens:     openai.Int(24),
			StreamOptions: openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)},
		})
		var text strings.Builder
		finish := ""
		var usage openai.CompletionUsage
		for stream.Next() {
			ch := stream.Current()
			for _, choice := range ch.Choices {
				text.WriteString(choice.Delta.Content)
				if choice.FinishReason != "" {
					if finish != "" {
						t.Fatalf("two finish reasons: %q then %q", finish, choice.FinishReason)
					}
					finish = choice.FinishReason
				}
			}
			if ch.Usage.TotalTokens > 0 {
				usage = ch.Usage
			}
		}
		if err := stream.Err(); err != nil {
			t.Fatal(err)
		}
		if text.Len() == 0 {
			t.Fatal("empty completion")
		}
		if finish != "length" && finish != "stop" {
			t.Fatalf("finish_reason %q", finish)
		}
		if usage.PromptTokens == 0 || usage.CompletionTokens == 0 || usage.CompletionTokens > 24 ||
			usage.TotalTokens != usage.PromptTokens+usage.CompletionTokens {
			t.Fatalf("usage %+v", usage)
		}
	})

	t.Run("non-streaming", func(t *testing.T) {
		resp, err := c.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{
			Model:     model,
			Messages:  []openai.ChatCompletionMessageParamUnion{openai.SystemMessage("Be brief."), openai.UserMessage("Hi")},
			MaxTokens: openai.Int(16),
			Seed:      openai.Int(7),
		})
		if err != nil {
			t.Fatal(err)
		}
		if len(resp.Choices) != 1 || resp.Choices[0].Message.Content == "" || resp.Choices[0].Message.Role != "assistant" {
			t.Fatalf("choices %+v", resp.Choices)
		}
		if fr := resp.Choices[0].FinishReason; fr != "length" && fr != "stop" {
			t.Fatalf("finish_reason %q", fr)
		}
		if resp.Usage.CompletionTokens == 0 || resp.Usage.CompletionTokens > 16 {
			t.Fatalf("usage %+v", resp.Usage)
		}
	})

	t.Run("completions", func(t *testing.T) {
		resp, err := c.Completions.New(ctx, openai.CompletionNewParams{
			Model:     openai.CompletionNewParamsModel(model),
			Prompt:    openai.CompletionNewParamsPromptUnion{OfString: openai.String("Once upon a time")},
			MaxTokens: openai.Int(8),
		})
		if err != nil {
			t.Fatal(err)
		}
		if len(resp.Choices) != 1 || resp.Choices[0].Text == "" || resp.Usage.CompletionTokens != 8 {
			t.Fatalf("completion %+v", resp)
		}
	})

	t.Run("models", func(t *testing.T) {
		page, err := c.Models.List(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(page.Data) != 1 || page.Data[0].ID != model {
			t.Fatalf("models %+v", page.Data)
		}
	})

	t.Run("raw SSE ends with DONE", func(t *testing.T) {
		resp, err := s.postJSON(ctx, "/v1/chat/completions", map[string]any{
			"model": model, "stream": true, "max_tokens": 5,
			"messages": []map[string]any{{"role": "user", "content": "Hello"}},
		})
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		if resp.Header.Get("X-Turbine-Worker") == "" {
			t.Fatal("no X-Turbine-Worker header")
		}
		var frames []string
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			if line := sc.Text(); strings.HasPrefix(line, "data: ") {
				frames = append(frames, strings.TrimPrefix(line, "data: "))
			}
		}
		if len(frames) < 2 || frames[len(frames)-1] != "[DONE]" {
			t.Fatalf("frames %q", frames)
		}
		var last struct {
			Choices []struct {
				FinishReason *string `json:"finish_reason"`
			} `json:"choices"`
		}
		if err := json.Unmarshal([]byte(frames[len(frames)-2]), &last); err != nil || len(last.Choices) != 1 ||
			last.Choices[0].FinishReason == nil {
			t.Fatalf("last chunk %s (%v)", frames[len(frames)-2], err)
		}
	})
	s.waitIdle(t)
}

// waitIdle waits until the router tracks no active request and the engines run nothing.
func (s *server) waitIdle(t *testing.T) {
	t.Helper()
	s.waitFor(20*time.Second, "no active requests and idle engines", func() bool {
		for _, w := range s.workerStats(model) {
			if w.ActiveRequests != 0 || w.ActiveBlocks != 0 || w.PrefillToks != 0 || w.Running != 0 {
				return false
			}
		}
		return true
	})
}

// servedBy sends a non-streaming chat request and returns the worker that served it.
func servedBy(t *testing.T, s *server, content string) string {
	t.Helper()
	resp, err := s.postJSON(context.Background(), "/v1/chat/completions", map[string]any{
		"model": model, "max_tokens": 2,
		"messages": []map[string]any{{"role": "user", "content": content}},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d: %s", resp.StatusCode, body)
	}
	w := resp.Header.Get("X-Turbine-Worker")
	if w == "" {
		t.Fatal("no X-Turbine-Worker header")
	}
	return w
}

// indexed is the number of blocks the router indexes for worker w.
func (s *server) indexed(w string) float64 {
	if st := s.workerStats(model)[w]; st != nil {
		return st.IndexedBlocks
	}
	return 0
}

func TestE2ERoutingModes(t *testing.T) {
	prefix := longText("granite", 400) // ~1,200 tokens: many 64-token blocks
	t.Run("kv follows the shared prefix", func(t *testing.T) {
		s := startServe(t, 2, "--speedup-ratio", "50", "--router-mode", "kv")
		first := servedBy(t, s, prefix+" question zero")
		// Wait for the engine's KV events to reach the router: an event, not a sleep.
		s.waitFor(10*time.Second, "the first prompt's blocks in the router's index", func() bool { return s.indexed(first) > 10 })
		for i := 1; i <= 6; i++ {
			if got := servedBy(t, s, prefix+" question "+strings.Repeat("x", i)); got != first {
				t.Fatalf("request %d sharing the prefix went to %s, want %s", i, got, first)
			}
		}
		s.waitIdle(t)
	})
	t.Run("round-robin spreads", func(t *testing.T) {
		s := startServe(t, 2, "--speedup-ratio", "50", "--router-mode", "round-robin")
		seen := map[string]int{}
		for i := 0; i < 6; i++ {
			seen[servedBy(t, s, prefix+" question "+strings.Repeat("y", i))]++
		}
		if len(seen) != 2 || seen["w0"] != 3 || seen["w1"] != 3 {
			t.Fatalf("round-robin placement %v, want 3 on each of w0 and w1", seen)
		}
	})
}

func TestE2EClientDisconnectFreesEverything(t *testing.T) {
	s := startServe(t, 2, "--speedup-ratio", "2")
	ctx, cancel := context.WithCancel(context.Background())
	resp, err := s.postJSON(ctx, "/v1/chat/completions", map[string]any{
		"model": model, "stream": true, "max_tokens": 5000, "ignore_eos": true,
		"messages": []map[string]any{{"role": "user", "content": longText("slate", 200)}},
	})
	if err != nil {
		t.Fatal(err)
	}
	worker := resp.Header.Get("X-Turbine-Worker")
	sc := bufio.NewScanner(resp.Body)
	for n := 0; n < 5 && sc.Scan(); {
		if strings.HasPrefix(sc.Text(), "data: ") {
			n++
		}
	}
	s.waitFor(10*time.Second, "the engine to report the running request", func() bool {
		st := s.workerStats(model)[worker]
		return st != nil && st.Running == 1 && st.ActiveRequests == 1
	})
	cancel()
	resp.Body.Close()
	s.waitIdle(t)
}

func TestE2EBadInput(t *testing.T) {
	s := startServe(t, 1, "--speedup-ratio", "50", "--max-model-len", "512")
	huge := strings.Repeat("a", 5<<20)
	cases := []struct {
		name   string
		body   string
		status int
		param  string
	}{
		{"malformed json", `{"model": "turbine-mock", "messages": [`, 400, ""},
		{"wrong type", `{"model": "turbine-mock", "messages": "hi"}`, 400, "messages"},
		{"missing messages", `{"model": "turbine-mock"}`, 400, "messages"},
		{"empty content", `{"model": "turbine-mock", "messages": [{"role": "user", "content": ""}]}`, 400, ""},
		{"negative max_tokens", `{"model": "turbine-mock", "max_tokens": -1, "messages": [{"role": "user", "content": "hi"}]}`, 400, "max_tokens"},
		{"huge max_tokens", `{"model": "turbine-mock", "max_tokens": 100000000, "messages": [{"role": "user", "content": "hi"}]}`, 400, ""},
		{"unknown model", `{"model": "nope", "messages": [{"role": "user", "content": "hi"}]}`, 404, ""},
		{"n over the bound", `{"model": "turbine-mock", "n": 129, "messages": [{"role": "user", "content": "hi"}]}`, 400, "n"},
		{"prompt over context", `{"model": "turbine-mock", "messages": [{"role": "user", "content": "` + longText("basalt", 400) + `"}]}`, 400, ""},
		{"oversized body", `{"model": "turbine-mock", "messages": [{"role": "user", "content": "` + huge + `"}]}`, 413, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			resp, err := http.Post(s.url+"/v1/chat/completions", "application/json", strings.NewReader(tc.body))
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			var e struct {
				Error *struct {
					Message string  `json:"message"`
					Type    string  `json:"type"`
					Param   *string `json:"param"`
				} `json:"error"`
			}
			raw, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != tc.status {
				t.Fatalf("status %d, want %d: %s", resp.StatusCode, tc.status, raw)
			}
			if err := json.Unmarshal(raw, &e); err != nil || e.Error == nil || e.Error.Message == "" || e.Error.Type == "" {
				t.Fatalf("not an OpenAI error body: %s", raw)
			}
			if tc.param != "" && (e.Error.Param == nil || *e.Error.Param != tc.param) {
				t.Fatalf("param = %v, want %q (%s)", e.Error.Param, tc.param, raw)
			}
		})
	}
	s.waitIdle(t)
}
