// Package vllm is vLLM for Turbine: a client for engines that speak vLLM's
// OpenAI-compatible HTTP dialect (vLLM itself, and Turbine's mock engine): health, the
// model list, streamed /v1/completions with token ids in and out, and the load an engine
// reports on /metrics; the engines.Engine adapter over it (Engine, engine.go), through
// which the worker actor drives its engine; and the launcher that starts `vllm serve`
// (Launcher, launcher.go).
package vllm

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/turbine-llm/turbine/engines/internal/enginehttp"
	"github.com/turbine-llm/turbine/messages"
)

// Client talks to one engine. Safe for concurrent use.
type Client struct {
	h *enginehttp.Client
}

// New returns a client for the engine at baseURL (e.g. http://127.0.0.1:8000). hc may be
// nil: a client of its own (enginehttp.DefaultPool), without an overall timeout
// (streams last as long as generation does; bound calls with their contexts). Errors:
// a URL that is not absolute http(s).
func New(baseURL string, hc *http.Client) (*Client, error) {
	h, err := enginehttp.New("vllm", baseURL, hc, errorFrom)
	if err != nil {
		return nil, err
	}
	return &Client{h: h}, nil
}

// Error is an error answer of the engine (HTTP status and vLLM's error body), or an
// error frame in the middle of a stream.
type Error struct {
	Status  int    // HTTP status (or the error body's code for a stream error frame)
	Type    string // e.g. BadRequestError
	Param   string
	Message string
}

func (e *Error) Error() string {
	s := fmt.Sprintf("vllm: engine answered %d", e.Status)
	if e.Type != "" {
		s += " " + e.Type
	}
	if e.Param != "" {
		s += " (param " + e.Param + ")"
	}
	return s + ": " + e.Message
}

// errorShapes are vLLM's error bodies, in the order they are read: {"error": {"message",
// "type", "param"}}, the same fields at the top level (older vLLM), FastAPI's
// {"detail": ...}; anything else is kept as text.
var errorShapes = []enginehttp.Shape{enginehttp.ErrorObject, enginehttp.TopLevel, enginehttp.Detail}

// errorFrom reads a non-200 answer into an *Error.
func errorFrom(status int, body []byte) error {
	f := enginehttp.DecodeAnswer(status, body, errorShapes...)
	return &Error{Status: status, Type: f.Type, Param: f.Param, Message: f.Message}
}

// Health returns nil when GET /health answers 200.
func (c *Client) Health(ctx context.Context) error {
	return c.h.Call(ctx, http.MethodGet, "/health", nil)
}

// Model is one entry of GET /v1/models.
type Model struct {
	ID      string `json:"id"`
	OwnedBy string `json:"owned_by"`
	Root    string `json:"root"`
	// MaxModelLen is the context length in tokens (0 when the engine did not say).
	MaxModelLen int `json:"max_model_len"`
}

// Models returns the engine's served models.
func (c *Client) Models(ctx context.Context) ([]Model, error) {
	return enginehttp.Models[Model](ctx, c.h)
}

// CompletionRequest is a token-id completion. The client always streams, asks for token
// ids (return_token_ids, vLLM >= 0.10.2) and for usage.
type CompletionRequest struct {
	// Model is the served model id ("" leaves it out: the engine's default).
	Model string
	// PromptTokenIDs: the prompt; at least one.
	PromptTokenIDs []uint32
	// MaxTokens >= 1.
	MaxTokens    int
	MinTokens    int
	IgnoreEOS    bool
	StopTokenIDs []uint32
	Seed         *int64
	Temperature  *float64
	TopP         *float64
	// RequestID is sent as X-Request-Id (vLLM's response id becomes cmpl-<RequestID>).
	RequestID string
	// Extra fields merged into the JSON body as they are (e.g. kv_transfer_params).
	Extra map[string]any
	// Logprobs asks for the logprobs of each output token and of the *Logprobs most
	// likely tokens at its position (Chunk.Logprobs); PromptLogprobs the same for the
	// prompt (Chunk.PromptLogprobs; vLLM answers them without streaming only:
	// CompleteOnce). nil: none (logprobs.go).
	Logprobs, PromptLogprobs *int32
	// IgnorePromptTokenIDs: the stream's chunks leave PromptTokenIDs nil, and the first
	// frame's copy of the prompt is skipped rather than parsed (Complete only).
	IgnorePromptTokenIDs bool
}

