package enginehttp

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/turbine-llm/turbine/engines"
)

// LoraRequest is the body of a LoRA adapter load (vLLM's LoadLoRAAdapterRequest, SGLang's
// LoadLoRAAdapterReqInput) or, without a path, of an unload (docs/reference.md §26.1).
type LoraRequest struct {
	LoraName string `json:"lora_name"`
	LoraPath string `json:"lora_path,omitempty"`
}

// PostLora posts r to path (a load or unload route) and returns nil when the engine
// answers 200. An error answer with a 4xx status is the engine's refusal of the adapter
// (a bad folder, a name taken, an unknown name): the client's answered function's error
// wrapped in an *engines.InvalidRequestError with the engine's message, read in every
// engine's error shapes; except FastAPI's own 404 or 405 for a route the server does not
// have (RouteMissing), which is the client's error wrapped with missing. Errors: those,
// other error answers (the answered function's), and transport errors.
func (c *Client) PostLora(ctx context.Context, path string, r LoraRequest, missing string) error {
	body, err := json.Marshal(r)
	if err != nil {
		return fmt.Errorf("%s: POST %s: %w", c.name, path, err)
	}
	resp, err := c.do(ctx, http.MethodPost, path, body, nil, func(status int, b []byte) error {
		err := c.answered(status, b)
		switch {
		case RouteMissing(status, b):
			return fmt.Errorf("%s: POST %s: %s: %w", c.name, path, missing, err)
		case status < 400 || status > 499:
			return err
		}
		f := DecodeAnswer(status, b, ErrorObject, ErrorMessageField, ErrorText, TopLevel, Detail)
		return &engines.InvalidRequestError{Status: status, Message: f.Message, Err: err}
	})
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	// A 200 that says it failed (SGLang's LoRAUpdateOutput with success false).
	b, _ := io.ReadAll(io.LimitReader(resp.Body, maxErrorBytes))
	var out struct {
		Success *bool `json:"success"`
	}
	if json.Unmarshal(b, &out) == nil && out.Success != nil && !*out.Success {
		err := c.answered(http.StatusBadRequest, b)
		return &engines.InvalidRequestError{Status: http.StatusBadRequest,
			Message: DecodeAnswer(http.StatusBadRequest, b, ErrorMessageField).Message, Err: err}
	}
	return nil
}

// RouteMissing reports whether an error answer is FastAPI's own for a route the server
// does not serve: 404 {"detail": "Not Found"} or 405 {"detail": "Method Not Allowed"}
// (vLLM without VLLM_ALLOW_RUNTIME_LORA_UPDATING has no LoRA routes), rather than the
// route's own 404 (vLLM's NotFoundError for an unknown adapter).
func RouteMissing(status int, body []byte) bool {
	var b struct {
		Detail string `json:"detail"`
	}
	if json.Unmarshal(body, &b) != nil {
		return false
	}
	return (status == http.StatusNotFound && strings.EqualFold(b.Detail, "Not Found")) ||
		(status == http.StatusMethodNotAllowed && strings.EqualFold(b.Detail, "Method Not Allowed"))
}
