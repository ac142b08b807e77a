package model

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"sort"
	"strings"
	"unicode"

	"github.com/dlclark/regexp2"
	"golang.org/x/text/unicode/norm"
)

// File names of the HF model layout that LoadModel reads (ConfigFile and
// GenerationConfigFile too).
const (
	fileTokenizer       = "tokenizer.json"
	fileTokenizerConfig = "tokenizer_config.json"
	fileChatTemplate    = "chat_template.jinja"
)

// gpt2Pattern is the pre-tokenizer regex of HF's ByteLevel pre-tokenizer with
// use_regex=true (GPT-2's pattern).
const gpt2Pattern = `'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+`

// hfTokenizerFile is the part of an HF tokenizers tokenizer.json that Turbine reads.
type hfTokenizerFile struct {
	AddedTokens   []hfAddedToken  `json:"added_tokens"`
	Normalizer    json.RawMessage `json:"normalizer"`
	PreTokenizer  json.RawMessage `json:"pre_tokenizer"`
	PostProcessor json.RawMessage `json:"post_processor"`
	Decoder       json.RawMessage `json:"decoder"`
	Model         *hfModel        `json:"model"`
}

type hfAddedToken struct {
	ID         *int64 `json:"id"`
	Content    string `json:"content"`
	SingleWord bool   `json:"single_word"`
	LStrip     bool   `json:"lstrip"`
	RStrip     bool   `json:"rstrip"`
	Special    bool   `json:"special"`
}

// hfModel is tokenizer.json's "model", read as BPE in the same pass as the rest of the
// file (a file is decoded once: it can be tens of MB). Other model types fail to decode
// their vocab; Type still tells which they are.
type hfModel struct {
	Type                    string    `json:"type"`
	Vocab                   hfVocab   `json:"vocab"`
	Merges                  *hfMerges `json:"merges"`
	IgnoreMerges            bool      `json:"ignore_merges"`
	ContinuingSubwordPrefix *string   `json:"continuing_subword_prefix"`
	EndOfWordSuffix         *string   `json:"end_of_word_suffix"`
	// SentencePiece-style BPE, WordPiece and Unigram.
	UnkToken             *string  `json:"unk_token"`
	UnkID                *int64   `json:"unk_id"`
	ByteFallback         bool     `json:"byte_fallback"`
	FuseUnk              bool     `json:"fuse_unk"`
	Dropout              *float64 `json:"dropout"`
	MaxInputCharsPerWord *int     `json:"max_input_chars_per_word"`
}

// hfVocab is the model's vocabulary: an object of token → id (BPE, WordPiece), or a
// list of [token, score] pairs whose index is the id (Unigram; the scores go to list).
type hfVocab struct {
	ids    map[string]int64
	list   []string
	scores []float64
}

func (v *hfVocab) UnmarshalJSON(b []byte) error {
	b = bytes.TrimSpace(b)
	if len(b) > 0 && b[0] == '[' {
		var pairs []json.RawMessage
		if err := json.Unmarshal(b, &pairs); err != nil {
			return err
		}
		v.list = make([]string, len(pairs))
		v.scores = make([]float64, len(pairs))
		for i, raw := range pairs {
			var pair []json.RawMessage
			if err := json.Unmarshal(raw, &pair); err != nil || len(pair) != 2 {
				return fmt.Errorf("vocab entry %d is not a [token, score] pair", i)
			}
			if err := json.Unmarshal(pair[0], &v.list[i]); err != nil {
				return fmt.Errorf("vocab entry %d: token: %v", i, err)
			}
			if err := json.Unmarshal(pair[1], &v.scores[i]); err != nil {
				return fmt.Errorf("vocab entry %d: score: %v", i, err)
			}
		}
		return nil
	}
	return json.Unmarshal(b, &v.ids)
}

// hfMerges is the merges list, written as "a b" strings (older files) or ["a", "b"]
// pairs (newer ones).
type hfMerges [][2]string

