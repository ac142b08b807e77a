package model

import (
	"strings"
	"unicode/utf8"
)

// pipelineTokenizer is an HF tokenizers pipeline for the families that are not
// byte-level BPE: SentencePiece-style BPE with byte fallback (Llama-2, Mistral v0.x,
// Gemma), WordPiece (BERT) and Unigram (T5, XLM-R). Text is split into added tokens and
// ordinary segments; each segment is normalised, cut into words by the pre-tokenizer and
// each word encoded by the model. Decoding runs the decoder steps over the tokens'
// strings, as HF tokenizers do (docs/reference.md §25).
//
// A pipelineTokenizer is immutable after construction and safe for concurrent use.
type pipelineTokenizer struct {
	normalize func(string) string // nil for none
	pre       preTokenizer        // nil: the whole segment is one word
	model     wordModel
	added     *addedMatcher // nil when there are no added tokens
	// strs[id] is the token's string as the vocabulary writes it (added tokens: their
	// content); "" for ids that are not tokens.
	strs []string
	// bytes[id] is what the token stands for inside a text: strs[id] through the
	// decoder's per-token steps (▁ → space, <0xNN> → the byte, WordPiece's ## glued);
	// nil for ids that are not tokens.
	bytes   [][]byte
	special []bool
	decoder []decodeStep
}

var _ Tokenizer = (*pipelineTokenizer)(nil)

// wordModel encodes one pre-tokenized word (BPE, WordPiece or Unigram).
type wordModel interface {
	encodeWord(word string, out []uint32) []uint32
}

// preTokenizer cuts a normalised segment into words; first reports whether the segment
// starts the text (Metaspace's prepend_scheme "first").
type preTokenizer func(text string, first bool, emit func(word string))

// Encode implements Tokenizer.
func (t *pipelineTokenizer) Encode(text string) []uint32 {
	out := make([]uint32, 0, len(text)/3+1)
	if t.added == nil {
		return t.encodeSegment(text, true, out)
	}
	pos := 0
	t.added.split(text, func(seg string, id uint32, isAdded bool) {
		if isAdded {
			out = append(out, id)
			pos++
			return
		}
		out = t.encodeSegment(seg, pos == 0, out)
		pos++
	})
	return out
}

func (t *pipelineTokenizer) encodeSegment(seg string, first bool, out []uint32) []uint32 {
	if seg == "" {
		return out
	}
	if t.normalize != nil {
		seg = t.normalize(seg)
		if seg == "" {
			return out
		}
	}
	if t.pre == nil {
		return t.model.encodeWord(seg, out)
	}
	t.pre(seg, first, func(word string) {
		if word != "" {
			out = t.model.encodeWord(word, out)
		}
	})
	return out
}

// Decode implements Tokenizer: the tokens' strings through the decoder. Ill-formed
// UTF-8 becomes U+FFFD; unknown ids are skipped.
func (t *pipelineTokenizer) Decode(ids []uint32) string {
	toks := make([]string, 0, len(ids))
	for _, id := range ids {
		if int(id) < len(t.strs) && t.bytes[id] != nil {
			toks = append(toks, t.strs[id])
		}
	}
	for _, step := range t.decoder {
		toks = step(toks)
	}
	s := strings.Join(toks, "")
	if utf8.ValidString(s) {
		return s
	}
	return string(appendValidUTF8(nil, []byte(s)))
}

// TokenBytes implements Tokenizer: the token as it reads inside a text (a word-initial
// SentencePiece or WordPiece token with its leading space). The slice is shared.
func (t *pipelineTokenizer) TokenBytes(id uint32) ([]byte, bool) {
	if int(id) >= len(t.bytes) || t.bytes[id] == nil {
		return nil, false
	}
	return t.bytes[id], true
}

// VocabSize implements Tokenizer.
func (t *pipelineTokenizer) VocabSize() int { return len(t.strs) }

// IsSpecial implements Tokenizer.
func (t *pipelineTokenizer) IsSpecial(id uint32) bool {
	return int(id) < len(t.special) && t.special[id]
}

// TokenString implements Tokenizer: the token's string as the vocabulary writes it
// ("▁Hello", "<0x0A>", "##ing"; an added token's content).
func (t *pipelineTokenizer) TokenString(id uint32) (string, bool) {
	if int(id) >= len(t.bytes) || t.bytes[id] == nil {
		return "", false
	}
	return t.strs[id], true
}

