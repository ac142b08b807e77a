package gateway

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"strings"
	"time"
	"unicode"

	"github.com/rs/zerolog"

	"github.com/turbine-llm/turbine/gateway/preprocess"
	"github.com/turbine-llm/turbine/messages"
)

// Defaults, in one place.
const (
	// DefaultMaxBodyBytes is the largest request body accepted (bytes); larger → 413.
	DefaultMaxBodyBytes = 4 << 20
	// DefaultRetryAfter is what a 503 tells clients to wait.
	DefaultRetryAfter = time.Second
	// DefaultOwnedBy is the `owned_by` of /v1/models entries.
	DefaultOwnedBy = "turbine"
	// MaxStopSequences is OpenAI's limit on `stop` entries.
	MaxStopSequences = 4
	// MaxRequestIDLength bounds an honoured X-Request-Id (bytes); longer ones are replaced.
	MaxRequestIDLength = 128
	// DefaultQueueTimeout is how long a queued request waits for a worker (QueueDepth > 0).
	DefaultQueueTimeout = 10 * time.Second
	// DefaultQueueRetry is how often the head of a model's queue retries the route when
	// none of this server's streams ended meanwhile (load freed by other frontends).
	DefaultQueueRetry = 20 * time.Millisecond
)

// Config is the gateway's user configuration. The zero value of each field means its
// default.
type Config struct {
	// MaxBodyBytes bounds request bodies in bytes (default DefaultMaxBodyBytes).
	MaxBodyBytes int64
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
	// RequestTimeout bounds a generation from its arrival to its last token; a request
	// past it is cancelled in its engine and answered 504 (or, streaming, one error frame
	// and [DONE]). Zero: no limit.
	RequestTimeout time.Duration
	// QueueRetry is the period of the queue head's route retries (default
	// DefaultQueueRetry); it also retries whenever a stream of its model ends here.
	QueueRetry time.Duration
	// APIKeys, when not empty, are the keys that a request to a path under /v1/ or
	// /admin/ must present, any one of them, as "Authorization: Bearer <key>" (vLLM's
	// --api-key); other requests there get 401 (KindUnauthorized). /health, /live and
	// /metrics stay open. Empty (the default): no authentication. Each key must be
	// non-empty, without white space at either end and without control characters (it
	// could not be sent in a header otherwise). The keys are never logged.
	APIKeys []string
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
	if c.QueueDepth < 0 || c.QueueTimeout < 0 || c.QueueRetry < 0 {
		return c, fmt.Errorf("gateway: config QueueDepth, QueueTimeout and QueueRetry must be >= 0, got %d, %s, %s",
			c.QueueDepth, c.QueueTimeout, c.QueueRetry)
	}
	for i, k := range c.APIKeys {
		// The error names the key's position, never the key.
		switch {
		case k == "":
			return c, fmt.Errorf("gateway: config APIKeys[%d] is empty", i)
		case strings.TrimSpace(k) != k || strings.ContainsFunc(k, unicode.IsControl):
			return c, fmt.Errorf("gateway: config APIKeys[%d] has white space at an end or a control character (it could not be sent in an Authorization header)", i)
		}
	}
	if c.QueueTimeout == 0 {
		c.QueueTimeout = DefaultQueueTimeout
	}
	if c.QueueRetry == 0 {
		c.QueueRetry = DefaultQueueRetry
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

func randomRequestID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// Preprocessor is what the gateway needs of one model's preprocessing: its tokenizer and
// chat template. *preprocess.Model provides it through PreprocessorOf.
type Preprocessor interface {
	// Tokenizer converts between text and token ids.
	Tokenizer() preprocess.Tokenizer
	// RenderChat renders a chat into the prompt text (preprocess.Model.RenderChat); the
	// result is tokenized with Tokenizer().Encode (the template writes BOS itself).
	RenderChat(in preprocess.ChatTemplateInput) (string, error)
	// EncodePrompt tokenizes a raw completions prompt, with the special tokens HF
	// tokenizers add (preprocess.Model.EncodePrompt).
	EncodePrompt(text string) []uint32
	// EOSTokenIDs are token ids that end generation.
	EOSTokenIDs() []uint32
	// ContextLength in tokens; 0 when unknown.
	ContextLength() int
}

// ModelLoader loads the preprocessing of a model from its card (card.Tokenizer names the
// source). It is called per request and should cache.
type ModelLoader func(card *messages.ModelCard) (Preprocessor, error)

// Detokenizer turns streamed token ids into text (preprocess.Detokenizer's methods).
type Detokenizer interface {
	Push(ids ...uint32) string
	Flush() string
}

// StopMatcher finds stop strings in streamed text (preprocess.StopMatcher's methods).
type StopMatcher interface {
	Push(text string) (emit string, stopped bool)
	Flush() string
}

// options are the seams tests and embedders replace.
type options struct {
	loadModel      ModelLoader
	newDetokenizer func(tok preprocess.Tokenizer, skipSpecial bool) Detokenizer
	newStopMatcher func(stops []string) StopMatcher
}

// Option changes how New builds the server.
type Option func(*options)

// WithModelLoader replaces the default loader (preprocess.LoadModel(card.Tokenizer)).
func WithModelLoader(l ModelLoader) Option { return func(o *options) { o.loadModel = l } }

// WithDetokenizer replaces preprocess.NewDetokenizer.
func WithDetokenizer(f func(tok preprocess.Tokenizer, skipSpecial bool) Detokenizer) Option {
	return func(o *options) { o.newDetokenizer = f }
}

// WithStopMatcher replaces preprocess.NewStopMatcher.
func WithStopMatcher(f func(stops []string) StopMatcher) Option {
	return func(o *options) { o.newStopMatcher = f }
}

func defaultOptions() options {
	return options{
		loadModel: func(card *messages.ModelCard) (Preprocessor, error) {
			m, err := preprocess.LoadModel(card.GetTokenizer())
			if err != nil {
				return nil, err
			}
			return PreprocessorOf(m), nil
		},
		newDetokenizer: func(tok preprocess.Tokenizer, skipSpecial bool) Detokenizer {
			return preprocess.NewDetokenizer(tok, skipSpecial)
		},
		newStopMatcher: func(stops []string) StopMatcher { return preprocess.NewStopMatcher(stops) },
	}
}

// PreprocessorOf adapts a loaded preprocess.Model to Preprocessor.
func PreprocessorOf(m *preprocess.Model) Preprocessor { return modelPreprocessor{m} }

type modelPreprocessor struct{ m *preprocess.Model }

func (p modelPreprocessor) Tokenizer() preprocess.Tokenizer { return p.m.Tokenizer }
func (p modelPreprocessor) RenderChat(in preprocess.ChatTemplateInput) (string, error) {
	return p.m.RenderChat(in)
}
func (p modelPreprocessor) EncodePrompt(text string) []uint32 { return p.m.EncodePrompt(text) }
func (p modelPreprocessor) EOSTokenIDs() []uint32             { return p.m.EOSTokenIDs }
func (p modelPreprocessor) ContextLength() int                { return p.m.ContextLength }