func (m *hfMerges) UnmarshalJSON(b []byte) error {
	if !isStringList(b) {
		return json.Unmarshal(b, (*[][2]string)(m))
	}
	var list []string
	if err := json.Unmarshal(b, &list); err != nil {
		return err
	}
	*m = make(hfMerges, len(list))
	for i, s := range list {
		a, c, ok := strings.Cut(s, " ")
		if !ok {
			return fmt.Errorf("merges entry %d (%q) is not two tokens separated by a space", i, s)
		}
		(*m)[i] = [2]string{a, c}
	}
	return nil
}

// hfComponent is a normalizer, pre-tokenizer, post-processor or decoder: a "type" and
// type-specific fields.
type hfComponent struct {
	Type string `json:"type"`
	// Sequence members.
	Normalizers   []json.RawMessage `json:"normalizers"`
	PreTokenizers []json.RawMessage `json:"pretokenizers"`
	Processors    []json.RawMessage `json:"processors"`
	Decoders      []json.RawMessage `json:"decoders"`
	// Split.
	Pattern  *hfPattern `json:"pattern"`
	Behavior string     `json:"behavior"`
	Invert   bool       `json:"invert"`
	// ByteLevel.
	AddPrefixSpace bool  `json:"add_prefix_space"`
	UseRegex       *bool `json:"use_regex"`
	// Digits.
	IndividualDigits bool `json:"individual_digits"`
	// TemplateProcessing.
	Single        []map[string]json.RawMessage `json:"single"`
	SpecialTokens map[string]hfTemplateSpecial `json:"special_tokens"`
}

type hfPattern struct {
	Regex  *string `json:"Regex"`
	String *string `json:"String"`
}

type hfTemplateSpecial struct {
	IDs []int64 `json:"ids"`
}

// maxTokenID bounds token ids read from files (tables are indexed by id): far above any
// real vocabulary (a few hundred thousand), far below what would exhaust memory.
const maxTokenID = 1 << 22

// hfSpec is a parsed tokenizer.json, before the tokenizer is built.
type hfSpec struct {
	tok Tokenizer
	// added maps added-token content to ids, for resolving the special tokens named in
	// tokenizer_config.json.
	added map[string]uint32
	// prefix and suffix are what the post-processor puts around a single sequence.
	prefix, suffix []uint32
	// merges and ignoreMerges are the model's, kept for tests (see onHFSpec).
	merges       hfMerges
	ignoreMerges bool
}

func decodeComponent(raw json.RawMessage) (*hfComponent, error) {
	if isNull(raw) {
		return nil, nil
	}
	var c hfComponent
	if err := json.Unmarshal(raw, &c); err != nil {
		return nil, err
	}
	return &c, nil
}

