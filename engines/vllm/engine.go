package vllm

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"time"

	"github.com/turbine-llm/turbine/engines"
	"github.com/turbine-llm/turbine/engines/launcher"
	"github.com/turbine-llm/turbine/messages"
)

// prefillLegParams is the kv_transfer_params of a prefill leg, as docs/reference.md §6 (and
// vLLM's own disaggregated proxies) send it.
var prefillLegParams = json.RawMessage(`{"do_remote_decode":true,"do_remote_prefill":false,"remote_engine_id":null,"remote_block_ids":null,"remote_host":null,"remote_port":null}`)

// Engine adapts a Client to engines.Engine (and engines.KVReleaser). The sampling
// settings are sent under vLLM's names (SamplingExtras), and an output constraint
// (SamplingParams.structured) as structured_outputs (StructuredOutputs).
//
// Disaggregated serving (SamplingParams.disagg, docs/reference.md §6): a prefill leg is
// sent with prefillLegParams, max_tokens 1, min_tokens 1 and "stream": false; its one chunk
// carries the answer's kv_transfer_params (Chunk.KVTransferParams). min_tokens 1 makes
// the leg end on its length limit, the only finish after which vLLM keeps the blocks and
// returns kv_transfer_params; its token is not part of the answer (the decode leg
// generates the whole output). A prefill leg cancelled while it runs is finished with
// engines.FinishPrefill (prefillGrace), so that an answer that names pinned blocks
// still reaches fn. A decode leg is streamed as usual with the prefill leg's
// kv_transfer_params, unchanged.
type Engine struct {
	c    *Client
	opts EngineOptions
}

// EngineOptions configure an Engine.
type EngineOptions struct {
	// Model is the served model name sent in every request.
	Model string
	// ReleaseKV, when set, releases the blocks a prefill leg pinned, named by its
	// kv_transfer_params (Engine.ReleaseKV calls it), and lets a cancelled prefill leg
	// finish within engines.PrefillGrace, since what it pins can then be released.
	// Turbine's mock engine has such an API (engines/mocker/launch sets it); vLLM has
	// none: nil.
	ReleaseKV func(ctx context.Context, requestID, kvTransferParams string) error
}

// NewEngine returns an Engine over c.
func NewEngine(c *Client, o EngineOptions) *Engine { return &Engine{c: c, opts: o} }

// Connect returns an Engine for the engine speaking vLLM's HTTP dialect at baseURL, with
// a client of its own (New); a malformed baseURL gives a launcher.FailedEngine.
func Connect(baseURL string, o EngineOptions) engines.Engine {
	c, err := New(baseURL, nil)
	if err != nil {
		return launcher.FailedEngine{Err: err}
	}
	return NewEngine(c, o)
}

func (e *Engine) Health(ctx context.Context) error { return e.c.Health(ctx) }

// Generate runs a request, or one leg of a disaggregated request (see Engine).
// Errors: an unknown leg, a decode leg without a kv_transfer_params object, and the
// client's; a decode leg whose KV blocks could not be loaded wraps engines.ErrKVTransfer;
// a request vLLM refuses itself (400, 422), or that cannot be sent to it (requestFrom), is
// an *engines.InvalidRequestError.
func (e *Engine) Generate(ctx context.Context, requestID string, tokens []uint32, s *messages.SamplingParams,
	fn func(engines.Chunk) error) error {
	req, err := requestFrom(e.opts.Model, requestID, tokens, s)
	if err != nil {
		return engines.Refused("vllm", err)
	}
	req.Logprobs, req.PromptLogprobs = s.Logprobs, s.PromptLogprobs
	req.IgnorePromptTokenIDs = true // engines.Chunk has no prompt: the worker knows it
	extra := func(k string, v any) {
		req.Extra = maps.Clone(req.Extra)
		if req.Extra == nil {
			req.Extra = map[string]any{}
		}
		req.Extra[k] = v
	}
	switch leg := s.GetDisagg(); leg.GetLeg() {
	case messages.Leg_LEG_AGGREGATED:
	case messages.Leg_LEG_PREFILL:
		req.MaxTokens, req.MinTokens = 1, 1
		extra("kv_transfer_params", prefillLegParams)
		ch, err := engines.FinishPrefill(ctx, e.prefillGrace(), func(ctx context.Context) (Chunk, error) {
			return e.c.CompleteOnce(ctx, req)
		})
		if err != nil {
			return err
		}
		if err := fn(engineChunk(ch)); err != nil {
			return err
		}
		return ctx.Err()
	case messages.Leg_LEG_DECODE:
		p := leg.GetKvTransferParams()
		if !isJSONObject(p) {
			return fmt.Errorf("vllm: a decode leg needs its prefill leg's kv_transfer_params (a JSON object), got %.100q", p)
		}
		extra("kv_transfer_params", json.RawMessage(p))
	default:
		return fmt.Errorf("vllm: disaggregated leg %s: want prefill or decode", leg.GetLeg().Label())
	}
	decode := s.GetDisagg().GetLeg() == messages.Leg_LEG_DECODE
	if req.PromptLogprobs != nil {
		// vLLM answers prompt_logprobs without streaming only (logprobs.go).
		ch, err := e.c.CompleteOnce(ctx, req)
		if err != nil {
			return kvLoadFailure(decode, err)
		}
		return fn(engineChunk(ch))
	}
	stream, err := e.c.Complete(ctx, req)
	if err != nil {
		return kvLoadFailure(decode, err)
	}
	defer stream.Release()
	for {
		ch, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return kvLoadFailure(decode, err)
		}
		if err := fn(engineChunk(ch)); err != nil {
			return err
		}
		if ch.FinishReason != "" {
			return nil
		}
	}
}

