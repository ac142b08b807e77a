package sglang

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"sync"
	"sync/atomic"

	"github.com/turbine-llm/turbine/engines/internal/enginehttp"
	"github.com/turbine-llm/turbine/messages"
)

// SamplingParams are the sampling_params of a generate request (SGLang's
// SamplingParams names). Nil pointers and zero values are left out, so the server's
// defaults apply.
type SamplingParams struct {
	// MaxNewTokens >= 1 (max_new_tokens).
	MaxNewTokens int
	// MinNewTokens suppresses EOS and stop tokens until that many were generated.
	MinNewTokens int
	Temperature  *float64
	TopP         *float64
	// TopK: 0 leaves it out (the server's default: the whole vocabulary).
	TopK              int
	MinP              *float64
	FrequencyPenalty  *float64
	PresencePenalty   *float64
	RepetitionPenalty *float64
	StopTokenIDs      []uint32
	IgnoreEOS         bool
	// Seed is sampling_seed (SGLang versions from late 2025 on; older ones refuse it).
	Seed *int64
	// JSONSchema (json_schema, a JSON Schema as JSON text), Regex (regex) and EBNF (ebnf)
	// constrain the output; at most one ("" leaves it out). See samplingFrom.
	JSONSchema, Regex, EBNF string
	// Extra keys added to sampling_params as they are, unless set above.
	Extra map[string]any
}

// GenerateRequest is one streamed generation from token ids.
type GenerateRequest struct {
	// RID is the request id (rid); required, unique among the server's live requests:
	// it is what /abort_request names.
	RID string
	// InputIDs: the prompt; at least one.
	InputIDs []uint32
	Sampling SamplingParams
	// Extra top-level GenerateReqInput fields (e.g. bootstrap_host, bootstrap_port,
	// bootstrap_room, lora_path), added unless the client sets the same key.
	Extra map[string]any
	// Logprobs, when not nil, asks for logprobs (logprobs.go): return_logprob,
	// top_logprobs_num and logprob_start_len.
	Logprobs *LogprobRequest
}

// Chunk is one step of a stream.
type Chunk struct {
	// TokenIDs generated since the previous chunk. A stop token (EOS or one of
	// StopTokenIDs) that ended the request is the last id here.
	TokenIDs []uint32
	// FinishReason is "" until the last chunk: "stop", "length" or "abort" (an abort
	// without an HTTP status; one with a status is returned as *Error).
	FinishReason string
	// StopTokenID is the token that matched on a "stop" finish, when HasStopTokenID;
	// StopString the stop string that matched.
	StopTokenID    uint32
	HasStopTokenID bool
	StopString     string
	// AbortMessage is the engine's message on an "abort" finish.
	AbortMessage string
	// Token counts from meta_info (every chunk carries them; final on the last).
	PromptTokens, CompletionTokens, CachedTokens int
	// Logprobs holds one entry per id of TokenIDs when GenerateRequest.Logprobs asked
	// for output logprobs; PromptLogprobs one per prompt token (the first's logprob NaN),
	// once, on the first chunk that has them, when it asked for the prompt's.
	Logprobs, PromptLogprobs []*messages.TokenLogprob
}

// Generate starts a streamed generation. The returned Stream must be closed; closing it
// before the last chunk (or cancelling ctx) closes the connection and posts
// /abort_request for r.RID. Errors: an invalid request, a transport error, or *Error for
// a non-200 answer.
func (c *Client) Generate(ctx context.Context, r GenerateRequest) (*Stream, error) {
	switch {
	case r.RID == "":
		return nil, errors.New("sglang: generate without a request id (rid)")
	case len(r.InputIDs) == 0:
		return nil, errors.New("sglang: generate without input ids")
	case r.Sampling.MaxNewTokens < 1:
		return nil, fmt.Errorf("sglang: max_new_tokens %d must be at least 1", r.Sampling.MaxNewTokens)
	case r.Sampling.MinNewTokens < 0 || r.Sampling.MinNewTokens > r.Sampling.MaxNewTokens:
		return nil, fmt.Errorf("sglang: min_new_tokens %d must be in 0..max_new_tokens (%d)", r.Sampling.MinNewTokens, r.Sampling.MaxNewTokens)
	}
	body, err := generateBody(r)
	if err != nil {
		return nil, fmt.Errorf("sglang: encoding the request: %w", err)
	}
	st, err := c.h.Stream(ctx, http.MethodPost, "/generate", body, nil, maxEventBytes)
	if err != nil {
		return nil, err
	}
	return &Stream{c: c, parent: ctx, st: st, rid: r.RID, lp: r.Logprobs, prompt: r.InputIDs}, nil
}

