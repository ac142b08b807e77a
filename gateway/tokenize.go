package gateway

import (
	"context"
	"fmt"
	"net/http"

	"github.com/turbine-llm/turbine/messages"
	"github.com/turbine-llm/turbine/model"
)

// POST /tokenize and POST /detokenize (docs/reference.md §24): vLLM's request and
// response shapes, answered by the frontend from the model deployment card and the
// model's tokenizer and chat template; no engine is involved.

// Endpoint labels (metrics, logs).
const (
	endpointTokenize   = "tokenize"
	endpointDetokenize = "detokenize"
)

// tokenizeRequest is a validated POST /tokenize body, one of vLLM's two forms: a prompt
// (TokenizeCompletionRequest) or a chat (TokenizeChatRequest).
type tokenizeRequest struct {
	// Model names the model; "" when the body names none (then the one model served).
	Model string
	// Prompt is the text of the prompt form.
	Prompt string
	// Chat is the chat form, parsed as a chat completions request's messages, tools,
	// add_generation_prompt and chat_template_kwargs are; nil for the prompt form.
	Chat *chatRequest
	// AddSpecialTokens adds the special tokens the tokenizer puts around a raw prompt
	// (Llama-3's <|begin_of_text|>): default true for a prompt, false for a chat, whose
	// template writes them.
	AddSpecialTokens bool
	// ReturnTokenStrs asks for token_strs, the tokens' vocabulary strings.
	ReturnTokenStrs bool
}

// tokenizeResponse is /tokenize's answer (vLLM's TokenizeResponse).
type tokenizeResponse struct {
	Count int `json:"count"`
	// MaxModelLen is the model's context length in tokens (0 when unknown).
	MaxModelLen int      `json:"max_model_len"`
	Tokens      []uint32 `json:"tokens"`
	// TokenStrs are the tokens' vocabulary strings (null unless return_token_strs).
	TokenStrs []string `json:"token_strs"`
}

// detokenizeRequest is a validated POST /detokenize body (vLLM's DetokenizeRequest).
type detokenizeRequest struct {
	// Model names the model; "" when the body names none (then the one model served).
	Model  string
	Tokens []uint32
}

// detokenizeResponse is /detokenize's answer (vLLM's DetokenizeResponse).
type detokenizeResponse struct {
	Prompt string `json:"prompt"`
}

// parseTokenizeRequest validates a /tokenize body: `prompt` (a string) or `messages`
// (a chat, checked as chat completions checks it), exactly one of them; `model`
// (optional), `add_special_tokens`, `return_token_strs`; for a chat also
// `add_generation_prompt` (default true), `continue_final_message`, `chat_template`,
// `chat_template_kwargs` and `tools`. Other fields are ignored, as vLLM ignores them.
// Errors are 400s of the catalogue, param naming the field.
func parseTokenizeRequest(body []byte) (*tokenizeRequest, *APIError) {
	o, aerr := parseBody(body)
	if aerr != nil {
		return nil, aerr
	}
	req := &tokenizeRequest{}
	req.Model, _ = o.str("model")
	req.ReturnTokenStrs, _ = o.boolean("return_token_strs")
	hasPrompt, hasMessages := o.has("prompt"), o.has("messages")
	switch {
	case o.err != nil:
	case hasPrompt && hasMessages:
		o.fail(newError(KindInvalidValue, "messages", "Invalid request: give either 'prompt' (a text) or 'messages' (a chat), not both."))
	case hasPrompt:
		req.Prompt, _ = o.str("prompt")
		req.AddSpecialTokens = true
	case hasMessages:
		req.Chat = parseTokenizeChat(o, body)
	default:
		o.fail(newError(KindMissingParameter, "prompt", "Missing required parameter: 'prompt' (or 'messages', for a chat)."))
	}
	if v, ok := o.boolean("add_special_tokens"); ok {
		req.AddSpecialTokens = v
	}
	if o.err != nil {
		return nil, o.err
	}
	return req, nil
}

