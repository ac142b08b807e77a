package trtllm

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"

	"github.com/turbine-llm/turbine/engines/internal/enginehttp"
)

// CompletionRequest is a streamed token-id completion. The client always streams, asks
// for token ids ("detokenize": false) and for usage.
type CompletionRequest struct {
	// Model is the served model name; trtllm-serve requires the field.
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
	// TopK: 0 leaves it out (the server's default).
	TopK int
	// RequestID is sent as X-Request-Id (trtllm-serve assigns its own ids).
	RequestID string
	// Extra fields merged into the body (e.g. disaggregated_params). The server refuses
	// fields it does not know.
	Extra map[string]any
}

// Chunk is one step of a stream.
type Chunk struct {
	// TokenIDs generated in this chunk. The stop token that ended the request is not
	// among them (trtllm-serve drops EOS and trims matched stop sequences).
	TokenIDs []uint32
	// FinishReason is "" until the last chunk: "stop", "length", "timeout" or
	// "cancelled".
	FinishReason string
	// StopTokenID is the stop_token_ids entry that ended the request (stop_reason as an
	// integer), when HasStopTokenID; StopString a stop_reason that is a string.
	StopTokenID    uint32
	HasStopTokenID bool
	StopString     string
	// Usage is set on the last chunk (nil when the server sent none).
	Usage *Usage
	// DisaggregatedParams is the choice's disaggregated_params (disaggregated serving:
	// what a context_only request returns for its generation_only request, docs/reference.md
	// §6); nil when absent or null.
	DisaggregatedParams json.RawMessage
}

// Usage counts tokens of the whole request.
type Usage struct {
	PromptTokens, CompletionTokens, TotalTokens int
	// CachedTokens: prompt tokens served from the KV cache (prompt_tokens_details).
	CachedTokens int
}

// Complete starts a streamed completion. The returned Stream must be closed; closing it
// (or cancelling ctx) closes the connection, which makes trtllm-serve abort the request.
// Errors: an invalid request, a transport error, or *Error for a non-200 answer (wrapped
// in an *engines.InvalidRequestError when it refuses the request: 400, 422).
func (c *Client) Complete(ctx context.Context, r CompletionRequest) (*Stream, error) {
	switch {
	case r.Model == "":
		return nil, errors.New("trtllm: completion without a model name (trtllm-serve requires one)")
	case len(r.PromptTokenIDs) == 0:
		return nil, errors.New("trtllm: completion without prompt tokens")
	case r.MaxTokens < 1:
		return nil, fmt.Errorf("trtllm: max_tokens %d must be at least 1", r.MaxTokens)
	}
	body, err := completionBody(r)
	if err != nil {
		return nil, fmt.Errorf("trtllm: encoding the request: %w", err)
	}
	hdr := http.Header{"Accept": {"text/event-stream"}}
	if r.RequestID != "" {
		hdr.Set("X-Request-Id", r.RequestID)
	}
	st, err := c.h.Stream(ctx, http.MethodPost, "/v1/completions", body, hdr, maxEventBytes)
	if err != nil {
		return nil, err
	}
	cs := enginehttp.NewCompletionStream(st, decodeFrame,
		func(c *Chunk) bool { return c.FinishReason != "" }, func(c *Chunk) bool { return len(c.TokenIDs) == 0 })
	return &Stream{st: st, cs: cs}, nil
}

// maxEventBytes bounds one SSE event. A chunk holds one step's token ids; the bound
// guards against a runaway server.
const maxEventBytes = 16 << 20

// Stream reads a completion's chunks. Recv is not safe for concurrent use; Close may be
// called from another goroutine.
type Stream struct {
	st *enginehttp.Stream
	cs *enginehttp.CompletionStream[Chunk]
}

// Recv returns the next chunk. The chunk with the FinishReason also carries the usage
// (the usage chunk that follows it is folded in); after it Recv returns io.EOF. Errors:
// an error frame (*Error), a malformed chunk, a stream that ends before [DONE], or the
// context's error. Any error closes the stream.
func (s *Stream) Recv() (Chunk, error) { return enginehttp.Recv(s.st, s.recv, s.Close) }

func (s *Stream) recv() (Chunk, error) {
	ch, u, err := s.cs.Next()
	if u != nil {
		ch.Usage = &Usage{PromptTokens: u.PromptTokens, CompletionTokens: u.CompletionTokens, TotalTokens: u.TotalTokens,
			CachedTokens: u.CachedTokens()}
	}
	return ch, err
}

