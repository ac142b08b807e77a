package frontend

import (
	"fmt"

	"google.golang.org/protobuf/proto"

	"github.com/turbine-llm/turbine/engines"
	"github.com/turbine-llm/turbine/messages"
)

// Request migration (docs/reference.md §10): when the worker serving a stream fails in a way
// that allows re-sending, the stream continues on another worker with the prompt
// followed by every token produced so far, and with max_tokens and min_tokens reduced by
// that count. The functions here decide; the stream (backend.go) carries it out.

// Fault reasons: the label values of turbine_frontend_migrations_total.
const (
	// FaultWorkerTerminated: the worker's actor stopped (its member left or crashed).
	FaultWorkerTerminated = "worker_terminated"
	// FaultEngineError: the worker reported a migratable engine failure (the engine
	// process died, refused the connection, or was not ready).
	FaultEngineError = "engine_error"
	// FaultStalled: no chunk arrived within Config.StallTimeout.
	FaultStalled = "stalled"
	// FaultKVTransfer: a decode leg's engine could not load the prompt's KV blocks from
	// the prefill engine (engines.ErrKVTransfer: the prefill engine died, froze or no
	// longer holds them). The prefill side is at fault: the request's prefill is
	// retried (disagg.go), and the decode worker is not excluded.
	FaultKVTransfer = "kv_transfer"
)

// DefaultMigrationLimit is how many times a request is re-sent after migratable faults
// unless configured otherwise (the --migration-limit default).
const DefaultMigrationLimit = 3

// faultOf returns the fault reason of a chunk from a worker: FaultKVTransfer for a
// migratable failure whose error carries engines.KVTransferFailed, FaultEngineError for
// any other failure the worker marked migratable, "" otherwise (tokens, a finish, or a
// failure that re-sending would not mend).
func faultOf(ch *messages.TokenChunk) string {
	switch {
	case !ch.GetMigratable() || (ch.GetError() == "" && ch.GetFinishReason() != "error"):
		return ""
	case engines.IsKVTransferFailure(ch.GetError()):
		return FaultKVTransfer
	}
	return FaultEngineError
}

// unmovable says why a request may never be migrated, or "" when it may: one whose
// output is constrained (structured output, SamplingParams.structured) is not re-sent,
// because the engine would constrain the continuation as a whole new output, from the
// grammar's start, and corrupt it (docs/reference.md §10).
func unmovable(sampling *messages.SamplingParams) string {
	if sampling.GetStructured() != nil {
		return "structured output requests are not moved to another worker (the output constraint cannot resume mid-answer)"
	}
	return ""
}

// refusal says why a fault is not migrated after done migrations under limit, or ""
// when one more is allowed.
func refusal(limit, done int) string {
	switch {
	case limit <= 0:
		return "migration is disabled"
	case done >= limit:
		return fmt.Sprintf("the migration limit (%d) is reached", limit)
	}
	return ""
}

// continuation is the request that resumes a stream after produced tokens: the prompt
// followed by produced, and sampling with max_tokens and min_tokens reduced by
// len(produced) (min_tokens not below 0). more is false when max_tokens is already used
// up: the stream is complete and nothing is re-sent. prompt and sampling are not changed.
func continuation(prompt []uint32, sampling *messages.SamplingParams, produced []uint32) (
	tokens []uint32, sp *messages.SamplingParams, more bool) {
	sp = &messages.SamplingParams{}
	if sampling != nil {
		sp = proto.Clone(sampling).(*messages.SamplingParams)
	}
	n := int32(len(produced))
	if sp.MaxTokens > 0 {
		if sp.MaxTokens <= n {
			return nil, nil, false
		}
		sp.MaxTokens -= n
	}
	sp.MinTokens = max(sp.MinTokens-n, 0)
	tokens = make([]uint32, 0, len(prompt)+len(produced))
	tokens = append(append(tokens, prompt...), produced...)
	return tokens, sp, true
}

// finalUsage rewrites the token counts of a stream's finishing chunk so that they cover
// the whole stream: the original prompt (promptLen tokens) and every token produced
// (completion), whichever attempt produced them. Cached tokens are capped at the original
// prompt (a continuation's prompt includes earlier output).
func finalUsage(ch *messages.TokenChunk, promptLen, completion int) {
	ch.PromptTokens = int32(promptLen)
	ch.CompletionTokens = int32(completion)
	ch.CachedTokens = min(ch.CachedTokens, int32(promptLen))
}