// parseTokenizeChat reads the chat form of a /tokenize body into a chat request, with the
// parsers of chat completions (chatTemplateFields, parseTemplateKwargs, parseMessages,
// parseTools).
func parseTokenizeChat(o *object, body []byte) *chatRequest {
	chat := &chatRequest{AddGenerationPrompt: true, ParallelToolCalls: true}
	genPrompt, genPromptSet := o.boolean("add_generation_prompt")
	if genPromptSet {
		chat.AddGenerationPrompt = genPrompt
	}
	chatTemplateFields(o, chat, genPromptSet)
	chat.TemplateKwargs = parseTemplateKwargs(o)
	chat.Messages = parseMessages(o)
	chat.Tools = parseTools(o, &rawFields{body: body}, chat)
	return chat
}

// parseDetokenizeRequest validates a /detokenize body: `tokens` (an array of token ids,
// required, may be empty) and `model` (optional).
func parseDetokenizeRequest(body []byte) (*detokenizeRequest, *APIError) {
	o, aerr := parseBody(body)
	if aerr != nil {
		return nil, aerr
	}
	req := &detokenizeRequest{}
	req.Model, _ = o.str("model")
	if o.err != nil {
		return nil, o.err
	}
	v, ok := o.value("tokens")
	if !ok {
		return nil, newError(KindMissingParameter, "tokens", "Missing required parameter: 'tokens'.")
	}
	if kindOf(v) != kindArray {
		return nil, typeError("tokens", "an array of token ids", kindOf(v))
	}
	ids, aerr := tokenIDs(v, "tokens")
	if aerr != nil {
		return nil, aerr
	}
	req.Tokens = ids
	return req, nil
}

// contextLength is the model's context length in tokens: the card's, else the
// tokenizer folder's (0 when neither knows it), as finishPrepare reads it.
func contextLength(card *messages.ModelCard, pre Preprocessor) int {
	if n := int(card.GetContextLength()); n > 0 {
		return n
	}
	return pre.ContextLength()
}

// tokenize answers a /tokenize request. The prompt form is tokenized as
// /v1/completions tokenizes a prompt (with the tokenizer's special tokens unless
// add_special_tokens is false); the chat form is rendered as /v1/chat/completions renders
// it (chatPrompt) and tokenized with those special tokens added only when
// add_special_tokens is true. The prompt is not checked against the context length. It
// returns the resolved model's name ("" when none was resolved; a LoRA adapter's base
// model) for metrics and logs.
func (s *Server) tokenize(ctx context.Context, req *tokenizeRequest) (string, *tokenizeResponse, *APIError) {
	card, aerr := s.resolveModel(ctx, req.Model)
	if aerr != nil {
		return "", nil, aerr
	}
	model, _ := servedNames(card) // a LoRA adapter's metrics go under its base model
	var (
		pre  Preprocessor
		text string
	)
	if req.Chat != nil {
		req.Chat.Model = card.GetModel()
		if _, pre, text, aerr = s.chatPrompt(ctx, req.Chat); aerr != nil {
			return model, nil, aerr
		}
	} else {
		if pre, aerr = s.loadModel(card); aerr != nil {
			return model, nil, aerr
		}
		text = req.Prompt
	}
	var ids []uint32
	if req.AddSpecialTokens {
		ids = pre.EncodePrompt(text)
	} else {
		ids = pre.Tokenizer().Encode(text)
	}
	if ids == nil {
		ids = []uint32{}
	}
	resp := &tokenizeResponse{Count: len(ids), MaxModelLen: contextLength(card, pre), Tokens: ids}
	if req.ReturnTokenStrs {
		resp.TokenStrs = tokenStrings(pre.Tokenizer(), ids)
	}
	return model, resp, nil
}

