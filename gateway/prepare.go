package gateway

import (
	"context"
	"fmt"

	"github.com/turbine-llm/turbine/gateway/parse"
	"github.com/turbine-llm/turbine/messages"
	"github.com/turbine-llm/turbine/model"
)

// prepared is a validated, tokenized request ready for the Backend.
type prepared struct {
	card    *messages.ModelCard
	pre     Preprocessor
	common  *commonRequest
	gen     *GenerateRequest
	stopIDs []uint32 // EOS ids (unless ignore_eos) and stop_token_ids
	// api renders the answer (set by handleAPI).
	api api
	// chat is the chat request (nil for completions).
	chat *chatRequest
	// output is how the answer's text is parsed (zero: all content).
	output outputParsing
}

// tokenizer is the tokenizer the answer is detokenized with: the model's, keeping the
// special tokens the output parsers read.
func (p *prepared) tokenizer() model.Tokenizer {
	if len(p.output.keep) == 0 {
		return p.pre.Tokenizer()
	}
	return keepSpecial{Tokenizer: p.pre.Tokenizer(), keep: p.output.keep}
}

// newParser returns the parser of the answer's output (all content when none).
func (p *prepared) newParser() parse.Parser {
	if p.output.parser == nil {
		return parse.Chain(nil, nil)
	}
	return p.output.parser
}

// parallelToolCalls is the request's parallel_tool_calls (true for completions).
func (p *prepared) parallelToolCalls() bool { return p.chat == nil || p.chat.ParallelToolCalls }

// lookupModel returns the card of a model with a live worker.
func (s *Server) lookupModel(ctx context.Context, name string) (*messages.ModelCard, *APIError) {
	cards, err := s.backend.Models(ctx)
	if err != nil {
		return nil, backendError(name, err)
	}
	for _, c := range cards {
		if c.GetModel() == name {
			return c, nil
		}
	}
	if r, ok := s.backend.(RecentModels); ok && r.Recent(name) {
		return nil, backendError(name, fmt.Errorf("%w: %q has no ready worker right now", ErrNoWorkers, clipName(name)))
	}
	return nil, modelNotFound(name)
}

func (s *Server) loadModel(card *messages.ModelCard) (Preprocessor, *APIError) {
	pre, err := s.opts.loadModel(card)
	if err != nil {
		return nil, &APIError{Kind: KindInternal, Message: fmt.Sprintf("The tokenizer of model %q could not be loaded.", card.GetModel()), Cause: err}
	}
	return pre, nil
}

// prepareChat applies the chat template, tokenizes and checks the result against the
// model's limits.
func (s *Server) prepareChat(ctx context.Context, requestID string, req *chatRequest) (*prepared, *APIError) {
	card, aerr := s.lookupModel(ctx, req.Model)
	if aerr != nil {
		return nil, aerr
	}
	pre, aerr := s.loadModel(card)
	if aerr != nil {
		return nil, aerr
	}
	prompt, err := pre.RenderChat(model.ChatTemplateInput{
		Messages:            req.Messages,
		Tools:               req.Tools,
		AddGenerationPrompt: req.AddGenerationPrompt,
		Kwargs:              templateKwargs(req),
	})
	if err != nil {
		return nil, &APIError{Kind: KindInvalidValue, Param: "messages", Message: "The chat template could not be applied to the messages: " + err.Error(), Cause: err}
	}
	ids := pre.Tokenizer().Encode(prompt)
	out, aerr := chooseOutputParsing(card, pre.Tokenizer(), req, prompt, s.opts.newToolCallID)
	if aerr != nil {
		return nil, aerr
	}
	p, aerr := finishPrepare(card, pre, &req.commonRequest, ids, "messages", requestID)
	if aerr != nil {
		return nil, aerr
	}
	p.chat, p.output = req, out
	p.gen.Sampling.Structured = req.Structured
	return p, nil
}

