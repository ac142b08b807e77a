package sglang

import (
	"context"

	"github.com/turbine-llm/turbine/engines"
	"github.com/turbine-llm/turbine/engines/internal/enginehttp"
)

// Embed returns the embedding of one tokenized input from an SGLang engine started with
// --is-embedding: POST /v1/embeddings (its OpenAI-compatible route) with the token ids as
// input and dimensions when > 0 (docs/reference.md §23). No model name is sent: SGLang
// serves one model and defaults it. Errors: the engine's answer as an *Error, a
// transport error, or a malformed answer.
func (c *Client) Embed(ctx context.Context, tokens []uint32, dimensions int) ([]float32, int, error) {
	return c.h.Embed(ctx, enginehttp.EmbeddingRequest{Input: tokens, Dimensions: dimensions})
}

// Embed implements engines.Embedder with Client.Embed.
func (e *Engine) Embed(ctx context.Context, requestID string, tokens []uint32, dimensions int) ([]float32, int, error) {
	return e.c.Embed(ctx, tokens, dimensions)
}

var _ engines.Embedder = (*Engine)(nil)