// Chunk is one step of a stream.
type Chunk struct {
	// TokenIDs generated in this chunk. A stop token (EOS or one of StopTokenIDs) that
	// ended the request is the last id here, and absent from Text, as in vLLM.
	TokenIDs []uint32
	// Text is the engine's detokenization of the chunk.
	Text string
	// PromptTokenIDs is set on the first chunk only (the prompt as the engine saw it).
	PromptTokenIDs []uint32
	// FinishReason is "" until the last chunk ("stop", "length", "abort", ...).
	FinishReason string
	// StopTokenID is the stop_token_ids entry that ended the request (vLLM's
	// stop_reason as an integer), when HasStopTokenID. StopString is a stop_reason that
	// is a string.
	StopTokenID    uint32
	HasStopTokenID bool
	StopString     string
	// Usage is set on the last chunk (nil when the engine sent none).
	Usage *Usage
	// KVTransferParams is the answer's kv_transfer_params (disaggregated serving: what a
	// prefill leg returns for its decode leg, docs/reference.md §6), on the last chunk; nil when
	// absent or null.
	KVTransferParams json.RawMessage
	// Logprobs, when the request asked for them: one per id of TokenIDs.
	Logprobs []*messages.TokenLogprob
	// PromptLogprobs, when the request asked for them: one per prompt token (CompleteOnce).
	PromptLogprobs []*messages.TokenLogprob

	rawLogprobs json.RawMessage // the choice's logprobs, read by Stream.recv
}

// Usage counts tokens of the whole request.
type Usage struct {
	PromptTokens, CompletionTokens, TotalTokens int
	// CachedTokens: prompt tokens served from the engine's prefix cache
	// (prompt_tokens_details.cached_tokens; 0 when the engine does not report it).
	CachedTokens int
}

// Complete starts a streamed completion. The returned Stream must be closed; closing it
// (or cancelling ctx) closes the connection, which makes vLLM abort the request.
// Errors: an invalid request, a transport error, or *Error for a non-200 answer (wrapped
// in an *engines.InvalidRequestError when it refuses the request: 400, 422).
func (c *Client) Complete(ctx context.Context, r CompletionRequest) (*Stream, error) {
	if len(r.PromptTokenIDs) == 0 {
		return nil, errors.New("vllm: completion without prompt tokens")
	}
	if r.MaxTokens < 1 {
		return nil, fmt.Errorf("vllm: max_tokens %d must be at least 1", r.MaxTokens)
	}
	b, err := completionBody(r)
	if err != nil {
		return nil, fmt.Errorf("vllm: encoding the request: %w", err)
	}
	hdr := http.Header{"Accept": {"text/event-stream"}}
	if r.RequestID != "" {
		hdr.Set("X-Request-Id", r.RequestID)
	}
	st, err := c.h.Stream(ctx, http.MethodPost, "/v1/completions", b, hdr, maxFrameBytes)
	if err != nil {
		return nil, err
	}
	decode := decodeFrame
	if r.IgnorePromptTokenIDs {
		decode = decodeFrameIgnoringPrompt
	}
	cs := enginehttp.NewCompletionStream(st, decode, func(c *Chunk) bool { return c.FinishReason != "" },
		func(c *Chunk) bool { return len(c.TokenIDs) == 0 && c.Text == "" })
	n := -1
	if r.Logprobs != nil {
		n = int(*r.Logprobs)
	}
	return &Stream{st: st, cs: cs, logprobs: n}, nil
}

