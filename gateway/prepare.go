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
	// stopReasons are the stop ids reported as vLLM's stop_reason (stopTokenReasons).
	stopReasons map[uint32]bool
	// api renders the answer (set by handleAPI).
	api api
	// chat is the chat request (nil for completions).
	chat *chatRequest
	// output is how the answer's text is parsed (zero: all content).
	output outputParsing
	// more are the requests of a completions batch's prompts after the first, in order
	// (choices.go).
	more []*GenerateRequest
	// parsers are the output parsers of choices 1 to n-1 of a chat request with n > 1:
	// each choice parses its own text (choice 0 has output.parser).
	parsers []parse.Parser
}

// setPromptText sets gen.PromptText when the prompt was given as text and runs
// untruncated (ids are its tokens before truncation).
func setPromptText(gen *GenerateRequest, pr completionPrompt, ids []uint32) {
	if !pr.Tokens && len(gen.TokenIDs) == len(ids) {
		gen.PromptText = pr.Text
	}
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

// lookupModel returns the card of a model with a live worker, or of a LoRA adapter one
// holds (findModel: its name, or BASE:ADAPTER; lora.go).
func (s *Server) lookupModel(ctx context.Context, name string) (*messages.ModelCard, *APIError) {
	cards, err := s.backend.Models(ctx)
	if err != nil {
		return nil, backendError(name, err)
	}
	if c, aerr := findModel(cards, name); c != nil || aerr != nil {
		return c, aerr
	}
	if r, ok := s.backend.(RecentCards); ok {
		if c := r.RecentCard(name); c != nil {
			return c, nil
		}
	}
	if r, ok := s.backend.(RecentModels); ok && r.Recent(name) {
		return nil, backendError(name, fmt.Errorf("%w: %q has no ready worker right now", ErrNoWorkers, clipName(name)))
	}
	return nil, modelNotFound(name)
}

// resolveModel returns the card of the model a request names, or, when it names none
// (name ""), of the one model served: vLLM answers a chat, completions, responses,
// embeddings, tokenize or detokenize request without `model` for the model it serves
// (docs/reference.md §5.1), LoRA adapters aside. Errors: those of lookupModel; with no
// name, 400 missing_required_parameter when several models are served (Turbine does not
// pick one), 503 no_workers when none is.
func (s *Server) resolveModel(ctx context.Context, name string) (*messages.ModelCard, *APIError) {
	if name != "" {
		return s.lookupModel(ctx, name)
	}
	all, err := s.backend.Models(ctx)
	if err != nil {
		return nil, backendError("", err)
	}
	var cards []*messages.ModelCard
	for _, c := range all {
		if isBase(c) {
			cards = append(cards, c)
		}
	}
	switch len(cards) {
	case 1:
		return cards[0], nil
	case 0:
		return nil, &APIError{Kind: KindNoWorkers, Message: "No model has a live worker now; retry later.", Cause: ErrNoWorkers}
	default:
		return nil, newError(KindMissingParameter, "model", "Missing required parameter: 'model' (this server serves %d models).", len(cards))
	}
}

func (s *Server) loadModel(card *messages.ModelCard) (Preprocessor, *APIError) {
	pre, err := s.opts.loadModel(card)
	if err != nil {
		return nil, &APIError{Kind: KindInternal, Message: fmt.Sprintf("The tokenizer of model %q could not be loaded.", card.GetModel()), Cause: err}
	}
	return pre, nil
}

// chatPrompt looks up req's model (resolveModel: setting req.Model when it names none),
// loads its preprocessing and renders req's messages with its chat template into the
// prompt text: what prepareChat tokenizes, and POST /tokenize too (tokenize.go), so both
// see the same prompt.
func (s *Server) chatPrompt(ctx context.Context, req *chatRequest) (*messages.ModelCard, Preprocessor, string, *APIError) {
	card, aerr := s.resolveModel(ctx, req.Model)
	if aerr != nil {
		return nil, nil, "", aerr
	}
	req.Model = card.GetModel()
	if aerr := s.requestTemplate(req); aerr != nil {
		return nil, nil, "", aerr
	}
	pre, aerr := s.loadModel(card)
	if aerr != nil {
		return nil, nil, "", aerr
	}
	prompt, err := pre.RenderChat(model.ChatTemplateInput{
		Messages:             req.Messages,
		Tools:                req.Tools,
		AddGenerationPrompt:  req.AddGenerationPrompt,
		Kwargs:               templateKwargs(req),
		Template:             req.ChatTemplate,
		ContinueFinalMessage: req.ContinueFinalMessage,
		Documents:            req.Documents,
	})
	if err != nil {
		return nil, nil, "", &APIError{Kind: KindInvalidValue, Param: promptParamOf(req), Message: "The chat template could not be applied to the " + promptParamOf(req) + ": " + err.Error(), Cause: err}
	}
	if prompt == "" && req.ChatTemplate != nil {
		return nil, nil, "", emptyTemplatePrompt()
	}
	return card, pre, prompt, nil
}

// prepareChat applies the chat template, tokenizes and checks the result against the
// model's limits.
func (s *Server) prepareChat(ctx context.Context, requestID string, req *chatRequest) (*prepared, *APIError) {
	s.warnIgnored(endpointChat, req.Ignored)
	card, pre, prompt, aerr := s.chatPrompt(ctx, req)
	if aerr != nil {
		return nil, aerr
	}
	if aerr := checkRunner(card, false, "Chat Completions"); aerr != nil {
		return nil, aerr
	}
	ids := chatTokenIDs(pre, req, prompt)
	req.promptText = prompt
	out, aerr := chooseOutputParsing(card, pre.Tokenizer(), req, prompt, s.opts.newToolCallID)
	if aerr != nil {
		return nil, aerr
	}
	p, aerr := finishPrepare(card, pre, &req.commonRequest, ids, promptParamOf(req), requestID)
	if aerr != nil {
		return nil, aerr
	}
	p.chat, p.output = req, out
	p.gen.Sampling.Structured = req.Structured
	for i := 1; i < req.N; i++ {
		o, aerr := chooseOutputParsing(card, pre.Tokenizer(), req, prompt, s.opts.newToolCallID)
		if aerr != nil {
			return nil, aerr
		}
		p.parsers = append(p.parsers, o.parser)
	}
	return p, nil
}

// prepareCompletion tokenizes the prompt (or checks given token ids against the
// vocabulary) and checks it against the model's limits.
func (s *Server) prepareCompletion(ctx context.Context, requestID string, req *completionRequest) (*prepared, *APIError) {
	s.warnIgnored(endpointCompletions, req.Ignored)
	card, aerr := s.resolveModel(ctx, req.Model)
	if aerr != nil {
		return nil, aerr
	}
	req.Model = card.GetModel()
	if aerr := checkRunner(card, false, "Completions"); aerr != nil {
		return nil, aerr
	}
	pre, aerr := s.loadModel(card)
	if aerr != nil {
		return nil, aerr
	}
	param := "prompt"
	if len(req.More) > 0 {
		param = "prompt[0]"
	}
	first := completionPrompt{Text: req.PromptText, IDs: req.PromptIDs, Tokens: req.TokenPrompt}
	ids, aerr := completionIDs(pre, first, param, req.AddSpecialTokens)
	if aerr != nil {
		return nil, aerr
	}
	p, aerr := finishPrepare(card, pre, &req.commonRequest, ids, param, requestID)
	if aerr != nil {
		return nil, aerr
	}
	setPromptText(p.gen, first, ids)
	// A batch: every prompt is checked against the model's limits before any runs.
	for i, pr := range req.More {
		param := indexParam("prompt", i+1)
		ids, aerr := completionIDs(pre, pr, param, req.AddSpecialTokens)
		if aerr != nil {
			return nil, aerr
		}
		q, aerr := finishPrepare(card, pre, &req.commonRequest, ids, param, requestID)
		if aerr != nil {
			return nil, aerr
		}
		p.more = append(p.more, q.gen)
		setPromptText(q.gen, pr, ids)
	}
	return p, nil
}

// completionIDs is a completions prompt's token ids: given ids checked against the
// vocabulary, or the text tokenized (with the tokenizer's special tokens when special,
// add_special_tokens). param names the prompt in errors.
func completionIDs(pre Preprocessor, pr completionPrompt, param string, special bool) ([]uint32, *APIError) {
	switch {
	case !pr.Tokens && special:
		return pre.EncodePrompt(pr.Text), nil
	case !pr.Tokens:
		return pre.Tokenizer().Encode(pr.Text), nil
	}
	vocab := pre.Tokenizer().VocabSize()
	for i, id := range pr.IDs {
		if int(id) >= vocab {
			return nil, newError(KindInvalidValue, indexParam(param, i), "Token id %d is out of vocabulary (size %d).", id, vocab)
		}
	}
	return pr.IDs, nil
}

func finishPrepare(card *messages.ModelCard, pre Preprocessor, c *commonRequest, ids []uint32, promptParam, requestID string) (*prepared, *APIError) {
	ctxLen := int(card.GetContextLength())
	if ctxLen <= 0 {
		ctxLen = pre.ContextLength()
	}
	ids, aerr := truncatePrompt(ids, c, ctxLen)
	if aerr != nil {
		return nil, aerr
	}
	if len(ids) == 0 {
		return nil, newError(KindInvalidValue, promptParam, "Invalid '%s': the prompt has no tokens.", promptParam)
	}
	maxTokens, aerr := completionBudget(ctxLen, len(ids), c.MaxTokens, c.MaxTokensParam, c.MaxTokensOwnName, promptParam)
	if aerr != nil {
		return nil, aerr
	}
	if aerr := checkMinTokensRoom(c, ctxLen, len(ids)); aerr != nil {
		return nil, aerr
	}
	if aerr := checkVocabulary(c, pre.Tokenizer().VocabSize()); aerr != nil {
		return nil, aerr
	}
	sampling := samplingParams(c, maxTokens)
	// A LoRA adapter's request runs on its base model with the adapter (lora.go); the
	// catalogue's folder of it is where a worker loads it on demand (the route's answer
	// sets each leg's own).
	served, lora := servedNames(card)
	sampling.LoraName = lora
	if lora != "" {
		sampling.LoraPath = card.GetLora().GetPath()
	}
	if aerr := engineRefusal(card, sampling); aerr != nil {
		return nil, aerr
	}
	var stopIDs []uint32
	if !c.IgnoreEOS {
		stopIDs = append(stopIDs, card.GetEosTokenIds()...)
		stopIDs = append(stopIDs, pre.EOSTokenIDs()...)
	}
	stopReasons := stopTokenReasons(c.StopTokenIDs, stopIDs)
	stopIDs = append(stopIDs, c.StopTokenIDs...)
	return &prepared{
		card:        card,
		pre:         pre,
		common:      c,
		stopIDs:     stopIDs,
		stopReasons: stopReasons,
		gen: &GenerateRequest{
			Model:         served,
			RequestID:     requestID,
			TokenIDs:      ids,
			Sampling:      sampling,
			OverlapWeight: c.Turbine.OverlapWeight,
			Temperature:   c.Turbine.RouterTemperature,
			ExplainRoute:  c.Turbine.ExplainRoute,
		},
	}, nil
}

// completionBudget checks a prompt of promptLen tokens against a context of ctxLen tokens
// (0: unknown, no check) and returns the max_tokens to send to the engine: the request's
// value, or what is left of the context when the request gave none (0 when the context
// is unknown: the engine's default). Errors and messages follow vLLM's, which name both
// max_tokens and max_completion_tokens unless ownName (maxParam alone).
func completionBudget(ctxLen, promptLen int, maxTokens int64, maxParam string, ownName bool, promptParam string) (int32, *APIError) {
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
		named := "'max_tokens' or 'max_completion_tokens'" // vLLM's words
		if ownName || maxParam != "" && maxParam != "max_tokens" && maxParam != "max_completion_tokens" {
			named = "'" + maxParam + "'"
		}
		return 0, newError(KindContextLengthExceeded, maxParam,
			"%s is too large: %d. This model's maximum context length is %d tokens and your request has %d input tokens (%d > %d - %d).",
			named, maxTokens, ctxLen, promptLen, maxTokens, ctxLen, promptLen)
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
	addExtras(sp, c)
	addLogprobs(sp, c)
	return sp
}

// maxTokensCap bounds min_tokens: by max_tokens when known, else by int32.
func maxTokensCap(maxTokens int32) int32 {
	if maxTokens > 0 {
		return maxTokens
	}
	return 1<<31 - 1
}
