package launcher

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"strconv"
	"time"

	"github.com/turbine-llm/turbine/engines"
	"github.com/turbine-llm/turbine/engines/mocker/kvtransfer"
	"github.com/turbine-llm/turbine/engines/vllm"
	"github.com/turbine-llm/turbine/messages"
)

// Legs of a disaggregated request (messages.DisaggParams.leg).
const (
	LegPrefill = "prefill"
	LegDecode  = "decode"
)

// vllmPrefillParams is the kv_transfer_params of a prefill leg, as docs/reference.md §6 (and
// vLLM's own disaggregated proxies) send it.
var vllmPrefillParams = json.RawMessage(`{"do_remote_decode":true,"do_remote_prefill":false,"remote_engine_id":null,"remote_block_ids":null,"remote_host":null,"remote_port":null}`)

// vllmEngine adapts the vLLM-dialect client to engines.Engine. An output constraint
// (SamplingParams.structured) is sent as structured_outputs (vllm.StructuredOutputs).
//
// Disaggregated serving (SamplingParams.disagg, docs/reference.md §6): a prefill leg is sent with
// vllmPrefillParams, max_tokens 1, min_tokens 1 and "stream": false; its one chunk
// carries the answer's kv_transfer_params (Chunk.KVTransferParams). min_tokens 1 makes
// the leg end on its length limit, the only finish after which vLLM keeps the blocks and
// returns kv_transfer_params; its token is not part of the answer (the decode leg
// generates the whole output). A prefill leg cancelled while it runs is finished with
// engines.FinishPrefill (prefillGrace), so that an answer that names pinned blocks
// still reaches fn. A decode leg is streamed as usual with the prefill leg's
// kv_transfer_params, unchanged.
type vllmEngine struct {
	c     *vllm.Client
	model string
	// mock: the engine is Turbine's mock engine, whose pinned blocks ReleaseKV can
	// release over its KV transfer port.
	mock bool
}

// newVLLMEngine returns an engines.Engine (and engines.KVReleaser) for an engine
// speaking vLLM's HTTP dialect at baseURL, serving model; mock says whether it is
// Turbine's mock engine. A malformed baseURL gives an engine whose every call fails with
// that error.
func newVLLMEngine(baseURL, model string, mock bool) engines.Engine {
	c, err := vllm.New(baseURL, nil)
	if err != nil {
		return brokenEngine{err}
	}
	return &vllmEngine{c: c, model: model, mock: mock}
}

func (e *vllmEngine) Health(ctx context.Context) error { return e.c.Health(ctx) }

