package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

// chatBody is what the fake chat server checks of a request.
type chatBody struct {
	Model    string `json:"model"`
	Messages []struct {
		Role    string `json:"role"`
		Content string `json:"content"`
	} `json:"messages"`
	MaxCompletionTokens int  `json:"max_completion_tokens"`
	MaxTokens           int  `json:"max_tokens"`
	Stream              bool `json:"stream"`
	IgnoreEOS           bool `json:"ignore_eos"`
	StreamOptions       struct {
		IncludeUsage bool `json:"include_usage"`
	} `json:"stream_options"`
}

// chatTemplateTokens is what the fake chat server adds to a prompt's word count as its
// chat template's tokens.
const chatTemplateTokens = 7

// chatStream is an OpenAI streaming /v1/chat/completions handler in the shape of
// vLLM's: a role chunk, one content chunk per token, a finish chunk with an empty delta,
// the usage chunk (prompt: the words plus chatTemplateTokens; cached: half) and [DONE].
// It fails the test on a request the benchmark should not send; seen, when not nil,
// gets every prompt.
func chatStream(t *testing.T, seen func(prompt string)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		var b chatBody
		if r.URL.Path != "/v1/chat/completions" || json.NewDecoder(r.Body).Decode(&b) != nil {
			http.Error(w, "bad request", http.StatusBadRequest)
			return
		}
		if b.Model != "m" || !b.Stream || !b.IgnoreEOS || !b.StreamOptions.IncludeUsage || len(b.Messages) != 1 ||
			b.Messages[0].Role != "user" || b.Messages[0].Content == "" || b.MaxCompletionTokens < 1 || b.MaxTokens != b.MaxCompletionTokens {
			t.Errorf("request %+v: want model m, stream, ignore_eos, include_usage, one user message, max_completion_tokens = max_tokens", b)
		}
		if seen != nil {
			seen(b.Messages[0].Content)
		}
		prompt := len(strings.Fields(b.Messages[0].Content)) + chatTemplateTokens
		w.Header().Set("Content-Type", "text/event-stream")
		frame := func(s string) { fmt.Fprintf(w, "data: %s\n\n", s); w.(http.Flusher).Flush() }
		frame(`{"object":"chat.completion.chunk","choices":[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}],"usage":null}`)
		for range b.MaxCompletionTokens {
			frame(`{"object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":" x"},"finish_reason":null}],"usage":null}`)
		}
		frame(`{"object":"chat.completion.chunk","choices":[{"index":0,"delta":{},"finish_reason":"length"}],"usage":null}`)
		frame(fmt.Sprintf(`{"object":"chat.completion.chunk","choices":[],"usage":{"prompt_tokens":%d,"completion_tokens":%d,"prompt_tokens_details":{"cached_tokens":%d}}}`,
			prompt, b.MaxCompletionTokens, prompt/2))
		frame("[DONE]")
	}
}

func TestClientDoChat(t *testing.T) {
	srv := httptest.NewServer(chatStream(t, nil))
	defer srv.Close()
	clock := newTickClock(time.Millisecond)
	c := &Client{URL: srv.URL, Model: "m", Clock: clock, Endpoint: EndpointChat}
	res := c.DoChat(context.Background(), clock.Now(), "the quick brown fox", 5)
	if res.Error != "" {
		t.Fatalf("error %s: %s", res.Error, res.Detail)
	}
	// Readings: send, 5 content chunks (not the role chunk, not the finish chunk), [DONE].
	if res.TTFT != time.Millisecond || len(res.ITL) != 4 || res.E2E != 6*time.Millisecond {
		t.Fatalf("TTFT %v, %d gaps, E2E %v; want 1ms, 4, 6ms", res.TTFT, len(res.ITL), res.E2E)
	}
	want := 4 + chatTemplateTokens
	if res.OutputTokens != 5 || res.PromptTokens != want || res.InputLength != want || res.CachedTokens != want/2 || !res.CachedKnown {
		t.Fatalf("result %+v: want 5 out, %d prompt tokens (the input length), %d cached", res, want, want/2)
	}
}

