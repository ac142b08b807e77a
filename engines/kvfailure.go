package engines

import (
	"errors"
	"strings"
)

// ErrKVTransfer is wrapped by an adapter's Generate error when the decode leg's engine
// answered that it could not load the KV blocks the prefill leg computed (vLLM with
// kv_load_failure_policy "fail", SGLang's "Decode transfer failed ... KVTransferError",
// TensorRT-LLM's DISAGG_TRANS_ERROR, the mock engine's KVTransferError in every
// dialect).
//
// Such a failure means the prefill engine died, froze or no longer holds the blocks, while
// the decode engine itself is healthy (docs/reference.md §6): the worker sends the chunk
// with FAULT_KV_TRANSFER, and the flow retries the request's prefill instead of counting
// the failure against the decode worker.
var ErrKVTransfer = errors.New("kv_transfer_failed: the decode engine could not load the prompt's KV blocks from the prefill engine")

// kvLoadFailureMarkers are what engines put in the answer to a decode leg whose KV
// could not be loaded, compared case-insensitively:
//
//   - "kvtransfererror": the mock engine's error type in every dialect, and SGLang's
//     exception (disaggregation/decode.py: "Decode transfer failed for request ... with
//     exception KVTransferError(bootstrap_room=...): ...");
//   - "decode transfer failed": SGLang's abort message of such a request (status 500);
//   - "disagg_trans_error": TensorRT-LLM's request state of a failed KV cache transfer
//     (kDISAGG_TRANS_ERROR), named in the mock engine's trtllm-dialect answer;
//   - "kv cache load failed", "kv load failure": vLLM's request-level KV load failure
//     (kv_load_failure_policy "fail"), where its answer names the cause.
var kvLoadFailureMarkers = []string{"kvtransfererror", "decode transfer failed", "disagg_trans_error",
	"kv cache load failed", "kv load failure"}

// IsKVLoadFailureAnswer reports whether an engine's error answer to a decode leg (its
// error type and message) says the leg's KV blocks could not be loaded from the prefill
// engine (kvLoadFailureMarkers). Adapters wrap such answers in ErrKVTransfer.
func IsKVLoadFailureAnswer(typ, message string) bool {
	s := strings.ToLower(typ + " " + message)
	for _, m := range kvLoadFailureMarkers {
		if strings.Contains(s, m) {
			return true
		}
	}
	return false
}