// CompleteOnce runs a completion answered in one JSON body ("stream": false), as a
// disaggregated prefill leg is sent (docs/reference.md §6), and returns it as the last chunk of
// a stream: all its token ids, the finish reason, the usage and kv_transfer_params.
// Cancelling ctx closes the connection, which makes vLLM abort the request. Errors: an
// invalid request, a transport error, *Error for a non-200 answer (wrapped in an
// *engines.InvalidRequestError when it refuses the request: 400, 422), or a malformed
// answer (not one choice, no token ids, no finish reason).
func (c *Client) CompleteOnce(ctx context.Context, r CompletionRequest) (Chunk, error) {
	if len(r.PromptTokenIDs) == 0 {
		return Chunk{}, errors.New("vllm: completion without prompt tokens")
	}
	if r.MaxTokens < 1 {
		return Chunk{}, fmt.Errorf("vllm: max_tokens %d must be at least 1", r.MaxTokens)
	}
	b, err := enginehttp.CompletionBody(enginehttp.Completion{Model: r.Model, PromptTokenIDs: r.PromptTokenIDs,
		MaxTokens: r.MaxTokens, MinTokens: r.MinTokens, IgnoreEOS: r.IgnoreEOS, StopTokenIDs: r.StopTokenIDs, Seed: r.Seed,
		Temperature: r.Temperature, TopP: r.TopP, Extra: r.logprobMembers(), NoStream: true}, "return_token_ids", true)
	if err != nil {
		return Chunk{}, fmt.Errorf("vllm: encoding the request: %w", err)
	}
	var hdr http.Header
	if r.RequestID != "" {
		hdr = http.Header{"X-Request-Id": {r.RequestID}}
	}
	resp, err := c.h.Submit(ctx, http.MethodPost, "/v1/completions", b, hdr)
	if err != nil {
		return Chunk{}, err
	}
	defer resp.Body.Close()
	var raw struct {
		Choices          []completionChoice `json:"choices"`
		Usage            *enginehttp.Usage  `json:"usage"`
		KVTransferParams json.RawMessage    `json:"kv_transfer_params"`
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, maxFrameBytes)).Decode(&raw); err != nil {
		if ctx.Err() != nil {
			return Chunk{}, ctx.Err()
		}
		return Chunk{}, fmt.Errorf("vllm: malformed completion answer: %w", err)
	}
	if len(raw.Choices) != 1 {
		return Chunk{}, fmt.Errorf("vllm: completion answer with %d choices, want 1", len(raw.Choices))
	}
	ch := raw.Choices[0]
	if ch.TokenIDs == nil {
		return Chunk{}, errors.New("vllm: the engine sent no token_ids (return_token_ids needs vLLM 0.10.2 or later)")
	}
	if ch.FinishReason == nil {
		return Chunk{}, errors.New("vllm: completion answer without a finish reason")
	}
	out := Chunk{TokenIDs: ch.TokenIDs, Text: ch.Text, PromptTokenIDs: ch.PromptTokenIDs, FinishReason: *ch.FinishReason,
		KVTransferParams: nullToNil(raw.KVTransferParams)}
	if out.StopTokenID, out.HasStopTokenID, out.StopString, err = enginehttp.StopReason(ch.StopReason); err != nil {
		return Chunk{}, fmt.Errorf("vllm: %w", err)
	}
	if r.Logprobs != nil {
		if out.Logprobs, err = logprobsOf(ch.Logprobs, ch.TokenIDs, int(*r.Logprobs)); err != nil {
			return Chunk{}, err
		}
	}
	if r.PromptLogprobs != nil {
		if out.PromptLogprobs, err = promptLogprobsOf(ch.PromptLogprobs, r.PromptTokenIDs, int(*r.PromptLogprobs)); err != nil {
			return Chunk{}, err
		}
	}
	if u := raw.Usage; u != nil {
		out.Usage = &Usage{PromptTokens: u.PromptTokens, CompletionTokens: u.CompletionTokens, TotalTokens: u.TotalTokens,
			CachedTokens: u.CachedTokens()}
	}
	return out, nil
}

func nullToNil(raw json.RawMessage) json.RawMessage {
	if len(raw) == 0 || string(raw) == "null" {
		return nil
	}
	return raw
}

// Stream reads a completion's SSE frames. Not safe for concurrent use.
type Stream struct {
	st *enginehttp.Stream
	cs *enginehttp.CompletionStream[Chunk]
	// logprobs is the request's logprobs (-1: none asked, the chunks' are not read).
	logprobs int
}

