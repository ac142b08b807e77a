package enginehttp

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"strconv"
)

// Usage is the usage member of an OpenAI-style completion chunk (vLLM, trtllm-serve).
type Usage struct {
	PromptTokens        int `json:"prompt_tokens"`
	CompletionTokens    int `json:"completion_tokens"`
	TotalTokens         int `json:"total_tokens"`
	PromptTokensDetails *struct {
		CachedTokens int `json:"cached_tokens"`
	} `json:"prompt_tokens_details"`
}

// CachedTokens is prompt_tokens_details.cached_tokens (0 when absent).
func (u *Usage) CachedTokens() int {
	if u.PromptTokensDetails == nil {
		return 0
	}
	return u.PromptTokensDetails.CachedTokens
}

// StopReason reads a choice's stop_reason (vLLM, trtllm-serve): absent or null, the stop
// token id that ended the request (an integer in 0..2^32-1; isID), or the stop string.
// Errors: any other value.
func StopReason(raw json.RawMessage) (id uint32, isID bool, str string, err error) {
	if len(raw) == 0 || string(raw) == "null" {
		return 0, false, "", nil
	}
	var n float64
	switch {
	case json.Unmarshal(raw, &n) == nil && n >= 0 && n <= math.MaxUint32 && n == math.Trunc(n):
		return uint32(n), true, "", nil
	case json.Unmarshal(raw, &str) == nil:
		return 0, false, str, nil
	}
	return 0, false, "", fmt.Errorf("stop_reason %.100s is neither a token id nor a string", raw)
}

// Completion is what a streamed token-id /v1/completions request of vLLM and
// trtllm-serve holds alike.
type Completion struct {
	// Model: "" leaves it out.
	Model          string
	PromptTokenIDs []uint32
	// MaxTokens is always written; MinTokens when > 0.
	MaxTokens, MinTokens int
	IgnoreEOS            bool
	StopTokenIDs         []uint32
	Seed                 *int64
	Temperature, TopP    *float64
	// TopK: 0 leaves it out.
	TopK int
	// Extra members, written first unless the request sets the same name.
	Extra map[string]any
	// NoStream asks for one JSON answer ("stream": false, no stream_options) instead of
	// a stream (a prefill leg of disaggregated serving, docs/reference.md §6).
	NoStream bool
}

// CompletionBody encodes c as a JSON body that streams with usage
// ("stream": true, "stream_options": {"include_usage": true}; "stream": false with
// NoStream) and ends with the
// engine's token-id switch: the member switchKey with the value switchOn (vLLM:
// "return_token_ids": true; trtllm-serve: "detokenize": false). Members left at their
// zero value are left out, so the server's defaults apply; the id arrays are written
// directly. Errors: an Extra value encoding/json refuses, or a temperature or top_p that
// is not a finite number.
func CompletionBody(c Completion, switchKey string, switchOn bool) ([]byte, error) {
	b := make([]byte, 0, 256+11*len(c.PromptTokenIDs))
	b = append(b, '{')
	own := map[string]bool{"model": c.Model != "", "prompt": true, "max_tokens": true, "min_tokens": c.MinTokens > 0,
		"ignore_eos": c.IgnoreEOS, "stop_token_ids": len(c.StopTokenIDs) > 0, "seed": c.Seed != nil,
		"temperature": c.Temperature != nil, "top_p": c.TopP != nil, "top_k": c.TopK != 0,
		"stream": true, "stream_options": true, switchKey: true}
	b, err := Extra(b, c.Extra, own)
	if err != nil {
		return nil, err
	}
	if c.Model != "" {
		b = String(Key(b, "model"), c.Model)
	}
	b = IDs(Key(b, "prompt"), c.PromptTokenIDs)
	b = Int(b, "max_tokens", int64(c.MaxTokens))
	if c.MinTokens > 0 {
		b = Int(b, "min_tokens", int64(c.MinTokens))
	}
	if c.IgnoreEOS {
		b = append(Key(b, "ignore_eos"), "true"...)
	}
	if len(c.StopTokenIDs) > 0 {
		b = IDs(Key(b, "stop_token_ids"), c.StopTokenIDs)
	}
	if c.Seed != nil {
		b = Int(b, "seed", *c.Seed)
	}
	for _, f := range []struct {
		key string
		v   *float64
	}{{"temperature", c.Temperature}, {"top_p", c.TopP}} {
		if f.v == nil {
			continue
		}
		if b, err = Float(b, f.key, *f.v); err != nil {
			return nil, err
		}
	}
	if c.TopK != 0 {
		b = Int(b, "top_k", int64(c.TopK))
	}
	if c.NoStream {
		b = append(b, `,"stream":false`...)
	} else {
		b = append(b, `,"stream":true,"stream_options":{"include_usage":true}`...)
	}
	b = append(Key(b, switchKey), strconv.FormatBool(switchOn)...)
	return append(b, '}'), nil
}

// CompletionStream reads an OpenAI-style completion stream (vLLM, trtllm-serve) whose
// chunks carry one choice each. Not safe for concurrent use.
type CompletionStream[C any] struct {
	st       *Stream
	decode   func(data []byte) (choice *C, usage *Usage, err error)
	finished func(*C) bool // the choice carries a finish reason
	empty    func(*C) bool // a choice without one carries nothing to hand out
	done     bool
}

// NewCompletionStream reads st's events. decode turns an event's data into its choice
// (nil for a chunk without one, such as the usage chunk) and its usage (nil when
// absent); finished tells whether a choice carries a finish reason, empty whether a
// choice without one carries nothing to hand out.
func NewCompletionStream[C any](st *Stream, decode func([]byte) (*C, *Usage, error), finished, empty func(*C) bool) *CompletionStream[C] {
	return &CompletionStream[C]{st: st, decode: decode, finished: finished, empty: empty}
}

// Next returns the next choice worth handing out. The one with the finish reason comes
// with the request's usage: its own, or that of the usage chunk after it (the last
// before [DONE]; nil when the server sent none); after it, Next returns io.EOF. Errors:
// decode's, the stream's, or a [DONE] before a finish reason (wrapping
// io.ErrUnexpectedEOF).
func (r *CompletionStream[C]) Next() (C, *Usage, error) {
	var zero C
	if r.done {
		return zero, nil, io.EOF
	}
	for {
		ch, usage, done, err := r.frame()
		switch {
		case err != nil:
			return zero, nil, err
		case done:
			r.done = true
			return zero, nil, fmt.Errorf("%s: stream ended with [DONE] before a finish reason: %w", r.st.sse.name, io.ErrUnexpectedEOF)
		case ch == nil:
			continue // a usage chunk without a finished chunk before it
		case !r.finished(ch) && r.empty(ch):
			continue
		case !r.finished(ch):
			return *ch, nil, nil
		}
		// The last chunk: take the usage chunk (if any) and [DONE].
		for {
			_, u, done, err := r.frame()
			if err != nil {
				return zero, nil, err
			}
			if done {
				r.done = true
				return *ch, usage, nil
			}
			if u != nil {
				usage = u
			}
		}
	}
}

// frame reads and decodes one event; done is true for [DONE].
func (r *CompletionStream[C]) frame() (ch *C, u *Usage, done bool, err error) {
	data, err := r.st.Event()
	if err != nil {
		return nil, nil, false, err
	}
	if string(data) == "[DONE]" {
		return nil, nil, true, nil
	}
	ch, u, err = r.decode(data)
	return ch, u, false, err
}