// prepareCompletion tokenizes the prompt (or checks given token ids against the
// vocabulary) and checks it against the model's limits.
func (s *Server) prepareCompletion(ctx context.Context, requestID string, req *completionRequest) (*prepared, *APIError) {
	card, aerr := s.lookupModel(ctx, req.Model)
	if aerr != nil {
		return nil, aerr
	}
	pre, aerr := s.loadModel(card)
	if aerr != nil {
		return nil, aerr
	}
	tok := pre.Tokenizer()
	ids := req.PromptIDs
	if req.TokenPrompt {
		vocab := tok.VocabSize()
		for i, id := range ids {
			if int(id) >= vocab {
				return nil, newError(KindInvalidValue, indexParam("prompt", i), "Token id %d is out of vocabulary (size %d).", id, vocab)
			}
		}
	} else {
		ids = pre.EncodePrompt(req.PromptText)
	}
	return finishPrepare(card, pre, &req.commonRequest, ids, "prompt", requestID)
}

func finishPrepare(card *messages.ModelCard, pre Preprocessor, c *commonRequest, ids []uint32, promptParam, requestID string) (*prepared, *APIError) {
	if len(ids) == 0 {
		return nil, newError(KindInvalidValue, promptParam, "Invalid '%s': the prompt has no tokens.", promptParam)
	}
	ctxLen := int(card.GetContextLength())
	if ctxLen <= 0 {
		ctxLen = pre.ContextLength()
	}
	maxTokens, aerr := completionBudget(ctxLen, len(ids), c.MaxTokens, c.MaxTokensParam, promptParam)
	if aerr != nil {
		return nil, aerr
	}
	var stopIDs []uint32
	if !c.IgnoreEOS {
		stopIDs = append(stopIDs, card.GetEosTokenIds()...)
		stopIDs = append(stopIDs, pre.EOSTokenIDs()...)
	}
	stopIDs = append(stopIDs, c.StopTokenIDs...)
	return &prepared{
		card:    card,
		pre:     pre,
		common:  c,
		stopIDs: stopIDs,
		gen: &GenerateRequest{
			Model:         card.GetModel(),
			RequestID:     requestID,
			TokenIDs:      ids,
			Sampling:      samplingParams(c, maxTokens),
			OverlapWeight: c.Turbine.OverlapWeight,
			Temperature:   c.Turbine.RouterTemperature,
		},
	}, nil
}

// completionBudget checks a prompt of promptLen tokens against a context of ctxLen tokens
// (0: unknown, no check) and returns the max_tokens to send to the engine: the request's
// value, or what is left of the context when the request gave none (0 when the context
// is unknown: the engine's default). Errors and messages follow vLLM's.
func completionBudget(ctxLen, promptLen int, maxTokens int64, maxParam, promptParam string) (int32, *APIError) {
	if ctxLen <= 0 {
		return int32(maxTokens), nil
	}
	if promptLen >= ctxLen {
		return 0, newError(KindContextLengthExceeded, promptParam,
			"This model's maximum context length is %d tokens. However, your request has %d input tokens. Please reduce the length of the input.",
			ctxLen, promptLen)
	}
	room := int64(ctxLen - promptLen)
	if maxTokens == 0 {
		return int32(room), nil
	}
	if maxTokens > room {
		return 0, newError(KindContextLengthExceeded, maxParam,
			"'max_tokens' or 'max_completion_tokens' is too large: %d. This model's maximum context length is %d tokens and your request has %d input tokens (%d > %d - %d).",
			maxTokens, ctxLen, promptLen, maxTokens, ctxLen, promptLen)
	}
	return int32(maxTokens), nil
}

// samplingParams builds the engine's sampling parameters.
func samplingParams(c *commonRequest, maxTokens int32) *messages.SamplingParams {
	sp := &messages.SamplingParams{
		MaxTokens:        maxTokens,
		MinTokens:        int32(min(c.MinTokens, int64(maxTokensCap(maxTokens)))),
		IgnoreEos:        c.IgnoreEOS,
		StopTokenIds:     c.StopTokenIDs,
		PresencePenalty:  c.PresencePenalty,
		FrequencyPenalty: c.FrequencyPenalty,
		Structured:       c.Structured,
	}
	sp.Temperature, sp.TopP, sp.Seed = c.Temperature, c.TopP, c.Seed
	return sp
}

// maxTokensCap bounds min_tokens: by max_tokens when known, else by int32.
func maxTokensCap(maxTokens int32) int32 {
	if maxTokens > 0 {
		return maxTokens
	}
	return 1<<31 - 1
}
