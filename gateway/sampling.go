package gateway

import (
	"math"
	"slices"
	"strconv"
	"sync"

	"github.com/turbine-llm/turbine/engines"
	"github.com/turbine-llm/turbine/messages"
)

// samplingExtras are vLLM's sampling and output fields beyond OpenAI's that chat and
// completions share (docs/reference.md §20). Fields that go to the engine are carried in
// messages.SamplingParams; the others (stop-string inclusion, spacing of special
// tokens, prompt truncation) are applied by the gateway.
type samplingExtras struct {
	TopK              *int32   // -1 or 0: off
	MinP              *float64 // [0, 1]
	RepetitionPenalty *float64 // > 0
	// LogitBias maps token ids to a bias in [-100, 100] (clamped, as vLLM does).
	LogitBias       map[uint32]float64
	BadWords        []string
	AllowedTokenIDs []uint32
	Priority        *int32
	CacheSalt       string
	// IncludeStopStr keeps the stop string that ended the output at its end.
	IncludeStopStr bool
	// SpacesBetweenSpecialTokens is accepted for vLLM's clients: Turbine's decoding
	// concatenates each token's text, as HF fast tokenizers' byte-level decoding does, so
	// it never puts a space between special tokens that false would have to remove.
	SpacesBetweenSpecialTokens bool
	// TruncatePromptTokens keeps the last k prompt tokens; -1 keeps up to what the
	// context leaves; nil: no truncation.
	TruncatePromptTokens *int64
	// Ignored are the top-level fields of the body nothing read (sorted): logged once
	// per name (Server.warnIgnored).
	Ignored []string
}

// parseSamplingExtras reads samplingExtras into c (after parseCommon). Problems go to o.
func parseSamplingExtras(o *object, c *commonRequest) {
	if c.Seed != nil && *c.Seed == -1 {
		c.Seed = nil // vLLM: -1 is no seed
	}
	if k, ok := o.integer("top_k"); ok {
		switch {
		case k < -1:
			o.fail(newError(KindInvalidValue, "top_k", "Invalid 'top_k': expected -1 or 0 (off) or a value >= 1, but got %d.", k))
		case k > math.MaxInt32:
			o.fail(newError(KindInvalidValue, "top_k", "Invalid 'top_k': %d is too large.", k))
		default:
			v := int32(k)
			c.TopK = &v
		}
	}
	if p, ok := o.number("min_p"); ok {
		if p < 0 || p > 1 {
			o.fail(newError(KindInvalidValue, "min_p", "Invalid 'min_p': expected a value between 0 and 1, but got %g.", p))
		}
		c.MinP = &p
	}
	if r, ok := o.number("repetition_penalty"); ok {
		if r <= 0 {
			o.fail(newError(KindInvalidValue, "repetition_penalty", "Invalid 'repetition_penalty': expected a value > 0, but got %g.", r))
		}
		c.RepetitionPenalty = &r
	}
	c.LogitBias = parseLogitBias(o)
	if items, ok := o.array("bad_words"); ok {
		for i, it := range items {
			s, isStr := it.(string)
			switch {
			case !isStr:
				o.fail(typeError(indexParam("bad_words", i), "a string", kindOf(it)))
			case s == "":
				o.fail(newError(KindInvalidValue, indexParam("bad_words", i), "Invalid '%s': bad_words cannot contain an empty string.", indexParam("bad_words", i)))
			default:
				c.BadWords = append(c.BadWords, s)
			}
		}
	}
	if items, ok := o.array("allowed_token_ids"); ok {
		ids, err := tokenIDs(items, "allowed_token_ids")
		o.fail(err)
		if err == nil && len(ids) == 0 {
			o.fail(newError(KindInvalidValue, "allowed_token_ids", "Invalid 'allowed_token_ids': empty array; give at least one token id, or leave the field out."))
		}
		c.AllowedTokenIDs = ids
	}
	if p, ok := o.integer("priority"); ok {
		if p < math.MinInt32 || p > math.MaxInt32 {
			o.fail(newError(KindInvalidValue, "priority", "Invalid 'priority': %d is out of range.", p))
		} else {
			v := int32(p)
			c.Priority = &v
		}
	}
	if o.has("cache_salt") {
		if s, ok := o.str("cache_salt"); ok && s == "" {
			o.fail(newError(KindInvalidValue, "cache_salt", "Parameter 'cache_salt' must be a non-empty string if provided."))
		} else {
			c.CacheSalt = s
		}
	}
	c.IncludeStopStr, _ = o.boolean("include_stop_str_in_output")
	c.SpacesBetweenSpecialTokens = true
	if v, ok := o.boolean("spaces_between_special_tokens"); ok {
		c.SpacesBetweenSpecialTokens = v
	}
	if k, ok := o.integer("truncate_prompt_tokens"); ok {
		if k < -1 {
			o.fail(newError(KindInvalidValue, "truncate_prompt_tokens", "Invalid 'truncate_prompt_tokens': expected -1 (the context length) or a value >= 0, but got %d.", k))
		}
		c.TruncatePromptTokens = &k
	}
}

