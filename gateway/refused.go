package gateway

import (
	"fmt"
	"unicode/utf8"

	"github.com/turbine-llm/turbine/engines"
	"github.com/turbine-llm/turbine/messages"
)

// engineRefused is the 400 for a request the model's engine refused itself (a chunk with
// FAULT_INVALID_REQUEST, docs/reference.md §10): the client's to mend, so the message
// names the engine (the model card's engine name, "vllm", ...; "" for none) and repeats
// its message, cut to maxEngineMessageBytes at a rune boundary. No param: the engine's
// message names the field where it does.
func engineRefused(engine, model, message string) *APIError {
	name := engines.DisplayName(engine)
	if name == "" {
		name = "the engine"
	}
	msg := fmt.Sprintf("The request was refused by %s, which serves model '%s'", name, clipName(model))
	if message == "" {
		return &APIError{Kind: KindInvalidValue, Message: msg + "."}
	}
	return &APIError{Kind: KindInvalidValue, Message: msg + ": " + clipEngineMessage(message)}
}

// clipEngineMessage is an engine's message cut to maxEngineMessageBytes at a rune
// boundary, with "…" when cut.
func clipEngineMessage(message string) string {
	if len(message) <= maxEngineMessageBytes {
		return message
	}
	cut := maxEngineMessageBytes
	for cut > 0 && !utf8.RuneStart(message[cut]) {
		cut--
	}
	return message[:cut] + "…"
}

// refusal is the 400 of c when it ends a request its engine refused itself (an error
// chunk with FAULT_INVALID_REQUEST: the engine's answer to the request, which the client
// is told), else nil.
func (t *textOutput) refusal(c *messages.TokenChunk) *APIError {
	if c.GetFault() != messages.Fault_FAULT_INVALID_REQUEST || (c.GetError() == "" && c.GetFinishReason() != "error") {
		return nil
	}
	e := engineRefused(t.engine, t.model, c.GetError())
	e.Cause = fmt.Errorf("worker %s: the engine refused the request: %s", c.GetWorkerId(), c.GetError())
	return e
}