// Recv returns the next chunk. The chunk with FinishReason also carries the usage (the
// usage frame that follows it is folded in); after it Recv returns io.EOF. Errors: the
// engine's error frame (*Error), a malformed frame, a stream that ends before [DONE], or
// the context's error.
func (s *Stream) Recv() (Chunk, error) { return enginehttp.Recv(s.st, s.recv, s.Close) }

func (s *Stream) recv() (Chunk, error) {
	ch, u, err := s.cs.Next()
	if err == nil && s.logprobs >= 0 {
		if ch.Logprobs, err = logprobsOf(ch.rawLogprobs, ch.TokenIDs, s.logprobs); err != nil {
			return Chunk{}, err
		}
	}
	ch.rawLogprobs = nil
	if u != nil {
		ch.Usage = &Usage{PromptTokens: u.PromptTokens, CompletionTokens: u.CompletionTokens, TotalTokens: u.TotalTokens,
			CachedTokens: u.CachedTokens()}
	}
	return ch, err
}

// maxFrameBytes bounds one SSE event: the first chunk of a token-id completion repeats
// the prompt's token ids (about 7 bytes each), so a 128 K-token prompt takes about 1 MB.
const maxFrameBytes = 16 << 20

// decodeFrame decodes one SSE event's data: its first choice (nil in the usage chunk;
// the client never asks for more, but every choice is checked) and its usage.
func decodeFrame(data []byte) (*Chunk, *enginehttp.Usage, error) { return decodeFrameOf(data, true) }

// decodeFrameIgnoringPrompt is decodeFrame for a stream whose caller does not read
// prompt_token_ids (CompletionRequest.IgnorePromptTokenIDs): the chunks' PromptTokenIDs
// stay nil, and the first frame's array is skipped, not parsed.
func decodeFrameIgnoringPrompt(data []byte) (*Chunk, *enginehttp.Usage, error) {
	return decodeFrameOf(data, false)
}

// decodeFrameOf is decodeFrame, reading the prompt's ids when prompt is true.
func decodeFrameOf(data []byte, prompt bool) (*Chunk, *enginehttp.Usage, error) {
	var raw struct {
		Error *struct {
			Message string  `json:"message"`
			Type    string  `json:"type"`
			Param   *string `json:"param"`
			Code    any     `json:"code"`
		} `json:"error"`
		Choices          []completionChoice `json:"choices"`
		Usage            *enginehttp.Usage  `json:"usage"`
		KVTransferParams json.RawMessage    `json:"kv_transfer_params"`
	}
	// The first frame repeats the prompt as prompt_token_ids; those are read by hand and
	// the generic decoder sees [] in their place (undone if the frame turns out not to be
	// a single choice, or the key was not that choice's: then its field stays nil).
	var promptIDs []uint32
	var cut []byte
	var hasPrompt bool
	if prompt {
		promptIDs, cut, hasPrompt = cutPromptTokenIDs(data)
	} else {
		cut, hasPrompt = skipPromptTokenIDs(data)
	}
	if hasPrompt {
		// The cut must have emptied the choice's own array: encoding/json matches keys
		// regardless of case, so a "Prompt_token_ids" of the choice's and a
		// "prompt_token_ids" inside another member are not the same array.
		if err := json.Unmarshal(cut, &raw); err != nil || len(raw.Choices) != 1 ||
			raw.Choices[0].PromptTokenIDs == nil || len(raw.Choices[0].PromptTokenIDs) != 0 {
			hasPrompt = false
			raw.Error, raw.Choices, raw.Usage, raw.KVTransferParams = nil, nil, nil, nil
		}
	}
	if !hasPrompt {
		if err := json.Unmarshal(data, &raw); err != nil {
			return nil, nil, fmt.Errorf("vllm: malformed stream frame %.200q: %w", data, err)
		}
	} else if prompt {
		raw.Choices[0].PromptTokenIDs = promptIDs
	}
	if raw.Error != nil {
		e := &Error{Type: raw.Error.Type, Message: raw.Error.Message}
		if f, ok := raw.Error.Code.(float64); ok {
			e.Status = int(f)
		}
		if raw.Error.Param != nil {
			e.Param = *raw.Error.Param
		}
		return nil, nil, e
	}
	var first *Chunk
	for _, c := range raw.Choices {
		ch := Chunk{Text: c.Text, TokenIDs: c.TokenIDs, rawLogprobs: c.Logprobs}
		if prompt {
			ch.PromptTokenIDs = c.PromptTokenIDs
		}
		if c.FinishReason != nil {
			ch.FinishReason = *c.FinishReason
		}
		if c.TokenIDs == nil && (c.Text != "" || ch.FinishReason == "") {
			return nil, nil, errors.New("vllm: the engine sent no token_ids (return_token_ids needs vLLM 0.10.2 or later)")
		}
		var err error
		if ch.StopTokenID, ch.HasStopTokenID, ch.StopString, err = enginehttp.StopReason(c.StopReason); err != nil {
			return nil, nil, fmt.Errorf("vllm: %w", err)
		}
		if first == nil {
			ch.KVTransferParams = nullToNil(raw.KVTransferParams)
			first = &ch
		}
	}
	return first, raw.Usage, nil
}