// maxEventBytes bounds one SSE event. With cumulative output (SGLang's default) every
// chunk repeats all output ids and the text so far: a 128 K-token answer makes chunks of
// about 1.5 MB.
const maxEventBytes = 64 << 20

// Stream reads a generation's chunks. Recv is not safe for concurrent use; Close may be
// called from another goroutine.
type Stream struct {
	c      *Client
	parent context.Context
	st     *enginehttp.Stream
	rid    string

	lp         *LogprobRequest // the logprobs asked (nil: none)
	prompt     []uint32
	promptDone bool // the prompt's logprobs were handed out

	seen     int         // output ids handed out so far
	last     uint32      // the last of them
	finished atomic.Bool // the last chunk was read (Close reads it from any goroutine)
	eof      bool

	closeOnce sync.Once
	closeErr  error
}

// Recv returns the next chunk; after the chunk with a FinishReason it returns io.EOF
// once the server's [DONE] arrived. Errors: the server's error frame or abort with a
// status (*Error), a malformed chunk, a stream that ends early, or the context's error.
// Any error closes the stream (aborting the request in the server).
func (s *Stream) Recv() (Chunk, error) { return enginehttp.Recv(s.st, s.recv, s.Close) }

func (s *Stream) recv() (Chunk, error) {
	if s.eof {
		return Chunk{}, io.EOF
	}
	for {
		data, err := s.st.Event()
		if err != nil {
			return Chunk{}, err
		}
		if string(data) == "[DONE]" {
			if !s.finished.Load() {
				return Chunk{}, fmt.Errorf("sglang: stream ended with [DONE] before a finish reason: %w", io.ErrUnexpectedEOF)
			}
			s.eof = true
			return Chunk{}, io.EOF
		}
		if s.finished.Load() {
			continue // nothing but [DONE] is expected after the last chunk
		}
		ch, ok, err := s.decode(data)
		if err != nil {
			return Chunk{}, err
		}
		if ok {
			return ch, nil
		}
	}
}

// frame is one streamed chunk; text is not read (it repeats what output_ids say).
type frame struct {
	Error     json.RawMessage `json:"error"`
	OutputIDs json.RawMessage `json:"output_ids"`
	MetaInfo  *struct {
		FinishReason     json.RawMessage `json:"finish_reason"`
		PromptTokens     int             `json:"prompt_tokens"`
		CompletionTokens *int            `json:"completion_tokens"`
		CachedTokens     int             `json:"cached_tokens"`
		logprobMeta
	} `json:"meta_info"`
}

// decode turns one event into a chunk; ok is false for a chunk with nothing new.
func (s *Stream) decode(data []byte) (Chunk, bool, error) {
	var f frame
	if err := json.Unmarshal(data, &f); err != nil {
		return Chunk{}, false, fmt.Errorf("sglang: malformed stream chunk %.200q: %w", data, err)
	}
	if len(f.Error) > 0 && string(f.Error) != "null" {
		return Chunk{}, false, errorFrom(0, data)
	}
	if f.MetaInfo == nil {
		return Chunk{}, false, fmt.Errorf("sglang: stream chunk without meta_info: %.200q", data)
	}
	var ch Chunk
	m := f.MetaInfo
	ch.PromptTokens, ch.CachedTokens = m.PromptTokens, m.CachedTokens
	if m.CompletionTokens != nil {
		ch.CompletionTokens = *m.CompletionTokens
	}
	if err := parseFinish(m.FinishReason, &ch); err != nil {
		return Chunk{}, false, err
	}
	if len(f.OutputIDs) == 0 || string(f.OutputIDs) == "null" {
		return Chunk{}, false, fmt.Errorf("sglang: stream chunk without output_ids: %.200q", data)
	}
	if err := s.newIDs(f.OutputIDs, m.CompletionTokens, &ch); err != nil {
		return Chunk{}, false, err
	}
	if err := s.logprobs(m.logprobMeta, &ch); err != nil {
		return Chunk{}, false, err
	}
	if ch.FinishReason != "" {
		s.finished.Store(true)
		return ch, true, nil
	}
	return ch, len(ch.TokenIDs) > 0 || len(ch.PromptLogprobs) > 0, nil
}

