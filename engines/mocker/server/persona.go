package server

import (
	"fmt"
	"slices"

	"github.com/turbine-llm/turbine/engines/mocker"
	"github.com/turbine-llm/turbine/engines/mocker/persona"
	"github.com/turbine-llm/turbine/messages"
)

// The persona (engines/mocker/persona): a server started with a tool-call or reasoning
// parser name (Options.ToolCallParser, ReasoningParser) answers like a model of that
// family, and any server answers a structured-output request with an instance of its
// constraint; other requests get drawn words.

// checkParsers validates the parser names of opts against what the persona writes.
func checkParsers(opts Options) error {
	if n := opts.ToolCallParser; n != "" && !slices.Contains(persona.ToolParsers(), n) {
		return fmt.Errorf("server: tool call parser %q: the mock engine writes the formats of %v", n, persona.ToolParsers())
	}
	if n := opts.ReasoningParser; n != "" && !slices.Contains(persona.ReasoningParsers(), n) {
		return fmt.Errorf("server: reasoning parser %q: the mock engine writes the formats of %v", n, persona.ReasoningParsers())
	}
	return nil
}

// script returns the tokens of the answer the persona plans for prompt
// (mocker.Request.Script), constrained by so (nil: free text), from seed; nil, for drawn
// words, when the server plays no persona and so is nil. The prompt is decoded with
// the tokenizer (special tokens included) and the answer encoded with it, so a family's
// markers become its special tokens where the tokenizer has them.
func (s *Server) script(prompt []uint32, so *messages.StructuredOutput, seed uint64) []uint32 {
	if s.opts.ToolCallParser == "" && s.opts.ReasoningParser == "" && so == nil {
		return nil
	}
	text := persona.Plan(persona.Input{ToolParser: s.opts.ToolCallParser, ReasoningParser: s.opts.ReasoningParser,
		Prompt: s.tok.Decode(prompt), Structured: so, Seed: seed})
	ids := s.tok.Encode(text)
	if ids == nil {
		ids = []uint32{} // an empty answer: EOS at once
	}
	return ids
}

// seed is the generation seed of r: its own, else the engine's default.
func (s *Server) seed(r *mocker.Request) uint64 {
	if r.HasSeed {
		return r.Seed
	}
	return s.opts.Engine.Seed
}