// parseTokenizerJSON builds a tokenizer from the bytes of a tokenizer.json; name is the
// file's path, for errors. Only byte-level BPE tokenizers are supported.
func parseTokenizerJSON(data []byte, name string) (*hfSpec, error) {
	fail := func(format string, args ...any) error {
		return fmt.Errorf("model: %s: "+format, append([]any{name}, args...)...)
	}
	var f hfTokenizerFile
	decodeErr := json.Unmarshal(data, &f)
	var typeErr *json.UnmarshalTypeError
	if decodeErr != nil && !errors.As(decodeErr, &typeErr) {
		return nil, fail("not a tokenizer.json: %v", decodeErr)
	}
	if f.Model == nil {
		return nil, fail(`no "model"`)
	}
	model := f.Model
	if model.Type == "" && model.Merges != nil {
		model.Type = "BPE" // files from older tokenizers versions omit the type
	}
	if model.Type == "" && model.Vocab.list != nil {
		model.Type = "Unigram"
	}
	if model.Type != "BPE" || !hasByteLevel(f.PreTokenizer) {
		// SentencePiece-style BPE, WordPiece, Unigram.
		if decodeErr != nil {
			return nil, fail("%v", decodeErr)
		}
		return parsePipelineTokenizer(&f, fail)
	}
	if model.ContinuingSubwordPrefix != nil && *model.ContinuingSubwordPrefix != "" {
		return nil, fail("BPE with continuing_subword_prefix %q is not supported", *model.ContinuingSubwordPrefix)
	}
	if model.EndOfWordSuffix != nil && *model.EndOfWordSuffix != "" {
		return nil, fail("BPE with end_of_word_suffix %q is not supported", *model.EndOfWordSuffix)
	}

	tok := &bpeTokenizer{}
	var err error
	if tok.normalize, err = buildNormalizer(f.Normalizer); err != nil {
		return nil, fail("normalizer: %v", err)
	}
	byteLevelSeen := false
	if tok.splits, byteLevelSeen, err = buildPreTokenizer(f.PreTokenizer); err != nil {
		return nil, fail("pre_tokenizer: %v", err)
	}
	if !byteLevelSeen {
		return nil, fail("pre_tokenizer has no ByteLevel step: only byte-level BPE is supported (SentencePiece-style BPE, e.g. Metaspace with byte fallback, is not)")
	}
	if err := checkDecoder(f.Decoder); err != nil {
		return nil, fail("decoder: %v", err)
	}
	if decodeErr != nil {
		return nil, fail("%v", decodeErr)
	}

	// Vocabulary: byte-level strings → ids.
	vocab := model.Vocab.ids
	if len(vocab) == 0 {
		return nil, fail("model.vocab is empty")
	}
	spec := &hfSpec{tok: tok, added: make(map[string]uint32, len(f.AddedTokens))}
	maxID := int64(-1)
	for s, id := range vocab {
		if s == "" {
			return nil, fail("model.vocab has an empty entry (id %d)", id)
		}
		if id < 0 || id >= maxTokenID {
			return nil, fail("model.vocab: id %d of %q is out of range [0, %d)", id, s, maxTokenID)
		}
		maxID = max(maxID, id)
	}
	for i, a := range f.AddedTokens {
		if a.ID == nil || *a.ID < 0 || *a.ID >= maxTokenID {
			return nil, fail("added_tokens[%d] (%q): missing or out-of-range id", i, a.Content)
		}
		maxID = max(maxID, *a.ID)
	}
	tok.tokens = make([][]byte, maxID+1)
	tok.special = make([]bool, maxID+1)
	tok.ranks = make(map[string]uint32, len(vocab))
	byID := make([]string, maxID+1) // vocabulary string of each id, for error messages
	for s, id := range vocab {
		if other := byID[id]; other != "" {
			return nil, fail("model.vocab: id %d is used by both %q and %q", id, other, s)
		}
		byID[id] = s
		b, ok := byteLevel.decode(s)
		if !ok {
			return nil, fail("model.vocab: entry %q (id %d) is not byte-level text: only byte-level BPE is supported", s, id)
		}
		if _, dup := tok.ranks[string(b)]; dup {
			return nil, fail("model.vocab: two entries stand for the bytes of %q", s)
		}
		tok.ranks[string(b)] = uint32(id)
		tok.tokens[id] = b
	}
	for c := 0; c < 256; c++ {
		if _, ok := tok.ranks[string([]byte{byte(c)})]; !ok {
			return nil, fail("model.vocab has no token for byte 0x%02X: not a byte-level BPE vocabulary", c)
		}
	}
	var merges hfMerges
	if model.Merges != nil {
		merges = *model.Merges
	}
	spec.merges, spec.ignoreMerges = merges, model.IgnoreMerges
	if err := checkMerges(merges, vocab); err != nil {
		return nil, fail("model.merges: %v", err)
	}

	// Added tokens (specials included).
	added := make([]addedToken, 0, len(f.AddedTokens))
	for i, a := range f.AddedTokens {
		if a.Content == "" {
			return nil, fail("added_tokens[%d] (id %d): empty content", i, *a.ID)
		}
		if s := byID[*a.ID]; s != "" && s != byteLevel.encode([]byte(a.Content)) {
			return nil, fail("added_tokens[%d]: id %d is %q in model.vocab but %q here", i, *a.ID, s, a.Content)
		}
		added = append(added, addedToken{
			content: a.Content, id: uint32(*a.ID), special: a.Special,
			lstrip: a.LStrip, rstrip: a.RStrip, singleWord: a.SingleWord,
		})
	}
	tok.added = newAddedMatcher(added)
	tok.isAdded = make([]bool, maxID+1)
	for _, a := range added {
		tok.tokens[a.id] = []byte(a.content)
		tok.special[a.id] = a.special
		tok.isAdded[a.id] = true
		spec.added[a.content] = a.id
	}

	if spec.prefix, spec.suffix, err = postProcessorIDs(f.PostProcessor); err != nil {
		return nil, fail("post_processor: %v", err)
	}
	return spec, nil
}

