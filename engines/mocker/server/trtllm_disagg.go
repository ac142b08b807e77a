package server

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"strconv"

	"github.com/turbine-llm/turbine/engines/mocker"
	"github.com/turbine-llm/turbine/engines/mocker/kvtransfer"
)

// TensorRT-LLM's disaggregated serving (docs/reference.md §6; tensorrt_llm/serve/openai_protocol.py,
// DisaggregatedParams): a context leg carries disaggregated_params {"request_type":
// "context_only"}; its choice answers disaggregated_params {"request_type":
// "context_only", "first_gen_tokens", "ctx_request_id", "encoded_opaque_state",
// "draft_tokens"}, which the generation leg sends back with request_type
// "generation_only". The mock engine's opaque state is a kvtransfer.Handle (its transfer
// port, engine id, the context request's id and its full prompt blocks).

// trtllmLeg is a validated disaggregated_params.
type trtllmLeg struct {
	context bool               // context_only: keep the blocks for a generation leg
	remote  *kvtransfer.Handle // generation_only
}

// trtllmRequestTypes are DisaggregatedParams.request_type's values.
var trtllmRequestTypes = []string{"context_only", "generation_only", "context_and_generation"}

// parseTRTLLMDisagg validates disaggregated_params. Absent, null or
// context_and_generation: an ordinary request. The message names the field.
func parseTRTLLMDisagg(raw json.RawMessage) (trtllmLeg, string) {
	var leg trtllmLeg
	if len(raw) == 0 || string(raw) == "null" {
		return leg, ""
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(raw, &fields); err != nil || fields == nil {
		return leg, fmt.Sprintf("disaggregated_params must be an object, got %.100s", raw)
	}
	var typ string
	if err := json.Unmarshal(fields["request_type"], &typ); err != nil {
		return leg, "disaggregated_params.request_type is required: one of context_only, generation_only, context_and_generation"
	}
	switch typ {
	case "context_only":
		leg.context = true
		return leg, ""
	case "context_and_generation":
		return leg, ""
	case "generation_only":
	default:
		return leg, fmt.Sprintf("disaggregated_params.request_type %q: want one of %v", typ, trtllmRequestTypes)
	}
	var ctxID float64
	if err := json.Unmarshal(fields["ctx_request_id"], &ctxID); err != nil || ctxID != math.Trunc(ctxID) || ctxID < 0 {
		return leg, fmt.Sprintf("disaggregated_params.ctx_request_id must be the context request's id (an integer), got %.100s", fields["ctx_request_id"])
	}
	if v, ok := fields["first_gen_tokens"]; ok && string(v) != "null" {
		var toks []uint32
		if err := json.Unmarshal(v, &toks); err != nil {
			return leg, fmt.Sprintf("disaggregated_params.first_gen_tokens must be a list of token ids, got %.100s", v)
		}
	}
	var state string
	if err := json.Unmarshal(fields["encoded_opaque_state"], &state); err != nil || state == "" {
		return leg, fmt.Sprintf("disaggregated_params.encoded_opaque_state is required for generation_only, got %.100s", fields["encoded_opaque_state"])
	}
	h, err := kvtransfer.DecodeHandle(state)
	if err != nil {
		return leg, "disaggregated_params.encoded_opaque_state: " + err.Error()
	}
	// The id is compared as the number JSON wrote: ids above 2^53 lose precision in
	// float64, so the handle's key is parsed the same way.
	if k, err := strconv.ParseFloat(h.Key, 64); err != nil || k != ctxID {
		return leg, fmt.Sprintf("disaggregated_params.ctx_request_id %.0f is not the context request of encoded_opaque_state (%s)", ctxID, h.Key)
	}
	leg.remote = &h
	return leg, ""
}

// trtllmContextID is a fresh context request id: a random positive 53-bit integer, so
// that JSON numbers carry it exactly.
func trtllmContextID() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return strconv.FormatUint(binary.LittleEndian.Uint64(b[:])>>11|1, 10)
}

// pullTRTLLM reads a generation leg's blocks into p.req; false when it answered an error
// (or the client left): a failed read is a request-level error, as TensorRT-LLM's
// generation server answers a request whose KV cache transfer failed
// (DISAGG_TRANS_ERROR): 500 KVTransferError.
func (s *Server) pullTRTLLM(ctx context.Context, w http.ResponseWriter, p *trtllmParsed) bool {
	h := p.leg.remote
	if h == nil || len(h.BlockIDs) == 0 {
		return true
	}
	imported, terr := s.pullKV(ctx, remoteKV{addr: h.Addr(), engineID: h.EngineID, key: h.Key, blockIDs: h.BlockIDs}, len(p.req.Prompt))
	if terr != nil {
		if ctx.Err() != nil {
			return false
		}
		field := "disaggregated_params.encoded_opaque_state"
		if terr.field == "remote_request_id" {
			field = "disaggregated_params.ctx_request_id"
		}
		trtllmError(w, http.StatusInternalServerError, KVTransferErrorType,
			"%s: the KV cache transfer of context request %s failed (DISAGG_TRANS_ERROR): %s", field, h.Key, terr.msg)
		return false
	}
	p.req.ImportedTokens = imported
	return true
}

// trtllmDisaggParams pins a finished context leg's blocks and returns the
// disaggregated_params of its choice; nil for other requests.
func (s *Server) trtllmDisaggParams(ctx context.Context, p *trtllmParsed, o mocker.Output) map[string]any {
	if !p.leg.context || !o.Finished {
		return nil
	}
	blocks, ok := s.prefillDone(ctx, o.RequestID, o, len(p.req.Prompt), false)
	if !ok {
		return nil
	}
	host, n := s.kvTransferHostPort()
	h := kvtransfer.Handle{EngineID: s.xfer.engineID, Host: host, Port: n, Key: o.RequestID, BlockIDs: blocks}
	id, _ := strconv.ParseUint(o.RequestID, 10, 64)
	return map[string]any{"request_type": "context_only", "first_gen_tokens": o.TokenIDs, "ctx_request_id": id,
		"encoded_opaque_state": h.Encode(), "draft_tokens": nil}
}

// ReleaseTRTLLM releases the blocks a context leg pinned on a mock engine in
// trtllm-serve's dialect, named by the leg's disaggregated_params: the transfer handle
// in encoded_opaque_state says where to send the release. It is engines.KVReleaser's
// ReleaseKV of the TensorRT-LLM adapter on the mock engine (engines/mocker/launch);
// trtllm-serve itself has no such API. Empty parameters, or a handle without blocks,
// release nothing. Errors: malformed parameters, or the transfer port unreachable.
func ReleaseTRTLLM(ctx context.Context, requestID, kvTransferParams string) error {
	if kvTransferParams == "" {
		return nil
	}
	var dp struct {
		State string `json:"encoded_opaque_state"`
	}
	if err := json.Unmarshal([]byte(kvTransferParams), &dp); err != nil {
		return fmt.Errorf("trtllm: releasing the KV of %s: disaggregated_params: %w", requestID, err)
	}
	h, err := kvtransfer.DecodeHandle(dp.State)
	if err != nil {
		return fmt.Errorf("trtllm: releasing the KV of %s: %w", requestID, err)
	}
	if len(h.BlockIDs) == 0 {
		return nil
	}
	if _, err := kvtransfer.Release(ctx, h.Addr(), h.EngineID, h.Key); err != nil {
		return fmt.Errorf("trtllm: releasing the KV of %s: %w", requestID, err)
	}
	return nil
}
