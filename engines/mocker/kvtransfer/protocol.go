// Package kvtransfer moves a prefill engine's KV blocks to a decode engine for the mock
// engine's disaggregated serving (docs/reference.md §6, §7), over a real TCP connection: the
// decode side reads the bytes a real KV cache of those blocks would hold, paced at a
// configured bandwidth, and the prefill side then releases the blocks it pinned.
//
// The prefill engine runs a Server on its transfer port (vLLM's NIXL side channel,
// SGLang's bootstrap port, TensorRT-LLM's cache transceiver play this part for real
// engines) and registers each finished prefill leg's blocks with Pin. The decode engine
// calls Read; a worker that will not send the decode leg calls Release.
//
// # Wire protocol
//
// One operation per connection. The client sends one JSON object on one line (at most
// MaxRequestBytes), a Request; the server answers one JSON line, a Response. For a
// successful read the server then sends Response.Bytes bytes of KV data, paced so that
// the n-th byte leaves no earlier than n / bandwidth seconds after the first, and the
// client answers one line {"op":"ack"} once it has read them all. The server releases
// the blocks when the ack arrives, or when the connection ends first (the reader gave
// up, e.g. because its own client disconnected): a pin is read at most once.
//
// A read that waits for its key to be pinned (Request.WaitMillis, SGLang's decode leg
// sent with its prefill leg) gets a keepalive line {"ok":true,"waiting":true} every
// Config.Keepalive until the pin comes (then the answer as above) or the wait ends. The
// client bounds every wait for a line or for data (Client.ProgressTimeout), so a prefill
// engine that accepted the connection and then froze fails the read instead of holding
// it forever.
//
// The bytes sent are len(blocks) × block size × KV bytes per token: what the KV cache of
// those blocks holds (a partly filled block occupies a whole block), which is what
// vLLM's NIXL connector transfers. vLLM sends only a prompt's full blocks (the decode
// engine recomputes the rest), and so does the mock engine.
package kvtransfer

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net"
	"strconv"
)

// MaxRequestBytes bounds a request or response line (1 MiB: about 100 k block ids).
const MaxRequestBytes = 1 << 20

// Bounds of the KV cache size and of the transfer bandwidth that engines accept from
// their configuration (the mock engine's --kv-bytes-per-token and
// --kv-transfer-bandwidth, and turbine serve's and node's, which pass them on).
const (
	// MaxBytesPerToken (16 MiB) is above the KV cache of one token of the largest
	// models in bfloat16 (2 × 126 layers × 8 KV heads × 128 × 2 bytes = 0.5 MiB for
	// Llama-3.1-405B; 2 × 96 layers × 12288 × 2 bytes = 4.5 MiB for OPT-175B, whose
	// attention has no grouped KV heads), and keeps a block's size (× block size) and a
	// read's (× block ids) far from overflowing int64.
	MaxBytesPerToken = 16 << 20
	// MinBandwidth (1 MB/s) and MaxBandwidth (10 TB/s), in bytes per second, bracket
	// every real interconnect (from 1 GbE's 125 MB/s to NVLink 5's 1.8 TB/s) with a
	// wide margin; below the minimum a prompt's KV takes hours to move.
	MinBandwidth = 1e6
	MaxBandwidth = 1e13
)

// Operations of a Request.
const (
	OpRead    = "read"
	OpRelease = "release"
	OpAck     = "ack"
)

// Request is the client's line.
type Request struct {
	// Op is OpRead or OpRelease.
	Op string `json:"op"`
	// EngineID names the prefill engine the client expects (vLLM's remote_engine_id); a
	// server with another id refuses (field "remote_engine_id").
	EngineID string `json:"engine_id"`
	// Key names the pinned request: the prefill leg's request id (vLLM's
	// remote_request_id), or "room:<n>" for an SGLang bootstrap room.
	Key string `json:"key"`
	// BlockIDs (read) are the blocks to read, each one of the pin's; empty: the pin's
	// transferable blocks (SGLang, where the decode side does not know them).
	BlockIDs []int64 `json:"block_ids,omitempty"`
	// WaitMillis (read): how long to wait for Key to be pinned when it is not yet (SGLang
	// sends both legs at once); 0 fails at once.
	WaitMillis int64 `json:"wait_ms,omitempty"`
}

// Response is the server's line.
type Response struct {
	OK bool `json:"ok"`
	// Error and Field (the request field that is wrong, in vLLM's kv_transfer_params
	// names) when not OK.
	Error string `json:"error,omitempty"`
	Field string `json:"field,omitempty"`
	// Read: the bytes that follow, the blocks they hold and the server's block size in
	// tokens and KV bytes per token.
	Bytes         int64   `json:"bytes,omitempty"`
	BlockIDs      []int64 `json:"block_ids,omitempty"`
	BlockSize     int     `json:"block_size,omitempty"`
	BytesPerToken int64   `json:"kv_bytes_per_token,omitempty"`
	// Released (release): the pin existed and was released.
	Released bool `json:"released,omitempty"`
	// Waiting (read, with OK): a keepalive line; the key is not pinned yet and the
	// server goes on waiting. The answer follows.
	Waiting bool `json:"waiting,omitempty"`
}

// RemoteError is an error the prefill engine's transfer server answered.
type RemoteError struct {
	// Field is the kv_transfer_params field at fault ("remote_engine_id",
	// "remote_request_id", "remote_block_ids", "bootstrap_room"); "" when none is.
	Field   string
	Message string
}

func (e *RemoteError) Error() string {
	if e.Field == "" {
		return "kvtransfer: " + e.Message
	}
	return fmt.Sprintf("kvtransfer: %s: %s", e.Field, e.Message)
}

// RoomKey is the pin key of an SGLang bootstrap room.
func RoomKey(room uint64) string { return fmt.Sprintf("room:%d", room) }

func encodeLine(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err) // only plain structs are encoded
	}
	return append(b, '\n')
}

// Handle locates a prefill leg's pinned blocks, for dialects whose transfer parameters
// are opaque to the caller: the mock engine's TensorRT-LLM dialect sends it as
// disaggregated_params.encoded_opaque_state (Encode).
type Handle struct {
	EngineID string  `json:"engine_id"`
	Host     string  `json:"host"`
	Port     int     `json:"port"`
	Key      string  `json:"key"`
	BlockIDs []int64 `json:"block_ids"`
}

// Addr is the transfer port's host:port.
func (h Handle) Addr() string { return net.JoinHostPort(h.Host, strconv.Itoa(h.Port)) }

// Encode returns h as base64 (standard encoding) of its JSON.
func (h Handle) Encode() string { return base64.StdEncoding.EncodeToString(encodeLine(h)) }

// DecodeHandle reads an encoded Handle. Errors: not base64, not the JSON of a Handle, or
// a Handle without engine id, host, port (1-65535) or key.
func DecodeHandle(s string) (Handle, error) {
	b, err := base64.StdEncoding.DecodeString(s)
	if err != nil {
		return Handle{}, fmt.Errorf("kvtransfer: handle is not base64: %w", err)
	}
	var h Handle
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&h); err != nil {
		return Handle{}, fmt.Errorf("kvtransfer: handle is not a transfer handle: %w", err)
	}
	if h.EngineID == "" || h.Host == "" || h.Port < 1 || h.Port > 65535 || h.Key == "" {
		return Handle{}, fmt.Errorf("kvtransfer: handle %s lacks an engine id, host, port or key", b)
	}
	return h, nil
}
