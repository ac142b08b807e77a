package bench

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"time"
	"unicode/utf8"
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

// Error kinds of a Result (a kind may also be "http_<status>" for another HTTP status
// than 200 or 401, or "stream_<code>" for an error frame of the stream with that code;
// see ErrorKind).
const (
	ErrConnect       = "connect"         // the request could not be sent or the body not read
	ErrTimeout       = "timeout"         // the request ran past its limit (http.Client.Timeout, a deadline)
	ErrFrameTooLarge = "frame_too_large" // an SSE line longer than MaxFrameBytes
	ErrSSE           = "sse_malformed"   // a frame that is not `data: <json>` or has no choices/usage
	ErrNoDone        = "no_done"         // the stream ended without data: [DONE]
	ErrNoUsage       = "no_usage"        // no usage chunk although include_usage was asked
	ErrNoTokens      = "no_tokens"       // the stream ended with [DONE] but no token-bearing frame
	ErrBadUsage      = "bad_usage"       // usage counts that cannot be: negative, or cached_tokens > prompt_tokens
	ErrOutputLength  = "output_length"   // completion_tokens differs from max_tokens (ignore_eos)
	ErrCanceled      = "canceled"        // the run was stopped before the answer ended
	ErrWorkload      = "workload"        // the request's prompt could not be synthesized
	ErrUnauthorized  = "unauthorized"    // HTTP 401: the server wants an API key, and none or a wrong one was sent
)

// MaxFrameBytes is the longest SSE line a Client reads (16 MiB); a longer one fails the
// request with ErrFrameTooLarge.
const MaxFrameBytes = 16 << 20

// MaxErrorKind is the longest error kind, in bytes; ErrorKind clips longer ones.
const MaxErrorKind = 64

// maxDetail is the longest Result.Detail, in bytes (a server's error message may be
// long; the report keeps its start).
const maxDetail = 1024

// ErrorKind turns s (an error kind built from a server's error code) into one a report
// can hold: letters lowered, every byte other than a-z, 0-9, '_', '.' and '-' replaced
// by '_', clipped to MaxErrorKind bytes; "error" when s is empty.
func ErrorKind(s string) string {
	if s == "" {
		return "error"
	}
	b := make([]byte, 0, min(len(s), MaxErrorKind))
	for i := 0; i < len(s) && len(b) < MaxErrorKind; i++ {
		c := s[i]
		switch {
		case c >= 'A' && c <= 'Z':
			c += 'a' - 'A'
		case c >= 'a' && c <= 'z', c >= '0' && c <= '9', c == '_', c == '.', c == '-':
		default:
			c = '_'
		}
		b = append(b, c)
	}
	return string(b)
}

// Result is the measurement of one request. Times are offsets on the run's clock.
type Result struct {
	Index        int             // position in the workload
	Start        time.Duration   // when the request was sent, from the start of the run
	TTFT         time.Duration   // send → first token-bearing frame
	ITL          []time.Duration // gaps between successive token-bearing frames
	E2E          time.Duration   // send → end of the stream (or the failure)
	InputLength  int             // prompt tokens sent
	PromptTokens int             // usage.prompt_tokens (0 when not reported)
	CachedTokens int             // usage.prompt_tokens_details.cached_tokens
	CachedKnown  bool            // the server reported cached_tokens
	OutputTokens int             // usage.completion_tokens, else token-bearing frames
	Error        string          // error kind; "" when the answer was valid
	Detail       string          // the error's message (at most 1 KiB)
	Lora         string          // the LoRA adapter the request named (Request.Lora); "" for the base model
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
	// APIKey, when not empty, is sent with every request as "Authorization: Bearer
	// <APIKey>" (OpenAI's and vLLM's --api-key scheme).
	APIKey string
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
	return c.complete(ctx, origin, c.Model, prompt, maxTokens)
}

