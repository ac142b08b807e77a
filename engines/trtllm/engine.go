package trtllm

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"sync"
	"time"

	"github.com/turbine-llm/turbine/engines"
	"github.com/turbine-llm/turbine/engines/internal/enginehttp"
	"github.com/turbine-llm/turbine/messages"
)

// EngineOptions configure an Engine.
type EngineOptions struct {
	// Model is the served model name (trtllm-serve requires one in every request).
	Model string
	// BlockSize is the KV block size, in tokens, in which WorkerLoad reports blocks (the
	// router's); TensorRT-LLM's own blocks are converted through its tokensPerBlock.
	BlockSize int
	// StatsInterval is the pause between two /metrics calls of the stats collector
	// (default 1 s). Each call takes about 2 s on trtllm-serve, which waits that long for
	// more stats before it answers.
	StatsInterval time.Duration
	// StatsTimeout bounds one /metrics call (default 10 s).
	StatsTimeout time.Duration
	// MaxStatsAge: Load fails when the collector's latest answer is older (default 30 s).
	MaxStatsAge time.Duration
	// ReleaseKV, when set, releases the blocks a context leg pinned, named by its
	// disaggregated_params (Engine.ReleaseKV calls it), and lets a cancelled context leg
	// finish within engines.PrefillGrace, since what it pins can then be released.
	// Turbine's mock engine has such an API (engines/mocker/launch sets it);
	// trtllm-serve has none: nil.
	ReleaseKV func(ctx context.Context, requestID, kvTransferParams string) error
}

// Engine adapts a Client to engines.Engine. Its load comes from a background collector
// of the iteration stats, started by the first Load and stopped by Close: trtllm-serve
// answers GET /metrics only after waiting about 2 s for stats, longer than a load scrape
// may take.
type Engine struct {
	c    *Client
	opts EngineOptions

	startOnce sync.Once
	stopOnce  sync.Once
	stop      context.CancelFunc
	stopped   chan struct{}
	first     chan struct{} // closed when the collector's first call answered

	mu     sync.Mutex
	last   Load      // the latest iteration's load (an idle one after an empty answer)
	lastAt time.Time // when last was answered
	err    error     // the latest call's error, nil once one succeeds again

	loras loraTable // the LoRA adapters recorded by LoadLora (lora.go)
}

// NewEngine returns an engines.Engine over c. Errors: an empty model name or a block
// size < 1.
func NewEngine(c *Client, o EngineOptions) (*Engine, error) {
	if o.Model == "" {
		return nil, errors.New("trtllm: engine without a model name (trtllm-serve requires one)")
	}
	if o.BlockSize < 1 {
		return nil, fmt.Errorf("trtllm: block size %d must be at least 1", o.BlockSize)
	}
	if o.StatsInterval <= 0 {
		o.StatsInterval = time.Second
	}
	if o.StatsTimeout <= 0 {
		o.StatsTimeout = 10 * time.Second
	}
	if o.MaxStatsAge <= 0 {
		o.MaxStatsAge = 30 * time.Second
	}
	return &Engine{c: c, opts: o, stopped: make(chan struct{}), first: make(chan struct{})}, nil
}

// Health returns nil when GET /health answers 200.
func (e *Engine) Health(ctx context.Context) error { return e.c.Health(ctx) }

