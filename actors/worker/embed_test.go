package worker

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/rs/zerolog"
	"github.com/turbine-llm/turbine/engines"
	"github.com/turbine-llm/turbine/messages"
)

// embedEngine is a plainEngine that also embeds: the vector is the tokens as floats;
// an input starting with token 0 waits for its context and reports it on cancelled.
type embedEngine struct {
	plainEngine
	cancelled chan struct{}
}

func (e embedEngine) Embed(ctx context.Context, _ string, tokens []uint32, dims int) ([]float32, int, error) {
	if tokens[0] == 0 {
		<-ctx.Done()
		close(e.cancelled)
		return nil, 0, ctx.Err()
	}
	v := make([]float32, 0, len(tokens))
	for _, t := range tokens {
		v = append(v, float32(t))
	}
	if dims > 0 {
		v = v[:dims]
	}
	return v, len(tokens), nil
}

func pooling(c *Config) {
	c.Card = &messages.ModelCard{Model: "m", Runner: messages.Runner_RUNNER_POOLING}
}

func TestEmbed(t *testing.T) {
	cases := []struct {
		name    string
		engine  func() any
		mod     func(*Config)
		msg     *messages.Embed
		want    []float32
		wantErr string
	}{
		{"embeds", func() any { return embedEngine{plainEngine{newDisaggEngine()}, nil} }, pooling,
			&messages.Embed{RequestId: "e1", TokenIds: []uint32{3, 4, 5}}, []float32{3, 4, 5}, ""},
		{"matryoshka", func() any { return embedEngine{plainEngine{newDisaggEngine()}, nil} }, pooling,
			&messages.Embed{RequestId: "e2", TokenIds: []uint32{3, 4, 5}, Dimensions: 2}, []float32{3, 4}, ""},
		{"engine serves no embeddings", func() any { return plainEngine{newDisaggEngine()} }, pooling,
			&messages.Embed{RequestId: "e3", TokenIds: []uint32{3}}, nil, "not served as an embedding model"},
		{"generating model", func() any { return embedEngine{plainEngine{newDisaggEngine()}, nil} }, nil,
			&messages.Embed{RequestId: "e4", TokenIds: []uint32{3}}, nil, "not served as an embedding model"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			eng := c.engine()
			sys, pid := startEmbedWorker(t, eng, c.mod)
			res, err := sys.Root.RequestFuture(pid, c.msg, 10*time.Second).Result()
			if err != nil {
				t.Fatal(err)
			}
			e := res.(*messages.Embedding)
			if e.RequestId != c.msg.RequestId || e.WorkerId != "w-disagg" || !slices.Equal(e.Vector, c.want) ||
				(c.wantErr == "") != (e.Error == "") || !strings.Contains(e.Error, c.wantErr) {
				t.Errorf("%+v", e)
			}
			if c.wantErr == "" && int(e.PromptTokens) != len(c.msg.TokenIds) {
				t.Errorf("prompt tokens %d", e.PromptTokens)
			}
		})
	}
}

// Cancel ends an embedding in the engine.
func TestEmbedCancel(t *testing.T) {
	eng := embedEngine{plainEngine{newDisaggEngine()}, make(chan struct{})}
	sys, pid := startEmbedWorker(t, eng, pooling)
	sys.Root.RequestFuture(pid, &messages.Embed{RequestId: "slow", TokenIds: []uint32{0, 1}}, 10*time.Second)
	sys.Root.Send(pid, &messages.Cancel{RequestId: "slow"})
	select {
	case <-eng.cancelled:
	case <-time.After(10 * time.Second): // bounded wait for the engine call to end, not a timing assertion
		t.Fatal("the engine's embedding was not cancelled")
	}
}

func startEmbedWorker(t *testing.T, eng any, mod func(*Config)) (*actor.ActorSystem, *actor.PID) {
	t.Helper()
	sys, pid, _ := startWorker(t, eng.(engines.Engine), mod, zerolog.Nop())
	return sys, pid
}
