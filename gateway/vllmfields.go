package gateway

import (
	"encoding/json"
	"net/http"
	"strconv"
)

// vLLM's request fields beyond OpenAI's and beyond sampling (docs/reference.md §20.1):
// each is honoured as vLLM honours it, accepted where it has no effect in vLLM either
// (a beam-search setting without beam search, a field of the render endpoints), or
// refused with a 400 unsupported_parameter naming it when it asks for what no Turbine
// engine does. Only fields vLLM's OpenAI server does not define are ignored with a
// warning (Server.warnIgnored).

// vllmOptions are the vLLM fields chat and completions share that change the answer or
// the prompt.
type vllmOptions struct {
	// RequestID is the body's request_id ("" when absent): the request's id when the
	// client sent no X-Request-Id header (useBodyRequestID).
	RequestID string
	// ReturnTokenIDs is return_token_ids: the answer carries the prompt's token ids and
	// the output's (tokenIDSink).
	ReturnTokenIDs bool
	// AddSpecialTokens tokenizes the prompt with the special tokens the tokenizer adds
	// to a raw text (a BOS): add_special_tokens, true by default for completions, false
	// for chat (the chat template writes them).
	AddSpecialTokens bool
	// TruncateRight is truncation_side "right": truncate_prompt_tokens keeps the first
	// tokens instead of the last.
	TruncateRight bool
}

// chatOptions are the chat-only vLLM fields.
type chatOptions struct {
	// Echo starts the answer with the last message's content when that message has the
	// answer's role (chatEcho).
	Echo bool
	// Documents are vLLM's documents (objects of strings), the chat template's
	// `documents`; nil when absent.
	Documents []map[string]any
	// OmitReasoning is include_reasoning false: the answer carries no reasoning.
	OmitReasoning bool
	// ReturnPromptText is return_prompt_text: the answer carries the rendered prompt
	// (promptText, set when the request is prepared).
	ReturnPromptText bool
	promptText       string
}

// effective reports whether a refused field's value asks for something: true, a
// non-empty string, object or array, any number. false, "", {} and [] ask for nothing
// (vLLM treats them as absent).
func effective(v any) bool {
	switch v := v.(type) {
	case bool:
		return v
	case string:
		return v != ""
	case map[string]any:
		return len(v) > 0
	case []any:
		return len(v) > 0
	case idArray:
		return len(v) > 0
	default:
		return v != nil
	}
}

// refusedVLLMFields are the vLLM fields of both endpoints that ask for what no Turbine
// engine does, with the reason given in the 400.
var refusedVLLMFields = []struct{ name, why string }{
	{"use_beam_search", "beam search is not served; Turbine's engines sample (leave it out or set it to false)"},
	{"kv_transfer_params", "KV transfer between engines is set by Turbine's router and workers for disaggregated serving, not by clients"},
	{"ec_transfer_params", "encoder-cache transfer is not served"},
	{"vllm_xargs", "it carries arguments for custom vLLM extensions, which Turbine's engines do not run"},
	{"mm_processor_kwargs", "only text content is served"},
	{"media_io_kwargs", "only text content is served"},
	{"logits_processors", "custom logits processors do not run on Turbine's engines"},
	{"logprob_token_ids", "logprobs are returned for the sampled token and the most likely ones (logprobs, top_logprobs), not for chosen token ids"},
	{"repetition_detection", "repetition detection is not served"},
	{"watermarking", "watermarking is not served"},
	{"structural_tag", "structural tags are not served (response_format json_schema and structured_outputs are)"},
}

