package model

import "github.com/ardanlabs/jinja"

// Tokenizer converts between text and token ids.
type Tokenizer interface {
	// Encode returns the token ids of text. Special tokens written in text (e.g.
	// "<|im_start|>") are recognised as special tokens. No BOS is added: chat templates
	// write it themselves (Model.EncodePrompt adds what a raw prompt needs).
	Encode(text string) []uint32
	// Decode returns the text of ids. Ill-formed UTF-8 becomes U+FFFD, one for each
	// maximal subpart (as HF tokenizers' lossy decoding does). Special tokens are
	// included; unknown ids are skipped.
	Decode(ids []uint32) string
	// TokenBytes returns the raw bytes a token stands for (false for an unknown id). The
	// slice is shared: callers must not modify it.
	TokenBytes(id uint32) ([]byte, bool)
	// VocabSize is the number of ids (highest id + 1), special tokens included.
	VocabSize() int
	// IsSpecial reports whether id is a special token (e.g. EOS): an added token flagged
	// "special" in tokenizer.json, or a tiktoken special. Added tokens that are not special
	// (Qwen3's <think>) are ordinary text for decoding.
	IsSpecial(id uint32) bool
	// TokenString returns the vocabulary string of id, what HF's convert_ids_to_tokens
	// returns (false for an unknown id): an added or special token's content as written;
	// otherwise the key of tokenizer.json's model.vocab, in the model's own alphabet:
	// byte-level BPE's ("Ġworld" for " world", "Ċ" for a newline; tiktoken encodings
	// are written the same way), SentencePiece's ("▁world", byte fallback "<0x0A>"),
	// WordPiece's ("##ing" inside a word). See docs/reference.md §25.
	TokenString(id uint32) (string, bool)
}

// ChatMessage is one message of a chat request after the gateway normalised it
// (content parts joined into one string).
type ChatMessage struct {
	Role       string
	Content    string
	Name       string
	ToolCallID string
	ToolCalls  []map[string]any // OpenAI tool_calls objects, passed to the template as-is
	// Reasoning is an assistant message's earlier chain of thought (the request's
	// reasoning or reasoning_content), passed to the template as reasoning_content (what
	// Qwen3's and DeepSeek's templates read) and reasoning, for interleaved thinking.
	Reasoning string
}

// Model is everything the gateway needs to preprocess requests for one served model.
type Model struct {
	// Source is what LoadModel was given.
	Source    string
	Tokenizer Tokenizer
	// BOSToken, EOSToken are the special tokens' text from tokenizer_config.json
	// ("" when the model has none); passed to the chat template.
	BOSToken, EOSToken string
	// EOSTokenIDs end generation (tokenizer_config eos_token, generation_config.json).
	EOSTokenIDs []uint32
	// ContextLength in tokens (config.json max_position_embeddings or
	// tokenizer_config model_max_length); 0 when unknown.
	ContextLength int
	// PromptPrefixIDs are the ids HF tokenizers put before a raw prompt when they add
	// special tokens (the post-processor's, e.g. Llama-3's <|begin_of_text|>); empty for
	// most chat models. EncodePrompt adds them; chat prompts don't need them (the
	// template writes BOS).
	PromptPrefixIDs []uint32
	// PromptSuffixIDs are the ids HF tokenizers put after a raw prompt when they add
	// special tokens (BERT's [SEP], T5's </s>); empty for most generative models.
	PromptSuffixIDs []uint32
	// ChatTemplate is the Jinja source of the chat template ("" when the model has none).
	ChatTemplate string

	template *jinja.Template
	// tokenVars are the special-token strings passed to the template by name
	// (bos_token, eos_token, ...); additionalTokens is additional_special_tokens.
	tokenVars        map[string]string
	additionalTokens []string
}

// LoadModel loads a model's preprocessing from source:
//   - "builtin:cl100k_base" (also o200k_base): an embedded offline tiktoken encoding with
//     a ChatML chat template; works without any file or network;
//   - a folder path holding tokenizer.json and tokenizer_config.json (HF layout; optional
//     config.json, generation_config.json and chat_template.jinja, which takes precedence
//     over tokenizer_config's chat_template as in transformers).
//
// Errors name the file and what was wrong. Loaded models are cached by source (folders by
// absolute path); a failed load is not cached.
func LoadModel(source string) (*Model, error) { return defaultCache.load(source) }

