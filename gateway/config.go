package gateway

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"strings"
	"time"
	"unicode"

	"github.com/rs/zerolog"

	"github.com/turbine-llm/turbine/messages"
	"github.com/turbine-llm/turbine/model"
)

// Defaults, in one place.
const (
	// DefaultMaxBodyBytes is the largest request body accepted (bytes); larger → 413.
	DefaultMaxBodyBytes = 4 << 20
	// DefaultRetryAfter is what a 503 tells clients to wait.
	DefaultRetryAfter = time.Second
	// DefaultOwnedBy is the `owned_by` of /v1/models entries.
	DefaultOwnedBy = "turbine"
	// MaxAnthropicStopSequences bounds the Messages API's `stop_sequences` (Anthropic
	// documents no limit; each one is matched against every token of the answer).
	MaxAnthropicStopSequences = 16
	// MaxSchemaDepth bounds the JSON nesting depth of a JSON Schema in a request (a
	// function's parameters, an Anthropic tool's input_schema, response_format,
	// structured_outputs.json, guided_json, the Responses API's text.format, the Messages
	// API's output_config.format): each object or array is one level, the schema itself
	// the first. A deeper one is refused (400 invalid_value) before it is compiled, whose
	// cost grows faster than the square of the depth. One level of properties is two
	// levels of JSON; OpenAI's structured outputs allow 10 levels of properties.
	MaxSchemaDepth = 64
	// MaxToolNameLength is OpenAI's limit on a function's name (chat completions and the
	// Responses API): 1 to 64 characters of a-z, A-Z, 0-9, '_' and '-'.
	MaxToolNameLength = 64
	// MaxAnthropicToolNameLength is the Messages API's limit on a tool's name: 1 to 128
	// characters of a-z, A-Z, 0-9, '_' and '-'.
	MaxAnthropicToolNameLength = 128
	// MaxRequestIDLength bounds an honoured X-Request-Id (bytes); longer ones are replaced.
	MaxRequestIDLength = 128
	// DefaultQueueTimeout is how long a queued request waits for a worker (QueueDepth > 0).
	DefaultQueueTimeout = 10 * time.Second
	// DefaultQueueRetry is how often the head of a model's queue retries the route when
	// none of this server's streams ended meanwhile (load freed by other frontends).
	DefaultQueueRetry = 20 * time.Millisecond
	// DefaultStreamWriteTimeout is how long one write of a response may wait for the
	// client to read (Config.StreamWriteTimeout): nginx's send_timeout, which has the same
	// meaning and default. A write waits only once the client's receive window and the
	// server's send queue are full, so only a client that has stopped reading (or whose
	// network has been down) for about this long is cut; a minute rides out a stalled
	// link and still frees a stalled client's engine sequence within about a minute.
	DefaultStreamWriteTimeout = 60 * time.Second
)