// logprobs sets ch's logprobs from m (logprobs.go), when asked.
func (s *Stream) logprobs(m logprobMeta, ch *Chunk) error {
	if s.lp == nil {
		return nil
	}
	var err error
	if s.lp.Output && len(ch.TokenIDs) > 0 {
		if ch.Logprobs, err = outputLogprobs(m, ch.TokenIDs, s.seen, s.lp.Top); err != nil {
			return err
		}
	}
	if s.lp.Prompt && !s.promptDone {
		if ch.PromptLogprobs, err = promptLogprobs(m, s.prompt, s.lp.PromptTop); err != nil {
			return err
		}
		s.promptDone = ch.PromptLogprobs != nil
	}
	return nil
}

// newIDs sets ch.TokenIDs to the ids not handed out before.
func (s *Stream) newIDs(raw json.RawMessage, completion *int, ch *Chunk) error {
	if s.c.opts.IncrementalOutput {
		ids, _, _, err := idList(raw, 0)
		if err != nil {
			return fmt.Errorf("sglang: %w", err)
		}
		if completion != nil && s.seen+len(ids) > *completion {
			return fmt.Errorf("sglang: %d output ids after %d exceed completion_tokens %d: the server streams cumulative output_ids (Options.IncrementalOutput must be false)",
				len(ids), s.seen, *completion)
		}
		ch.TokenIDs = ids
	} else {
		ids, n, before, err := idList(raw, s.seen)
		if err != nil {
			return fmt.Errorf("sglang: %w", err)
		}
		if n < s.seen || (s.seen > 0 && before != s.last) {
			return fmt.Errorf("sglang: output_ids (%d ids) do not extend the %d ids already received: the server streams incremental output_ids (--incremental-streaming-output; set Options.IncrementalOutput)",
				n, s.seen)
		}
		ch.TokenIDs = ids
	}
	if len(ch.TokenIDs) > 0 {
		s.seen += len(ch.TokenIDs)
		s.last = ch.TokenIDs[len(ch.TokenIDs)-1]
	}
	return nil
}

// parseFinish reads meta_info.finish_reason (null, an object, or a bare string from
// very old servers) into ch. An abort that carries an HTTP status is an *Error.
func parseFinish(raw json.RawMessage, ch *Chunk) error {
	if len(raw) == 0 || string(raw) == "null" {
		return nil
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		ch.FinishReason = s
		return nil
	}
	var fr struct {
		Type       string          `json:"type"`
		Matched    json.RawMessage `json:"matched"`
		Message    string          `json:"message"`
		StatusCode *int            `json:"status_code"`
		ErrType    *string         `json:"err_type"`
	}
	if err := json.Unmarshal(raw, &fr); err != nil || fr.Type == "" {
		return fmt.Errorf("sglang: finish_reason %.200s: want null or an object with a type", raw)
	}
	ch.FinishReason = fr.Type
	switch fr.Type {
	case "stop":
		if len(fr.Matched) == 0 || string(fr.Matched) == "null" {
			return nil
		}
		var n float64
		var str string
		var list []float64
		switch {
		case json.Unmarshal(fr.Matched, &n) == nil:
			if n < 0 || n > math.MaxUint32 || n != math.Trunc(n) {
				return fmt.Errorf("sglang: finish_reason.matched %s is not a token id", fr.Matched)
			}
			ch.StopTokenID, ch.HasStopTokenID = uint32(n), true
		case json.Unmarshal(fr.Matched, &str) == nil:
			ch.StopString = str
		case json.Unmarshal(fr.Matched, &list) == nil:
			// a list of token ids (multi-token stop sequences): nothing single to report
		default:
			return fmt.Errorf("sglang: finish_reason.matched %.100s is neither a token id nor a string", fr.Matched)
		}
	case "abort":
		if fr.StatusCode != nil && *fr.StatusCode != 0 {
			e := &Error{Status: *fr.StatusCode, Message: fr.Message}
			if fr.ErrType != nil {
				e.Type = *fr.ErrType
			}
			return e
		}
		ch.AbortMessage = fr.Message
	}
	return nil
}