// parseVLLMFields reads vLLM's fields shared by chat and completions into c (after
// parseSamplingExtras); the endpoints' own are read by parseChatVLLMFields and
// parseCompletionVLLMFields. Problems go to o.
func parseVLLMFields(o *object, c *commonRequest) {
	for _, f := range refusedVLLMFields {
		if v, ok := o.value(f.name); ok && effective(v) {
			o.fail(newError(KindUnsupported, f.name, "'%s' is not supported: %s.", f.name, f.why))
		}
	}
	if n, ok := o.integer("thinking_token_budget"); ok && n != -1 {
		o.fail(newError(KindUnsupported, "thinking_token_budget", "'thinking_token_budget' is not supported: the reasoning cannot be bounded apart from the answer; bound both with max_tokens (-1, unlimited, is accepted)."))
	}
	if id, ok := o.str("request_id"); ok {
		if !validRequestID(id) {
			o.fail(newError(KindInvalidValue, "request_id", "Invalid 'request_id': expected 1 to %d letters, digits, '-', '_', '.' or ':'.", MaxRequestIDLength))
		}
		c.RequestID = id
	}
	c.ReturnTokenIDs, _ = o.boolean("return_token_ids")
	if s, ok := o.str("truncation_side"); ok {
		switch s {
		case "left":
		case "right":
			c.TruncateRight = true
		default:
			o.fail(newError(KindInvalidValue, "truncation_side", "Invalid value for 'truncation_side': '%s'. Supported values are: 'left' and 'right'.", clipName(s)))
		}
	}
	// Accepted without effect, as in vLLM: beam-search settings (beam search is off),
	// stream batching (a hint: the text streamed is the same), a session label, and the
	// fields only vLLM's render endpoints read.
	o.number("length_penalty")
	o.boolean("early_stopping")
	o.str("session_id")
	o.boolean("return_token_offsets")
	o.boolean("return_mm_kwargs")
	if n, ok := o.integer("stream_interval"); ok && n < 1 {
		o.fail(newError(KindInvalidValue, "stream_interval", "Invalid 'stream_interval': expected a value >= 1, but got %d.", n))
	}
	if n, ok := o.integer("routed_experts_prompt_start"); ok && n < 0 {
		o.fail(newError(KindInvalidValue, "routed_experts_prompt_start", "Invalid 'routed_experts_prompt_start': expected a value >= 0, but got %d.", n))
	}
}

// parseChatVLLMFields reads the chat-only vLLM fields into req. Problems go to o.
func parseChatVLLMFields(o *object, req *chatRequest) {
	req.Echo, _ = o.boolean("echo")
	req.AddSpecialTokens, _ = o.boolean("add_special_tokens")
	if v, ok := o.boolean("include_reasoning"); ok {
		req.OmitReasoning = !v
	}
	req.ReturnPromptText, _ = o.boolean("return_prompt_text")
	req.Documents = parseDocuments(o)
}

// parseCompletionVLLMFields reads the completions-only vLLM fields into req. Problems
// go to o.
func parseCompletionVLLMFields(o *object, req *completionRequest) {
	req.AddSpecialTokens = true
	if v, ok := o.boolean("add_special_tokens"); ok {
		req.AddSpecialTokens = v
	}
	if o.has("prompt_embeds") {
		o.fail(newError(KindUnsupported, "prompt_embeds", "'prompt_embeds' is not supported: give the prompt as text or token ids."))
	}
}

// parseDocuments reads vLLM's documents: an array of objects whose values are strings
// (a title and a text, by convention). nil when absent.
func parseDocuments(o *object) []map[string]any {
	items, ok := o.array("documents")
	if !ok {
		return nil
	}
	docs := make([]map[string]any, 0, len(items))
	for i, it := range items {
		d, err := objectOf(it, indexParam("documents", i))
		if err != nil {
			o.fail(err)
			return nil
		}
		doc := make(map[string]any, len(d.m))
		for k := range d.m {
			s, ok := d.str(k)
			if d.err == nil && !ok {
				d.fail(typeError(d.param(k), "a string", kindNull))
			}
			if d.err != nil {
				o.fail(d.err)
				return nil
			}
			doc[k] = s
		}
		docs = append(docs, doc)
	}
	return docs
}

// useBodyRequestID makes the body's request_id (id, "" when absent) the request's id
// when the client sent no usable X-Request-Id header, as vLLM does (the header wins
// there too): the answer's id, the Backend's request id and X-Request-Id follow.
func useBodyRequestID(w http.ResponseWriter, r *http.Request, rec *requestRecord, id string) {
	if id == "" || validRequestID(r.Header.Get("X-Request-Id")) {
		return
	}
	rec.id = id
	w.Header().Set("X-Request-Id", id)
}

// chatTokenIDs tokenizes a rendered chat prompt: with the tokenizer's special tokens
// when the request's add_special_tokens is true (vLLM adds them on top of what the
// template wrote), else as the template wrote it.
func chatTokenIDs(pre Preprocessor, req *chatRequest, prompt string) []uint32 {
	if req.AddSpecialTokens {
		return pre.EncodePrompt(prompt)
	}
	return pre.Tokenizer().Encode(prompt)
}