// detokenize answers a /detokenize request: the text of the tokens, special tokens
// included (as vLLM decodes them). Errors: a token id that is not one of the vocabulary's
// (400 invalid_value, param "tokens[i]"); more tokens than the model's context length
// (400 context_length_exceeded, as vLLM bounds them).
func (s *Server) detokenize(ctx context.Context, req *detokenizeRequest) (string, *detokenizeResponse, *APIError) {
	card, aerr := s.resolveModel(ctx, req.Model)
	if aerr != nil {
		return "", nil, aerr
	}
	model, _ := servedNames(card) // a LoRA adapter's metrics go under its base model
	pre, aerr := s.loadModel(card)
	if aerr != nil {
		return model, nil, aerr
	}
	if n := contextLength(card, pre); n > 0 && len(req.Tokens) > n {
		return model, nil, newError(KindContextLengthExceeded, "tokens",
			"Invalid 'tokens': %d tokens are more than this model's maximum context length of %d tokens.", len(req.Tokens), n)
	}
	tok := pre.Tokenizer()
	for i, id := range req.Tokens {
		if _, ok := tok.TokenBytes(id); !ok {
			return model, nil, newError(KindInvalidValue, indexParam("tokens", i),
				"Invalid 'tokens[%d]': token id %d is not in the vocabulary of model %q (size %d).", i, id, clipName(card.GetModel()), tok.VocabSize())
		}
	}
	return model, &detokenizeResponse{Prompt: tok.Decode(req.Tokens)}, nil
}

// tokenStrings returns the vocabulary strings of ids, as HF's convert_ids_to_tokens
// does: each token's string in its tokenizer's own alphabet (model.Tokenizer.TokenString;
// docs/reference.md §25), "" for an id the tokenizer does not know.
func tokenStrings(tok model.Tokenizer, ids []uint32) []string {
	out := make([]string, len(ids))
	for i, id := range ids {
		out[i], _ = tok.TokenString(id)
	}
	return out
}

func (s *Server) handleTokenize(w http.ResponseWriter, r *http.Request) {
	s.handleTokenization(w, r, endpointTokenize, func(ctx context.Context, body []byte) (string, any, *APIError) {
		req, aerr := parseTokenizeRequest(body)
		if aerr != nil {
			return "", nil, aerr
		}
		name, resp, aerr := s.tokenize(ctx, req)
		return name, resp, aerr
	})
}

func (s *Server) handleDetokenize(w http.ResponseWriter, r *http.Request) {
	s.handleTokenization(w, r, endpointDetokenize, func(ctx context.Context, body []byte) (string, any, *APIError) {
		req, aerr := parseDetokenizeRequest(body)
		if aerr != nil {
			return "", nil, aerr
		}
		name, resp, aerr := s.detokenize(ctx, req)
		return name, resp, aerr
	})
}

// handleTokenization runs the steps /tokenize and /detokenize share: like a generation
// it is refused while the server drains and holds one of Config.MaxConcurrentRequests
// while it runs (rendering and tokenizing a large prompt costs CPU); answer parses the
// body and answers, returning the model it resolved to ("" when none). The request is
// counted in turbine_frontend_requests_total and the duration histogram under its
// endpoint, and logged, as generation requests are.
func (s *Server) handleTokenization(w http.ResponseWriter, r *http.Request, endpoint string,
	answer func(ctx context.Context, body []byte) (string, any, *APIError)) {
	rec := s.begin(r, endpoint)
	defer s.end(rec)
	fail := func(aerr *APIError) {
		rec.fail(aerr)
		writeError(w, aerr, s.cfg.RetryAfter)
	}
	if s.draining.Load() {
		fail(draining())
		return
	}
	t, aerr := s.admitRequest()
	if aerr != nil {
		fail(aerr)
		return
	}
	defer t.release()
	body, aerr := s.readBody(w, r)
	if aerr != nil {
		fail(aerr)
		return
	}
	name, resp, aerr := answer(r.Context(), body)
	rec.model = name
	if aerr != nil {
		fail(aerr)
		return
	}
	if err := writeJSON(w, http.StatusOK, resp); err != nil {
		rec.fail(&APIError{Kind: KindClientClosed, Message: fmt.Sprintf("The answer could not be written: %v.", err), Cause: err})
	}
}