// Generate runs a request, or one leg of a disaggregated request (see vllmEngine).
// Errors: an unknown leg, a decode leg without a kv_transfer_params object, and the
// client's; a decode leg whose KV blocks could not be loaded wraps engines.ErrKVTransfer.
func (e *vllmEngine) Generate(ctx context.Context, requestID string, tokens []uint32, s *messages.SamplingParams,
	fn func(engines.Chunk) error) error {
	req := vllm.CompletionRequest{Model: e.model, PromptTokenIDs: tokens, RequestID: requestID,
		MaxTokens: int(s.GetMaxTokens()), MinTokens: int(s.GetMinTokens()), IgnoreEOS: s.GetIgnoreEos(),
		StopTokenIDs: s.GetStopTokenIds()}
	if s.GetHasSeed() {
		v := s.Seed
		req.Seed = &v
	}
	if s.GetHasTemperature() {
		v := s.Temperature
		req.Temperature = &v
	}
	if s.GetHasTopP() {
		v := s.TopP
		req.TopP = &v
	}
	if s.GetPresencePenalty() != 0 || s.GetFrequencyPenalty() != 0 {
		req.Extra = map[string]any{"presence_penalty": s.PresencePenalty, "frequency_penalty": s.FrequencyPenalty}
	}
	extra := func(k string, v any) {
		req.Extra = maps.Clone(req.Extra)
		if req.Extra == nil {
			req.Extra = map[string]any{}
		}
		req.Extra[k] = v
	}
	so, err := vllm.StructuredOutputs(s.GetStructured())
	if err != nil {
		return err
	}
	if so != nil {
		extra("structured_outputs", so)
	}
	switch leg := s.GetDisagg(); leg.GetLeg() {
	case "":
	case LegPrefill:
		req.MaxTokens, req.MinTokens = 1, 1
		extra("kv_transfer_params", vllmPrefillParams)
		ch, err := engines.FinishPrefill(ctx, e.prefillGrace(), func(ctx context.Context) (vllm.Chunk, error) {
			return e.c.CompleteOnce(ctx, req)
		})
		if err != nil {
			return err
		}
		if err := fn(vllmChunk(ch)); err != nil {
			return err
		}
		return ctx.Err()
	case LegDecode:
		p := leg.GetKvTransferParams()
		if !isJSONObject(p) {
			return fmt.Errorf("vllm: a decode leg needs its prefill leg's kv_transfer_params (a JSON object), got %.100q", p)
		}
		extra("kv_transfer_params", json.RawMessage(p))
	default:
		return fmt.Errorf("vllm: disaggregated leg %q: want %q or %q", leg.GetLeg(), LegPrefill, LegDecode)
	}
	decode := s.GetDisagg().GetLeg() == LegDecode
	stream, err := e.c.Complete(ctx, req)
	if err != nil {
		return kvLoadFailure(decode, err)
	}
	defer stream.Close()
	for {
		ch, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return kvLoadFailure(decode, err)
		}
		if err := fn(vllmChunk(ch)); err != nil {
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
	var ve *vllm.Error
	if decode && errors.As(err, &ve) && engines.IsKVLoadFailureAnswer(ve.Type, ve.Message) {
		return fmt.Errorf("%w: %w", engines.ErrKVTransfer, err)
	}
	return err
}

// prefillGrace is how long a cancelled prefill leg may still run (engines.FinishPrefill):
// on the mock engine, whose pinned blocks ReleaseKV releases, engines.PrefillGrace; on
// vLLM none (aborting the request frees its blocks, while a leg that finishes pins them
// until VLLM_NIXL_ABORT_REQUEST_TIMEOUT).
func (e *vllmEngine) prefillGrace() time.Duration {
	if e.mock {
		return engines.PrefillGrace
	}
	return 0
}

func vllmChunk(ch vllm.Chunk) engines.Chunk {
	out := engines.Chunk{TokenIDs: ch.TokenIDs, FinishReason: ch.FinishReason, KVTransferParams: string(ch.KVTransferParams)}
	if ch.Usage != nil {
		out.PromptTokens, out.CachedTokens, out.CompletionTokens = ch.Usage.PromptTokens, ch.Usage.CachedTokens, ch.Usage.CompletionTokens
	}
	return out
}

func isJSONObject(s string) bool {
	var m map[string]json.RawMessage
	return json.Unmarshal([]byte(s), &m) == nil && m != nil
}

// ReleaseKV releases the blocks a prefill leg pinned (engines.KVReleaser). On the mock
// engine it sends a release for remote_request_id to remote_host:remote_port, naming
// remote_engine_id; parameters without blocks (nothing was pinned) or empty ones
// release nothing. On vLLM it does nothing and returns nil: vLLM has no such API, and
// frees the blocks after VLLM_NIXL_ABORT_REQUEST_TIMEOUT (480 s by default). Errors
// (mock engine): malformed parameters, or the transfer port unreachable.
func (e *vllmEngine) ReleaseKV(ctx context.Context, requestID, kvTransferParams string) error {
	if !e.mock || kvTransferParams == "" {
		return nil
	}
	var kp struct {
		RemoteEngineID  string  `json:"remote_engine_id"`
		RemoteRequestID string  `json:"remote_request_id"`
		RemoteHost      string  `json:"remote_host"`
		RemotePort      int     `json:"remote_port"`
		RemoteBlockIDs  []int64 `json:"remote_block_ids"`
	}
	if err := json.Unmarshal([]byte(kvTransferParams), &kp); err != nil {
		return fmt.Errorf("vllm: releasing the KV of %s: kv_transfer_params: %w", requestID, err)
	}
	if len(kp.RemoteBlockIDs) == 0 {
		return nil
	}
	if kp.RemoteHost == "" || kp.RemotePort <= 0 || kp.RemoteRequestID == "" {
		return fmt.Errorf("vllm: releasing the KV of %s: kv_transfer_params lacks remote_host, remote_port or remote_request_id: %.200s",
			requestID, kvTransferParams)
	}
	addr := net.JoinHostPort(kp.RemoteHost, strconv.Itoa(kp.RemotePort))
	if _, err := kvtransfer.Release(ctx, addr, kp.RemoteEngineID, kp.RemoteRequestID); err != nil {
		return fmt.Errorf("vllm: releasing the KV of %s: %w", requestID, err)
	}
	return nil
}

func (e *vllmEngine) Load(ctx context.Context) (*messages.WorkerLoad, error) {
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
	_ engines.Engine     = (*vllmEngine)(nil)
	_ engines.KVReleaser = (*vllmEngine)(nil)
)

type brokenEngine struct{ err error }

func (b brokenEngine) Health(context.Context) error { return b.err }
func (b brokenEngine) Generate(context.Context, string, []uint32, *messages.SamplingParams, func(engines.Chunk) error) error {
	return b.err
}
func (b brokenEngine) Load(context.Context) (*messages.WorkerLoad, error) { return nil, b.err }