// Close closes the connection (aborting the request in the engine if it still runs).
// Safe to call more than once.
func (s *Stream) Close() error { return s.st.Close() }

// Release closes the stream and gives its read buffer back for other streams
// (enginehttp.SSEReader.Release): call it from the goroutine that called Recv, after its
// last call; chunks already returned stay valid.
func (s *Stream) Release() { s.st.Release() }

// Load is an engine's load as its /metrics reports it (vLLM v1 metric names), summed
// over its engines (data-parallel ranks) except KVCacheUsage, which is their mean.
type Load struct {
	Running, Waiting float64
	// KVCacheUsage is the fraction of KV blocks in use, 0..1 (vllm:kv_cache_usage_perc,
	// or vllm:gpu_cache_usage_perc from older engines).
	KVCacheUsage float64
	// PrefixCacheQueries and PrefixCacheHits are cumulative token counts.
	PrefixCacheQueries, PrefixCacheHits float64
	Preemptions                         float64
	// BlockSize and NumGPUBlocks from vllm:cache_config_info (0 when absent).
	BlockSize, NumGPUBlocks int
	// At is when the scrape was answered.
	At time.Time
}

// Load scrapes GET /metrics. Errors: transport, non-200, unparsable text, or none of
// the running/waiting gauges present.
func (c *Client) Load(ctx context.Context) (Load, error) {
	fams, err := c.h.Metrics(ctx, "/metrics")
	if err != nil {
		return Load{}, err
	}
	return LoadFromFamilies(fams, time.Now())
}

// LoadFromFamilies extracts a Load from parsed metric families (exported for tests and
// for callers that scrape themselves).
func LoadFromFamilies(fams map[string]*dto.MetricFamily, at time.Time) (Load, error) {
	l := Load{At: at}
	running, okR := sum(fams, "vllm:num_requests_running")
	waiting, okW := sum(fams, "vllm:num_requests_waiting")
	if !okR && !okW {
		return Load{}, errors.New("vllm: /metrics has neither vllm:num_requests_running nor vllm:num_requests_waiting")
	}
	l.Running, l.Waiting = running, waiting
	if u, n := mean(fams, "vllm:kv_cache_usage_perc"); n > 0 {
		l.KVCacheUsage = u
	} else if u, n := mean(fams, "vllm:gpu_cache_usage_perc"); n > 0 {
		l.KVCacheUsage = u
	}
	l.PrefixCacheQueries, _ = sumCounter(fams, "vllm:prefix_cache_queries", "vllm:gpu_prefix_cache_queries")
	l.PrefixCacheHits, _ = sumCounter(fams, "vllm:prefix_cache_hits", "vllm:gpu_prefix_cache_hits")
	l.Preemptions, _ = sumCounter(fams, "vllm:num_preemptions")
	if f := fams["vllm:cache_config_info"]; f != nil && len(f.Metric) > 0 {
		for _, lp := range f.Metric[0].Label {
			var n int
			if _, err := fmt.Sscan(lp.GetValue(), &n); err != nil {
				continue
			}
			switch lp.GetName() {
			case "block_size":
				l.BlockSize = n
			case "num_gpu_blocks":
				l.NumGPUBlocks = n
			}
		}
	}
	return l, nil
}

