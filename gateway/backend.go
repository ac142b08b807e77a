package gateway

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/turbine-llm/turbine/messages"
)

// Backend is what the OpenAI HTTP layer needs from the cluster: the live model list and a
// way to run a tokenized request on a worker chosen by the model's Router grain.
// The actor-backed implementation lives in cluster/ (package cluster, type Backend);
// tests use fakes.
type Backend interface {
	// Models returns the cards of the models that have at least one live worker.
	Models(ctx context.Context) ([]*messages.ModelCard, error)
	// Generate routes the request and starts it on a worker. The returned Stream must be
	// closed by the caller on every path. Errors: ErrUnknownModel, ErrNoWorkers,
	// ErrAllBusy (wrapped), or a transport error; a Backend that parks the request in
	// req.Parking also ErrDraining and ctx.Err() while it waits there.
	Generate(ctx context.Context, req *GenerateRequest) (Stream, error)
}

// GenerateRequest is a tokenized request for one model.
type GenerateRequest struct {
	Model     string
	RequestID string
	TokenIDs  []uint32 // the full templated prompt, as token ids
	Sampling  *messages.SamplingParams
	// Router overrides (docs/reference.md §3); nil means the router's default.
	OverlapWeight *float64
	Temperature   *float64
	// PinWorker asks the router for this worker (RouteRequest pin_worker): the choices
	// after the first of an n > 1 request follow the first's decision. Empty: route.
	PinWorker string
	// SessionID is the client's session (x-session-id, else the body's user; session.go):
	// the router may keep the conversation on the worker of its last request
	// (RouteRequest session_id). Empty: none. Not sent to workers.
	SessionID string
	// PromptText is a completions prompt as the request gave it, when it gave text and
	// the prompt ran untruncated: echo shows it (logprobs.go). Not sent to workers.
	PromptText string
	// ExplainRoute asks the router to explain its choice (RouteRequest explain); the
	// stream then implements ExplainedStream (`turbine.explain_route`, explain.go).
	ExplainRoute bool
	// Parking is the request's place in its model's busy queue, set by the gateway while
	// the queue is on (Config.QueueDepth > 0); nil otherwise. A Backend that uses it
	// parks a request that finds every worker busy instead of answering ErrAllBusy.
	Parking Parking
}

// Stream is a running request's token stream.
type Stream interface {
	// Recv returns the next chunk in order. After the chunk carrying a finish reason it
	// returns io.EOF. It returns ctx.Err() when ctx ends first.
	Recv(ctx context.Context) (*messages.TokenChunk, error)
	// WorkerID names the worker serving the request.
	WorkerID() string
	// Close cancels the request in the engine if it has not finished and frees the
	// router's load tracking for it. Safe to call more than once.
	Close()
}

// ChunkPoller is a Stream that can tell, without waiting, whether its next chunk has
// come: Ready returns it (as Recv would) or nil when Recv would wait, or has an error or
// the end to report. Ready does not look at the request's context: the caller stops
// asking once it has ended, and Recv reports it. A stream's SSE frames are then flushed when it has nothing more
// ready, so frames of chunks that queued up (a busy CPU, a burst) leave in one write
// instead of one each, and a frame is never held while Recv waits.
type ChunkPoller interface {
	Ready() *messages.TokenChunk
}

// DisaggInfo says how a request was split between a prefill and a decode worker
// (disaggregated serving, docs/reference.md §6).
type DisaggInfo struct {
	// Decision is the router's: "aggregated" (no prefill/decode pools), "remote" (a
	// prefill leg on PrefillWorker, then the decode leg on DecodeWorker), or a reason the
	// decode worker prefilled the prompt itself: "local_short_prefill",
	// "local_prefill_queue", "local_no_prefill_workers", "local_requested".
	Decision string
	// PrefillWorker is the prefill leg's worker id ("" unless Decision is "remote").
	PrefillWorker string
	// DecodeWorker is the decode worker's id ("" when Decision is "aggregated").
	DecodeWorker string
}

// DisaggStream is implemented by streams that know their disaggregation decision. The
// answer may change while the stream runs: a prefill leg retried on another worker, or a
// request migrated, is routed again.
type DisaggStream interface {
	Disagg() DisaggInfo
}

// MetricsWriter is implemented by backends that add their own families (e.g. the
// routers' per-worker load) to the gateway's /metrics, in Prometheus text format.
type MetricsWriter interface {
	WritePrometheus(ctx context.Context, w io.Writer)
}

// RecentModels is implemented by backends that remember models served a moment ago: a
// request for one whose workers are all down gets 503 (retryable) instead of 404.
type RecentModels interface {
	// Recent reports whether model had a live worker recently.
	Recent(model string) bool
}

// RecentCards is implemented by backends whose model list can lag for a moment (a
// catalog rebuilt after it moved): RecentCard returns the card of a model listed a
// moment ago and not now, which the gateway serves the request with (nil: none).
type RecentCards interface {
	RecentCard(model string) *messages.ModelCard
}

// Backend errors (wrapped with detail by implementations; match with errors.Is).
var (
	ErrUnknownModel = errors.New("gateway: unknown model")
	ErrNoWorkers    = errors.New("gateway: no live worker for model")
	ErrAllBusy      = errors.New("gateway: all workers busy")
	// ErrNoPrefillWorkers: disaggregation is enforced and no prefill worker is live. It
	// wraps ErrNoWorkers (503).
	ErrNoPrefillWorkers = fmt.Errorf("%w: no live prefill worker, and disaggregated serving is enforced", ErrNoWorkers)
)
