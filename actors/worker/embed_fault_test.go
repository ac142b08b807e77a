package worker

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/turbine-llm/turbine/engines"
	"github.com/turbine-llm/turbine/messages"
)

// failingEmbedEngine is a plainEngine whose every embedding fails with err.
type failingEmbedEngine struct {
	plainEngine
	err error
}

func (e failingEmbedEngine) Embed(context.Context, string, []uint32, int) ([]float32, int, error) {
	return nil, 0, e.err
}

// A failed embedding says with its fault what kind of failure it was: the engine's
// refusal of the input (its message alone, for the client), an engine failure another
// worker may not have, or neither.
func TestEmbedFault(t *testing.T) {
	refused := &engines.InvalidRequestError{Status: 400, Message: "Input too long.",
		Err: errors.New("vllm: engine answered 400 BadRequestError: Input too long.")}
	cases := []struct {
		name      string
		engine    engines.Engine
		mod       func(*Config)
		wantErr   string
		wantFault messages.Fault
	}{
		{"engine refused the input", failingEmbedEngine{plainEngine{newDisaggEngine()}, refused}, pooling,
			"Input too long.", messages.Fault_FAULT_INVALID_REQUEST},
		{"engine failed", failingEmbedEngine{plainEngine{newDisaggEngine()}, errors.New("vllm: POST /v1/embeddings: connection refused")}, pooling,
			"vllm: POST /v1/embeddings: connection refused", messages.Fault_FAULT_ENGINE_ERROR},
		{"generating model", failingEmbedEngine{plainEngine{newDisaggEngine()}, refused}, nil,
			`worker: model "m" is not served as an embedding model (--runner pooling)`, messages.Fault_FAULT_NONE},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			mod := c.mod
			if mod == nil {
				mod = func(c *Config) { c.Card = &messages.ModelCard{Model: "m"} }
			}
			sys, pid := startEmbedWorker(t, c.engine, mod)
			res, err := sys.Root.RequestFuture(pid, &messages.Embed{RequestId: "f1", TokenIds: []uint32{3}}, 10*time.Second).Result()
			if err != nil {
				t.Fatal(err)
			}
			e := res.(*messages.Embedding)
			if e.Error != c.wantErr || e.Fault != c.wantFault || len(e.Vector) != 0 {
				t.Errorf("error %q fault %s, want %q %s", e.Error, e.Fault.Label(), c.wantErr, c.wantFault.Label())
			}
		})
	}
}