func buildNormalizer(raw json.RawMessage) (func(string) string, error) {
	c, err := decodeComponent(raw)
	if err != nil || c == nil {
		return nil, err
	}
	switch c.Type {
	case "NFC":
		return norm.NFC.String, nil
	case "NFD":
		return norm.NFD.String, nil
	case "NFKC":
		return norm.NFKC.String, nil
	case "NFKD":
		return norm.NFKD.String, nil
	case "Lowercase":
		return lowercase, nil
	case "StripAccents":
		return removeMarks, nil
	case "Prepend":
		var p struct {
			Prepend string `json:"prepend"`
		}
		if err := decodeAs(raw, &p); err != nil {
			return nil, err
		}
		return func(s string) string {
			if s == "" {
				return s
			}
			return p.Prepend + s
		}, nil
	case "Replace":
		var r struct {
			Pattern *hfPattern `json:"pattern"`
			Content string     `json:"content"`
		}
		if err := decodeAs(raw, &r); err != nil {
			return nil, err
		}
		fn, err := replaceNormalizer(r.Pattern, r.Content)
		if err != nil {
			return nil, fmt.Errorf("Replace: %v", err)
		}
		return fn, nil
	case "Strip":
		var st struct {
			Left  bool `json:"strip_left"`
			Right bool `json:"strip_right"`
		}
		if err := decodeAs(raw, &st); err != nil {
			return nil, err
		}
		return func(s string) string {
			if st.Left {
				s = strings.TrimLeftFunc(s, unicode.IsSpace)
			}
			if st.Right {
				s = strings.TrimRightFunc(s, unicode.IsSpace)
			}
			return s
		}, nil
	case "BertNormalizer":
		var b struct {
			CleanText          *bool `json:"clean_text"`
			HandleChineseChars *bool `json:"handle_chinese_chars"`
			StripAccents       *bool `json:"strip_accents"`
			Lowercase          *bool `json:"lowercase"`
		}
		if err := decodeAs(raw, &b); err != nil {
			return nil, err
		}
		or := func(p *bool, def bool) bool {
			if p == nil {
				return def
			}
			return *p
		}
		lower := or(b.Lowercase, true)
		return bertNormalizer(or(b.CleanText, true), or(b.HandleChineseChars, true), or(b.StripAccents, lower), lower), nil
	case "Precompiled":
		var p struct {
			Charsmap *string `json:"precompiled_charsmap"`
		}
		if err := decodeAs(raw, &p); err != nil {
			return nil, err
		}
		if p.Charsmap == nil || *p.Charsmap == "" {
			return nil, nil // an empty charsmap normalises nothing
		}
		return newPrecompiled(*p.Charsmap)
	case "Sequence":
		var fns []func(string) string
		for _, sub := range c.Normalizers {
			fn, err := buildNormalizer(sub)
			if err != nil {
				return nil, err
			}
			if fn != nil {
				fns = append(fns, fn)
			}
		}
		if len(fns) == 0 {
			return nil, nil
		}
		return func(s string) string {
			for _, fn := range fns {
				s = fn(s)
			}
			return s
		}, nil
	}
	return nil, fmt.Errorf("type %q is not supported (supported: NFC, NFD, NFKC, NFKD, Lowercase, StripAccents, Prepend, Replace, Strip, BertNormalizer, Precompiled, Sequence)", c.Type)
}