// kvLoadFailure wraps err, the error of a decode leg (decode true), in
// engines.ErrKVTransfer when it is the engine's answer that the leg's KV blocks could
// not be loaded from the prefill engine (engines.IsKVLoadFailureAnswer: the mock
// engine's 503 KVTransferError; vLLM with kv_load_failure_policy "fail" when its answer
// names the KV load failure — released vLLM answers a bare 500 "Internal server error",
// which stays an engine error).
func kvLoadFailure(decode bool, err error) error {
	var ve *Error
	if decode && errors.As(err, &ve) && engines.IsKVLoadFailureAnswer(ve.Type, ve.Message) {
		return fmt.Errorf("%w: %w", engines.ErrKVTransfer, err)
	}
	return err
}

// prefillGrace is how long a cancelled prefill leg may still run (engines.FinishPrefill):
// engines.PrefillGrace where the blocks it pins can be released (EngineOptions.ReleaseKV:
// the mock engine); on vLLM none (aborting the request frees its blocks, while a leg
// that finishes pins them until VLLM_NIXL_ABORT_REQUEST_TIMEOUT).
func (e *Engine) prefillGrace() time.Duration {
	if e.opts.ReleaseKV != nil {
		return engines.PrefillGrace
	}
	return 0
}

func engineChunk(ch Chunk) engines.Chunk {
	out := engines.Chunk{TokenIDs: ch.TokenIDs, FinishReason: ch.FinishReason, KVTransferParams: string(ch.KVTransferParams),
		Logprobs: ch.Logprobs, PromptLogprobs: ch.PromptLogprobs}
	if ch.Usage != nil {
		out.PromptTokens, out.CachedTokens, out.CompletionTokens = ch.Usage.PromptTokens, ch.Usage.CachedTokens, ch.Usage.CompletionTokens
	}
	return out
}

func isJSONObject(s string) bool {
	var m map[string]json.RawMessage
	return json.Unmarshal([]byte(s), &m) == nil && m != nil
}

// ReleaseKV releases the blocks a prefill leg pinned (engines.KVReleaser) through
// EngineOptions.ReleaseKV. Without it (vLLM) it does nothing and returns nil: vLLM has
// no such API, and frees the blocks after VLLM_NIXL_ABORT_REQUEST_TIMEOUT (480 s by
// default). Errors: ReleaseKV's (malformed parameters, or the engine unreachable).
func (e *Engine) ReleaseKV(ctx context.Context, requestID, kvTransferParams string) error {
	if e.opts.ReleaseKV == nil || kvTransferParams == "" {
		return nil
	}
	return e.opts.ReleaseKV(ctx, requestID, kvTransferParams)
}

// LoadLora loads a LoRA adapter into the engine (engines.LoraLoader; Client.LoadLora).
func (e *Engine) LoadLora(ctx context.Context, name, path string) error {
	return e.c.LoadLora(ctx, name, path)
}

// UnloadLora unloads a LoRA adapter (engines.LoraLoader; Client.UnloadLora).
func (e *Engine) UnloadLora(ctx context.Context, name string) error {
	return e.c.UnloadLora(ctx, name)
}

func (e *Engine) Load(ctx context.Context) (*messages.WorkerLoad, error) {
	l, err := e.c.Load(ctx)
	if err != nil {
		return nil, err
	}
	out := &messages.WorkerLoad{Running: int32(l.Running), Waiting: int32(l.Waiting), KvUsage: l.KVCacheUsage,
		TotalBlocks: int64(l.NumGPUBlocks)}
	out.ActiveBlocks = int64(l.KVCacheUsage * float64(l.NumGPUBlocks))
	return out, nil
}

var (
	_ engines.Engine     = (*Engine)(nil)
	_ engines.KVReleaser = (*Engine)(nil)
	_ engines.LoraLoader = (*Engine)(nil)
)