// decodeStep is one HF decoder over the list of token strings.
type decodeStep func(toks []string) []string

// byteFallbackToken returns the byte a "<0xNN>" token stands for.
func byteFallbackToken(s string) (byte, bool) {
	if len(s) != 6 || s[0] != '<' || s[1] != '0' || s[2] != 'x' || s[5] != '>' {
		return 0, false
	}
	hi, ok1 := hexDigit(s[3])
	lo, ok2 := hexDigit(s[4])
	return hi<<4 | lo, ok1 && ok2
}

func hexDigit(c byte) (byte, bool) {
	switch {
	case c >= '0' && c <= '9':
		return c - '0', true
	case c >= 'A' && c <= 'F':
		return c - 'A' + 10, true
	case c >= 'a' && c <= 'f':
		return c - 'a' + 10, true
	}
	return 0, false
}

// decodeByteFallback is HF's ByteFallback decoder: runs of <0xNN> tokens become the
// bytes they stand for when those form valid UTF-8, else one U+FFFD per token.
func decodeByteFallback(toks []string) []string {
	out := toks[:0:0]
	var run []byte
	flush := func() {
		if len(run) == 0 {
			return
		}
		if utf8.Valid(run) {
			out = append(out, string(run))
		} else {
			for range run {
				out = append(out, "\uFFFD")
			}
		}
		run = run[:0]
	}
	for _, s := range toks {
		if b, ok := byteFallbackToken(s); ok {
			run = append(run, b)
			continue
		}
		flush()
		out = append(out, s)
	}
	flush()
	return out
}

func decodeFuse(toks []string) []string {
	if len(toks) <= 1 {
		return toks
	}
	return []string{strings.Join(toks, "")}
}

// decodeStrip is HF's Strip decoder: removes up to start leading and stop trailing
// occurrences of content from every token.
func decodeStrip(content rune, start, stop int) decodeStep {
	return func(toks []string) []string {
		out := make([]string, len(toks))
		for i, s := range toks {
			for n := 0; n < start; n++ {
				r, size := utf8.DecodeRuneInString(s)
				if size == 0 || r != content {
					break
				}
				s = s[size:]
			}
			for n := 0; n < stop; n++ {
				r, size := utf8.DecodeLastRuneInString(s)
				if size == 0 || r != content {
					break
				}
				s = s[:len(s)-size]
			}
			out[i] = s
		}
		return out
	}
}

func decodeReplace(from, to string) decodeStep {
	return func(toks []string) []string {
		out := make([]string, len(toks))
		for i, s := range toks {
			out[i] = strings.ReplaceAll(s, from, to)
		}
		return out
	}
}

// decodeMetaspace is HF's Metaspace decoder: the replacement becomes a space, and the
// first token loses its leading space unless prepend_scheme is "never".
func decodeMetaspace(replacement string, stripFirst bool) decodeStep {
	return func(toks []string) []string {
		out := make([]string, len(toks))
		for i, s := range toks {
			s = strings.ReplaceAll(s, replacement, " ")
			if i == 0 && stripFirst {
				s = strings.TrimPrefix(s, " ")
			}
			out[i] = s
		}
		return out
	}
}

// decodeWordPiece is HF's WordPiece decoder: tokens after the first are glued when they
// carry the prefix and spaced otherwise; cleanup removes the space before punctuation
// and in English contractions, token by token.
func decodeWordPiece(prefix string, cleanup bool) decodeStep {
	return func(toks []string) []string {
		out := make([]string, len(toks))
		for i, s := range toks {
			out[i] = wordPieceDecodeToken(s, prefix, cleanup, i == 0)
		}
		return out
	}
}

func wordPieceDecodeToken(s, prefix string, cleanup, first bool) string {
	if !first {
		if rest, ok := strings.CutPrefix(s, prefix); ok {
			s = rest
		} else {
			s = " " + s
		}
	}
	if cleanup {
		s = cleanupTokenization(s)
	}
	return s
}

// cleanupTokenization is transformers' clean_up_tokenization (HF tokenizers' WordPiece
// decoder cleanup).
var cleanupReplacer = strings.NewReplacer(" .", ".", " ?", "?", " !", "!", " ,", ",", " ' ", "'",
	" n't", "n't", " 'm", "'m", " 's", "'s", " 've", "'ve", " 're", "'re")

func cleanupTokenization(s string) string { return cleanupReplacer.Replace(s) }