// ApplyChatTemplate renders messages with the model's chat template (Jinja) into the
// prompt text. tools is the OpenAI tools array (nil when absent). Go maps have no key
// order, so objects reach the template (and its tojson) with sorted keys; use RenderChat
// with the raw tools JSON to keep the request's order, as HF transformers does.
func (m *Model) ApplyChatTemplate(msgs []ChatMessage, tools []map[string]any, addGenerationPrompt bool) (string, error) {
	in := ChatTemplateInput{Messages: msgs, AddGenerationPrompt: addGenerationPrompt}
	if tools != nil {
		in.ToolMaps = tools
	}
	return m.RenderChat(in)
}

// EncodePrompt tokenizes a raw (non-chat) prompt as HF tokenizers do with special tokens
// on: PromptPrefixIDs, Encode(text), then PromptSuffixIDs.
func (m *Model) EncodePrompt(text string) []uint32 {
	ids := m.Tokenizer.Encode(text)
	if len(m.PromptPrefixIDs) == 0 && len(m.PromptSuffixIDs) == 0 {
		return ids
	}
	out := make([]uint32, 0, len(m.PromptPrefixIDs)+len(ids)+len(m.PromptSuffixIDs))
	out = append(append(out, m.PromptPrefixIDs...), ids...)
	return append(out, m.PromptSuffixIDs...)
}

// Detokenizer turns a stream of token ids into text incrementally, never emitting a
// partial multi-byte UTF-8 character (bytes are held until the character completes).
// Concatenating every Push result and the final Flush gives exactly Decode of all ids
// (Decode of the non-special ids when skipping specials).
type Detokenizer struct {
	tok         Tokenizer
	skipSpecial bool
	// pending holds the bytes of an incomplete character at the end of the stream (at
	// most 3 bytes between calls).
	pending []byte
}

// NewDetokenizer returns a Detokenizer for tok. skipSpecial drops special tokens' text.
func NewDetokenizer(tok Tokenizer, skipSpecial bool) *Detokenizer {
	return &Detokenizer{tok: tok, skipSpecial: skipSpecial}
}

// Push adds ids and returns the text that became complete. Unknown ids are skipped.
func (d *Detokenizer) Push(ids ...uint32) string { return d.push(ids) }

// Flush returns whatever is held back (invalid trailing bytes become U+FFFD) and resets
// the Detokenizer for a new stream.
func (d *Detokenizer) Flush() string { return d.flush() }

// StopMatcher finds OpenAI `stop` strings in streamed text, including ones that span
// chunk boundaries: text that could be the start of a stop string is held back (only the
// longest suffix that is a prefix of some stop string). The stop string that is complete
// first in the stream ends it (of several completing at the same byte, the longest), so
// the result does not depend on how the text is chunked. Matching is an Aho–Corasick
// automaton: a pushed byte costs amortized constant time whatever the number of stop
// strings; building it costs time and memory linear in their total length (at most 21
// bytes per byte of stop strings), and matchers of equal lists share one automaton
// while any of them is in use (the n choices of a request build it once).
type StopMatcher struct {
	ac *stopAutomaton // nil without stop strings
	// state is the automaton's node for the text so far; held is the longest suffix of
	// that text that is a proper prefix of a stop string (the node's string); stopped is
	// set once a stop string was found.
	state   int32
	held    string
	stopped bool
	matched string
}

// NewStopMatcher returns a matcher for stops (empty and duplicate strings are ignored;
// any number of stop strings is accepted: OpenAI allows up to 4, vLLM sets no bound).
func NewStopMatcher(stops []string) *StopMatcher { return newStopMatcher(stops) }

// Push adds text; it returns the text that is safe to emit and whether a stop string was
// found (the stop string itself and anything after it are never emitted). Once stopped,
// Push returns ("", true).
func (s *StopMatcher) Push(text string) (emit string, stopped bool) { return s.push(text) }

// Flush returns held-back text at the end of the stream ("" after a stop).
func (s *StopMatcher) Flush() string { return s.flush() }

// Matched returns the stop string that ended the stream ("" before a stop).
func (s *StopMatcher) Matched() string { return s.matched }
