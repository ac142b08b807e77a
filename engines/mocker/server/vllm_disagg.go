package server

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net"
	"net/http"
	"strconv"

	"github.com/turbine-llm/turbine/engines/mocker"
	"github.com/turbine-llm/turbine/engines/mocker/kvtransfer"
)

// vLLM's disaggregated serving with the NIXL connector (docs/reference.md §6). A prefill leg
// carries kv_transfer_params {"do_remote_decode": true, ...} (other fields null); its
// answer carries the kv_transfer_params a decode leg sends back unchanged
// ({"do_remote_prefill": true, "remote_engine_id", "remote_block_ids", "remote_host",
// "remote_port", "remote_request_id", "tp_size"}).

// vllmLeg is a validated kv_transfer_params.
type vllmLeg struct {
	prefill bool      // do_remote_decode: keep the blocks for a decode leg
	remote  *remoteKV // do_remote_prefill with blocks to read
	blocks  int       // len(remote_block_ids) of a decode leg
}

func transferParam(field, format string, args ...any) *apiError {
	return badRequest("kv_transfer_params."+field, "kv_transfer_params."+field+" "+format, args...)
}

// parseKVTransferParams validates kv_transfer_params for a prompt of promptLen tokens.
// Absent, null, or both do_remote_* false: an ordinary request. Errors name the field.
func (s *Server) parseKVTransferParams(raw rawJSON, promptLen int) (vllmLeg, *apiError) {
	var leg vllmLeg
	if !raw.set || raw.isNull() {
		return leg, nil
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(raw.raw, &fields); err != nil || fields == nil {
		return leg, badRequest("kv_transfer_params", "kv_transfer_params must be an object, got %.100s", raw.raw)
	}
	flag := func(name string) (bool, *apiError) {
		v, ok := fields[name]
		if !ok || string(v) == "null" {
			return false, nil
		}
		var b bool
		if err := json.Unmarshal(v, &b); err != nil {
			return false, transferParam(name, "must be a boolean, got %.100s", v)
		}
		return b, nil
	}
	decode, aerr := flag("do_remote_decode")
	if aerr != nil {
		return leg, aerr
	}
	prefill, aerr := flag("do_remote_prefill")
	if aerr != nil {
		return leg, aerr
	}
	switch {
	case decode && prefill:
		return leg, badRequest("kv_transfer_params", "kv_transfer_params: do_remote_decode and do_remote_prefill are both true; a request is one leg")
	case decode:
		leg.prefill = true
		return leg, nil
	case !prefill:
		return leg, nil
	}
	str := func(name string) (string, *apiError) {
		v, ok := fields[name]
		var x string
		if !ok || string(v) == "null" {
			return "", transferParam(name, "is required with do_remote_prefill")
		}
		if err := json.Unmarshal(v, &x); err != nil || x == "" {
			return "", transferParam(name, "must be a non-empty string, got %.100s", v)
		}
		return x, nil
	}
	engineID, aerr := str("remote_engine_id")
	if aerr != nil {
		return leg, aerr
	}
	requestID, aerr := str("remote_request_id")
	if aerr != nil {
		return leg, aerr
	}
	host, aerr := str("remote_host")
	if aerr != nil {
		return leg, aerr
	}
	v, ok := fields["remote_port"]
	if !ok || string(v) == "null" {
		return leg, transferParam("remote_port", "is required with do_remote_prefill")
	}
	var port float64
	if err := json.Unmarshal(v, &port); err != nil || port != math.Trunc(port) || port < 1 || port > 65535 {
		return leg, transferParam("remote_port", "must be a TCP port (an integer 1-65535), got %.100s", v)
	}
	v, ok = fields["remote_block_ids"]
	if !ok || string(v) == "null" {
		return leg, transferParam("remote_block_ids", "is required with do_remote_prefill")
	}
	var list []any
	dec := json.NewDecoder(bytes.NewReader(v))
	dec.UseNumber()
	if err := dec.Decode(&list); err != nil {
		return leg, transferParam("remote_block_ids", "must be a list of block ids, got %.100s", v)
	}
	ids := make([]int64, len(list))
	for i, e := range list {
		n, _ := e.(json.Number)
		id, err := n.Int64()
		if err != nil || id < 0 || id > math.MaxInt32 {
			return leg, transferParam("remote_block_ids", "[%d] must be a block id (an integer 0-%d), got %v", i, math.MaxInt32, e)
		}
		ids[i] = id
	}
	if bs := s.opts.Engine.BlockSize; len(ids) > (promptLen+bs-1)/bs {
		return leg, transferParam("remote_block_ids", "lists %d blocks; a prompt of %d tokens fills %d blocks of %d tokens",
			len(ids), promptLen, (promptLen+bs-1)/bs, bs)
	}
	if v, ok := fields["tp_size"]; ok && string(v) != "null" {
		var tp float64
		if err := json.Unmarshal(v, &tp); err != nil || tp != math.Trunc(tp) || tp < 1 {
			return leg, transferParam("tp_size", "must be a positive integer, got %.100s", v)
		}
	}
	leg.blocks = len(ids)
	if len(ids) > 0 { // vLLM does not read when the prefill engine kept no full block
		leg.remote = &remoteKV{addr: net.JoinHostPort(host, strconv.Itoa(int(port))), engineID: engineID, key: requestID, blockIDs: ids}
	}
	return leg, nil
}

// KVTransferErrorType is the error type of the mock engine's answer to a decode leg
// whose KV blocks could not be read (every dialect; engines.IsKVLoadFailureAnswer).
const KVTransferErrorType = "KVTransferError"

// pullVLLM reads a decode leg's blocks into p.req; false when it answered an error (or
// the client left): a failed read is answered 503 KVTransferError naming the transfer
// parameter the prefill engine refused, unless the recompute policy lets the leg
// compute the prompt itself.
func (s *Server) pullVLLM(ctx context.Context, w http.ResponseWriter, p *parsed) bool {
	if p.leg.remote == nil {
		return true
	}
	imported, terr := s.pullKV(ctx, *p.leg.remote, len(p.req.Prompt))
	if terr != nil {
		if ctx.Err() != nil {
			return false
		}
		param := "kv_transfer_params"
		if terr.field != "" {
			param += "." + terr.field
		}
		writeError(w, &apiError{status: http.StatusServiceUnavailable, typ: KVTransferErrorType, param: param,
			msg: "KV cache load failed (kv_load_failure_policy fail): " + terr.msg})
		return false
	}
	p.req.ImportedTokens = imported
	return true
}

// prefillParams pins a finished prefill leg's blocks and returns the kv_transfer_params
// of its answer: nil when nothing was kept (a leg that finished on a stop token, as
// vLLM returns none then).
func (s *Server) prefillParams(ctx context.Context, p *parsed, o mocker.Output) *vllmKVTransferParams {
	if !p.leg.prefill || !o.Finished {
		return nil
	}
	blocks, ok := s.prefillDone(ctx, o.RequestID, o, len(p.req.Prompt), false)
	if !ok {
		return nil
	}
	host, n := s.kvTransferHostPort()
	return &vllmKVTransferParams{DoRemotePrefill: true, RemoteBlockIDs: blocks, RemoteEngineID: s.xfer.engineID,
		RemoteRequestID: o.RequestID, RemoteHost: host, RemotePort: n, TPSize: 1}
}

// ReleaseVLLM releases the blocks a prefill leg pinned on a mock engine in vLLM's
// dialect, named by the leg's kv_transfer_params: a release of remote_request_id sent to
// remote_host:remote_port, naming remote_engine_id. It is engines.KVReleaser's ReleaseKV
// of the vLLM adapter on the mock engine (engines/mocker/launch); vLLM itself has no
// such API. Parameters without blocks (nothing was pinned) or empty ones release
// nothing. Errors: malformed parameters, or the transfer port unreachable.
func ReleaseVLLM(ctx context.Context, requestID, kvTransferParams string) error {
	if kvTransferParams == "" {
		return nil
	}
	var kp vllmKVTransferParams
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