// Config is the gateway's user configuration. The zero value of each field means its
// default.
type Config struct {
	// MaxBodyBytes bounds request bodies in bytes (default DefaultMaxBodyBytes).
	MaxBodyBytes int64
	// CORS is the cross-origin policy for browser clients; nil: none (no CORS headers; a
	// preflight is an OPTIONS request like any other: 405, or 401 first where an API key
	// is required).
	CORS *CORS
	// RetryAfter is sent with 503 answers, rounded to whole seconds (default 1 s).
	RetryAfter time.Duration
	// OwnedBy is the `owned_by` of /v1/models entries (default "turbine").
	OwnedBy string
	// Logger receives one line per request (the zero Logger discards).
	Logger zerolog.Logger
	// Now is the clock for `created` timestamps and latency metrics (default time.Now).
	Now func() time.Time
	// NewRequestID makes a request id when the client sent no usable X-Request-Id
	// (default: 32 random hex digits).
	NewRequestID func() string
	// QueueDepth is how many requests per model may wait, first in first out, when every
	// worker is busy; 0 (the default) answers them with 503 at once.
	QueueDepth int
	// QueueTimeout bounds a queued request's wait; then it gets 503 (default
	// DefaultQueueTimeout).
	QueueTimeout time.Duration
	// RequestTimeout bounds a generation from its arrival to its last token (an
	// embeddings request, to its last input's embedding); a request past it is cancelled
	// in its engine and answered 504 (or, streaming, one error frame and [DONE]). Zero:
	// no limit.
	RequestTimeout time.Duration
	// QueueRetry is the period of the queue head's route retries (default
	// DefaultQueueRetry); it also retries whenever a stream of its model ends here.
	QueueRetry time.Duration
	// MaxConcurrentRequests bounds the generation requests this server handles at once,
	// each counted from its arrival to the end of its answer, whatever its model (as
	// sgl-router's --max-concurrent-requests). A request arriving when all are taken waits
	// in its model's queue when QueueDepth > 0 (503 server_overloaded once the queue is
	// full or after QueueTimeout), else it is answered 503 server_overloaded with
	// Retry-After at once, before its body is read. 0 (the default): no limit.
	MaxConcurrentRequests int
	// StreamWriteTimeout bounds how long one write (or flush) of any response, streamed
	// or not, may wait for the client to read: the deadline is renewed before every
	// write, so it limits a stall, not the response's length, nor the time between
	// tokens. A client that reads nothing for this long once the socket buffers are full
	// has its connection closed and its engine request cancelled (counted as a client
	// that went away, status 499), however legitimate its slowness. Default
	// DefaultStreamWriteTimeout; negative: no deadline.
	StreamWriteTimeout time.Duration
	// APIKeys, when not empty, are the keys that a request to a path under /v1/ (or to
	// /tokenize, /detokenize) must present, any one of them, as
	// "Authorization: Bearer <key>" (vLLM's --api-key); other requests there get 401
	// (KindUnauthorized). They do not open /admin/ (AdminAPIKeys). /health, /live and
	// /metrics stay open. Empty (the default): no authentication. Each key must be
	// non-empty, without white space at either end and without control characters (it
	// could not be sent in a header otherwise). The keys are never logged.
	APIKeys []string
	// AdminAPIKeys, when not empty, are the keys that a request to a path under /admin/
	// must present, any one of them, as "Authorization: Bearer <key>"; APIKeys do not
	// open /admin/, nor do these keys open /v1/. Without them, /admin/ refuses every
	// request with 403 (KindAdminForbidden) when APIKeys is set, and otherwise serves
	// only loopback clients whose request carries no proxy header (Forwarded,
	// X-Forwarded-For, X-Real-Ip). Same rules as APIKeys; never logged.
	AdminAPIKeys []string
	// TrustRequestChatTemplate lets a request bring its own Jinja chat template (vLLM's
	// --trust-request-chat-template): chat_template on chat completions and /tokenize,
	// and chat_template_kwargs.chat_template. False (the default): such a request is
	// refused with 400, before its template is compiled. The template engine bounds
	// neither a template's running time nor its output, nor its parser's recursion, so a
	// trusted template can take the whole server's CPU and memory, or crash the process
	// (docs/reference.md §20): set it only when every client may be trusted with that.
	TrustRequestChatTemplate bool
	// Observer, when set, receives every generation request's TTFT, inter-token gaps,
	// queue wait and prompt and completion tokens as they are measured (the frontend's
	// planner reports, docs/reference.md §27.7); nil: none.
	Observer Observer
}

