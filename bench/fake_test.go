package bench

import (
	"encoding/json"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"
)

// tickClock is a virtual clock that moves step forward on every reading, so a
// sequential run's latencies count the readings between two events.
type tickClock struct {
	mu   sync.Mutex
	now  time.Time
	step time.Duration
}

func newTickClock(step time.Duration) *tickClock {
	return &tickClock{now: time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC), step: step}
}

func (c *tickClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(c.step)
	return c.now
}

// After moves the clock by d and fires at once.
func (c *tickClock) After(d time.Duration) <-chan time.Time {
	c.mu.Lock()
	c.now = c.now.Add(d)
	t := c.now
	c.mu.Unlock()
	ch := make(chan time.Time, 1)
	ch <- t
	return ch
}

// completionsBody is what the fake server checks of a request.
type completionsBody struct {
	Model         string   `json:"model"`
	Prompt        []uint32 `json:"prompt"`
	MaxTokens     int      `json:"max_tokens"`
	Stream        bool     `json:"stream"`
	IgnoreEOS     bool     `json:"ignore_eos"`
	StreamOptions struct {
		IncludeUsage bool `json:"include_usage"`
	} `json:"stream_options"`
}

// openAIStream is an OpenAI streaming /v1/completions handler in the shape of vLLM's:
// one frame per token, a finish frame, the usage chunk (cached tokens: half the prompt)
// and [DONE]. It fails the test on a request the benchmark should not send.
func openAIStream(t *testing.T) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		var b completionsBody
		if r.URL.Path != "/v1/completions" || json.NewDecoder(r.Body).Decode(&b) != nil {
			http.Error(w, "bad request", http.StatusBadRequest)
			return
		}
		if b.Model != "m" || !b.Stream || !b.IgnoreEOS || !b.StreamOptions.IncludeUsage || len(b.Prompt) == 0 || b.MaxTokens < 1 {
			t.Errorf("request %+v: want model m, stream, ignore_eos, include_usage, a prompt and max_tokens", b)
		}
		w.Header().Set("Content-Type", "text/event-stream")
		frame := func(s string) { fmt.Fprintf(w, "data: %s\n\n", s); w.(http.Flusher).Flush() }
		for range b.MaxTokens {
			frame(`{"object":"text_completion","choices":[{"index":0,"text":"x","finish_reason":null}],"usage":null}`)
		}
		frame(`{"object":"text_completion","choices":[{"index":0,"text":"","finish_reason":"length"}],"usage":null}`)
		frame(fmt.Sprintf(`{"object":"text_completion","choices":[],"usage":{"prompt_tokens":%d,"completion_tokens":%d,"prompt_tokens_details":{"cached_tokens":%d}}}`,
			len(b.Prompt), b.MaxTokens, len(b.Prompt)/2))
		frame("[DONE]")
	}
}