// buildPreTokenizer returns the splitters of the pre-tokenizer, in order, and
// whether it has a ByteLevel step.
func buildPreTokenizer(raw json.RawMessage) (splits []pieceSplitter, byteLevelSeen bool, err error) {
	c, err := decodeComponent(raw)
	if err != nil || c == nil {
		return nil, false, err
	}
	switch c.Type {
	case "Sequence":
		for i, sub := range c.PreTokenizers {
			s, bl, err := buildPreTokenizer(sub)
			if err != nil {
				return nil, false, fmt.Errorf("pretokenizers[%d]: %w", i, err)
			}
			splits = append(splits, s...)
			byteLevelSeen = byteLevelSeen || bl
		}
		return splits, byteLevelSeen, nil
	case "Split":
		if c.Pattern == nil {
			return nil, false, errors.New("Split without a pattern")
		}
		if c.Behavior != "Isolated" {
			return nil, false, fmt.Errorf("Split behavior %q is not supported (only Isolated)", c.Behavior)
		}
		if c.Invert {
			return nil, false, errors.New("Split with invert=true is not supported")
		}
		var pattern string
		switch {
		case c.Pattern.Regex != nil:
			pattern = *c.Pattern.Regex
		case c.Pattern.String != nil:
			pattern = regexp2.Escape(*c.Pattern.String)
		default:
			return nil, false, errors.New(`Split pattern has neither "Regex" nor "String"`)
		}
		if pattern == "" {
			return nil, false, errors.New("Split pattern is empty")
		}
		sp, err := newSplitter(pattern)
		if err != nil {
			return nil, false, fmt.Errorf("Split pattern %q: %v", pattern, err)
		}
		return []pieceSplitter{sp}, false, nil
	case "ByteLevel":
		if c.AddPrefixSpace {
			return nil, false, errors.New("ByteLevel with add_prefix_space=true is not supported")
		}
		if c.UseRegex == nil || *c.UseRegex {
			sp, err := newSplitter(gpt2Pattern)
			return []pieceSplitter{sp}, true, err
		}
		return nil, true, nil
	case "Digits":
		p := `\p{N}+`
		if c.IndividualDigits {
			p = `\p{N}`
		}
		sp, err := newSplitter(p)
		return []pieceSplitter{sp}, false, err
	}
	return nil, false, fmt.Errorf("type %q is not supported (supported: Sequence, Split, ByteLevel, Digits)", c.Type)
}

func checkDecoder(raw json.RawMessage) error {
	c, err := decodeComponent(raw)
	if err != nil || c == nil {
		return err
	}
	switch c.Type {
	case "ByteLevel":
		return nil
	case "Sequence":
		for i, sub := range c.Decoders {
			if err := checkDecoder(sub); err != nil {
				return fmt.Errorf("decoders[%d]: %w", i, err)
			}
		}
		return nil
	}
	return fmt.Errorf("type %q is not supported (only ByteLevel): not a byte-level BPE tokenizer", c.Type)
}

// checkMerges verifies that the merges list is ordered like the ids of the tokens the
// merges produce. When it is, merges-based BPE (HF tokenizers) and rank-based BPE
// (tiktoken, rank = id) encode alike, which is what bpeTokenizer relies on.
func checkMerges(pairs hfMerges, vocab map[string]int64) error {
	last := int64(-1)
	for i, p := range pairs {
		for _, part := range p {
			if _, ok := vocab[part]; !ok {
				return fmt.Errorf("entry %d: %q is not in the vocabulary", i, part)
			}
		}
		id, ok := vocab[p[0]+p[1]]
		if !ok {
			return fmt.Errorf("entry %d: the merge of %q and %q is not in the vocabulary", i, p[0], p[1])
		}
		if id < last {
			return fmt.Errorf("entry %d (%q + %q → id %d) comes after a merge producing id %d: merges are not in id order, which rank-based BPE needs (merges-based BPE is not implemented)", i, p[0], p[1], id, last)
		}
		last = id
	}
	return nil
}

// isStringList reports whether raw is a JSON array whose first element is a string (or
// an empty array).
func isStringList(raw json.RawMessage) bool {
	b := bytes.TrimSpace(raw)
	if len(b) == 0 || b[0] != '[' {
		return false
	}
	b = bytes.TrimSpace(b[1:])
	return len(b) > 0 && (b[0] == '"' || b[0] == ']')
}

