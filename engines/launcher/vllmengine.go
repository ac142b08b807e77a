package launcher

import (
	"context"
	"errors"
	"io"
	"net/http"

	"github.com/turbine-llm/turbine/engines"
	"github.com/turbine-llm/turbine/engines/kvevents"
	"github.com/turbine-llm/turbine/engines/vllm"
	"github.com/turbine-llm/turbine/kv"
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

// Connect returns the client for a mock engine at baseURL.
func (m *Mocker) Connect(baseURL string) engines.Engine { return newVLLMEngine(baseURL, m.Model) }

// SubscribeKVEvents subscribes to the mock engine's ZMQ KV events (vLLM wire format).
// endpoint is the one the engine was given: like vLLM, an engine binds only for a "*"
// host (or ipc://) and otherwise connects, in which case this side listens.
func (m *Mocker) SubscribeKVEvents(ctx context.Context, endpoint string, fn func(kv.Batch)) error {
	ep, listen := kvevents.ConsumerEndpoint(endpoint)
	return kvevents.SubscribeWith(ctx, kvevents.SubscriberConfig{Endpoint: ep, Topic: KVEventsTopic, Listen: listen}, fn)
}

var _ engines.Launcher = (*Mocker)(nil)
