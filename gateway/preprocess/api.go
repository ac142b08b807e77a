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