// hfTokenizerConfig is the part of tokenizer_config.json that Turbine reads.
type hfTokenizerConfig struct {
	ChatTemplate            json.RawMessage `json:"chat_template"`
	BOSToken                json.RawMessage `json:"bos_token"`
	EOSToken                json.RawMessage `json:"eos_token"`
	UnkToken                json.RawMessage `json:"unk_token"`
	SepToken                json.RawMessage `json:"sep_token"`
	PadToken                json.RawMessage `json:"pad_token"`
	ClsToken                json.RawMessage `json:"cls_token"`
	MaskToken               json.RawMessage `json:"mask_token"`
	AdditionalSpecialTokens json.RawMessage `json:"additional_special_tokens"`
	ModelMaxLength          json.RawMessage `json:"model_max_length"`
	AddBOSToken             *bool           `json:"add_bos_token"`
}

// tokenizerConfig is a parsed tokenizer_config.json.
type tokenizerConfig struct {
	// chatTemplate is the default template ("" when none).
	chatTemplate string
	// tokens holds the special-token strings passed to chat templates, by variable name
	// (bos_token, eos_token, unk_token, sep_token, pad_token, cls_token, mask_token);
	// additional lists additional_special_tokens.
	tokens     map[string]string
	additional []string
	// modelMaxLength is 0 when absent or a sentinel.
	modelMaxLength int
	addBOSToken    *bool
}

// maxSaneContext bounds context lengths read from files: transformers writes int(1e30)
// as model_max_length when a model sets none.
const maxSaneContext = 1 << 30

var specialTokenKeys = []string{"bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token"}

func parseTokenizerConfig(data []byte, name string) (*tokenizerConfig, error) {
	fail := func(format string, args ...any) error {
		return fmt.Errorf("model: %s: "+format, append([]any{name}, args...)...)
	}
	var c hfTokenizerConfig
	if err := json.Unmarshal(data, &c); err != nil {
		return nil, fail("not a tokenizer_config.json: %v", err)
	}
	out := &tokenizerConfig{tokens: map[string]string{}, addBOSToken: c.AddBOSToken}
	for i, raw := range []json.RawMessage{c.BOSToken, c.EOSToken, c.UnkToken, c.SepToken, c.PadToken, c.ClsToken, c.MaskToken} {
		s, err := tokenString(raw)
		if err != nil {
			return nil, fail("%s: %v", specialTokenKeys[i], err)
		}
		if s != "" {
			out.tokens[specialTokenKeys[i]] = s
		}
	}
	if !isNull(c.AdditionalSpecialTokens) {
		var list []json.RawMessage
		if err := json.Unmarshal(c.AdditionalSpecialTokens, &list); err != nil {
			return nil, fail("additional_special_tokens: %v", err)
		}
		for i, raw := range list {
			s, err := tokenString(raw)
			if err != nil {
				return nil, fail("additional_special_tokens[%d]: %v", i, err)
			}
			out.additional = append(out.additional, s)
		}
	}
	if !isNull(c.ModelMaxLength) {
		var v float64
		if err := json.Unmarshal(c.ModelMaxLength, &v); err != nil {
			return nil, fail("model_max_length: %v", err)
		}
		if v >= 1 && v < maxSaneContext {
			out.modelMaxLength = int(v)
		}
	}
	var err error
	if out.chatTemplate, err = chatTemplateFromConfig(c.ChatTemplate); err != nil {
		return nil, fail("chat_template: %v", err)
	}
	return out, nil
}

// tokenString reads a special token written as a string, an AddedToken object
// ({"content": ...}) or null ("").
func tokenString(raw json.RawMessage) (string, error) {
	if isNull(raw) {
		return "", nil
	}
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		return s, nil
	}
	var obj struct {
		Content *string `json:"content"`
	}
	if err := json.Unmarshal(raw, &obj); err != nil || obj.Content == nil {
		return "", fmt.Errorf("neither a string nor an object with \"content\": %s", truncate(string(raw), 60))
	}
	return *obj.Content, nil
}

