package enginehttp

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"

	"github.com/turbine-llm/turbine/engines"
)

// EmbeddingRequest is the body of an OpenAI-compatible POST /v1/embeddings with one
// token-id input, as vLLM (--runner pooling) and SGLang (--is-embedding) take it
// (docs/reference.md §23).
type EmbeddingRequest struct {
	Model          string   `json:"model,omitempty"`
	Input          []uint32 `json:"input"`
	EncodingFormat string   `json:"encoding_format"`
	Dimensions     int      `json:"dimensions,omitempty"`
}

// embeddingAnswer is the part of the answer read back.
type embeddingAnswer struct {
	Object string `json:"object"`
	Data   []struct {
		Index     int       `json:"index"`
		Embedding []float32 `json:"embedding"`
	} `json:"data"`
	Usage struct {
		PromptTokens int `json:"prompt_tokens"`
	} `json:"usage"`
}

// Embed posts r to /v1/embeddings and returns the one vector and the prompt tokens the
// engine counted (len(r.Input) when it reports none). Errors: Do's (the engine's error
// answer, decoded by the client's answered function; one whose status refuses the input,
// engines.InvalidRequestStatus, wrapped in an *engines.InvalidRequestError with the
// engine's message), or a malformed answer (not JSON, not one float entry).
func (c *Client) Embed(ctx context.Context, r EmbeddingRequest) ([]float32, int, error) {
	if r.EncodingFormat == "" {
		r.EncodingFormat = "float"
	}
	body, err := json.Marshal(r)
	if err != nil {
		return nil, 0, fmt.Errorf("%s: POST /v1/embeddings: %w", c.name, err)
	}
	resp, err := c.Submit(ctx, http.MethodPost, "/v1/embeddings", body, nil)
	if err != nil {
		return nil, 0, err
	}
	defer resp.Body.Close()
	var a embeddingAnswer
	if err := json.NewDecoder(io.LimitReader(resp.Body, maxJSONBytes)).Decode(&a); err != nil {
		return nil, 0, fmt.Errorf("%s: POST /v1/embeddings: decoding the answer: %w", c.name, err)
	}
	if len(a.Data) != 1 || len(a.Data[0].Embedding) == 0 {
		return nil, 0, fmt.Errorf("%s: POST /v1/embeddings: want one embedding in the answer, got %d entries", c.name, len(a.Data))
	}
	n := a.Usage.PromptTokens
	if n <= 0 {
		n = len(r.Input)
	}
	return a.Data[0].Embedding, n, nil
}

// refusedInput is the client's answered function for a request the engine may refuse
// (an embedding, a generation: Submit): the engine's error, wrapped in an
// *engines.InvalidRequestError when its status refuses the input. The message is read
// in every engine's error shapes (an engine's own error type keeps the shapes it sends).
func (c *Client) refusedInput(status int, body []byte) error {
	err := c.answered(status, body)
	if !engines.InvalidRequestStatus(status) {
		return err
	}
	f := DecodeAnswer(status, body, ErrorObject, ErrorText, TopLevel, Detail)
	return &engines.InvalidRequestError{Status: status, Message: f.Message, Err: err}
}