// emptyTemplatePrompt is the 400 for a request's chat_template that rendered nothing:
// its variables are undefined (a template engine writes an undefined variable as
// nothing), or it writes no message.
func emptyTemplatePrompt() *APIError {
	return newError(KindInvalidValue, "chat_template",
		"Invalid 'chat_template': the template rendered an empty prompt. Check the variables it uses: a chat template gets messages, tools, documents, add_generation_prompt, the tokenizer's special tokens (bos_token, eos_token, ...) and the chat_template_kwargs; any other variable is undefined and renders as nothing.")
}

// chatEcho is what vLLM's echo puts before a chat answer: the last message's content
// when that message has the answer's role (the assistant's with add_generation_prompt,
// else the last message's own), "" otherwise or without echo.
func chatEcho(req *chatRequest) string {
	if req == nil || !req.Echo || len(req.Messages) == 0 {
		return ""
	}
	last := req.Messages[len(req.Messages)-1]
	if req.AddGenerationPrompt && last.Role != "assistant" {
		return ""
	}
	return last.Content
}

// stopTokenReasons are the token ids whose stop vLLM reports as the stop_reason: the
// request's stop_token_ids, except the model's EOS ids (eos, nil with ignore_eos),
// which vLLM checks first and reports as null.
func stopTokenReasons(stopTokenIDs, eos []uint32) map[uint32]bool {
	if len(stopTokenIDs) == 0 {
		return nil
	}
	out := make(map[uint32]bool, len(stopTokenIDs))
	for _, id := range stopTokenIDs {
		out[id] = true
	}
	for _, id := range eos {
		delete(out, id)
	}
	return out
}

// vllmStopReason is vLLM's stop_reason of a finished answer: the stop string that
// matched, the stop token id that ended it, or null.
func vllmStopReason(end *ending) json.RawMessage {
	switch {
	case end.StopString != "":
		return mustJSON(end.StopString)
	case end.StopTokenID != nil:
		return json.RawMessage(strconv.FormatUint(uint64(*end.StopTokenID), 10))
	}
	return json.RawMessage("null")
}

// tokenIDSink keeps one choice's token ids for return_token_ids: the prompt's, and the
// output's as textOutput counts them (every completion token, the one that stopped the
// output included). A nil sink (not asked) renders nothing. Not safe for concurrent use.
type tokenIDSink struct {
	prompt     []uint32
	out        []uint32
	sent       int  // output ids already in a chunk
	promptSent bool // prompt ids already in a chunk
}

// newTokenIDSink returns the sink of a choice with prompt ids prompt; nil when the
// request did not ask for token ids.
func newTokenIDSink(c *commonRequest, prompt []uint32) *tokenIDSink {
	if !c.ReturnTokenIDs {
		return nil
	}
	return &tokenIDSink{prompt: prompt}
}

func (s *tokenIDSink) add(id uint32) {
	if s != nil {
		s.out = append(s.out, id)
	}
}

// idList is ids as a JSON array ([] when empty).
func idList(ids []uint32) json.RawMessage {
	if ids == nil {
		ids = []uint32{}
	}
	return mustJSON(ids)
}

// promptIDs is the prompt's ids (nil when not asked).
func (s *tokenIDSink) promptIDs() json.RawMessage {
	if s == nil {
		return nil
	}
	return idList(s.prompt)
}

// promptOnce is the prompt's ids for the first chunk of a stream that carries them, nil
// after (and when not asked).
func (s *tokenIDSink) promptOnce() json.RawMessage {
	if s == nil || s.promptSent {
		return nil
	}
	s.promptSent = true
	return idList(s.prompt)
}

// pending is the output ids not yet in a chunk (nil when there are none or when not
// asked).
func (s *tokenIDSink) pending() json.RawMessage {
	if s == nil || s.sent == len(s.out) {
		return nil
	}
	ids := s.out[s.sent:]
	s.sent = len(s.out)
	return idList(ids)
}

// all is every output id (nil when not asked).
func (s *tokenIDSink) all() json.RawMessage {
	if s == nil {
		return nil
	}
	return idList(s.out)
}
