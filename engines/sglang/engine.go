package sglang

import (
	"context"
	"errors"
	"fmt"
	"math"

	"github.com/turbine-llm/turbine/engines"
	"github.com/turbine-llm/turbine/engines/internal/enginehttp"
	"github.com/turbine-llm/turbine/messages"
)

// Engine adapts a Client to engines.Engine.
type Engine struct {
	c *Client
	// blockSize converts SGLang's token counts to KV blocks in WorkerLoad.
	blockSize int
}

// NewEngine returns an engines.Engine over c. blockSize is the KV block size, in tokens,
// in which WorkerLoad reports blocks (the router's block size); SGLang itself counts
// tokens. Errors: blockSize < 1.
func NewEngine(c *Client, blockSize int) (*Engine, error) {
	if blockSize < 1 {
		return nil, fmt.Errorf("sglang: block size %d must be at least 1", blockSize)
	}
	return &Engine{c: c, blockSize: blockSize}, nil
}

// Health returns nil when the server is ready (Client.Health).
func (e *Engine) Health(ctx context.Context) error { return e.c.Health(ctx) }

// Generate runs one request as rid requestID and calls fn for each chunk in order; the
// last carries the finish reason and the token counts. The sampling settings are sent
// under SGLang's names (generateRequest); bad_words and allowed_token_ids, which SGLang
// lacks, are an error (*engines.InvalidRequestError, engines.Refused). Cancelling ctx,
// or an error from fn, closes the stream and aborts the request in the server. A request
// SGLang refuses itself, with a 400 or 422 answer or an abort with such a status, is an
// *engines.InvalidRequestError (refusedAbort).
//
// Disaggregated serving (SamplingParams.disagg, docs/reference.md §6): both legs are the same
// request with bootstrap_host, bootstrap_port and bootstrap_room added; the server's
// --disaggregation-mode decides which leg it runs, and the caller sends both at once. No
// transfer parameters come back (Chunk.KVTransferParams stays empty): the decode server
// finds the KV by the room. Errors: an unknown leg, or a leg without a bootstrap host
// and port.
func (e *Engine) Generate(ctx context.Context, requestID string, tokens []uint32, s *messages.SamplingParams,
	fn func(engines.Chunk) error) error {
	req, err := generateRequest(requestID, tokens, s)
	if err != nil {
		return engines.Refused("sglang", err)
	}
	req.Logprobs = logprobRequestFrom(s)
	switch leg := s.GetDisagg(); leg.GetLeg() {
	case messages.Leg_LEG_AGGREGATED:
	case messages.Leg_LEG_PREFILL, messages.Leg_LEG_DECODE:
		if leg.GetBootstrapHost() == "" || leg.GetBootstrapPort() < 1 || leg.GetBootstrapPort() > 65535 {
			return fmt.Errorf("sglang: the %s leg of %s needs the prefill server's bootstrap host and port, got %q:%d",
				leg.GetLeg().Label(), requestID, leg.GetBootstrapHost(), leg.GetBootstrapPort())
		}
		if req.Extra == nil {
			req.Extra = map[string]any{}
		}
		req.Extra["bootstrap_host"], req.Extra["bootstrap_port"] = leg.GetBootstrapHost(), leg.GetBootstrapPort()
		req.Extra["bootstrap_room"] = leg.GetBootstrapRoom()
	default:
		return fmt.Errorf("sglang: disaggregated leg %s: want prefill or decode", leg.GetLeg().Label())
	}
	decode := s.GetDisagg().GetLeg() == messages.Leg_LEG_DECODE
	stream, err := e.c.Generate(ctx, req)
	if err != nil {
		return kvLoadFailure(decode, err)
	}
	defer stream.Close()
	return refusedAbort(kvLoadFailure(decode, enginehttp.Forward(stream.Recv, engineChunk, fn)))
}

// refusedAbort wraps err, a stream's error, in an *engines.InvalidRequestError when it
// is the server's abort of the request with a status that refuses the request itself
// (engines.InvalidRequestStatus: SGLang aborts an input it will not take, found once the
// request is queued, with status_code 400), unless it is wrapped so already. An error
// frame without a status stays an engine error: SGLang's stream sends one for any
// ValueError, its own failures included.
func refusedAbort(err error) error {
	var se *Error
	var inv *engines.InvalidRequestError
	if !errors.As(err, &se) || !engines.InvalidRequestStatus(se.Status) || errors.As(err, &inv) {
		return err
	}
	return &engines.InvalidRequestError{Status: se.Status, Message: se.Message, Err: err}
}