func sum(fams map[string]*dto.MetricFamily, name string) (float64, bool) {
	f := fams[name]
	if f == nil {
		return 0, false
	}
	var s float64
	for _, m := range f.Metric {
		s += enginehttp.MetricValue(m)
	}
	return s, true
}

func mean(fams map[string]*dto.MetricFamily, name string) (float64, int) {
	f := fams[name]
	if f == nil || len(f.Metric) == 0 {
		return 0, 0
	}
	s, _ := sum(fams, name)
	return s / float64(len(f.Metric)), len(f.Metric)
}

// sumCounter finds a counter under its name with or without _total, trying names in order.
func sumCounter(fams map[string]*dto.MetricFamily, names ...string) (float64, bool) {
	for _, n := range names {
		for _, cand := range []string{n + "_total", n} {
			if v, ok := sum(fams, cand); ok {
				return v, true
			}
		}
	}
	return 0, false
}

// completionBody encodes r as a vLLM /v1/completions JSON body that asks for token ids
// ("return_token_ids": true, vLLM >= 0.10.2).
func completionBody(r CompletionRequest) ([]byte, error) {
	return enginehttp.CompletionBody(enginehttp.Completion{Model: r.Model, PromptTokenIDs: r.PromptTokenIDs,
		MaxTokens: r.MaxTokens, MinTokens: r.MinTokens, IgnoreEOS: r.IgnoreEOS, StopTokenIDs: r.StopTokenIDs, Seed: r.Seed,
		Temperature: r.Temperature, TopP: r.TopP, Extra: r.logprobMembers()}, "return_token_ids", true)
}

// promptIDsKey is how vLLM (and the mock engine) write the first chunk's prompt ids. The
// quote before the colon cannot be escaped, so the key cannot match inside a string.
var promptIDsKey = []byte(`"prompt_token_ids":`)

// cutPromptTokenIDs finds the one `"prompt_token_ids":[ids]` member of an SSE frame and
// returns the ids and the frame with [] in place of the array. ok is false when the
// member is absent, appears more than once, or is not an array of plain integers below
// 2^32; the frame is then decoded as it is.
func cutPromptTokenIDs(data []byte) (ids []uint32, cut []byte, ok bool) {
	start, end, ok := promptIDsArray(data)
	if !ok {
		return nil, nil, false
	}
	ids = make([]uint32, 0, bytes.Count(data[start:end], []byte(","))+1)
	b := data[start+1 : end] // the ids and the closing ']'
	i := 0
	for b[i] == ' ' {
		i++
	}
	if b[i] == ']' {
		i = len(b) // []
	}
	for i < len(b) {
		// One id: "0", or a non-zero digit and at most 9 more; then spaces and ',' or ']'.
		var v uint64
		switch c := b[i]; {
		case c == '0':
			i++
		case c >= '1' && c <= '9':
			first := i
			for b[i] >= '0' && b[i] <= '9' {
				v = v*10 + uint64(b[i]-'0')
				i++
			}
			if i-first > 10 || v > math.MaxUint32 {
				return nil, nil, false
			}
		default:
			return nil, nil, false
		}
		ids = append(ids, uint32(v))
		for b[i] == ' ' {
			i++
		}
		switch b[i] {
		case ',':
			i++
			for b[i] == ' ' {
				i++
			}
			if b[i] == ']' {
				return nil, nil, false // [1,]
			}
		case ']':
			i++
		default:
			return nil, nil, false
		}
	}
	return ids, cutArray(data, start, end), true
}

// promptIDsArray finds the one `"prompt_token_ids":[...]` member of an SSE frame:
// data[start:end] is its array up to the first ']'. ok is false when the member is
// absent, appears more than once, or its value does not begin with '['.
func promptIDsArray(data []byte) (start, end int, ok bool) {
	at := bytes.Index(data, promptIDsKey)
	if at < 0 || bytes.Index(data[at+len(promptIDsKey):], promptIDsKey) >= 0 {
		return 0, 0, false
	}
	start = at + len(promptIDsKey)
	for start < len(data) && (data[start] == ' ' || data[start] == '\t') {
		start++
	}
	if start >= len(data) || data[start] != '[' {
		return 0, 0, false
	}
	n := bytes.IndexByte(data[start:], ']')
	if n < 0 {
		return 0, 0, false
	}
	return start, start + n + 1, true
}

