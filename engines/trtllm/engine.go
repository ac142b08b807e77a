package trtllm

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"sync"

	"github.com/turbine-llm/turbine/engines"
	"github.com/turbine-llm/turbine/messages"
)

// Engine adapts a Client to engines.Engine.
type Engine struct {
	c         *Client
	model     string
	blockSize int

	mu   sync.Mutex
	last Load // the latest iteration's load seen by Load
}

// NewEngine returns an engines.Engine over c for the served model name model. blockSize
// is the KV block size, in tokens, in which WorkerLoad reports blocks (the router's);
// TensorRT-LLM's own blocks are converted through its tokensPerBlock. Errors: an empty
// model name or blockSize < 1.
func NewEngine(c *Client, model string, blockSize int) (*Engine, error) {
	if model == "" {
		return nil, errors.New("trtllm: engine without a model name (trtllm-serve requires one)")
	}
	if blockSize < 1 {
		return nil, fmt.Errorf("trtllm: block size %d must be at least 1", blockSize)
	}
	return &Engine{c: c, model: model, blockSize: blockSize}, nil
}

// Health returns nil when GET /health answers 200.
func (e *Engine) Health(ctx context.Context) error { return e.c.Health(ctx) }

// Generate runs one request and calls fn for each chunk in order; the last carries the
// finish reason ("cancelled" and "timeout" become "abort") and the usage. The stop token
// that ended a request is not among the ids: trtllm-serve does not return it. Cancelling
// ctx, or an error from fn, closes the connection, which aborts the request.
func (e *Engine) Generate(ctx context.Context, requestID string, tokens []uint32, s *messages.SamplingParams,
	fn func(engines.Chunk) error) error {
	req := CompletionRequest{Model: e.model, PromptTokenIDs: tokens, RequestID: requestID,
		MaxTokens: int(s.GetMaxTokens()), MinTokens: int(s.GetMinTokens()), IgnoreEOS: s.GetIgnoreEos(),
		StopTokenIDs: s.GetStopTokenIds()}
	if s.GetHasSeed() {
		v := s.GetSeed()
		req.Seed = &v
	}
	if s.GetHasTemperature() {
		v := s.GetTemperature()
		req.Temperature = &v
	}
	if s.GetHasTopP() {
		v := s.GetTopP()
		req.TopP = &v
	}
	if s.GetPresencePenalty() != 0 || s.GetFrequencyPenalty() != 0 {
		req.Extra = map[string]any{"presence_penalty": s.GetPresencePenalty(), "frequency_penalty": s.GetFrequencyPenalty()}
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
		out := engines.Chunk{TokenIDs: ch.TokenIDs, FinishReason: finishReason(ch.FinishReason)}
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

func finishReason(r string) string {
	switch r {
	case "cancelled", "timeout":
		return "abort"
	}
	return r
}

// Load reads the latest iteration's statistics from GET /metrics. trtllm-serve hands
// each iteration's stats out once, so this must be the server's only /metrics reader.
// When no iteration ran since the previous call the engine is idle: no running or
// queued requests and no blocks in use, of the block count last seen.
func (e *Engine) Load(ctx context.Context) (*messages.WorkerLoad, error) {
	stats, err := e.c.IterationStats(ctx)
	if err != nil {
		return nil, err
	}
	e.mu.Lock()
	l, ok := LoadFromStats(stats)
	if ok {
		e.last = l
	} else {
		l = Load{MaxBlocks: e.last.MaxBlocks, TokensPerBlock: e.last.TokensPerBlock, Iter: e.last.Iter}
	}
	e.mu.Unlock()
	return workerLoad(l, e.blockSize), nil
}

func workerLoad(l Load, blockSize int) *messages.WorkerLoad {
	out := &messages.WorkerLoad{Running: int32(l.Running), Waiting: int32(l.Queued), KvUsage: l.KVUsage()}
	scale := 1.0
	if l.TokensPerBlock > 0 {
		scale = float64(l.TokensPerBlock) / float64(blockSize)
	}
	out.TotalBlocks = int64(math.Floor(float64(l.MaxBlocks) * scale))
	out.ActiveBlocks = int64(math.Ceil(float64(l.UsedBlocks) * scale))
	return out
}

var _ engines.Engine = (*Engine)(nil)
