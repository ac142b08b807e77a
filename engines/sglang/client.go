package sglang

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/turbine-llm/turbine/engines/internal/enginehttp"
)

// Options tunes a Client to how its server was started.
type Options struct {
	// IncrementalOutput: the server runs with --incremental-streaming-output, so each
	// streamed chunk's output_ids holds only its new tokens. False (SGLang's default):
	// output_ids are cumulative.
	IncrementalOutput bool
	// AbortTimeout bounds the POST /abort_request a stream sends when it is closed or
	// cancelled before it finished (default 5 s).
	AbortTimeout time.Duration
	// HealthPath is the readiness probe (default /health).
	HealthPath string
}

const defaultAbortTimeout = 5 * time.Second

// Client talks to one SGLang server. Safe for concurrent use.
type Client struct {
	h    *enginehttp.Client
	opts Options
}

// New returns a client for the server at baseURL (e.g. http://127.0.0.1:30000). hc may
// be nil: a client of its own (enginehttp.DefaultPool), without an overall timeout
// (bound calls with their contexts). Errors: a URL that is not absolute http(s).
func New(baseURL string, hc *http.Client, opts Options) (*Client, error) {
	h, err := enginehttp.New("sglang", baseURL, hc, errorFrom)
	if err != nil {
		return nil, err
	}
	if opts.AbortTimeout <= 0 {
		opts.AbortTimeout = defaultAbortTimeout
	}
	if opts.HealthPath == "" {
		opts.HealthPath = "/health"
	}
	return &Client{h: h, opts: opts}, nil
}

// Error is an error answer of the server (HTTP status and body), or an error frame in
// the middle of a stream (Status 0).
type Error struct {
	Status  int
	Type    string // the body's type, when it has one (e.g. "Bad Request")
	Message string
}

func (e *Error) Error() string {
	return enginehttp.ErrorMessage("sglang", e.Status, e.Type, e.Message)
}

// errorShapes are SGLang's error bodies, in the order they are read: {"error":
// {"message"}} (ValueError answers and stream error frames), {"error": "<text>"},
// {"object": "error", "message", "type", "code"} (ErrorResponse), FastAPI's
// {"detail": ...} and LoRAUpdateOutput's {"success": false, "error_message"} (LoRA
// adapter loads); anything else is kept as text.
var errorShapes = []enginehttp.Shape{enginehttp.ErrorObject, enginehttp.ErrorText, enginehttp.TopLevel, enginehttp.Detail,
	enginehttp.ErrorMessageField}

// errorFrom reads an error body into an *Error: a non-200 answer's (with its status), or
// an error frame of a stream (status 0).
func errorFrom(status int, body []byte) error {
	f := enginehttp.DecodeAnswer(status, body, errorShapes...)
	return &Error{Status: status, Type: f.Type, Message: f.Message}
}

// Health returns nil when the readiness probe (GET /health by default) answers 200.
// SGLang answers 503 while it starts or when its probe generation gets no answer.
func (c *Client) Health(ctx context.Context) error {
	return c.h.Call(ctx, http.MethodGet, c.opts.HealthPath, nil)
}

// ModelInfo is the answer of GET /get_model_info.
type ModelInfo struct {
	ModelPath     string `json:"model_path"`
	TokenizerPath string `json:"tokenizer_path"`
	IsGeneration  bool   `json:"is_generation"`
	WeightVersion string `json:"weight_version"`
}

// ModelInfo returns the served model's paths and kind.
func (c *Client) ModelInfo(ctx context.Context) (ModelInfo, error) {
	var mi ModelInfo
	if err := c.h.GetJSON(ctx, "/get_model_info", &mi); err != nil {
		return ModelInfo{}, err
	}
	return mi, nil
}

// Abort asks the server to abort request rid (POST /abort_request). SGLang answers 200
// whether or not it still knows rid.
func (c *Client) Abort(ctx context.Context, rid string) error {
	if rid == "" {
		return fmt.Errorf("sglang: abort without a request id")
	}
	b, err := json.Marshal(struct {
		RID      string `json:"rid"`
		AbortAll bool   `json:"abort_all"`
	}{RID: rid})
	if err != nil {
		return err
	}
	return c.h.Call(ctx, http.MethodPost, "/abort_request", b)
}

// SGLang's LoRA adapter routes (docs/reference.md §26.1).
const (
	loadLoraPath   = "/load_lora_adapter"
	unloadLoraPath = "/unload_lora_adapter"
	noLoraRoutes   = "the server has no LoRA adapter API (SGLang before dynamic LoRA loading)"
)

// LoadLora loads the LoRA adapter in folder path under name: POST /load_lora_adapter
// {"lora_name": name, "lora_path": path}, answered with SGLang's LoRAUpdateOutput
// {"success", "error_message", "loaded_adapters"}. Requests then name the adapter in
// /generate's lora_path. Errors: SGLang's refusal (400 with success false: adapters
// off, a name already loaded, --max-loaded-loras adapters loaded, an unreadable
// adapter) as an *engines.InvalidRequestError with its error_message, wrapping *Error;
// *Error for other answers; transport errors.
func (c *Client) LoadLora(ctx context.Context, name, path string) error {
	if name == "" || path == "" {
		return errors.New("sglang: a LoRA adapter load needs a name and a path")
	}
	return c.h.PostLora(ctx, loadLoraPath, enginehttp.LoraRequest{LoraName: name, LoraPath: path}, noLoraRoutes)
}

// UnloadLora unloads the LoRA adapter name: POST /unload_lora_adapter {"lora_name": name}.
// SGLang waits for the requests that run with it to finish. Errors: as LoadLora's (an
// adapter SGLang does not hold is a 400 refusal).
func (c *Client) UnloadLora(ctx context.Context, name string) error {
	if name == "" {
		return errors.New("sglang: a LoRA adapter unload needs a name")
	}
	return c.h.PostLora(ctx, unloadLoraPath, enginehttp.LoraRequest{LoraName: name}, noLoraRoutes)
}
