package server

import (
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

// SGLang's disaggregated serving (docs/reference.md §6; python/sglang/srt/managers/io_struct.py,
// GenerateReqInput's bootstrap_host, bootstrap_port and bootstrap_room): both legs get
// the same request with the prefill engine's bootstrap address and a random room, and
// are sent at once; each engine's --disaggregation-mode (here Role) says which leg it
// runs. A prefill engine computes the prompt and one token and pins the blocks under
// the room; a decode engine reads the room's blocks from the bootstrap address (the
// prefill engine's KV transfer port), waiting for the prefill leg to finish, then
// generates. A decode leg that gives up while waiting makes the prefill engine release
// the room's blocks as soon as they are pinned.

// sglangLeg is a validated set of bootstrap fields.
type sglangLeg struct {
	prefill bool   // Role prefill: pin the blocks under the room
	room    uint64 // bootstrap_room
	remote  *remoteKV
}

// parseSGLangDisagg validates a /generate body's bootstrap fields: all three or none;
// with them, the engine must be a prefill or decode engine. The message names the field.
func (s *Server) parseSGLangDisagg(body []byte) (sglangLeg, string) {
	var leg sglangLeg
	var f struct {
		Host json.RawMessage `json:"bootstrap_host"`
		Port json.RawMessage `json:"bootstrap_port"`
		Room json.RawMessage `json:"bootstrap_room"`
	}
	if err := json.Unmarshal(body, &f); err != nil {
		return leg, "invalid JSON body: " + err.Error()
	}
	set := func(v json.RawMessage) bool { return len(v) > 0 && string(v) != "null" }
	if !set(f.Host) && !set(f.Port) && !set(f.Room) {
		return leg, ""
	}
	var host string
	if err := json.Unmarshal(f.Host, &host); err != nil || host == "" {
		return leg, fmt.Sprintf("bootstrap_host must be the prefill engine's host (a non-empty string), got %.100s", f.Host)
	}
	var port float64
	if err := json.Unmarshal(f.Port, &port); err != nil || port != math.Trunc(port) || port < 1 || port > 65535 {
		return leg, fmt.Sprintf("bootstrap_port must be a TCP port (an integer 1-65535), got %.100s", f.Port)
	}
	room, err := strconv.ParseUint(string(f.Room), 10, 64)
	if err != nil {
		return leg, fmt.Sprintf("bootstrap_room must be a non-negative integer below 2^64, got %.100s", f.Room)
	}
	leg.room = room
	switch s.opts.Role {
	case RolePrefill:
		leg.prefill = true
	case RoleDecode:
		leg.remote = &remoteKV{addr: net.JoinHostPort(host, strconv.Itoa(int(port))), key: kvtransfer.RoomKey(room),
			wait: s.opts.KVTransfer.Timeout}
	default:
		return leg, "bootstrap_host, bootstrap_port and bootstrap_room need an engine started with --role prefill or decode " +
			"(SGLang's --disaggregation-mode); this engine is aggregated"
	}
	return leg, ""
}

// pullSGLang reads a decode leg's blocks into req; false when it answered an error (or
// the client left). A failed read is answered as SGLang's decode scheduler aborts such a
// request (disaggregation/decode.py): 500 "Decode transfer failed for request ... with
// exception KVTransferError(bootstrap_room=...): ...".
func (s *Server) pullSGLang(ctx context.Context, w http.ResponseWriter, leg sglangLeg, req *mocker.Request) bool {
	if leg.remote == nil {
		return true
	}
	imported, terr := s.pullKV(ctx, *leg.remote, len(req.Prompt))
	if terr != nil {
		if ctx.Err() == nil {
			sglangError(w, http.StatusInternalServerError,
				"Decode transfer failed for request rid=%s bootstrap_room=%d with exception %s(bootstrap_room=%d): %s",
				req.ID, leg.room, KVTransferErrorType, leg.room, terr.msg)
		}
		return false
	}
	req.ImportedTokens = imported
	return true
}