// Close ends the stream. Before the last chunk it closes the connection and posts
// /abort_request for the request (bounded by Options.AbortTimeout); its error is the
// abort's. Safe to call more than once and from another goroutine than Recv.
func (s *Stream) Close() error {
	s.closeOnce.Do(func() {
		finished := s.finished.Load()
		_ = s.st.Close()
		if !finished {
			ctx, cancel := context.WithTimeout(context.WithoutCancel(s.parent), s.c.opts.AbortTimeout)
			defer cancel()
			s.closeErr = s.c.Abort(ctx, s.rid)
		}
	})
	return s.closeErr
}

// generateBody encodes r as a /generate JSON body; the id arrays are written directly.
func generateBody(r GenerateRequest) ([]byte, error) {
	b := make([]byte, 0, 256+11*len(r.InputIDs))
	b = append(b, '{')
	var err error
	own := map[string]bool{"rid": true, "input_ids": true, "sampling_params": true, "stream": true}
	extra := r.Extra
	if r.Logprobs != nil {
		extra = r.Logprobs.members()
		for k, v := range r.Extra {
			if _, ok := extra[k]; !ok {
				extra[k] = v
			}
		}
	}
	if b, err = enginehttp.Extra(b, extra, own); err != nil {
		return nil, err
	}
	b = enginehttp.String(enginehttp.Key(b, "rid"), r.RID)
	b = enginehttp.IDs(enginehttp.Key(b, "input_ids"), r.InputIDs)
	if b, err = samplingBody(enginehttp.Key(b, "sampling_params"), r.Sampling); err != nil {
		return nil, err
	}
	b = enginehttp.Key(b, "stream")
	b = append(b, "true}"...)
	return b, nil
}

func samplingBody(b []byte, p SamplingParams) ([]byte, error) {
	b = append(b, '{')
	own := map[string]bool{"max_new_tokens": true, "min_new_tokens": p.MinNewTokens > 0, "top_k": p.TopK != 0,
		"stop_token_ids": len(p.StopTokenIDs) > 0, "ignore_eos": p.IgnoreEOS, "sampling_seed": p.Seed != nil,
		"json_schema": p.JSONSchema != "", "regex": p.Regex != "", "ebnf": p.EBNF != ""}
	floats := []struct {
		key string
		v   *float64
	}{{"temperature", p.Temperature}, {"top_p", p.TopP}, {"min_p", p.MinP}, {"frequency_penalty", p.FrequencyPenalty},
		{"presence_penalty", p.PresencePenalty}, {"repetition_penalty", p.RepetitionPenalty}}
	for _, f := range floats {
		own[f.key] = f.v != nil
	}
	var err error
	if b, err = enginehttp.Extra(b, p.Extra, own); err != nil {
		return nil, err
	}
	b = enginehttp.Int(b, "max_new_tokens", int64(p.MaxNewTokens))
	if p.MinNewTokens > 0 {
		b = enginehttp.Int(b, "min_new_tokens", int64(p.MinNewTokens))
	}
	for _, f := range floats {
		if f.v == nil {
			continue
		}
		if b, err = enginehttp.Float(b, f.key, *f.v); err != nil {
			return nil, fmt.Errorf("sampling_params.%w", err)
		}
	}
	if p.TopK != 0 {
		b = enginehttp.Int(b, "top_k", int64(p.TopK))
	}
	if len(p.StopTokenIDs) > 0 {
		b = enginehttp.IDs(enginehttp.Key(b, "stop_token_ids"), p.StopTokenIDs)
	}
	if p.IgnoreEOS {
		b = append(enginehttp.Key(b, "ignore_eos"), "true"...)
	}
	if p.Seed != nil {
		b = enginehttp.Int(b, "sampling_seed", *p.Seed)
	}
	for _, f := range []struct{ key, v string }{{"json_schema", p.JSONSchema}, {"regex", p.Regex}, {"ebnf", p.EBNF}} {
		if f.v != "" {
			b = enginehttp.String(enginehttp.Key(b, f.key), f.v)
		}
	}
	return append(b, '}'), nil
}