// parseLogitBias reads logit_bias: an object from token ids (as strings, JSON having no
// other keys) to a bias, clamped to [-100, 100] as vLLM does. nil when absent or empty.
func parseLogitBias(o *object) map[uint32]float64 {
	lb, ok := o.child("logit_bias")
	if !ok || len(lb.m) == 0 {
		return nil
	}
	keys := make([]string, 0, len(lb.m))
	for k := range lb.m {
		keys = append(keys, k)
	}
	slices.Sort(keys) // the first bad key named is the same on every run
	out := make(map[uint32]float64, len(keys))
	for _, k := range keys {
		id, err := strconv.ParseUint(k, 10, 32)
		if err != nil {
			o.fail(newError(KindInvalidValue, "logit_bias", "Invalid 'logit_bias': key '%s' is not a token id (a non-negative integer written as a string).", clipName(k)))
			return nil
		}
		b, ok := lb.number(k)
		if lb.err == nil && !ok {
			lb.fail(typeError(lb.param(k), "a number", kindNull)) // vLLM refuses a null bias too
		}
		if lb.err != nil {
			o.fail(lb.err)
			return nil
		}
		out[uint32(id)] = max(-100, min(100, b))
	}
	return out
}

// chatTemplateFields reads the chat-only template fields into req: continue_final_message
// (which, as vLLM, cannot be combined with an explicit add_generation_prompt true, and
// turns the default add_generation_prompt off) and chat_template (a string, kept as it
// is: Server.requestTemplate refuses or compiles it). Problems go to o.
func chatTemplateFields(o *object, req *chatRequest, addGenerationPromptSet bool) {
	if v, ok := o.boolean("continue_final_message"); ok && v {
		if addGenerationPromptSet && req.AddGenerationPrompt {
			o.fail(newError(KindInvalidValue, "continue_final_message", "Cannot set both `continue_final_message` and `add_generation_prompt` to True."))
			return
		}
		req.ContinueFinalMessage, req.AddGenerationPrompt = true, false
	}
	if src, ok := o.str("chat_template"); ok {
		req.ChatTemplateSource = &src
	}
}

// checkVocabulary checks the token ids the sampling fields name against a vocabulary of
// vocab ids, with vLLM's wording.
func checkVocabulary(c *commonRequest, vocab int) *APIError {
	outside := func(ids []uint32) []uint32 {
		var out []uint32
		for _, id := range ids {
			if int64(id) >= int64(vocab) {
				out = append(out, id)
			}
		}
		return out
	}
	biased := make([]uint32, 0, len(c.LogitBias))
	for id := range c.LogitBias {
		biased = append(biased, id)
	}
	slices.Sort(biased)
	for _, f := range []struct {
		param string
		ids   []uint32
	}{{"stop_token_ids", c.StopTokenIDs}, {"logit_bias", biased}, {"allowed_token_ids", c.AllowedTokenIDs}} {
		if bad := outside(f.ids); len(bad) > 0 {
			if len(bad) > 8 {
				bad = bad[:8]
			}
			return newError(KindInvalidValue, f.param, "Invalid '%s': token id(s) %v are out of vocabulary (size %d).", f.param, bad, vocab)
		}
	}
	return nil
}

