package gateway

import (
	"errors"
	"strings"

	"github.com/turbine-llm/turbine/messages"
)

// textOutput turns a request's token chunks into the text the client sees. It
// detokenizes incrementally, ends the request at a stop token id (the model's EOS ids
// unless ignore_eos, and stop_token_ids) or at a stop string (never emitting the stop
// text), and counts completion tokens. It does no I/O and keeps no clock: the caller
// feeds chunks in order and writes what comes out.
//
// Following vLLM, neither stop token ids nor stop strings end a request before
// min_tokens completion tokens exist.
type textOutput struct {
	detok     Detokenizer
	stops     StopMatcher // nil when the request has no stop strings
	stopIDs   map[uint32]bool
	minTokens int

	completionTokens int
	cachedTokens     int
	workerID         string // from the chunks; "" until a chunk names one
	finishReason     string // "" until finished
	// stopString is the stop string that finished the request ("" otherwise).
	stopString string
	// stopReasons are the stop ids reported as the stop_reason (prepared.stopReasons);
	// stopTokenID is the one that finished the request (nil otherwise).
	stopReasons map[uint32]bool
	stopTokenID *uint32
	// ids keeps the token ids for return_token_ids (nil: not asked; vllmfields.go).
	ids *tokenIDSink
	// lp collects the logprobs of the tokens kept (nil: none asked; logprobs.go).
	lp *logprobSink
	// engine and model name the model card's engine and model in the 400 of a request
	// the engine refused (engineRefused).
	engine, model string
}

// matcher is a StopMatcher that tells which stop string it found (model.StopMatcher does).
type matcher interface{ Matched() string }

func newTextOutput(detok Detokenizer, stops StopMatcher, stopIDs []uint32, minTokens int) *textOutput {
	ids := make(map[uint32]bool, len(stopIDs))
	for _, id := range stopIDs {
		ids[id] = true
	}
	return &textOutput{detok: detok, stops: stops, stopIDs: ids, minTokens: minTokens}
}

// finished reports whether the request has ended (with finishReason).
func (t *textOutput) finished() bool { return t.finishReason != "" }

// push consumes one chunk and returns the text that became safe to emit. After the
// chunk that finishes the request, finished() is true and the returned text is the last.
// A chunk reporting an engine failure returns a KindEngineError, or a KindBackendError
// when the chunk is marked migratable (the worker was lost and the request could not be
// migrated), or the 400 of engineRefused when the engine refused the request itself
// (FAULT_INVALID_REQUEST). Chunks after the end are ignored.
func (t *textOutput) push(c *messages.TokenChunk) (string, *APIError) {
	if t.finished() {
		return "", nil
	}
	if c.GetWorkerId() != "" {
		t.workerID = c.GetWorkerId()
	}
	if int(c.GetCachedTokens()) > t.cachedTokens {
		t.cachedTokens = int(c.GetCachedTokens())
	}
	var out strings.Builder
	for i, id := range c.GetTokenIds() {
		t.completionTokens++
		t.lp.add(c, i)
		t.ids.add(id)
		if t.stopIDs[id] && t.completionTokens > t.minTokens {
			out.WriteString(t.end("stop"))
			if t.stopReasons[id] && t.stopString == "" {
				t.stopTokenID = &id
			}
			return out.String(), nil
		}
		out.WriteString(t.filter(t.detok.Push(id)))
		if t.finished() {
			return out.String(), nil
		}
	}
	switch reason := c.GetFinishReason(); {
	case c.GetError() != "" || reason == "error":
		if e := t.refusal(c); e != nil {
			return out.String(), e
		}
		msg := c.GetError()
		if msg == "" {
			msg = "the engine failed the request"
		}
		// The engine's own message names internal addresses: it goes to the log only.
		e := newError(KindEngineError, "", "The engine failed while generating; the request can be retried.")
		if c.GetFault() != messages.Fault_FAULT_NONE {
			// The worker or its engine was lost and the request could not be moved to
			// another one (migration disabled or its limit reached): 502, retryable.
			e = newError(KindBackendError, "", "The worker serving the request failed and the request could not be moved to another worker; it can be retried.")
		}
		e.Cause = errors.New(msg)
		return out.String(), e
	case reason == "abort":
		return out.String(), newError(KindEngineError, "", "The engine aborted the request.")
	case reason != "":
		out.WriteString(t.end(reason))
	}
	return out.String(), nil
}

// filter passes text through the stop matcher once min_tokens is reached; a stop string
// ends the request.
func (t *textOutput) filter(text string) string {
	if t.stops == nil || t.completionTokens <= t.minTokens {
		return text
	}
	emit, stopped := t.stops.Push(text)
	if stopped {
		t.finishReason = "stop"
		if m, ok := t.stops.(matcher); ok {
			t.stopString = m.Matched()
		}
	}
	return emit
}

// end flushes held-back text and finishes with reason (unless the flushed text holds a
// stop string, which finishes with "stop").
func (t *textOutput) end(reason string) string {
	text := t.filter(t.detok.Flush())
	if t.finished() {
		return text
	}
	if t.stops != nil {
		text += t.stops.Flush()
	}
	t.finishReason = reason
	return text
}

// usage returns the request's token accounting for a prompt of promptTokens.
func (t *textOutput) usage(promptTokens int) Usage {
	return Usage{
		PromptTokens:        promptTokens,
		CompletionTokens:    t.completionTokens,
		TotalTokens:         promptTokens + t.completionTokens,
		PromptTokensDetails: PromptTokensDetails{CachedTokens: t.cachedTokens},
	}
}
