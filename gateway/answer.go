package gateway

import (
	"net/http"
	"time"

	"github.com/turbine-llm/turbine/gateway/parse"
)

// The chat completions API, the Responses API (responses.go) and the Anthropic Messages
// API (anthropic.go) share one generation path: each translates its request into a
// chatRequest, which is prepared, run and parsed (gateway/parse) the same way; only the
// answer's shape differs. An api names that shape.
type api interface {
	// endpoint is the metrics and log label (endpointChat, ...).
	endpoint() string
	// writeError answers e in this API's error shape, with Retry-After when e's kind
	// carries one.
	writeError(w http.ResponseWriter, e *APIError, retryAfter time.Duration)
	// answer returns the renderer of one prepared request's answer.
	answer(a answerInfo) answer
}

// answerInfo is what a renderer knows of its request before the first event.
type answerInfo struct {
	// ID is the request id (X-Request-Id); each API prefixes it its own way.
	ID string
	// Created is the request's arrival, in Unix seconds.
	Created int64
	// Model is the model name as the request gave it.
	Model string
	// PromptTokens is the prompt's length in tokens.
	PromptTokens int
	// IncludeUsage is stream_options.include_usage.
	IncludeUsage bool
	// Usage, when not nil, is the usage so far, which every chunk carries
	// (stream_options.continuous_usage_stats with include_usage).
	Usage func() Usage
	// Chat is the translated request (tools, stream options, the API's own fields are
	// kept by the API's renderer itself).
	Chat *chatRequest
	// Index is the choice this renderer renders, and Multi says the request has several
	// (choices.go): the stream's usage chunk and its end are then written once, by the
	// merge, not by each choice's streamEnd.
	Index int
	Multi bool
	// Logprobs collects the choice's logprobs and renders them (nil: the request asked
	// for none; logprobs.go).
	Logprobs *logprobSink
	// TokenIDs keeps the choice's token ids (nil: the request did not ask for them with
	// return_token_ids; vllmfields.go).
	TokenIDs *tokenIDSink
}

// answer renders one answer. Stream methods write to an SSE response whose 200 header
// is sent; a non-nil error means the client is gone and the request is abandoned.
type answer interface {
	// streamStart writes what precedes the first event.
	streamStart(s *sseWriter) error
	// streamEvents writes parsed events as they come (never empty).
	streamEvents(s *sseWriter, evs []parse.Event) error
	// streamEnd writes the end of a finished answer: end.Last, the events of the
	// finishing engine chunk, which streamEvents has not seen (a renderer may put them in
	// its final frame, as chat completions put the last text with finish_reason), then
	// whatever closes the stream.
	streamEnd(s *sseWriter, end *ending) error
	// streamFail writes a failure after the header (every event before it went through
	// streamEvents).
	streamFail(s *sseWriter, e *APIError) error
	// respond writes a finished non-streaming answer with status 200.
	respond(w http.ResponseWriter, end *ending) error
}

// ending is how an answer finished.
type ending struct {
	// Finish is the OpenAI finish_reason: "stop", "length" or "tool_calls".
	Finish string
	// StopString is the stop string that ended the answer ("" when it ended otherwise).
	StopString string
	// StopTokenID is the stop_token_ids id that ended the answer (nil when it ended
	// otherwise; an EOS id is not one: vllmfields.go, stopTokenReasons).
	StopTokenID *uint32
	// Usage counts the tokens (completion tokens include reasoning tokens).
	Usage Usage
	// ReasoningTokens counts the completion tokens that were reasoning (approximate:
	// tokens decoded while the parser was in a reasoning block).
	ReasoningTokens int
	// Result is every event of the answer collected (parallel_tool_calls false applied).
	Result parse.Result
	// Last are the events of the finishing engine chunk (streams only; see streamEnd).
	Last []parse.Event
	// Info is the `turbine` extension object, nil unless the request asked for it.
	Info *TurbineInfo
}

// event writes one SSE frame with an event name: "event: NAME\ndata: {json}\n\n", as the
// Responses and Anthropic Messages APIs frame their streams.
func (s *sseWriter) event(name string, v any) error {
	b, err := encodeJSON(v)
	if err != nil {
		return err
	}
	if s.err != nil {
		return s.err
	}
	buf := make([]byte, 0, len(name)+len(b)+16)
	buf = append(buf, "event: "...)
	buf = append(buf, name...)
	buf = append(buf, "\ndata: "...)
	buf = append(buf, b...)
	buf = append(buf, "\n\n"...)
	return s.write(buf)
}