// withDefaults validates c and fills its defaults.
func (c Config) withDefaults() (Config, error) {
	if c.MaxBodyBytes < 0 {
		return c, fmt.Errorf("gateway: config MaxBodyBytes must be >= 0, got %d", c.MaxBodyBytes)
	}
	if c.MaxBodyBytes == 0 {
		c.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if c.RetryAfter < 0 {
		return c, fmt.Errorf("gateway: config RetryAfter must be >= 0, got %s", c.RetryAfter)
	}
	if c.RetryAfter == 0 {
		c.RetryAfter = DefaultRetryAfter
	}
	if c.RequestTimeout < 0 {
		return c, fmt.Errorf("gateway: config RequestTimeout must be >= 0, got %s", c.RequestTimeout)
	}
	if c.MaxConcurrentRequests < 0 {
		return c, fmt.Errorf("gateway: config MaxConcurrentRequests must be >= 0, got %d", c.MaxConcurrentRequests)
	}
	if c.QueueDepth < 0 || c.QueueTimeout < 0 || c.QueueRetry < 0 {
		return c, fmt.Errorf("gateway: config QueueDepth, QueueTimeout and QueueRetry must be >= 0, got %d, %s, %s",
			c.QueueDepth, c.QueueTimeout, c.QueueRetry)
	}
	if err := checkKeys("APIKeys", c.APIKeys); err != nil {
		return c, err
	}
	if err := checkKeys("AdminAPIKeys", c.AdminAPIKeys); err != nil {
		return c, err
	}
	if c.QueueTimeout == 0 {
		c.QueueTimeout = DefaultQueueTimeout
	}
	if c.QueueRetry == 0 {
		c.QueueRetry = DefaultQueueRetry
	}
	if c.StreamWriteTimeout == 0 {
		c.StreamWriteTimeout = DefaultStreamWriteTimeout
	}
	if c.OwnedBy == "" {
		c.OwnedBy = DefaultOwnedBy
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.NewRequestID == nil {
		c.NewRequestID = randomRequestID
	}
	return c, nil
}

// checkKeys checks the keys of the Config field named field; the error names a key's
// position, never the key.
func checkKeys(field string, keys []string) error {
	for i, k := range keys {
		switch {
		case k == "":
			return fmt.Errorf("gateway: config %s[%d] is empty", field, i)
		case strings.TrimSpace(k) != k || strings.ContainsFunc(k, unicode.IsControl):
			return fmt.Errorf("gateway: config %s[%d] has white space at an end or a control character (it could not be sent in an Authorization header)", field, i)
		}
	}
	return nil
}

func randomRequestID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// Preprocessor is what the gateway needs of one model's preprocessing: its tokenizer and
// chat template. *model.Model provides it through PreprocessorOf.
type Preprocessor interface {
	// Tokenizer converts between text and token ids.
	Tokenizer() model.Tokenizer
	// RenderChat renders a chat into the prompt text (model.Model.RenderChat); the
	// result is tokenized with Tokenizer().Encode (the template writes BOS itself).
	RenderChat(in model.ChatTemplateInput) (string, error)
	// EncodePrompt tokenizes a raw completions prompt, with the special tokens HF
	// tokenizers add (model.Model.EncodePrompt).
	EncodePrompt(text string) []uint32
	// EOSTokenIDs are token ids that end generation.
	EOSTokenIDs() []uint32
	// ContextLength in tokens; 0 when unknown.
	ContextLength() int
}

// ModelLoader loads the preprocessing of a model from its card (card.Tokenizer names the
// source). It is called per request and should cache.
type ModelLoader func(card *messages.ModelCard) (Preprocessor, error)

// Detokenizer turns streamed token ids into text (model.Detokenizer's methods).
type Detokenizer interface {
	Push(ids ...uint32) string
	Flush() string
}

// StopMatcher finds stop strings in streamed text (model.StopMatcher's methods).
type StopMatcher interface {
	Push(text string) (emit string, stopped bool)
	Flush() string
}

// options are the seams tests and embedders replace.
type options struct {
	loadModel      ModelLoader
	newDetokenizer func(tok model.Tokenizer, skipSpecial bool) Detokenizer
	newStopMatcher func(stops []string) StopMatcher
	// newToolCallID names an answer's tool call index (random, as vLLM's ids).
	newToolCallID func(index int) string
}

// Option changes how New builds the server.
type Option func(*options)

// WithModelLoader replaces the default loader (model.LoadModel(card.Tokenizer)).
func WithModelLoader(l ModelLoader) Option { return func(o *options) { o.loadModel = l } }

// WithToolCallIDs replaces the random tool call ids ("chatcmpl-tool-<32 hex>") with f's.
func WithToolCallIDs(f func(index int) string) Option {
	return func(o *options) { o.newToolCallID = f }
}

// WithDetokenizer replaces model.NewDetokenizer.
func WithDetokenizer(f func(tok model.Tokenizer, skipSpecial bool) Detokenizer) Option {
	return func(o *options) { o.newDetokenizer = f }
}

// WithStopMatcher replaces model.NewStopMatcher.
func WithStopMatcher(f func(stops []string) StopMatcher) Option {
	return func(o *options) { o.newStopMatcher = f }
}

func defaultOptions() options {
	return options{
		loadModel: func(card *messages.ModelCard) (Preprocessor, error) {
			m, err := model.LoadModel(card.GetTokenizer())
			if err != nil {
				return nil, err
			}
			return PreprocessorOf(m), nil
		},
		newDetokenizer: func(tok model.Tokenizer, skipSpecial bool) Detokenizer {
			return model.NewDetokenizer(tok, skipSpecial)
		},
		newStopMatcher: func(stops []string) StopMatcher { return model.NewStopMatcher(stops) },
		newToolCallID:  newToolCallID,
	}
}

// PreprocessorOf adapts a loaded model.Model to Preprocessor.
func PreprocessorOf(m *model.Model) Preprocessor { return modelPreprocessor{m} }

type modelPreprocessor struct{ m *model.Model }

func (p modelPreprocessor) Tokenizer() model.Tokenizer { return p.m.Tokenizer }
func (p modelPreprocessor) RenderChat(in model.ChatTemplateInput) (string, error) {
	return p.m.RenderChat(in)
}
func (p modelPreprocessor) EncodePrompt(text string) []uint32 { return p.m.EncodePrompt(text) }
func (p modelPreprocessor) EOSTokenIDs() []uint32             { return p.m.EOSTokenIDs }
func (p modelPreprocessor) ContextLength() int                { return p.m.ContextLength }
