package flow

import (
	"fmt"

	"google.golang.org/protobuf/proto"

	"github.com/turbine-llm/turbine/messages"
)

// Request migration (docs/reference.md §10): when the worker serving a request fails in
// a way that allows re-sending, the request continues on another worker with the prompt
// followed by every token produced so far, and with max_tokens and min_tokens reduced by
// that count. The functions here decide; Flow.migrate carries it out.

// faultOf returns the fault of a chunk from a worker: FAULT_KV_TRANSFER and
// FAULT_INVALID_REQUEST (the engine refused the request itself: never re-sent) for a
// failure the worker marked so, FAULT_ENGINE_ERROR for any other failure the worker
// marked as one that re-sending may mend, FAULT_NONE otherwise (tokens, a finish, or a
// failure that re-sending would not mend).
func faultOf(ch *messages.TokenChunk) messages.Fault {
	switch {
	case ch.GetFault() == messages.Fault_FAULT_NONE || (ch.GetError() == "" && ch.GetFinishReason() != "error"):
		return messages.Fault_FAULT_NONE
	case ch.GetFault() == messages.Fault_FAULT_KV_TRANSFER, ch.GetFault() == messages.Fault_FAULT_INVALID_REQUEST:
		return ch.GetFault()
	}
	return messages.Fault_FAULT_ENGINE_ERROR
}

// refusedChunk is the error chunk that ends request requestID whose engine refused it
// (ch, a chunk with FAULT_INVALID_REQUEST): the engine's message unchanged and the
// fault, so that the consumer answers 400 with that message (docs/reference.md §10).
func refusedChunk(requestID string, ch *messages.TokenChunk) *messages.TokenChunk {
	return &messages.TokenChunk{RequestId: requestID, FinishReason: "error", WorkerId: ch.GetWorkerId(),
		Error: ch.GetError(), Fault: messages.Fault_FAULT_INVALID_REQUEST}
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

// answersWhole reports whether a leg sent with sampling is answered whole, not
// streamed: one that asks for the prompt's logprobs (SamplingParams.prompt_logprobs,
// which completions' echo with logprobs sets too), which vLLM's server returns only
// without streaming (docs/reference.md §21). Nothing of such a leg comes until its
// engine has finished, so the stall timer waits for its first chunk without bound.
func answersWhole(sampling *messages.SamplingParams) bool {
	return sampling != nil && sampling.PromptLogprobs != nil
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
// len(produced) (min_tokens not below 0), and without prompt_logprobs once a token was
// produced (the first chunk carried them; the output's logprobs continue). more is false
// when max_tokens is already used up: the stream is complete and nothing is re-sent.
// prompt and sampling are not changed.
func continuation(prompt []uint32, sampling *messages.SamplingParams, produced []uint32) (
	tokens []uint32, sp *messages.SamplingParams, more bool) {
	sp = cloneSampling(sampling)
	n := int32(len(produced))
	if sp.MaxTokens > 0 {
		if sp.MaxTokens <= n {
			return nil, nil, false
		}
		sp.MaxTokens -= n
	}
	sp.MinTokens = max(sp.MinTokens-n, 0)
	if n > 0 {
		sp.PromptLogprobs = nil
	}
	tokens = make([]uint32, 0, len(prompt)+len(produced))
	tokens = append(append(tokens, prompt...), produced...)
	return tokens, sp, true
}

// finalUsage rewrites the token counts of a stream's finishing chunk so that they cover
// the whole stream: the original prompt (promptLen tokens) and every token produced
// (completion), whichever leg produced them. Cached tokens are capped at the original
// prompt (a continuation's prompt includes earlier output).
func finalUsage(ch *messages.TokenChunk, promptLen, completion int) {
	ch.PromptTokens = int32(promptLen)
	ch.CompletionTokens = int32(completion)
	ch.CachedTokens = min(ch.CachedTokens, int32(promptLen))
}

// cloneSampling returns a copy of base (an empty one for nil).
func cloneSampling(base *messages.SamplingParams) *messages.SamplingParams {
	if base == nil {
		return &messages.SamplingParams{}
	}
	return proto.Clone(base).(*messages.SamplingParams)
}

// withLoraPath is the sampling of the legs a route starts: base's with lora_path set to
// the route's (RouteResponse.lora_path: the adapter folder a worker that lacks the
// request's LoRA adapter loads it from; "" when the worker holds it, or the request names
// none; docs/reference.md §26.3). The adapter's name stays: a migration or prefill retry
// routes it again. base is returned as it is when it already says so, else not changed.
func withLoraPath(base *messages.SamplingParams, path string) *messages.SamplingParams {
	if base.GetLoraPath() == path {
		return base
	}
	sp := cloneSampling(base)
	sp.LoraPath = path
	return sp
}

// Disaggregated serving (docs/reference.md §6): the sampling of each leg.

// prefillSampling is a prefill leg's sampling: base's with max_tokens 1, min_tokens 0
// and DisaggParams leg LEG_PREFILL (with the bootstrap fields when set). base is not
// changed.
func prefillSampling(base *messages.SamplingParams, bootstrap *messages.DisaggParams) *messages.SamplingParams {
	sp := cloneSampling(base)
	sp.MaxTokens, sp.MinTokens = 1, 0
	sp.Disagg = legParams(messages.Leg_LEG_PREFILL, "", bootstrap)
	return sp
}

// decodeSampling is a decode leg's sampling: base's with DisaggParams leg LEG_DECODE,
// the prefill leg's transfer parameters (a JSON object, passed on unchanged) and the
// bootstrap fields when set. base is not changed.
func decodeSampling(base *messages.SamplingParams, kvParams string, bootstrap *messages.DisaggParams) *messages.SamplingParams {
	sp := cloneSampling(base)
	sp.Disagg = legParams(messages.Leg_LEG_DECODE, kvParams, bootstrap)
	return sp
}

func legParams(leg messages.Leg, kvParams string, bootstrap *messages.DisaggParams) *messages.DisaggParams {
	d := &messages.DisaggParams{Leg: leg, KvTransferParams: kvParams}
	if bootstrap != nil {
		d.BootstrapHost, d.BootstrapPort, d.BootstrapRoom = bootstrap.BootstrapHost, bootstrap.BootstrapPort, bootstrap.BootstrapRoom
	}
	return d
}
