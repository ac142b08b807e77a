package engines

import "testing"

func TestKVTransferFailure(t *testing.T) {
	for _, tc := range []struct {
		typ, msg string
		want     bool
	}{
		{"KVTransferError", "KV cache load failed (kv_load_failure_policy fail): ...", true},
		{"", "Decode transfer failed for request rank=0 rid='a' bootstrap_room=5 with exception KVTransferError(bootstrap_room=5): Failed to get kvcache from prefill instance, it might be dead", true},
		{"InternalServerError", "the KV cache transfer of context request 5 failed (DISAGG_TRANS_ERROR): gone", true},
		{"InternalServerError", "KV cache load failed for request cmpl-1", true},
		{"BadRequestError", "kv_transfer_params.remote_port must be a TCP port", false},
		{"InternalServerError", "Internal server error", false},
	} {
		if got := IsKVLoadFailureAnswer(tc.typ, tc.msg); got != tc.want {
			t.Errorf("IsKVLoadFailureAnswer(%q, %q) = %v, want %v", tc.typ, tc.msg, got, tc.want)
		}
	}
}
