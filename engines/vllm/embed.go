package vllm

import (
	"context"

	"github.com/turbine-llm/turbine/engines"
	"github.com/turbine-llm/turbine/engines/internal/enginehttp"
)

// Embed returns the embedding of one tokenized input from a vLLM engine started with
// --runner pooling: POST /v1/embeddings with the token ids as input, the served model
// name and dimensions when > 0 (docs/reference.md §23). Errors: the engine's answer as
// an *Error (a generating model: 400 "The model does not support Embeddings API"), a
// transport error, or a malformed answer.
func (c *Client) Embed(ctx context.Context, model string, tokens []uint32, dimensions int) ([]float32, int, error) {
	return c.h.Embed(ctx, enginehttp.EmbeddingRequest{Model: model, Input: tokens, Dimensions: dimensions})
}

// Embed implements engines.Embedder with Client.Embed; requestID is not sent (vLLM's
// embeddings request carries none that Turbine needs).
func (e *Engine) Embed(ctx context.Context, requestID string, tokens []uint32, dimensions int) ([]float32, int, error) {
	return e.c.Embed(ctx, e.opts.Model, tokens, dimensions)
}

var _ engines.Embedder = (*Engine)(nil)
