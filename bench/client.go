package bench

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"
)

// Clock is the time source of the client and the runner.
type Clock interface {
	Now() time.Time
	// After is time.After on this clock.
	After(d time.Duration) <-chan time.Time
}

// WallClock is the real clock.
type WallClock struct{}

// Now is time.Now.
func (WallClock) Now() time.Time { return time.Now() }

// After is time.After.
func (WallClock) After(d time.Duration) <-chan time.Time { return time.After(d) }

// Error kinds of a Result (a kind may also be "http_<status>" or "stream_<code>" for an
// error frame of the stream with that code).
const (
	ErrConnect      = "connect"       // the request could not be sent or the body not read
	ErrSSE          = "sse_malformed" // a frame that is not `data: <json>` or has no choices/usage
	ErrNoDone       = "no_done"       // the stream ended without data: [DONE]
	ErrNoUsage      = "no_usage"      // no usage chunk although include_usage was asked
	ErrOutputLength = "output_length" // completion_tokens differs from max_tokens (ignore_eos)
	ErrCanceled     = "canceled"      // the run was stopped before the answer ended
	ErrWorkload     = "workload"      // the request's prompt could not be synthesized
)

// Result is the measurement of one request. Times are offsets on the run's clock.
type Result struct {
	Index        int             // position in the workload
	Start        time.Duration   // when the request was sent, from the start of the run
	TTFT         time.Duration   // send → first token-bearing frame
	ITL          []time.Duration // gaps between successive token-bearing frames
	E2E          time.Duration   // send → end of the stream
	InputLength  int             // prompt tokens sent
	PromptTokens int             // usage.prompt_tokens (0 when not reported)
	CachedTokens int             // usage.prompt_tokens_details.cached_tokens
	CachedKnown  bool            // the server reported cached_tokens
	OutputTokens int             // usage.completion_tokens, else token-bearing frames
	Error        string          // error kind; "" when the answer was valid
	Detail       string          // the error's message
}

// Endpoints a Client sends to.
const (
	EndpointCompletions = "completions" // /v1/completions, the prompt as token ids
	EndpointChat        = "chat"        // /v1/chat/completions, the prompt as text
)

// Client sends completions to one OpenAI-compatible server.
type Client struct {
	HTTP  *http.Client // nil: http.DefaultClient
	URL   string       // base URL, e.g. http://127.0.0.1:8000 (without /v1)
	Model string
	Clock Clock // nil: WallClock
	// Endpoint is what a Runner sends through: EndpointCompletions ("" too: Do) or
	// EndpointChat (DoChat).
	Endpoint string
}

func (c *Client) clock() Clock {
	if c.Clock == nil {
		return WallClock{}
	}
	return c.Clock
}

// Do sends one streaming completion of prompt with max_tokens maxTokens and measures
// it. origin is the run's start on the client's clock. Failures are in Result.Error.
func (c *Client) Do(ctx context.Context, origin time.Time, prompt []uint32, maxTokens int) Result {
	body, _ := json.Marshal(map[string]any{
		"model": c.Model, "prompt": prompt, "max_tokens": maxTokens, "stream": true,
		"stream_options": map[string]any{"include_usage": true}, "ignore_eos": true,
	})
	return c.send(ctx, origin, "/v1/completions", body, Result{InputLength: len(prompt)}, false, maxTokens)
}

// DoChat sends text as the one user message of a streaming chat completion and measures
// it like Do. The body asks for maxTokens both as max_completion_tokens (OpenAI's
// current name) and max_tokens (the older one, which some servers still need), with
// stream_options.include_usage and ignore_eos, an extension that vLLM, SGLang,
// TensorRT-LLM and Turbine honour (a server that ignores it may stop early, which shows
// as output_length errors). Token-bearing chunks are those whose choices[].delta has
// content (or a reasoning model's reasoning_content or reasoning) not empty: the first
// chunk, which only names the role, does not count, and every such chunk gives one ITL
// gap, however many tokens it carries. The output length is
// usage.completion_tokens; the result's InputLength is usage.prompt_tokens (the server
// tokenized the text and applied its chat template), or the number of words of text
// when the usage chunk is missing.
func (c *Client) DoChat(ctx context.Context, origin time.Time, text string, maxTokens int) Result {
	body, _ := json.Marshal(map[string]any{
		"model": c.Model, "messages": []map[string]string{{"role": "user", "content": text}},
		"max_completion_tokens": maxTokens, "max_tokens": maxTokens, "stream": true,
		"stream_options": map[string]any{"include_usage": true}, "ignore_eos": true,
	})
	words := 0
	if text != "" {
		words = strings.Count(text, " ") + 1
	}
	res := c.send(ctx, origin, "/v1/chat/completions", body, Result{InputLength: words}, true, maxTokens)
	if res.PromptTokens > 0 {
		res.InputLength = res.PromptTokens
	}
	return res
}