// Generate runs one request and calls fn for each chunk in order; the last carries the
// finish reason ("cancelled" and "timeout" become "abort") and the usage. The stop token
// that ended a request is not among the ids: trtllm-serve does not return it. Cancelling
// ctx, or an error from fn, closes the connection, which aborts the request. The
// sampling settings are sent under trtllm-serve's names and an output constraint
// (SamplingParams.structured) as response_format (requestFrom, which also says what is
// refused).
//
// Disaggregated serving (SamplingParams.disagg, docs/reference.md §6): a prefill leg is a
// context_only request (disaggregated_params {"request_type": "context_only"},
// max_tokens 1, "stream": false, as trtllm-serve's disaggregated server sends it); its
// one chunk carries the choice's disaggregated_params (Chunk.KVTransferParams). A prefill
// leg cancelled while it runs is finished with engines.FinishPrefill (grace
// engines.PrefillGrace only with EngineOptions.ReleaseKV), so that an answer that names
// pinned blocks still reaches fn, and Generate returns ctx's error. A decode leg sends
// those parameters back with request_type generation_only and streams as usual. A
// request with a LoRA adapter (SamplingParams.lora_name) carries it as lora_request on
// either leg (lora.go).
// Errors: an unknown leg, a decode leg without a parameters object, and the client's; a
// decode leg whose KV cache transfer failed wraps engines.ErrKVTransfer; a request
// trtllm-serve refuses itself (400, 422), or that it has no field for (requestFrom), is
// an *engines.InvalidRequestError.
func (e *Engine) Generate(ctx context.Context, requestID string, tokens []uint32, s *messages.SamplingParams,
	fn func(engines.Chunk) error) error {
	req, err := requestFrom(e.opts.Model, requestID, tokens, s)
	if err != nil {
		return engines.Refused("trtllm", err)
	}
	if err := e.loras.attach(&req, s.GetLoraName(), s.GetLoraPath()); err != nil {
		return err
	}
	switch leg := s.GetDisagg(); leg.GetLeg() {
	case messages.Leg_LEG_AGGREGATED:
	case messages.Leg_LEG_PREFILL:
		req.MaxTokens, req.MinTokens = 1, min(req.MinTokens, 1)
		req.Extra["disaggregated_params"] = map[string]any{"request_type": "context_only"}
		grace := time.Duration(0) // trtllm-serve: an abort frees the blocks, a finished leg pins them
		if e.opts.ReleaseKV != nil {
			grace = engines.PrefillGrace
		}
		ch, err := engines.FinishPrefill(ctx, grace, func(ctx context.Context) (Chunk, error) {
			return e.c.CompleteOnce(ctx, req)
		})
		if err != nil {
			return err
		}
		out := engineChunk(ch)
		out.KVTransferParams = string(ch.DisaggregatedParams)
		if err := fn(out); err != nil {
			return err
		}
		return ctx.Err()
	case messages.Leg_LEG_DECODE:
		var dp map[string]json.RawMessage
		if err := json.Unmarshal([]byte(leg.GetKvTransferParams()), &dp); err != nil || dp == nil {
			return fmt.Errorf("trtllm: a decode leg needs its context leg's disaggregated_params (a JSON object), got %.100q",
				leg.GetKvTransferParams())
		}
		dp["request_type"] = json.RawMessage(`"generation_only"`)
		req.Extra["disaggregated_params"] = dp
	default:
		return fmt.Errorf("trtllm: disaggregated leg %s: want prefill or decode", leg.GetLeg().Label())
	}
	decode := s.GetDisagg().GetLeg() == messages.Leg_LEG_DECODE
	stream, err := e.c.Complete(ctx, req)
	if err != nil {
		return kvLoadFailure(decode, err)
	}
	defer stream.Close()
	return kvLoadFailure(decode, enginehttp.Forward(stream.Recv, engineChunk, fn))
}

// kvLoadFailure wraps err, the error of a decode leg (decode true), in
// engines.ErrKVTransfer when it is the server's answer that the leg's KV cache transfer
// failed (engines.IsKVLoadFailureAnswer: DISAGG_TRANS_ERROR, or the mock engine's
// KVTransferError): the context server is at fault, not this one.
func kvLoadFailure(decode bool, err error) error {
	var te *Error
	if decode && errors.As(err, &te) && engines.IsKVLoadFailureAnswer(te.Type, te.Message) {
		return fmt.Errorf("%w: %w", engines.ErrKVTransfer, err)
	}
	return err
}

