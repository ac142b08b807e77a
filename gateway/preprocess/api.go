// Package preprocess turns OpenAI requests into token ids and token ids back into text:
// tokenizers (an embedded offline default and HF tokenizer.json models), chat templates
// (Jinja, from tokenizer_config.json), incremental detokenization and stop strings.
package preprocess

// Tokenizer converts between text and token ids.
type Tokenizer interface {
	// Encode returns the token ids of text. Special tokens written in text (e.g.
	// "<|im_start|>") are recognised as special tokens. No BOS is added: chat templates
	// write it themselves.
	Encode(text string) []uint32
	// Decode returns the text of ids; invalid UTF-8 byte runs become U+FFFD.
	Decode(ids []uint32) string
	// TokenBytes returns the raw bytes a token stands for (false for an unknown id).
	TokenBytes(id uint32) ([]byte, bool)
	// VocabSize is the number of ids (highest id + 1), special tokens included.
	VocabSize() int
	// IsSpecial reports whether id is a special/added token (e.g. EOS).
	IsSpecial(id uint32) bool
}

// ChatMessage is one message of a chat request after the gateway normalised it
// (content parts joined into one string).
type ChatMessage struct {
	Role       string
	Content    string
	Name       string
	ToolCallID string
	ToolCalls  []map[string]any // OpenAI tool_calls objects, passed to the template as-is
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
}

// LoadModel loads a model's preprocessing from source:
//   - "builtin:cl100k_base" (also o200k_base): an embedded offline tiktoken encoding with
//     a ChatML chat template; works without any file or network;
//   - a folder path holding tokenizer.json and tokenizer_config.json (HF layout; optional
//     config.json and generation_config.json).
//
// Errors name the file and what was wrong. Loaded models are cached by source.
func LoadModel(source string) (*Model, error) { panic("preprocess: LoadModel not implemented yet") }

// ApplyChatTemplate renders messages with the model's chat template (Jinja) into the
// prompt text. tools is the OpenAI tools array (nil when absent).
func (m *Model) ApplyChatTemplate(msgs []ChatMessage, tools []map[string]any, addGenerationPrompt bool) (string, error) {
	panic("preprocess: ApplyChatTemplate not implemented yet")
}

// Detokenizer turns a stream of token ids into text incrementally, never emitting a
// partial multi-byte UTF-8 character (bytes are held until the character completes).
type Detokenizer struct{ tok Tokenizer }

// NewDetokenizer returns a Detokenizer for tok. skipSpecial drops special tokens' text.
func NewDetokenizer(tok Tokenizer, skipSpecial bool) *Detokenizer { panic("not implemented yet") }

// Push adds ids and returns the text that became complete.
func (d *Detokenizer) Push(ids ...uint32) string { panic("not implemented yet") }

// Flush returns whatever is held back (invalid trailing bytes become U+FFFD).
func (d *Detokenizer) Flush() string { panic("not implemented yet") }

// StopMatcher finds OpenAI `stop` strings in streamed text, including ones that span
// chunk boundaries: text that could be the start of a stop string is held back.
type StopMatcher struct{ stops []string }

// NewStopMatcher returns a matcher for stops (empty strings are ignored).
func NewStopMatcher(stops []string) *StopMatcher { panic("not implemented yet") }

// Push adds text; it returns the text that is safe to emit and whether a stop string was
// found (the stop string itself and anything after it are never emitted).
func (s *StopMatcher) Push(text string) (emit string, stopped bool) { panic("not implemented yet") }

// Flush returns held-back text at the end of the stream.
func (s *StopMatcher) Flush() string { panic("not implemented yet") }