// complete is Do with the request's model (c.Model, or a LoRA adapter's name).
func (c *Client) complete(ctx context.Context, origin time.Time, model string, prompt []uint32, maxTokens int) Result {
	body, _ := json.Marshal(map[string]any{
		"model": model, "prompt": prompt, "max_tokens": maxTokens, "stream": true,
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
	return c.chat(ctx, origin, c.Model, text, maxTokens)
}

// chat is DoChat with the request's model (c.Model, or a LoRA adapter's name).
func (c *Client) chat(ctx context.Context, origin time.Time, model, text string, maxTokens int) Result {
	body, _ := json.Marshal(map[string]any{
		"model": model, "messages": []map[string]string{{"role": "user", "content": text}},
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
// output length. A failure's E2E is the time from the send to the failure.
func (c *Client) send(ctx context.Context, origin time.Time, path string, body []byte, res Result, chat bool, maxTokens int) Result {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, strings.TrimRight(c.URL, "/")+path, bytes.NewReader(body))
	if err != nil {
		return fail(res, ErrConnect, err.Error())
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "text/event-stream")
	if c.APIKey != "" {
		req.Header.Set("Authorization", "Bearer "+c.APIKey)
	}
	hc := c.HTTP
	if hc == nil {
		hc = http.DefaultClient
	}
	clock := c.clock()
	start := clock.Now()
	res.Start = start.Sub(origin)
	resp, err := hc.Do(req)
	if err != nil {
		res.E2E = clock.Now().Sub(start)
		return fail(res, transportKind(ctx, err), err.Error())
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		res.E2E = clock.Now().Sub(start)
		if resp.StatusCode == http.StatusUnauthorized {
			what := "no API key was sent"
			if c.APIKey != "" {
				what = "the API key sent was refused"
			}
			return fail(res, ErrUnauthorized, fmt.Sprintf("HTTP 401, %s: %s", what, strings.TrimSpace(string(msg))))
		}
		return fail(res, fmt.Sprintf("http_%d", resp.StatusCode), strings.TrimSpace(string(msg)))
	}
	res, err = readStream(resp.Body, clock.Now, start, res, chat)
	if err != nil {
		res.Error = transportKind(ctx, err)
	}
	if res.Error == "" && res.OutputTokens != maxTokens {
		res = fail(res, ErrOutputLength, fmt.Sprintf("%d tokens generated, max_tokens %d with ignore_eos", res.OutputTokens, maxTokens))
	}
	return res
}

// transportKind classifies an error of sending a request or reading its body: the run
// stopped (ErrCanceled), a time limit (ErrTimeout: the client's Timeout, a deadline of
// ctx or of the connection), a line over MaxFrameBytes (ErrFrameTooLarge), or else
// ErrConnect.
func transportKind(ctx context.Context, err error) string {
	var ne net.Error
	switch {
	case errors.Is(err, bufio.ErrTooLong):
		return ErrFrameTooLarge
	case errors.Is(ctx.Err(), context.Canceled):
		return ErrCanceled
	case ctx.Err() != nil, errors.Is(err, context.DeadlineExceeded), errors.Is(err, os.ErrDeadlineExceeded),
		errors.As(err, &ne) && ne.Timeout():
		return ErrTimeout
	}
	return ErrConnect
}

func fail(r Result, kind, detail string) Result {
	r.Error, r.Detail = kind, clipDetail(detail)
	return r
}

// clipDetail keeps the first maxDetail bytes of s (whole UTF-8 characters).
func clipDetail(s string) string {
	if len(s) <= maxDetail {
		return s
	}
	cut := maxDetail
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
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
// A chat frame bears tokens when a choice's delta has content (see bearsTokens). A
// failure's E2E is the time from start to the failure. err is the body's read error
// (res.Error is then ErrConnect; the caller classifies it), nil otherwise.
func readStream(body io.Reader, now func() time.Time, start time.Time, res Result, chat bool) (_ Result, err error) {
	sc := bufio.NewScanner(body)
	sc.Buffer(make([]byte, 4<<10), MaxFrameBytes) // grows for long frames
	var last time.Time
	frames, usageTokens := 0, -1
	failed := func(kind, detail string) Result {
		res.E2E = now().Sub(start)
		res.OutputTokens = frames
		return fail(res, kind, detail)
	}
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
			return failed(ErrSSE, fmt.Sprintf("line %q is not an SSE data frame", clip(line))), nil
		}
		payload = strings.TrimSpace(payload)
		if payload == "[DONE]" {
			res.E2E = now().Sub(start)
			res.OutputTokens = frames
			switch {
			case frames == 0:
				detail := "the stream ended with [DONE] without a token-bearing frame"
				if usageTokens >= 0 {
					detail += fmt.Sprintf(" (usage.completion_tokens %d)", usageTokens)
				}
				return fail(res, ErrNoTokens, detail), nil
			case usageTokens < 0:
				return fail(res, ErrNoUsage, "the stream ended without a usage chunk"), nil
			}
			res.OutputTokens = usageTokens
			return res, nil
		}
		var c chunk
		if err := json.Unmarshal([]byte(payload), &c); err != nil {
			return failed(ErrSSE, fmt.Sprintf("frame %q: %v", clip(payload), err)), nil
		}
		if c.Error != nil {
			return failed(ErrorKind("stream_"+errorCode(c.Error.Code, c.Error.Type)), c.Error.Message), nil
		}
		if u := c.Usage; u != nil {
			d := u.PromptTokensDetails
			if u.PromptTokens < 0 || u.CompletionTokens < 0 || (d != nil && (d.CachedTokens < 0 || d.CachedTokens > u.PromptTokens)) {
				what := fmt.Sprintf("prompt_tokens %d, completion_tokens %d", u.PromptTokens, u.CompletionTokens)
				if d != nil {
					what += fmt.Sprintf(", cached_tokens %d", d.CachedTokens)
				}
				return failed(ErrBadUsage, "usage "+what+": want counts >= 0 and cached_tokens <= prompt_tokens"), nil
			}
			usageTokens = u.CompletionTokens
			res.PromptTokens = u.PromptTokens
			if d != nil {
				res.CachedTokens, res.CachedKnown = d.CachedTokens, true
			}
		}
		if c.Choices == nil && c.Usage == nil {
			return failed(ErrSSE, fmt.Sprintf("frame %q has neither choices nor usage", clip(payload))), nil
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
	if err := sc.Err(); err != nil && !errors.Is(err, io.EOF) {
		if errors.Is(err, bufio.ErrTooLong) {
			return failed(ErrFrameTooLarge, fmt.Sprintf("an SSE line longer than %d MiB", MaxFrameBytes>>20)), err
		}
		return failed(ErrConnect, err.Error()), err
	}
	return failed(ErrNoDone, "the stream ended without data: [DONE]"), nil
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