// cutArray returns data with [] in place of data[start:end].
func cutArray(data []byte, start, end int) []byte {
	cut := make([]byte, 0, len(data)-(end-start)+2)
	cut = append(cut, data[:start]...)
	cut = append(cut, "[]"...)
	return append(cut, data[end:]...)
}

// idChars marks the bytes an array of unsigned integers is written with.
var idChars = [256]bool{'0': true, '1': true, '2': true, '3': true, '4': true, '5': true, '6': true,
	'7': true, '8': true, '9': true, ',': true, ' ': true, '\t': true, '\n': true, '\r': true}

// skipPromptTokenIDs is cutPromptTokenIDs for a caller that does not read the ids: the
// frame with [] in place of the array, whose bytes are only checked to be digits,
// commas and white space (so that the first ']' ends it), not parsed. ok is false as
// for cutPromptTokenIDs when the member is absent or repeated, or when the array holds
// anything else.
func skipPromptTokenIDs(data []byte) (cut []byte, ok bool) {
	start, end, ok := promptIDsArray(data)
	if !ok {
		return nil, false
	}
	for _, c := range data[start+1 : end-1] {
		if !idChars[c] {
			return nil, false
		}
	}
	return cutArray(data, start, end), true
}

// completionChoice is one choice of a vLLM /v1/completions answer or stream frame.
type completionChoice struct {
	Text           string          `json:"text"`
	FinishReason   *string         `json:"finish_reason"`
	StopReason     json.RawMessage `json:"stop_reason"`
	TokenIDs       []uint32        `json:"token_ids"`
	PromptTokenIDs []uint32        `json:"prompt_token_ids"`
	Logprobs       json.RawMessage `json:"logprobs"`
	PromptLogprobs json.RawMessage `json:"prompt_logprobs"`
}

// vLLM's LoRA adapter routes (docs/reference.md §26.1), served only when the engine runs
// with VLLM_ALLOW_RUNTIME_LORA_UPDATING=True (the launcher sets it with Spec.MaxLoras).
const (
	loadLoraPath   = "/v1/load_lora_adapter"
	unloadLoraPath = "/v1/unload_lora_adapter"
	noLoraRoutes   = "the engine has no runtime LoRA API (start vLLM with VLLM_ALLOW_RUNTIME_LORA_UPDATING=True and --enable-lora)"
)

// LoadLora loads the LoRA adapter in folder path under name: POST /v1/load_lora_adapter
// {"lora_name": name, "lora_path": path}, answered 200 with a sentence. Requests then
// name the adapter in their model field (CompletionRequest.Model). Errors: vLLM's
// refusal (400 for adapters off, a name already loaded, a rank above --max-lora-rank, an
// unreadable adapter; 404 for a folder without an adapter; the mock engine's 503 when
// every slot holds an adapter is not a refusal) as an *engines.InvalidRequestError with
// vLLM's message wrapping *Error; an engine without the route; *Error for other
// answers; transport errors.
func (c *Client) LoadLora(ctx context.Context, name, path string) error {
	if name == "" || path == "" {
		return errors.New("vllm: a LoRA adapter load needs a name and a path")
	}
	return c.h.PostLora(ctx, loadLoraPath, enginehttp.LoraRequest{LoraName: name, LoraPath: path}, noLoraRoutes)
}

// UnloadLora unloads the LoRA adapter name: POST /v1/unload_lora_adapter
// {"lora_name": name}. vLLM lets requests that run with it finish. Errors: as LoadLora's
// (404 NotFoundError for an adapter vLLM does not hold).
func (c *Client) UnloadLora(ctx context.Context, name string) error {
	if name == "" {
		return errors.New("vllm: a LoRA adapter unload needs a name")
	}
	return c.h.PostLora(ctx, unloadLoraPath, enginehttp.LoraRequest{LoraName: name}, noLoraRoutes)
}
