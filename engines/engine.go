// Package engines holds what every engine adapter shares: the interface a worker uses to
// talk to its engine process, and how that process is launched.
package engines

import (
	"context"

	"github.com/turbine-llm/turbine/kv"
	"github.com/turbine-llm/turbine/messages"
)

// Chunk is one piece of an engine's token stream.
type Chunk struct {
	TokenIDs     []uint32
	FinishReason string // "" until the last chunk: "stop", "length", "abort"
	// Usage, set on the last chunk (token counts).
	PromptTokens, CachedTokens, CompletionTokens int
}

// Engine is how a worker talks to its engine process once it is up.
type Engine interface {
	// Health returns nil when the engine serves requests.
	Health(ctx context.Context) error
	// Generate runs one request with the prompt as token ids and calls fn for each chunk
	// in order. Cancelling ctx aborts the request in the engine. An error returned by fn
	// stops the stream and is returned.
	Generate(ctx context.Context, requestID string, tokens []uint32, s *messages.SamplingParams, fn func(Chunk) error) error
	// Load scrapes the engine's load (running/waiting requests, KV usage).
	Load(ctx context.Context) (*messages.WorkerLoad, error)
}

// Launcher builds an engine process's command line and its client.
type Launcher interface {
	// Command returns argv and extra environment for an engine serving on host:port and
	// publishing KV events on kvEndpoint (a ZMQ endpoint such as tcp://127.0.0.1:5557).
	Command(host string, port int, kvEndpoint string) (argv, env []string)
	// Connect returns a client for the engine at baseURL (http://host:port).
	Connect(baseURL string) Engine
	// SubscribeKVEvents subscribes to the engine's KV events and calls fn for each batch in
	// order until ctx ends. It returns when ctx ends or the subscription fails.
	SubscribeKVEvents(ctx context.Context, endpoint string, fn func(kv.Batch)) error
}