// truncatePrompt keeps the last truncate_prompt_tokens of ids, the first with
// truncation_side "right" (docs/reference.md §20): k as given, or for -1 what the context of ctxLen tokens leaves beside max_tokens (beside
// one token when max_tokens is absent); -1 with an unknown context truncates nothing. A k
// larger than the context leaves is a 400, as in vLLM.
func truncatePrompt(ids []uint32, c *commonRequest, ctxLen int) ([]uint32, *APIError) {
	if c.TruncatePromptTokens == nil {
		return ids, nil
	}
	k := *c.TruncatePromptTokens
	if ctxLen > 0 {
		maxInput := int64(ctxLen) - c.MaxTokens
		if k == -1 {
			k = maxInput
			if c.MaxTokens == 0 {
				k = int64(ctxLen) - 1
			}
		} else if k > maxInput {
			return nil, newError(KindInvalidValue, "truncate_prompt_tokens",
				"truncate_prompt_tokens=%d cannot be greater than the model's context length - max_tokens = %d. Please request a smaller truncation size.", k, maxInput)
		}
	}
	if k < 0 || k >= int64(len(ids)) {
		return ids, nil
	}
	if c.TruncateRight {
		return ids[:k], nil // truncation_side "right"
	}
	return ids[int64(len(ids))-k:], nil
}

// checkMinTokensRoom refuses min_tokens larger than what a prompt of promptLen tokens
// leaves in a context of ctxLen tokens (0: unknown, no check), as vLLM does.
func checkMinTokensRoom(c *commonRequest, ctxLen, promptLen int) *APIError {
	if ctxLen <= 0 || promptLen >= ctxLen {
		return nil
	}
	if room := int64(ctxLen - promptLen); c.MinTokens > room {
		return newError(KindInvalidValue, "min_tokens",
			"Invalid 'min_tokens': %d is more than the %d tokens the prompt (%d tokens) leaves in the model's context of %d tokens.",
			c.MinTokens, room, promptLen, ctxLen)
	}
	return nil
}

// addExtras copies the fields that go to the engine into sp.
func addExtras(sp *messages.SamplingParams, c *commonRequest) {
	sp.TopK, sp.MinP, sp.RepetitionPenalty, sp.Priority = c.TopK, c.MinP, c.RepetitionPenalty, c.Priority
	sp.LogitBias, sp.BadWords, sp.AllowedTokenIds, sp.CacheSalt = c.LogitBias, c.BadWords, c.AllowedTokenIDs, c.CacheSalt
}

// engineRefusal is the 400 for a sampling field the model's engine cannot honour
// (engines.Unsupported), or nil.
func engineRefusal(card *messages.ModelCard, sp *messages.SamplingParams) *APIError {
	r, ok := engines.Unsupported(card.GetEngine(), sp)
	if !ok {
		return nil
	}
	return newError(KindUnsupported, r.Field, "'%s' is not supported by %s, which serves model '%s': %s.",
		r.Field, r.Engine, clipName(card.GetModel()), r.Reason)
}

// maxIgnoredFieldNames bounds the field names remembered as logged, so that a client
// sending random names cannot grow the set without end; past it, names go unlogged.
const maxIgnoredFieldNames = 256

// ignoredFields are the unknown request field names a Server has logged.
type ignoredFields struct {
	mu    sync.Mutex
	names map[string]bool
}

// first reports whether name was not logged before, and remembers it (while there is
// room).
func (f *ignoredFields) first(name string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.names[name] || len(f.names) >= maxIgnoredFieldNames {
		return false
	}
	if f.names == nil {
		f.names = make(map[string]bool)
	}
	f.names[name] = true
	return true
}

// warnIgnored logs each of fields, once per name for the Server's life: a field vLLM's
// OpenAI server does not define is ignored, as vLLM ignores it, but not in silence.
func (s *Server) warnIgnored(endpoint string, fields []string) {
	for _, f := range fields {
		if s.ignored.first(f) {
			s.cfg.Logger.Warn().Str("field", clipName(f)).Str("endpoint", endpoint).
				Msg("request field ignored: vLLM's OpenAI server does not define it either (logged once per field name)")
		}
	}
}

// keepStop is a StopMatcher that keeps the stop string that ended the text at the end
// of what it emits (include_stop_str_in_output).
type keepStop struct {
	StopMatcher
	done bool
}

// withStopString wraps m so that the matched stop string is emitted when include is
// set; m itself otherwise. m must report the string it matched (matcher).
func withStopString(m StopMatcher, include bool) StopMatcher {
	if !include || m == nil {
		return m
	}
	return &keepStop{StopMatcher: m}
}

func (k *keepStop) Push(text string) (string, bool) {
	if k.done {
		return "", true
	}
	emit, stopped := k.StopMatcher.Push(text)
	if stopped {
		k.done = true
		emit += k.Matched()
	}
	return emit, stopped
}

// Matched is the stop string that ended the text ("" when the wrapped matcher does not
// tell).
func (k *keepStop) Matched() string {
	if m, ok := k.StopMatcher.(matcher); ok {
		return m.Matched()
	}
	return ""
}
