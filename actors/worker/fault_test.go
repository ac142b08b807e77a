package worker

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/rs/zerolog"
	"github.com/turbine-llm/turbine/engines"
	"github.com/turbine-llm/turbine/messages"
)

// failingEngine is healthy; Generate sends tokens (one chunk each, none finishing), then
// returns err.
type failingEngine struct {
	tokens []uint32
	err    error
}

func (failingEngine) Health(context.Context) error { return nil }
func (failingEngine) Load(context.Context) (*messages.WorkerLoad, error) {
	return &messages.WorkerLoad{TotalBlocks: 16}, nil
}
func (e failingEngine) Generate(_ context.Context, _ string, _ []uint32, _ *messages.SamplingParams, fn func(engines.Chunk) error) error {
	for _, tok := range e.tokens {
		if err := fn(engines.Chunk{TokenIDs: []uint32{tok}}); err != nil {
			return err
		}
	}
	return e.err
}

// TestStreamChunksFault: the last chunk of a failed leg names its fault — FAULT_KV_TRANSFER
// when the engine could not load the leg's KV from the prefill engine (an error wrapping
// engines.ErrKVTransfer), FAULT_ENGINE_ERROR for any other failure — and a leg that
// finishes carries none.
func TestStreamChunksFault(t *testing.T) {
	decode := &messages.SamplingParams{MaxTokens: 4, Disagg: &messages.DisaggParams{Leg: messages.Leg_LEG_DECODE,
		KvTransferParams: `{"remote_block_ids":[1]}`}}
	kvErr := fmt.Errorf("vllm: engine answered 503 KVTransferError: KV cache load failed: %w", engines.ErrKVTransfer)
	for _, tc := range []struct {
		name      string
		sampling  *messages.SamplingParams
		engine    engines.Engine
		wantIndex uint32
		wantFault messages.Fault
	}{
		{"decode leg, KV transfer failed", decode, failingEngine{err: kvErr}, 0, messages.Fault_FAULT_KV_TRANSFER},
		{"decode leg, KV transfer failed after a token", decode, failingEngine{tokens: []uint32{7}, err: kvErr}, 1,
			messages.Fault_FAULT_KV_TRANSFER},
		{"decode leg, engine failed", decode, failingEngine{err: errors.New("connection refused")}, 0,
			messages.Fault_FAULT_ENGINE_ERROR},
		{"aggregated, engine failed", &messages.SamplingParams{MaxTokens: 4},
			failingEngine{tokens: []uint32{7, 8}, err: errors.New("engine answered 500")}, 2, messages.Fault_FAULT_ENGINE_ERROR},
		{"stream ended without a finish", decode, failingEngine{tokens: []uint32{7}}, 1, messages.Fault_FAULT_ENGINE_ERROR},
		{"finished", decode, plainEngine{&disaggEngine{sampling: make(chan *messages.SamplingParams, 1),
			release: closedChan()}}, 1, messages.Fault_FAULT_NONE},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var sent []*messages.TokenChunk
			m := &messages.Generate{RequestId: "r1", TokenIds: []uint32{1, 2, 3}, Sampling: tc.sampling}
			err := streamChunks(context.Background(), tc.engine, m, nil, func(c *messages.TokenChunk) { sent = append(sent, c) },
				nil, "w0", func(string) { t.Error("release called") })
			if len(sent) == 0 {
				t.Fatal("no chunk sent")
			}
			last := sent[len(sent)-1]
			if last.Fault != tc.wantFault || last.Index != tc.wantIndex || last.WorkerId != "w0" {
				t.Fatalf("last chunk %v, want index %d fault %v", last, tc.wantIndex, tc.wantFault)
			}
			for _, c := range sent[:len(sent)-1] {
				if c.Fault != messages.Fault_FAULT_NONE {
					t.Fatalf("token chunk with a fault: %v", c)
				}
			}
			if failed := tc.wantFault != messages.Fault_FAULT_NONE; failed != (err != nil) ||
				failed != (last.FinishReason == "error") || failed != (last.Error != "") {
				t.Fatalf("error %v, last chunk %v", err, last)
			}
		})
	}
}

// TestWorkerSendsKVTransferFault: a decode leg whose engine cannot load the KV reaches
// the caller as a chunk with FAULT_KV_TRANSFER through the worker actor; an engine
// failure as FAULT_ENGINE_ERROR.
func TestWorkerSendsKVTransferFault(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
		want messages.Fault
	}{
		{"kv transfer", fmt.Errorf("sglang: Decode transfer failed: %w", engines.ErrKVTransfer), messages.Fault_FAULT_KV_TRANSFER},
		{"engine error", errors.New("sglang: engine answered 500"), messages.Fault_FAULT_ENGINE_ERROR},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sys, pid, _ := startWorker(t, failingEngine{err: tc.err}, func(c *Config) { c.Role = "decode" }, zerolog.Nop())
			ref, chunks := chunkSink(sys)
			sys.Root.Send(pid, &messages.Generate{RequestId: "r1", TokenIds: []uint32{5}, ReplyTo: ref,
				Sampling: &messages.SamplingParams{MaxTokens: 4, Disagg: &messages.DisaggParams{Leg: messages.Leg_LEG_DECODE,
					BootstrapHost: "10.0.0.1", BootstrapPort: 8998, BootstrapRoom: 1}}})
			c := next(t, chunks)
			if c.RequestId != "r1" || c.FinishReason != "error" || c.Fault != tc.want {
				t.Fatalf("chunk %v, want an error chunk with fault %v", c, tc.want)
			}
		})
	}
}

func closedChan() chan struct{} {
	c := make(chan struct{})
	close(c)
	return c
}