// send posts body to path, reads the stream (chat chunks when chat) and checks the
// output length.
func (c *Client) send(ctx context.Context, origin time.Time, path string, body []byte, res Result, chat bool, maxTokens int) Result {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, strings.TrimRight(c.URL, "/")+path, bytes.NewReader(body))
	if err != nil {
		return fail(res, ErrConnect, err.Error())
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "text/event-stream")
	hc := c.HTTP
	if hc == nil {
		hc = http.DefaultClient
	}
	clock := c.clock()
	start := clock.Now()
	res.Start = start.Sub(origin)
	resp, err := hc.Do(req)
	if err != nil {
		return fail(res, connectKind(ctx), err.Error())
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		res.E2E = clock.Now().Sub(start)
		return fail(res, fmt.Sprintf("http_%d", resp.StatusCode), strings.TrimSpace(string(msg)))
	}
	res = readStream(resp.Body, clock.Now, start, res, chat)
	if res.Error == ErrConnect {
		res.Error = connectKind(ctx)
	}
	if res.Error == "" && res.OutputTokens != maxTokens {
		res = fail(res, ErrOutputLength, fmt.Sprintf("%d tokens generated, max_tokens %d with ignore_eos", res.OutputTokens, maxTokens))
	}
	return res
}

func connectKind(ctx context.Context) string {
	if ctx.Err() != nil {
		return ErrCanceled
	}
	return ErrConnect
}

func fail(r Result, kind, detail string) Result {
	r.Error, r.Detail = kind, detail
	return r
}

// chunk is the part of a completion or chat completion stream chunk the benchmark
// reads.
type chunk struct {
	Choices []struct {
		Text  string `json:"text"` // completions
		Delta *struct {
			Content          string `json:"content"`
			ReasoningContent string `json:"reasoning_content"`
			Reasoning        string `json:"reasoning"`
		} `json:"delta"` // chat
		FinishReason *string `json:"finish_reason"`
	} `json:"choices"`
	Usage *struct {
		PromptTokens        int `json:"prompt_tokens"`
		CompletionTokens    int `json:"completion_tokens"`
		PromptTokensDetails *struct {
			CachedTokens int `json:"cached_tokens"`
		} `json:"prompt_tokens_details"`
	} `json:"usage"`
	Error *struct {
		Message string `json:"message"`
		Code    any    `json:"code"`
		Type    string `json:"type"`
	} `json:"error"`
}

// readStream reads an SSE completion stream (chat: chat completion stream) from body,
// timing each token-bearing frame with now, and fills res. A completion frame bears
// tokens when it has a choice with text, or a choice without finish_reason (a token
// whose text is not complete yet); a frame that only carries the finish reason does not.
// A chat frame bears tokens when a choice's delta has content (see bearsTokens).
func readStream(body io.Reader, now func() time.Time, start time.Time, res Result, chat bool) Result {
	sc := bufio.NewScanner(body)
	sc.Buffer(make([]byte, 4<<10), 16<<20) // grows for long frames
	var last time.Time
	frames, usageTokens := 0, -1
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, ":") {
			continue
		}
		payload, ok := strings.CutPrefix(line, "data:")
		if !ok {
			if strings.HasPrefix(line, "event:") || strings.HasPrefix(line, "id:") || strings.HasPrefix(line, "retry:") {
				continue
			}
			return fail(res, ErrSSE, fmt.Sprintf("line %q is not an SSE data frame", clip(line)))
		}
		payload = strings.TrimSpace(payload)
		if payload == "[DONE]" {
			res.E2E = now().Sub(start)
			res.OutputTokens = frames
			if usageTokens < 0 {
				return fail(res, ErrNoUsage, "the stream ended without a usage chunk")
			}
			res.OutputTokens = usageTokens
			return res
		}
		var c chunk
		if err := json.Unmarshal([]byte(payload), &c); err != nil {
			return fail(res, ErrSSE, fmt.Sprintf("frame %q: %v", clip(payload), err))
		}
		if c.Error != nil {
			return fail(res, "stream_"+errorCode(c.Error.Code, c.Error.Type), c.Error.Message)
		}
		if c.Usage != nil {
			usageTokens = c.Usage.CompletionTokens
			res.PromptTokens = c.Usage.PromptTokens
			if d := c.Usage.PromptTokensDetails; d != nil {
				res.CachedTokens, res.CachedKnown = d.CachedTokens, true
			}
		}
		if c.Choices == nil && c.Usage == nil {
			return fail(res, ErrSSE, fmt.Sprintf("frame %q has neither choices nor usage", clip(payload)))
		}
		if !bearsTokens(c, chat) {
			continue
		}
		t := now()
		if frames == 0 {
			res.TTFT = t.Sub(start)
		} else {
			res.ITL = append(res.ITL, t.Sub(last))
		}
		last = t
		frames++
	}
	res.E2E = now().Sub(start)
	res.OutputTokens = frames
	if err := sc.Err(); err != nil && !errors.Is(err, io.EOF) {
		return fail(res, ErrConnect, err.Error())
	}
	return fail(res, ErrNoDone, "the stream ended without data: [DONE]")
}

// bearsTokens reports whether c carries generated tokens. A chat chunk does when a
// choice's delta has text (content, reasoning_content or reasoning): the first chunk
// names the role alone, and the last may carry only the finish reason.
func bearsTokens(c chunk, chat bool) bool {
	for _, ch := range c.Choices {
		if chat {
			if d := ch.Delta; d != nil && (d.Content != "" || d.ReasoningContent != "" || d.Reasoning != "") {
				return true
			}
			continue
		}
		if ch.Text != "" || ch.FinishReason == nil {
			return true
		}
	}
	return false
}

func errorCode(code any, typ string) string {
	switch v := code.(type) {
	case string:
		if v != "" {
			return v
		}
	case float64:
		return fmt.Sprint(v)
	}
	if typ != "" {
		return typ
	}
	return "error"
}

func clip(s string) string {
	if len(s) > 120 {
		return s[:120] + "…"
	}
	return s
}
