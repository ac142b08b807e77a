package gateway

import (
	"context"
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
	if len(message) > maxEngineMessageBytes {
		cut := maxEngineMessageBytes
		for cut > 0 && !utf8.RuneStart(message[cut]) {
			cut--
		}
		message = message[:cut] + "…"
	}
	return &APIError{Kind: KindInvalidValue, Message: msg + ": " + message}
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

// firstChunk is a stream's first Recv result, read ahead (awaitFirst).
type firstChunk struct {
	c   *messages.TokenChunk
	err error
}

// awaitFirst reads the stream's first chunk before a streamed answer's headers are
// written, as vLLM's server does, so that a request its engine refused before producing
// anything is answered with the 400 alone (engineRefused), which it returns, rather than
// with an error frame in a 200 stream. Any other chunk, or an error, is kept for pump
// (recv), which handles it as it always does.
func (g *generation) awaitFirst(ctx context.Context) *APIError {
	c, err := g.stream.Recv(ctx)
	if err == nil && len(c.GetTokenIds()) == 0 {
		if aerr := g.out.refusal(c); aerr != nil {
			return aerr
		}
	}
	g.first = &firstChunk{c: c, err: err}
	return nil
}

// recv is the stream's next chunk: the one awaitFirst kept, then Recv's.
func (g *generation) recv(ctx context.Context) (*messages.TokenChunk, error) {
	if f := g.first; f != nil {
		g.first = nil
		return f.c, f.err
	}
	return g.stream.Recv(ctx)
}
