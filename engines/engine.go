// Package engines holds what every engine adapter shares: the interface a worker uses to
// talk to its engine process, and how that process is launched. Each engine is one
// package holding its client, adapter and launcher (engines/vllm, engines/sglang,
// engines/trtllm; the mock engine's launcher is engines/mocker/launch), and
// engines/registry maps engine names to launchers.
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
	// KVTransferParams is set on the last chunk of a prefill leg
	// (SamplingParams.disagg.leg "prefill") whose engine returned transfer parameters:
	// a JSON object the decode leg passes back unchanged (DisaggParams.kv_transfer_params).
	// vLLM: the response's kv_transfer_params (do_remote_prefill, remote_engine_id,
	// remote_block_ids, remote_host, remote_port, tp_size, ...; docs/reference.md §6).
	// TensorRT-LLM: the choice's disaggregated_params (request_type, first_gen_tokens,
	// ctx_request_id, encoded_opaque_state). Empty when the engine returned none: vLLM
	// returns none when the prefill leg finished on a stop token (its only token ended
	// the request, and no KV was kept), and SGLang never does (its decode leg finds the
	// KV through the bootstrap room both legs were given).
	KVTransferParams string
	// Logprobs, with SamplingParams.logprobs set: one per token of TokenIDs, in order.
	Logprobs []*messages.TokenLogprob
	// PromptLogprobs, with SamplingParams.prompt_logprobs set: one per prompt token, on
	// the first chunk only.
	PromptLogprobs []*messages.TokenLogprob
}

// Embedder is implemented by engines that serve embeddings (a pooling model: vLLM
// --runner pooling, SGLang --is-embedding, the mock engine's --runner pooling).
type Embedder interface {
	// Embed returns the embedding of one tokenized input, truncated to dimensions when
	// dimensions > 0 (Matryoshka), and the input's token count. Errors: the engine could
	// not be reached, refused the input, or answered malformed JSON.
	Embed(ctx context.Context, requestID string, tokens []uint32, dimensions int) (vector []float32, promptTokens int, err error)
}

// Engine is how a worker talks to its engine process once it is up.
type Engine interface {
	// Health returns nil when the engine serves requests.
	Health(ctx context.Context) error
	// Generate runs one request with the prompt as token ids and calls fn for each chunk
	// in order. Cancelling ctx aborts the request in the engine. An error returned by fn
	// stops the stream and is returned.
	//
	// A prefill leg (SamplingParams.disagg leg "prefill") whose engine answers after ctx
	// ended (FinishPrefill) still passes its last chunk, with its KVTransferParams, to fn,
	// and Generate then returns ctx's error (or fn's): the caller, which will not hand
	// the parameters to a decode leg, releases the blocks they name (KVReleaser).
	Generate(ctx context.Context, requestID string, tokens []uint32, s *messages.SamplingParams, fn func(Chunk) error) error
	// Load scrapes the engine's load (running/waiting requests, KV usage).
	Load(ctx context.Context) (*messages.WorkerLoad, error)
}

// KVReleaser is implemented by engines whose KV blocks pinned for a disaggregated
// request can be released on request: the worker of a prefill leg calls ReleaseKV when
// the decode leg will not read them (rejected, cancelled, or never sent), so that they
// do not stay pinned until the engine's own timeout.
//
// Only the mock engine frees blocks at once (a release message on its KV transfer port,
// which its launcher hands the vLLM and TensorRT-LLM adapters); on vLLM and trtllm-serve,
// which have no release API, ReleaseKV is a no-op returning nil (docs/reference.md §6).
// SGLang's adapter does not implement it: a prefill leg returns no parameters to name
// the blocks by, and the prefill server frees a room's KV when its bootstrap times out.
//
// Releasing blocks that were already read or released is harmless and returns nil.
// requestID is the prefill leg's request id; kvTransferParams what its last chunk
// carried (Chunk.KVTransferParams). Errors: malformed parameters, or the engine could
// not be reached.
type KVReleaser interface {
	ReleaseKV(ctx context.Context, requestID, kvTransferParams string) error
}

// Bootstrapper is implemented by launchers whose prefill engines advertise a bootstrap
// address that both legs of a disaggregated request are given (SGLang's
// --disaggregation-bootstrap-port; docs/reference.md §6): the worker registers it
// (messages.WorkerInfo bootstrap_host and bootstrap_port) after each Command, since the
// port may be chosen at each start. Bootstrap returns the address of the engine the
// latest Command started; ok is false when the engine has none (not SGLang, not a
// prefill role, or no Command yet).
type Bootstrapper interface {
	Bootstrap() (host string, port int, ok bool)
}

// KVEventSource is implemented by launchers that may start their engine without KV
// events (the mock engine's, under `turbine serve --mocker-kv-events=false`): KVEvents
// reports whether the engines their Command starts publish them. A worker whose
// launcher says they do not registers so (messages.WorkerInfo no_kv_events), and the
// router routes it on its own record of what it placed there (docs/reference.md §3.4).
// Launchers without the method always start engines with events.
type KVEventSource interface {
	KVEvents() bool
}

// LoraLoader is implemented by engines whose LoRA adapters are loaded and unloaded at
// run time (docs/reference.md §26): vLLM (/v1/load_lora_adapter, with runtime LoRA
// updating enabled by its launcher), SGLang (/load_lora_adapter) and the mock engine
// (vLLM's API). TensorRT-LLM's server takes the adapter with each request instead
// (lora_request): its client only records the adapter's path. A request names its
// adapter in SamplingParams.lora_name, which each engine's client sends in its dialect.
//
// name is the adapter's served name, path its folder on the engine's host. Errors: an
// *InvalidRequestError when the engine refused the adapter itself (a bad folder, a name
// already loaded, an unknown name to unload), else the engine could not be reached or
// failed.
type LoraLoader interface {
	LoadLora(ctx context.Context, name, path string) error
	UnloadLora(ctx context.Context, name string) error
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