// kvLoadFailure wraps err, the error of a decode leg (decode true), in
// engines.ErrKVTransfer when it is the server's abort of a request whose KV transfer
// failed (engines.IsKVLoadFailureAnswer: "Decode transfer failed ... KVTransferError"):
// the prefill server is at fault, not this one.
func kvLoadFailure(decode bool, err error) error {
	var se *Error
	if decode && errors.As(err, &se) && engines.IsKVLoadFailureAnswer(se.Type, se.Message) {
		return fmt.Errorf("%w: %w", engines.ErrKVTransfer, err)
	}
	return err
}

// engineChunk carries the token counts on the last chunk only.
func engineChunk(ch Chunk) engines.Chunk {
	out := engines.Chunk{TokenIDs: ch.TokenIDs, FinishReason: ch.FinishReason, Logprobs: ch.Logprobs, PromptLogprobs: ch.PromptLogprobs}
	if ch.FinishReason != "" {
		out.PromptTokens, out.CachedTokens, out.CompletionTokens = ch.PromptTokens, ch.CachedTokens, ch.CompletionTokens
	}
	return out
}

// samplingFrom maps Turbine's sampling parameters to SGLang's names. An output
// constraint (SamplingParams.structured, docs/reference.md §16) becomes one of SGLang's
// three: a JSON Schema is json_schema (its text), json_object the schema
// {"type":"object"} (as SGLang's own OpenAI server sends it), a regex regex, a list of
// choices the regex that matches exactly one of them (enginehttp.ChoiceRegex), an EBNF
// grammar ebnf.
func samplingFrom(s *messages.SamplingParams) SamplingParams {
	p := SamplingParams{MaxNewTokens: int(s.GetMaxTokens()), MinNewTokens: int(s.GetMinTokens()),
		IgnoreEOS: s.GetIgnoreEos(), StopTokenIDs: s.GetStopTokenIds()}
	p.Temperature, p.TopP, p.Seed = enginehttp.OptionalSampling(s)
	if v := s.GetPresencePenalty(); v != 0 {
		p.PresencePenalty = &v
	}
	if v := s.GetFrequencyPenalty(); v != 0 {
		p.FrequencyPenalty = &v
	}
	switch so := s.GetStructured(); {
	case so.GetJsonSchema() != "":
		p.JSONSchema = so.GetJsonSchema()
	case so.GetJsonObject():
		p.JSONSchema = `{"type":"object"}`
	case so.GetRegex() != "":
		p.Regex = so.GetRegex()
	case len(so.GetChoice()) > 0:
		p.Regex = enginehttp.ChoiceRegex(so.GetChoice())
	case so.GetGrammar() != "":
		p.EBNF = so.GetGrammar()
	}
	return p
}

// Load scrapes the server's gauges: KvUsage is sglang:token_usage; TotalBlocks and
// ActiveBlocks are the KV token counts divided by the block size (ActiveBlocks from the
// usage when the server does not report used tokens).
func (e *Engine) Load(ctx context.Context) (*messages.WorkerLoad, error) {
	l, err := e.c.Load(ctx)
	if err != nil {
		return nil, err
	}
	return workerLoad(l, e.blockSize), nil
}

func workerLoad(l Load, blockSize int) *messages.WorkerLoad {
	out := &messages.WorkerLoad{Running: int32(l.Running), Waiting: int32(l.Queued), KvUsage: l.TokenUsage}
	bs := float64(blockSize)
	out.TotalBlocks = int64(math.Floor(l.MaxTotalTokens / bs))
	if l.UsedTokens > 0 {
		out.ActiveBlocks = int64(math.Ceil(l.UsedTokens / bs))
	} else {
		out.ActiveBlocks = int64(math.Round(l.TokenUsage * float64(out.TotalBlocks)))
	}
	return out
}

// LoadLora loads a LoRA adapter into the server (engines.LoraLoader; Client.LoadLora).
func (e *Engine) LoadLora(ctx context.Context, name, path string) error {
	return e.c.LoadLora(ctx, name, path)
}

// UnloadLora unloads a LoRA adapter (engines.LoraLoader; Client.UnloadLora).
func (e *Engine) UnloadLora(ctx context.Context, name string) error {
	return e.c.UnloadLora(ctx, name)
}

var (
	_ engines.Engine     = (*Engine)(nil)
	_ engines.LoraLoader = (*Engine)(nil)
)