func TestClientDoChatErrors(t *testing.T) {
	const role = `{"choices":[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}]}`
	const tok = `{"choices":[{"index":0,"delta":{"content":"x"},"finish_reason":null}]}`
	const thought = `{"choices":[{"index":0,"delta":{"reasoning_content":"hm"},"finish_reason":null}]}`
	const usage = `{"choices":[],"usage":{"prompt_tokens":9,"completion_tokens":%d}}`
	for _, tc := range []struct {
		name   string
		frames []string
		want   string
		tokens int // token-bearing frames of a valid answer
	}{
		{"valid", []string{role, tok, tok, fmt.Sprintf(usage, 2), "[DONE]"}, "", 2},
		{"reasoning counts", []string{role, thought, tok, fmt.Sprintf(usage, 2), "[DONE]"}, "", 2},
		{"no usage", []string{role, tok, tok, "[DONE]"}, ErrNoUsage, 0},
		{"too few tokens", []string{role, tok, fmt.Sprintf(usage, 1), "[DONE]"}, ErrOutputLength, 0},
		{"no done", []string{role, tok, tok, fmt.Sprintf(usage, 2)}, ErrNoDone, 0},
		{"error frame", []string{role, `{"error":{"message":"boom","code":"engine_error"}}`, "[DONE]"}, "stream_engine_error", 0},
		{"neither choices nor usage", []string{role, `{}`}, ErrSSE, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				for _, f := range tc.frames {
					fmt.Fprintf(w, "data: %s\n\n", f)
				}
			}))
			defer srv.Close()
			res := (&Client{URL: srv.URL, Model: "m"}).DoChat(context.Background(), time.Now(), "a b c", 2)
			if res.Error != tc.want {
				t.Fatalf("error kind %q (%s), want %q", res.Error, res.Detail, tc.want)
			}
			if tc.want == "" && (len(res.ITL) != tc.tokens-1 || res.InputLength != 9) {
				t.Fatalf("result %+v: want %d token-bearing chunks, 9 prompt tokens", res, tc.tokens)
			}
			if tc.want == ErrNoUsage && res.InputLength != 3 {
				t.Fatalf("input length %d without usage, want the 3 words", res.InputLength)
			}
		})
	}
}

// TestRunChat runs a synthetic workload with a shared prefix through the chat endpoint:
// every answer is valid, the prompts of one group begin with the same words, and the
// summary counts the server's prompt tokens.
func TestRunChat(t *testing.T) {
	var mu sync.Mutex
	var prompts []string
	srv := httptest.NewServer(chatStream(t, func(p string) {
		mu.Lock()
		prompts = append(prompts, p)
		mu.Unlock()
	}))
	defer srv.Close()
	spec := SyntheticSpec{ISL: mustLength(t, "uniform:100:200"), OSL: FixedLength(3), Requests: 12,
		PrefixGroups: 1, PrefixTokens: 50, BlockTokens: 16, Seed: 1}
	reqs, err := spec.Generate()
	if err != nil {
		t.Fatal(err)
	}
	r := &Runner{Client: &Client{URL: srv.URL, Model: "m", Endpoint: EndpointChat}, Concurrency: 4, BlockTokens: 16}
	s := Summarize(r.Run(context.Background(), reqs))
	var isl int64
	for _, rq := range reqs {
		isl += int64(rq.InputLength + chatTemplateTokens)
	}
	if s.Succeeded != 12 || s.OutputTokens != 36 || s.InputTokens != isl {
		t.Fatalf("summary %+v: want 12 valid answers, 36 output tokens, %d input tokens", s, isl)
	}
	prefix := strings.Join(strings.Fields(prompts[0])[:50], " ") + " "
	for i, p := range prompts {
		if !strings.HasPrefix(p, prefix) {
			t.Fatalf("prompt %d does not begin with the group's 50 words", i)
		}
	}
}
