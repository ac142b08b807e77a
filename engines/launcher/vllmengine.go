package launcher

import (
	"context"
	"errors"
	"io"
	"net/http"

	"github.com/turbine-llm/turbine/engines"
	"github.com/turbine-llm/turbine/engines/vllm"
	"github.com/turbine-llm/turbine/messages"
)

// vllmEngine adapts the vLLM-dialect client to engines.Engine.
type vllmEngine struct {
	c     *vllm.Client
	model string
}

// newVLLMEngine returns an engines.Engine for an engine speaking vLLM's HTTP dialect at
// baseURL, serving model. A malformed baseURL gives an engine whose every call fails
// with that error.
func newVLLMEngine(baseURL, model string) engines.Engine {
	c, err := vllm.New(baseURL, &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 256}})
	if err != nil {
		return brokenEngine{err}
	}
	return &vllmEngine{c: c, model: model}
}

func (e *vllmEngine) Health(ctx context.Context) error { return e.c.Health(ctx) }

func (e *vllmEngine) Generate(ctx context.Context, requestID string, tokens []uint32, s *messages.SamplingParams,
	fn func(engines.Chunk) error) error {
	req := vllm.CompletionRequest{Model: e.model, PromptTokenIDs: tokens, RequestID: requestID,
		MaxTokens: int(s.GetMaxTokens()), MinTokens: int(s.GetMinTokens()), IgnoreEOS: s.GetIgnoreEos(),
		StopTokenIDs: s.GetStopTokenIds()}
	if s.GetHasSeed() {
		v := s.Seed
		req.Seed = &v
	}
	if s.GetHasTemperature() {
		v := s.Temperature
		req.Temperature = &v
	}
	if s.GetHasTopP() {
		v := s.TopP
		req.TopP = &v
	}
	if s.GetPresencePenalty() != 0 || s.GetFrequencyPenalty() != 0 {
		req.Extra = map[string]any{"presence_penalty": s.PresencePenalty, "frequency_penalty": s.FrequencyPenalty}
	}
	stream, err := e.c.Complete(ctx, req)
	if err != nil {
		return err
	}
	defer stream.Close()
	for {
		ch, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		out := engines.Chunk{TokenIDs: ch.TokenIDs, FinishReason: ch.FinishReason}
		if ch.Usage != nil {
			out.PromptTokens, out.CachedTokens, out.CompletionTokens = ch.Usage.PromptTokens, ch.Usage.CachedTokens, ch.Usage.CompletionTokens
		}
		if err := fn(out); err != nil {
			return err
		}
		if ch.FinishReason != "" {
			return nil
		}
	}
}

func (e *vllmEngine) Load(ctx context.Context) (*messages.WorkerLoad, error) {
	l, err := e.c.Load(ctx)
	if err != nil {
		return nil, err
	}
	out := &messages.WorkerLoad{Running: int32(l.Running), Waiting: int32(l.Waiting), KvUsage: l.KVCacheUsage,
		TotalBlocks: int64(l.NumGPUBlocks)}
	out.ActiveBlocks = int64(l.KVCacheUsage * float64(l.NumGPUBlocks))
	return out, nil
}

type brokenEngine struct{ err error }

func (b brokenEngine) Health(context.Context) error { return b.err }
func (b brokenEngine) Generate(context.Context, string, []uint32, *messages.SamplingParams, func(engines.Chunk) error) error {
	return b.err
}
func (b brokenEngine) Load(context.Context) (*messages.WorkerLoad, error) { return nil, b.err }