// engineChunk maps the finish reason and carries the usage when the chunk has one.
func engineChunk(ch Chunk) engines.Chunk {
	out := engines.Chunk{TokenIDs: ch.TokenIDs, FinishReason: finishReason(ch.FinishReason)}
	if ch.Usage != nil {
		out.PromptTokens, out.CachedTokens, out.CompletionTokens = ch.Usage.PromptTokens, ch.Usage.CachedTokens, ch.Usage.CompletionTokens
	}
	return out
}

// ReleaseKV releases the blocks a context leg pinned (engines.KVReleaser) through
// EngineOptions.ReleaseKV. Without it (trtllm-serve) it does nothing and returns nil:
// the context server frees the blocks after
// cache_transceiver_config.kv_transfer_timeout_ms. Errors: ReleaseKV's (malformed
// parameters, or the engine unreachable).
func (e *Engine) ReleaseKV(ctx context.Context, requestID, kvTransferParams string) error {
	if e.opts.ReleaseKV == nil || kvTransferParams == "" {
		return nil
	}
	return e.opts.ReleaseKV(ctx, requestID, kvTransferParams)
}

func finishReason(r string) string {
	switch r {
	case "cancelled", "timeout":
		return "abort"
	}
	return r
}

// Load returns the load of the latest iteration the stats collector saw (it starts the
// collector on the first call and waits for its first answer). When no iteration ran
// between two of its calls the engine is idle: no running or queued requests and no
// blocks in use, of the block count last seen. trtllm-serve hands each iteration's stats
// out once, so the collector must be the server's only /metrics reader. Errors: the
// collector's latest error, no answer yet when ctx ends, or an answer older than
// MaxStatsAge.
func (e *Engine) Load(ctx context.Context) (*messages.WorkerLoad, error) {
	e.startOnce.Do(func() {
		cctx, cancel := context.WithCancel(context.Background())
		e.stop = cancel
		go e.collect(cctx)
	})
	select {
	case <-e.stopped:
		return nil, errors.New("trtllm: engine closed")
	default:
	}
	select {
	case <-e.first:
	case <-e.stopped:
		return nil, errors.New("trtllm: engine closed")
	case <-ctx.Done():
		return nil, fmt.Errorf("trtllm: no iteration stats from GET /metrics yet: %w", ctx.Err())
	}
	e.mu.Lock()
	l, at, err := e.last, e.lastAt, e.err
	e.mu.Unlock()
	if err != nil {
		return nil, err
	}
	if age := time.Since(at); age > e.opts.MaxStatsAge {
		return nil, fmt.Errorf("trtllm: the latest iteration stats are %v old", age.Round(time.Second))
	}
	return workerLoad(l, e.opts.BlockSize), nil
}

// collect calls GET /metrics until ctx ends, keeping the latest load.
func (e *Engine) collect(ctx context.Context) {
	defer close(e.stopped)
	firstDone := false
	for {
		cctx, cancel := context.WithTimeout(ctx, e.opts.StatsTimeout)
		stats, err := e.c.IterationStats(cctx)
		cancel()
		if ctx.Err() != nil {
			return
		}
		e.mu.Lock()
		if err != nil {
			e.err = err
		} else {
			if l, ok := LoadFromStats(stats); ok {
				e.last = l
			} else {
				e.last = Load{MaxBlocks: e.last.MaxBlocks, TokensPerBlock: e.last.TokensPerBlock, Iter: e.last.Iter}
			}
			e.lastAt, e.err = time.Now(), nil
		}
		e.mu.Unlock()
		if !firstDone {
			close(e.first)
			firstDone = true
		}
		t := time.NewTimer(e.opts.StatsInterval)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}

// Close stops the stats collector. Safe to call more than once.
func (e *Engine) Close() error {
	e.stopOnce.Do(func() {
		e.startOnce.Do(func() { close(e.stopped) }) // never started
		if e.stop != nil {
			e.stop()
		}
		<-e.stopped
	})
	return nil
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

var (
	_ engines.Engine     = (*Engine)(nil)
	_ engines.KVReleaser = (*Engine)(nil)
	_ engines.LoraLoader = (*Engine)(nil)
)