// decodeFrame decodes one chunk of a stream: its choice (one: the client never asks for
// more; nil in the usage chunk) and its usage.
func decodeFrame(data []byte) (*Chunk, *enginehttp.Usage, error) {
	var raw struct {
		Error   json.RawMessage `json:"error"`
		Object  string          `json:"object"`
		Message string          `json:"message"`
		Choices []struct {
			Index        int             `json:"index"`
			Text         string          `json:"text"`
			TokenIDs     []uint32        `json:"token_ids"`
			FinishReason *string         `json:"finish_reason"`
			StopReason   json.RawMessage `json:"stop_reason"`
			Disagg       json.RawMessage `json:"disaggregated_params"`
		} `json:"choices"`
		Usage *enginehttp.Usage `json:"usage"`
	}
	if err := json.Unmarshal(data, &raw); err != nil {
		return nil, nil, fmt.Errorf("trtllm: malformed stream chunk %.200q: %w", data, err)
	}
	if (len(raw.Error) > 0 && string(raw.Error) != "null") || raw.Object == "error" {
		return nil, nil, errorFrom(0, data)
	}
	switch len(raw.Choices) {
	case 0:
		return nil, raw.Usage, nil
	case 1:
	default:
		return nil, nil, fmt.Errorf("trtllm: stream chunk with %d choices, want 1", len(raw.Choices))
	}
	c := raw.Choices[0]
	ch := &Chunk{TokenIDs: c.TokenIDs, DisaggregatedParams: nullToNil(c.Disagg)}
	if c.FinishReason != nil {
		ch.FinishReason = *c.FinishReason
	}
	if c.TokenIDs == nil && (c.Text != "" || ch.FinishReason == "") {
		return nil, nil, errors.New(`trtllm: the server sent text without token_ids (it ignores "detokenize": false; trtllm-serve needs NVIDIA/TensorRT-LLM#5382, mid-2025)`)
	}
	var err error
	if ch.StopTokenID, ch.HasStopTokenID, ch.StopString, err = enginehttp.StopReason(c.StopReason); err != nil {
		return nil, nil, fmt.Errorf("trtllm: %w", err)
	}
	return ch, raw.Usage, nil
}

func nullToNil(raw json.RawMessage) json.RawMessage {
	if len(raw) == 0 || string(raw) == "null" {
		return nil
	}
	return raw
}

// CompleteOnce runs a completion answered in one JSON body ("stream": false), as a
// disaggregated context_only request is sent, and returns its one choice as the last
// chunk of a stream: its token ids, finish reason, usage and disaggregated_params.
// Cancelling ctx closes the connection, which makes trtllm-serve abort the request.
// Errors: an invalid request, a transport error, *Error for a non-200 answer (wrapped in
// an *engines.InvalidRequestError when it refuses the request: 400, 422), or a malformed
// answer (not one choice, no token ids, no finish reason).
func (c *Client) CompleteOnce(ctx context.Context, r CompletionRequest) (Chunk, error) {
	switch {
	case r.Model == "":
		return Chunk{}, errors.New("trtllm: completion without a model name (trtllm-serve requires one)")
	case len(r.PromptTokenIDs) == 0:
		return Chunk{}, errors.New("trtllm: completion without prompt tokens")
	case r.MaxTokens < 1:
		return Chunk{}, fmt.Errorf("trtllm: max_tokens %d must be at least 1", r.MaxTokens)
	}
	body, err := enginehttp.CompletionBody(enginehttp.Completion{Model: r.Model, PromptTokenIDs: r.PromptTokenIDs,
		MaxTokens: r.MaxTokens, MinTokens: r.MinTokens, IgnoreEOS: r.IgnoreEOS, StopTokenIDs: r.StopTokenIDs, Seed: r.Seed,
		Temperature: r.Temperature, TopP: r.TopP, TopK: r.TopK, Extra: r.Extra, NoStream: true}, "detokenize", false)
	if err != nil {
		return Chunk{}, fmt.Errorf("trtllm: encoding the request: %w", err)
	}
	var hdr http.Header
	if r.RequestID != "" {
		hdr = http.Header{"X-Request-Id": {r.RequestID}}
	}
	resp, err := c.h.Submit(ctx, http.MethodPost, "/v1/completions", body, hdr)
	if err != nil {
		return Chunk{}, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxEventBytes))
	if err != nil {
		if ctx.Err() != nil {
			return Chunk{}, ctx.Err()
		}
		return Chunk{}, fmt.Errorf("trtllm: reading the completion answer: %w", err)
	}
	ch, u, err := decodeFrame(b)
	if err != nil {
		return Chunk{}, err
	}
	if ch == nil || ch.FinishReason == "" {
		return Chunk{}, fmt.Errorf("trtllm: completion answer without a finished choice: %.200q", b)
	}
	if u != nil {
		ch.Usage = &Usage{PromptTokens: u.PromptTokens, CompletionTokens: u.CompletionTokens, TotalTokens: u.TotalTokens,
			CachedTokens: u.CachedTokens()}
	}
	return *ch, nil
}

// Close closes the connection (trtllm-serve then aborts the request if it still runs).
// Safe to call more than once and from another goroutine than Recv.
func (s *Stream) Close() error { return s.st.Close() }

// completionBody encodes r as a /v1/completions JSON body that asks for token ids
// ("detokenize": false).
func completionBody(r CompletionRequest) ([]byte, error) {
	return enginehttp.CompletionBody(enginehttp.Completion{Model: r.Model, PromptTokenIDs: r.PromptTokenIDs,
		MaxTokens: r.MaxTokens, MinTokens: r.MinTokens, IgnoreEOS: r.IgnoreEOS, StopTokenIDs: r.StopTokenIDs, Seed: r.Seed,
		Temperature: r.Temperature, TopP: r.TopP, TopK: r.TopK, Extra: r.Extra}, "detokenize", false)
}
