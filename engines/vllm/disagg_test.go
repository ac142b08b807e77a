package vllm

import (
	"encoding/json"
	"errors"
	"slices"
	"testing"

	"github.com/turbine-llm/turbine/engines/internal/enginetest"
)

// prefillParams is docs/reference.md §6's kv_transfer_params of a prefill leg.
var prefillParams = json.RawMessage(`{"do_remote_decode":true,"do_remote_prefill":false,"remote_engine_id":null,"remote_block_ids":null,"remote_host":null,"remote_port":null}`)

// TestDisaggregatedLegs runs a prefill leg as one JSON answer (CompleteOnce) and as a
// stream on one mock engine, and their decode legs on another: the kv_transfer_params
// come back on the last chunk, and the decode leg's output is the aggregated one.
func TestDisaggregatedLegs(t *testing.T) {
	pre, preSrv := startMocker(t, 100)
	dec, decSrv := startMocker(t, 100)
	ctx := enginetest.Ctx(t)
	p := enginetest.Prompt(40)
	st, err := dec.Complete(ctx, CompletionRequest{PromptTokenIDs: p, MaxTokens: 8, IgnoreEOS: true})
	if err != nil {
		t.Fatal(err)
	}
	chunks, err := enginetest.Collect(st.Recv, st.Close)
	if err != nil {
		t.Fatal(err)
	}
	var want []uint32
	for _, ch := range chunks {
		if ch.KVTransferParams != nil {
			t.Fatalf("an aggregated request returned kv_transfer_params %s", ch.KVTransferParams)
		}
		want = append(want, ch.TokenIDs...)
	}

	for _, once := range []bool{true, false} {
		req := CompletionRequest{PromptTokenIDs: p, MaxTokens: 1, MinTokens: 1, RequestID: "leg",
			Extra: map[string]any{"kv_transfer_params": prefillParams}}
		var last Chunk
		if once {
			last, err = pre.CompleteOnce(ctx, req)
		} else {
			st, err = pre.Complete(ctx, req)
			if err == nil {
				var cs []Chunk
				cs, err = enginetest.Collect(st.Recv, st.Close)
				last = cs[len(cs)-1]
			}
		}
		if err != nil {
			t.Fatal(err)
		}
		var kp map[string]any
		if err := json.Unmarshal(last.KVTransferParams, &kp); err != nil || kp["do_remote_prefill"] != true ||
			kp["remote_engine_id"] != preSrv.KVTransferEngineID() || len(kp["remote_block_ids"].([]any)) != 2 {
			t.Fatalf("once=%v: kv_transfer_params %s", once, last.KVTransferParams)
		}
		if last.FinishReason != "length" || len(last.TokenIDs) != 1 || last.TokenIDs[0] != want[0] || last.Usage == nil ||
			last.Usage.PromptTokens != 40 || (once && !slices.Equal(last.PromptTokenIDs, p)) {
			t.Fatalf("once=%v: prefill leg %+v", once, last)
		}
		st, err = dec.Complete(ctx, CompletionRequest{PromptTokenIDs: p, MaxTokens: 8, IgnoreEOS: true,
			Extra: map[string]any{"kv_transfer_params": last.KVTransferParams}})
		if err != nil {
			t.Fatal(err)
		}
		cs, err := enginetest.Collect(st.Recv, st.Close)
		if err != nil {
			t.Fatal(err)
		}
		var got []uint32
		for _, ch := range cs {
			got = append(got, ch.TokenIDs...)
		}
		if !slices.Equal(got, want) {
			t.Fatalf("once=%v: decode leg %v, want %v", once, got, want)
		}
	}
	if ts := decSrv.TransferStats(); ts.Reads != 2 {
		t.Fatalf("decode engine transfers %+v", ts)
	}

	// Errors: a refused decode leg is *Error with the field; a bad request is refused
	// before it is sent.
	_, err = dec.CompleteOnce(ctx, CompletionRequest{PromptTokenIDs: p, MaxTokens: 1,
		Extra: map[string]any{"kv_transfer_params": map[string]any{"do_remote_prefill": true}}})
	var e *Error
	if !errors.As(err, &e) || e.Status != 400 || e.Param != "kv_transfer_params.remote_engine_id" {
		t.Fatalf("refused leg: %v", err)
	}
	if _, err := dec.CompleteOnce(ctx, CompletionRequest{MaxTokens: 1}); err == nil {
		t.Fatal("no prompt accepted")
	}
}
