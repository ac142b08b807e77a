package worker

import (
	"errors"
	"fmt"
	"testing"

	"github.com/rs/zerolog"
	"github.com/turbine-llm/turbine/engines"
	"github.com/turbine-llm/turbine/messages"
)

// An engine that refuses a request itself (its HTTP 400 or 422, an
// *engines.InvalidRequestError) ends the stream with FAULT_INVALID_REQUEST and the
// engine's own message, which the client is told, so that the request is not re-sent
// to every other worker; before or after tokens, aggregated or a disaggregated leg.
func TestWorkerSendsInvalidRequestFault(t *testing.T) {
	refused := &engines.InvalidRequestError{Status: 400, Message: "cache_salt should have at most 1024 characters, got 1025.",
		Err: errors.New("vllm: engine answered 400 BadRequestError (param cache_salt): cache_salt should have at most 1024 characters, got 1025.")}
	decode := &messages.SamplingParams{MaxTokens: 4, Disagg: &messages.DisaggParams{Leg: messages.Leg_LEG_DECODE,
		KvTransferParams: `{"remote_block_ids":[1]}`}}
	for _, tc := range []struct {
		name      string
		engine    failingEngine
		sampling  *messages.SamplingParams
		wantIndex uint32
		wantErr   string
		wantFault messages.Fault
	}{
		{"refused", failingEngine{err: refused}, &messages.SamplingParams{MaxTokens: 4}, 0, refused.Message,
			messages.Fault_FAULT_INVALID_REQUEST},
		{"refused after tokens", failingEngine{tokens: []uint32{7, 8}, err: refused}, &messages.SamplingParams{MaxTokens: 4}, 2,
			refused.Message, messages.Fault_FAULT_INVALID_REQUEST},
		{"refused, wrapped by the adapter", failingEngine{err: fmt.Errorf("vllm: POST /v1/completions: %w", refused)},
			&messages.SamplingParams{MaxTokens: 4}, 0, refused.Message, messages.Fault_FAULT_INVALID_REQUEST},
		{"decode leg refused", failingEngine{err: refused}, decode, 0, refused.Message, messages.Fault_FAULT_INVALID_REQUEST},
		{"refused without a message", failingEngine{err: &engines.InvalidRequestError{Status: 422, Err: errors.New("sglang: engine answered 422")}},
			&messages.SamplingParams{MaxTokens: 4}, 0, "the engine refused the input (HTTP 422)", messages.Fault_FAULT_INVALID_REQUEST},
		{"engine failed", failingEngine{err: errors.New("vllm: engine answered 500: boom")}, &messages.SamplingParams{MaxTokens: 4}, 0,
			"engine: vllm: engine answered 500: boom", messages.Fault_FAULT_ENGINE_ERROR},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sys, pid, _ := startWorker(t, tc.engine, func(c *Config) {
				if tc.sampling.GetDisagg() != nil {
					c.Role = "decode"
				}
			}, zerolog.Nop())
			ref, chunks := chunkSink(sys)
			sys.Root.Send(pid, &messages.Generate{RequestId: "r1", TokenIds: []uint32{5}, ReplyTo: ref, Sampling: tc.sampling})
			for i := range tc.engine.tokens {
				if c := next(t, chunks); c.Fault != messages.Fault_FAULT_NONE || c.Error != "" || c.Index != uint32(i) {
					t.Fatalf("token chunk %v", c)
				}
			}
			c := next(t, chunks)
			if c.RequestId != "r1" || c.FinishReason != "error" || c.Index != tc.wantIndex || c.WorkerId == "" {
				t.Fatalf("chunk %v, want the error chunk %d", c, tc.wantIndex)
			}
			if c.Fault != tc.wantFault || c.Error != tc.wantErr {
				t.Errorf("fault %s error %q, want %s %q", c.Fault.Label(), c.Error, tc.wantFault.Label(), tc.wantErr)
			}
		})
	}
}