// chatTemplateFromConfig reads chat_template: a string, or a list of {"name", "template"}
// of which "default" is used.
func chatTemplateFromConfig(raw json.RawMessage) (string, error) {
	if isNull(raw) {
		return "", nil
	}
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		return s, nil
	}
	var list []struct {
		Name     string `json:"name"`
		Template string `json:"template"`
	}
	if err := json.Unmarshal(raw, &list); err != nil {
		return "", fmt.Errorf("neither a string nor a list of named templates: %v", err)
	}
	var names []string
	for _, t := range list {
		if t.Name == "default" {
			return t.Template, nil
		}
		names = append(names, t.Name)
	}
	sort.Strings(names)
	return "", fmt.Errorf("a list of named templates without \"default\" (names: %s)", strings.Join(names, ", "))
}

// loadConfig holds what LoadModel reads from config.json and generation_config.json. The
// model deployment card reads them with ParseConfig and ParseGenerationConfig instead.
type loadConfig struct {
	contextLength int      // 0 when unknown
	eosTokenIDs   []uint32 // nil when absent
}

// loadContextKeys are the config.json keys that bound the context length (the smallest
// present wins), as vLLM reads them.
var loadContextKeys = []string{"max_position_embeddings", "n_positions", "max_seq_len", "seq_length", "max_sequence_length", "max_seq_length", "seq_len"}

// parseLoadConfig reads config.json (context length, eos_token_id). Multimodal configs
// keep the language model's fields in "text_config", which is read when the top level has
// none.
func parseLoadConfig(data []byte, name string) (*loadConfig, error) {
	var top map[string]json.RawMessage
	if err := json.Unmarshal(data, &top); err != nil {
		return nil, fmt.Errorf("model: %s: not a JSON object: %v", name, err)
	}
	out := &loadConfig{}
	levels := []map[string]json.RawMessage{top}
	if raw, ok := top["text_config"]; ok && !isNull(raw) {
		var text map[string]json.RawMessage
		if err := json.Unmarshal(raw, &text); err != nil {
			return nil, fmt.Errorf("model: %s: text_config: %v", name, err)
		}
		levels = append(levels, text)
	}
	for _, level := range levels {
		for _, key := range loadContextKeys {
			raw, ok := level[key]
			if !ok || isNull(raw) {
				continue
			}
			var v float64
			if err := json.Unmarshal(raw, &v); err != nil {
				return nil, fmt.Errorf("model: %s: %s: %v", name, key, err)
			}
			if v >= 1 && v < maxSaneContext && (out.contextLength == 0 || int(v) < out.contextLength) {
				out.contextLength = int(v)
			}
		}
		if out.contextLength > 0 {
			break
		}
	}
	for _, level := range levels {
		ids, err := parseLoadTokenIDs(level["eos_token_id"])
		if err != nil {
			return nil, fmt.Errorf("model: %s: eos_token_id: %v", name, err)
		}
		if ids != nil {
			out.eosTokenIDs = ids
			break
		}
	}
	return out, nil
}

// parseLoadGenerationConfig reads eos_token_id from generation_config.json.
func parseLoadGenerationConfig(data []byte, name string) ([]uint32, error) {
	var c struct {
		EOSTokenID json.RawMessage `json:"eos_token_id"`
	}
	if err := json.Unmarshal(data, &c); err != nil {
		return nil, fmt.Errorf("model: %s: not a generation_config.json: %v", name, err)
	}
	ids, err := parseLoadTokenIDs(c.EOSTokenID)
	if err != nil {
		return nil, fmt.Errorf("model: %s: eos_token_id: %v", name, err)
	}
	return ids, nil
}

// parseLoadTokenIDs reads a token id written as an integer or a list of integers.
func parseLoadTokenIDs(raw json.RawMessage) ([]uint32, error) {
	if isNull(raw) {
		return nil, nil
	}
	var list []int64
	var one int64
	if err := json.Unmarshal(raw, &one); err == nil {
		list = []int64{one}
	} else if err := json.Unmarshal(raw, &list); err != nil {
		return nil, fmt.Errorf("neither an integer nor a list of integers: %s", truncate(string(raw), 60))
	}
	out := make([]uint32, 0, len(list))
	for _, id := range list {
		if id < 0 || id > math.MaxInt32 {
			return nil, fmt.Errorf("token id %d is out of range", id)
		}
		out = append(out, uint32(id))
	}
	return out, nil
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}
