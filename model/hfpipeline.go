package model

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/dlclark/regexp2"
	"golang.org/x/text/unicode/norm"
)

// hasByteLevel reports whether a pre-tokenizer has a ByteLevel step (then the file is
// read as byte-level BPE).
func hasByteLevel(raw json.RawMessage) bool {
	c, err := decodeComponent(raw)
	if err != nil || c == nil {
		return false
	}
	if c.Type == "ByteLevel" {
		return true
	}
	for _, sub := range c.PreTokenizers {
		if hasByteLevel(sub) {
			return true
		}
	}
	return false
}

// decodeAs decodes one component's fields into v.
func decodeAs(raw json.RawMessage, v any) error { return json.Unmarshal(raw, v) }

// parsePipelineTokenizer builds the tokenizer of a file that is not byte-level BPE:
// SentencePiece-style BPE, WordPiece or Unigram (docs/reference.md §25).
func parsePipelineTokenizer(f *hfTokenizerFile, fail func(string, ...any) error) (*hfSpec, error) {
	model := f.Model
	tok := &pipelineTokenizer{}
	spec := &hfSpec{tok: tok, added: make(map[string]uint32, len(f.AddedTokens))}

	// Vocabulary: id → string, and string → id.
	var strs []string
	ids := map[string]uint32{}
	setID := func(s string, id int64, what string) error {
		if s == "" {
			return fmt.Errorf("%s has an empty entry (id %d)", what, id)
		}
		if id < 0 || id >= maxTokenID {
			return fmt.Errorf("%s: id %d of %q is out of range [0, %d)", what, id, s, maxTokenID)
		}
		for int64(len(strs)) <= id {
			strs = append(strs, "")
		}
		if other := strs[id]; other != "" && other != s {
			return fmt.Errorf("%s: id %d is used by both %q and %q", what, id, other, s)
		}
		strs[id] = s
		if _, dup := ids[s]; !dup {
			ids[s] = uint32(id)
		}
		return nil
	}
	switch model.Type {
	case "Unigram":
		if len(model.Vocab.list) == 0 {
			return nil, fail("model.vocab is empty")
		}
		strs = make([]string, 0, len(model.Vocab.list))
		for i, s := range model.Vocab.list {
			if err := setID(s, int64(i), "model.vocab"); err != nil {
				return nil, fail("%v", err)
			}
		}
	case "BPE", "WordPiece":
		if len(model.Vocab.ids) == 0 {
			return nil, fail("model.vocab is empty")
		}
		maxID := int64(0)
		for _, id := range model.Vocab.ids {
			maxID = max(maxID, id)
		}
		strs = make([]string, 0, min(maxID+1, maxTokenID))
		for s, id := range model.Vocab.ids {
			if err := setID(s, id, "model.vocab"); err != nil {
				return nil, fail("%v", err)
			}
		}
	default:
		return nil, fail("model type %q is not supported (supported: BPE, WordPiece, Unigram)", model.Type)
	}
	vocabLen := len(strs)

	// Added tokens (specials included).
	added := make([]addedToken, 0, len(f.AddedTokens))
	for i, a := range f.AddedTokens {
		if a.ID == nil || *a.ID < 0 || *a.ID >= maxTokenID {
			return nil, fail("added_tokens[%d] (%q): missing or out-of-range id", i, a.Content)
		}
		if a.Content == "" {
			return nil, fail("added_tokens[%d] (id %d): empty content", i, *a.ID)
		}
		if *a.ID < int64(vocabLen) && strs[*a.ID] != "" && strs[*a.ID] != a.Content {
			return nil, fail("added_tokens[%d]: id %d is %q in model.vocab but %q here", i, *a.ID, strs[*a.ID], a.Content)
		}
		if err := setID(a.Content, *a.ID, "added_tokens"); err != nil {
			return nil, fail("%v", err)
		}
		ids[a.Content] = uint32(*a.ID)
		added = append(added, addedToken{
			content: a.Content, id: uint32(*a.ID), special: a.Special,
			lstrip: a.LStrip, rstrip: a.RStrip, singleWord: a.SingleWord,
		})
	}
	tok.added = newAddedMatcher(added)
	tok.strs = strs
	tok.special = make([]bool, len(strs))
	isAdded := make([]bool, len(strs))
	for _, a := range added {
		tok.special[a.id] = a.special
		isAdded[a.id] = true
		spec.added[a.content] = a.id
	}

	var err error
	if model.Dropout != nil && *model.Dropout != 0 {
		return nil, fail("model.dropout %v is not supported (only null or 0: encoding must be deterministic)", *model.Dropout)
	}
	switch model.Type {
	case "BPE":
		tok.model, err = buildMergesBPE(model, ids, strs[:vocabLen])
	case "WordPiece":
		tok.model, err = buildWordPiece(model, ids, strs[:vocabLen])
	case "Unigram":
		tok.model, err = buildUnigram(model, ids, strs[:vocabLen])
	}
	if err != nil {
		return nil, fail("model: %v", err)
	}
	if tok.normalize, err = buildNormalizer(f.Normalizer); err != nil {
		return nil, fail("normalizer: %v", err)
	}
	if tok.pre, err = buildPipelinePreTokenizer(f.PreTokenizer); err != nil {
		return nil, fail("pre_tokenizer: %v", err)
	}
	var perToken []func(string) string
	if tok.decoder, perToken, err = buildDecoder(f.Decoder); err != nil {
		return nil, fail("decoder: %v", err)
	}
	byteFallback := hasDecoder(f.Decoder, "ByteFallback")
	tok.bytes = make([][]byte, len(strs))
	for id, s := range strs {
		if s == "" {
			continue
		}
		if b, ok := byteFallbackToken(s); ok && byteFallback && !isAdded[id] {
			tok.bytes[id] = []byte{b}
			continue
		}
		for _, fn := range perToken {
			s = fn(s)
		}
		tok.bytes[id] = []byte(s)
	}
	if spec.prefix, spec.suffix, err = postProcessorIDs(f.PostProcessor); err != nil {
		return nil, fail("post_processor: %v", err)
	}
	return spec, nil
}

// hasDecoder reports whether a decoder is, or holds in a Sequence, a decoder of type typ.
func hasDecoder(raw json.RawMessage, typ string) bool {
	c, err := decodeComponent(raw)
	if err != nil || c == nil {
		return false
	}
	if c.Type == typ {
		return true
	}
	for _, sub := range c.Decoders {
		if hasDecoder(sub, typ) {
			return true
		}
	}
	return false
}

// byteTokenIDs returns the ids of the <0xNN> tokens (-1 where absent).
func byteTokenIDs(ids map[string]uint32) *[256]int32 {
	var out [256]int32
	for b := range out {
		out[b] = -1
		if id, ok := ids[fmt.Sprintf("<0x%02X>", b)]; ok {
			out[b] = int32(id)
		}
	}
	return &out
}

func buildMergesBPE(model *hfModel, ids map[string]uint32, strs []string) (*mergesBPEModel, error) {
	if p := model.ContinuingSubwordPrefix; p != nil && *p != "" {
		return nil, fmt.Errorf("BPE with continuing_subword_prefix %q is not supported", *p)
	}
	if s := model.EndOfWordSuffix; s != nil && *s != "" {
		return nil, fmt.Errorf("BPE with end_of_word_suffix %q is not supported", *s)
	}
	m := &mergesBPEModel{vocab: ids, unkID: -1, fuseUnk: model.FuseUnk, ignoreMerges: model.IgnoreMerges}
	for c := range m.ascii {
		m.ascii[c] = -1
		if id, ok := ids[string(rune(c))]; ok && int(id) < len(strs) {
			m.ascii[c] = int32(id)
		}
	}
	if model.ByteFallback {
		m.byteIDs = byteTokenIDs(ids)
	}
	if model.UnkToken != nil {
		id, ok := ids[*model.UnkToken]
		if !ok {
			return nil, fmt.Errorf("unk_token %q is not in the vocabulary", *model.UnkToken)
		}
		m.unkID = int32(id)
	}
	var merges hfMerges
	if model.Merges != nil {
		merges = *model.Merges
	}
	m.merges = make(map[uint64]mergeRule, len(merges))
	for i, p := range merges {
		a, okA := ids[p[0]]
		b, okB := ids[p[1]]
		c, okC := ids[p[0]+p[1]]
		switch {
		case !okA:
			return nil, fmt.Errorf("merges entry %d: %q is not in the vocabulary", i, p[0])
		case !okB:
			return nil, fmt.Errorf("merges entry %d: %q is not in the vocabulary", i, p[1])
		case !okC:
			return nil, fmt.Errorf("merges entry %d: the merge of %q and %q is not in the vocabulary", i, p[0], p[1])
		}
		if _, dup := m.merges[pairKey(a, b)]; !dup {
			m.merges[pairKey(a, b)] = mergeRule{rank: uint32(i), id: c}
		}
		if strings.HasPrefix(p[1], spaceMark) {
			r, _ := utf8.DecodeLastRuneInString(p[0])
			if m.joinsSpace == nil {
				m.joinsSpace = map[rune]bool{}
			}
			m.joinsSpace[r] = true
		}
	}
	_, m.cutBeforeSpace = ids[spaceMark]
	return m, nil
}

func buildWordPiece(model *hfModel, ids map[string]uint32, strs []string) (*wordPieceModel, error) {
	prefix := "##"
	if model.ContinuingSubwordPrefix != nil {
		prefix = *model.ContinuingSubwordPrefix
	}
	m := &wordPieceModel{initial: map[string]uint32{}, cont: map[string]uint32{}, maxChars: 100}
	if model.MaxInputCharsPerWord != nil {
		if *model.MaxInputCharsPerWord <= 0 {
			return nil, fmt.Errorf("max_input_chars_per_word %d is not positive", *model.MaxInputCharsPerWord)
		}
		m.maxChars = *model.MaxInputCharsPerWord
	}
	if model.UnkToken == nil {
		return nil, errors.New("WordPiece without unk_token")
	}
	unk, ok := ids[*model.UnkToken]
	if !ok {
		return nil, fmt.Errorf("unk_token %q is not in the vocabulary", *model.UnkToken)
	}
	m.unkID = unk
	for id, s := range strs {
		if s == "" {
			continue
		}
		if rest, ok := strings.CutPrefix(s, prefix); ok && prefix != "" && rest != "" {
			if _, dup := m.cont[rest]; !dup {
				m.cont[rest] = uint32(id)
			}
			m.maxLen = max(m.maxLen, len(rest))
		}
		if _, dup := m.initial[s]; !dup {
			m.initial[s] = uint32(id)
		}
		m.maxLen = max(m.maxLen, len(s))
	}
	return m, nil
}

func buildUnigram(model *hfModel, ids map[string]uint32, strs []string) (*unigramModel, error) {
	m := &unigramModel{trie: newByteTrie(len(strs)), scores: model.Vocab.scores}
	for i, sc := range m.scores {
		if math.IsNaN(sc) || math.IsInf(sc, 0) {
			return nil, fmt.Errorf("vocab entry %d (%q): score %v is not a finite number", i, strs[i], sc)
		}
	}
	if model.UnkID == nil {
		return nil, errors.New("Unigram without unk_id")
	}
	if *model.UnkID < 0 || *model.UnkID >= int64(len(strs)) {
		return nil, fmt.Errorf("unk_id %d is not an id of the vocabulary (0..%d)", *model.UnkID, len(strs)-1)
	}
	m.unkID = uint32(*model.UnkID)
	m.unkScore = minScore(m.scores) - unkPenalty
	if model.ByteFallback {
		m.byteIDs = byteTokenIDs(ids)
	}
	for id, s := range strs {
		if ids[s] == uint32(id) {
			m.trie.insert(s, uint32(id))
		}
	}
	return m, nil
}

// hfPatternSpec is a Split or Replace pattern.
func compilePattern(p *hfPattern) (string, *regexp2.Regexp, error) {
	switch {
	case p == nil:
		return "", nil, errors.New("no pattern")
	case p.String != nil:
		if *p.String == "" {
			return "", nil, errors.New("empty pattern")
		}
		return *p.String, nil, nil
	case p.Regex != nil:
		re, err := regexp2.Compile(*p.Regex, regexp2.None)
		if err != nil {
			return "", nil, fmt.Errorf("pattern %q: %v", *p.Regex, err)
		}
		return "", re, nil
	}
	return "", nil, errors.New(`pattern has neither "Regex" nor "String"`)
}

// patternMatches returns the byte ranges of the non-empty matches of a pattern in text.
func patternMatches(lit string, re *regexp2.Regexp, text string) [][2]int {
	var out [][2]int
	if re == nil {
		for i := 0; i < len(text); {
			j := strings.Index(text[i:], lit)
			if j < 0 {
				break
			}
			out = append(out, [2]int{i + j, i + j + len(lit)})
			i += j + len(lit)
		}
		return out
	}
	runes := []rune(text)
	runePos, bytePos := 0, 0
	advance := func(toRune int) int {
		for runePos < toRune {
			_, size := utf8.DecodeRuneInString(text[bytePos:])
			bytePos += size
			runePos++
		}
		return bytePos
	}
	m, err := re.FindRunesMatch(runes)
	for err == nil && m != nil {
		if m.Length > 0 {
			start := advance(m.Index)
			end := advance(m.Index + m.Length)
			out = append(out, [2]int{start, end})
		}
		m, err = re.FindNextMatch(m)
	}
	return out
}

// replaceNormalizer is HF's Replace normalizer (and decoder).
func replaceNormalizer(p *hfPattern, content string) (func(string) string, error) {
	lit, re, err := compilePattern(p)
	if err != nil {
		return nil, err
	}
	if re == nil {
		return func(s string) string { return strings.ReplaceAll(s, lit, content) }, nil
	}
	return func(s string) string {
		ms := patternMatches("", re, s)
		if len(ms) == 0 {
			return s
		}
		var b strings.Builder
		last := 0
		for _, m := range ms {
			b.WriteString(s[last:m[0]])
			b.WriteString(content)
			last = m[1]
		}
		b.WriteString(s[last:])
		return b.String()
	}, nil
}

// lowercase is Unicode full lowercasing (Rust's str::to_lowercase, JavaScript's
// toLowerCase): as strings.ToLower, but U+0130 becomes "i̇" and a final capital sigma ς.
func lowercase(s string) string {
	ascii := true
	for i := 0; i < len(s); i++ {
		if s[i] >= utf8.RuneSelf {
			ascii = false
			break
		}
	}
	if ascii {
		return strings.ToLower(s)
	}
	var b strings.Builder
	b.Grow(len(s))
	for i, r := range s {
		switch r {
		case 'İ':
			b.WriteString("i\u0307")
		case 'Σ':
			if finalSigma(s, i) {
				b.WriteRune('ς')
			} else {
				b.WriteRune('σ')
			}
		default:
			b.WriteRune(unicode.ToLower(r))
		}
	}
	return b.String()
}

// finalSigma reports whether the Σ at byte i ends a word: a letter before it, none after.
func finalSigma(s string, i int) bool {
	before, _ := utf8.DecodeLastRuneInString(s[:i])
	after, _ := utf8.DecodeRuneInString(s[i+len("Σ"):])
	return i > 0 && unicode.IsLetter(before) && !unicode.IsLetter(after)
}

func removeMarks(s string) string {
	return strings.Map(func(r rune) rune {
		if unicode.Is(unicode.Mn, r) {
			return -1
		}
		return r
	}, s)
}

// bertNormalizer is HF's BertNormalizer.
func bertNormalizer(cleanText, chinese, stripAccents, lower bool) func(string) string {
	return func(s string) string {
		var b strings.Builder
		b.Grow(len(s) + len(s)/4)
		for _, r := range s {
			if cleanText {
				if r == 0 || r == utf8.RuneError || isBertControl(r) {
					continue
				}
				if isBertWhitespace(r) {
					r = ' '
				}
			}
			if chinese && isCJK(r) {
				b.WriteByte(' ')
				b.WriteRune(r)
				b.WriteByte(' ')
				continue
			}
			b.WriteRune(r)
		}
		s = b.String()
		if stripAccents {
			s = removeMarks(norm.NFD.String(s))
		}
		if lower {
			s = lowercase(s)
		}
		return s
	}
}

func isBertWhitespace(r rune) bool {
	return r == ' ' || r == '\t' || r == '\n' || r == '\r' || unicode.Is(unicode.Zs, r)
}

func isBertControl(r rune) bool {
	if r == '\t' || r == '\n' || r == '\r' {
		return false
	}
	return unicode.In(r, unicode.Cc, unicode.Cf, unicode.Co, unicode.Cs)
}

// isCJK reports whether r is in a CJK Unified Ideographs block (BERT's
// _is_chinese_char).
func isCJK(r rune) bool {
	return (r >= 0x4E00 && r <= 0x9FFF) || (r >= 0x3400 && r <= 0x4DBF) || (r >= 0x20000 && r <= 0x2A6DF) ||
		(r >= 0x2A700 && r <= 0x2B73F) || (r >= 0x2B740 && r <= 0x2B81F) || (r >= 0x2B820 && r <= 0x2CEAF) ||
		(r >= 0xF900 && r <= 0xFAFF) || (r >= 0x2F800 && r <= 0x2FA1F)
}

// metaspaceSpec is HF's Metaspace pre-tokenizer / decoder.
type metaspaceSpec struct {
	Replacement    string  `json:"replacement"`
	PrependScheme  *string `json:"prepend_scheme"`
	AddPrefixSpace *bool   `json:"add_prefix_space"`
	Split          *bool   `json:"split"`
}

// scheme returns the prepend scheme: prepend_scheme, else the older add_prefix_space
// (true, the default, is "always").
func (m metaspaceSpec) scheme() (string, error) {
	if m.PrependScheme != nil {
		switch *m.PrependScheme {
		case "first", "always", "never":
			return *m.PrependScheme, nil
		}
		return "", fmt.Errorf("Metaspace prepend_scheme %q is not one of first, always, never", *m.PrependScheme)
	}
	if m.AddPrefixSpace != nil && !*m.AddPrefixSpace {
		return "never", nil
	}
	return "always", nil
}

func (m metaspaceSpec) replacement() (string, error) {
	if utf8.RuneCountInString(m.Replacement) != 1 {
		return "", fmt.Errorf("Metaspace replacement %q is not one character", m.Replacement)
	}
	return m.Replacement, nil
}

func metaspacePre(repl, scheme string, split bool) preTokenizer {
	return func(text string, first bool, emit func(string)) {
		text = strings.ReplaceAll(text, " ", repl)
		if (scheme == "always" || (scheme == "first" && first)) && !strings.HasPrefix(text, repl) {
			text = repl + text
		}
		if !split {
			emit(text)
			return
		}
		// Split before every replacement (behaviour MergedWithNext).
		start := 0
		for i := len(repl); i <= len(text); {
			j := strings.Index(text[i:], repl)
			if j < 0 {
				break
			}
			cut := i + j
			if cut > start {
				emit(text[start:cut])
			}
			start = cut
			i = cut + len(repl)
		}
		emit(text[start:])
	}
}

// splitBehavior cuts text at the matches per HF's SplitDelimiterBehavior.
func splitBehavior(text string, ms [][2]int, behavior string, emit func(string)) {
	last := 0
	for _, m := range ms {
		switch behavior {
		case "Removed":
			emit(text[last:m[0]])
			last = m[1]
		case "Isolated":
			emit(text[last:m[0]])
			emit(text[m[0]:m[1]])
			last = m[1]
		case "MergedWithPrevious":
			emit(text[last:m[1]])
			last = m[1]
		case "MergedWithNext":
			emit(text[last:m[0]])
			last = m[0]
		case "Contiguous":
			emit(text[last:m[0]])
			emit(text[m[0]:m[1]])
			last = m[1]
		}
	}
	emit(text[last:])
}

func validBehavior(b string) error {
	switch b {
	case "Removed", "Isolated", "MergedWithPrevious", "MergedWithNext":
		return nil
	}
	return fmt.Errorf("Split behavior %q is not supported (supported: Removed, Isolated, MergedWithPrevious, MergedWithNext)", b)
}

// isBertPunct is BERT's punctuation: ASCII punctuation and Unicode category P.
func isBertPunct(r rune) bool {
	return (r >= 33 && r <= 47) || (r >= 58 && r <= 64) || (r >= 91 && r <= 96) || (r >= 123 && r <= 126) || unicode.IsPunct(r)
}

// bertPre is HF's BertPreTokenizer: whitespace separates words and every punctuation
// character is a word of its own.
func bertPre(text string, _ bool, emit func(string)) {
	start := -1
	for i, r := range text {
		switch {
		case unicode.IsSpace(r):
			if start >= 0 {
				emit(text[start:i])
				start = -1
			}
		case isBertPunct(r):
			if start >= 0 {
				emit(text[start:i])
				start = -1
			}
			emit(text[i : i+utf8.RuneLen(r)])
		default:
			if start < 0 {
				start = i
			}
		}
	}
	if start >= 0 {
		emit(text[start:])
	}
}

func whitespaceSplitPre(text string, _ bool, emit func(string)) {
	for _, w := range strings.FieldsFunc(text, unicode.IsSpace) {
		emit(w)
	}
}

// buildPipelinePreTokenizer builds the pre-tokenizer of a non-byte-level file.
func buildPipelinePreTokenizer(raw json.RawMessage) (preTokenizer, error) {
	c, err := decodeComponent(raw)
	if err != nil || c == nil {
		return nil, err
	}
	switch c.Type {
	case "Sequence":
		var steps []preTokenizer
		for i, sub := range c.PreTokenizers {
			p, err := buildPipelinePreTokenizer(sub)
			if err != nil {
				return nil, fmt.Errorf("pretokenizers[%d]: %w", i, err)
			}
			if p != nil {
				steps = append(steps, p)
			}
		}
		if len(steps) == 0 {
			return nil, nil
		}
		var chain func(level int, text string, first bool, emit func(string))
		chain = func(level int, text string, first bool, emit func(string)) {
			if level == len(steps) {
				emit(text)
				return
			}
			steps[level](text, first, func(w string) {
				if w != "" {
					chain(level+1, w, first, emit)
				}
			})
		}
		return func(text string, first bool, emit func(string)) { chain(0, text, first, emit) }, nil
	case "Metaspace":
		var m metaspaceSpec
		if err := decodeAs(raw, &m); err != nil {
			return nil, err
		}
		repl, err := m.replacement()
		if err != nil {
			return nil, err
		}
		scheme, err := m.scheme()
		if err != nil {
			return nil, err
		}
		return metaspacePre(repl, scheme, m.Split == nil || *m.Split), nil
	case "Split":
		lit, re, err := compilePattern(c.Pattern)
		if err != nil {
			return nil, fmt.Errorf("Split: %v", err)
		}
		if err := validBehavior(c.Behavior); err != nil {
			return nil, err
		}
		if c.Invert {
			return nil, errors.New("Split with invert=true is not supported")
		}
		behavior := c.Behavior
		return func(text string, _ bool, emit func(string)) {
			splitBehavior(text, patternMatches(lit, re, text), behavior, emit)
		}, nil
	case "WhitespaceSplit":
		return whitespaceSplitPre, nil
	case "BertPreTokenizer":
		return bertPre, nil
	case "Whitespace":
		re := regexp2.MustCompile(`\w+|[^\w\s]+`, regexp2.None)
		return func(text string, _ bool, emit func(string)) {
			for _, m := range patternMatches("", re, text) {
				emit(text[m[0]:m[1]])
			}
		}, nil
	case "Punctuation":
		behavior := c.Behavior
		if behavior == "" {
			behavior = "Isolated"
		}
		if err := validBehavior(behavior); err != nil {
			return nil, err
		}
		return func(text string, _ bool, emit func(string)) {
			var ms [][2]int
			for i, r := range text {
				if isBertPunct(r) {
					ms = append(ms, [2]int{i, i + utf8.RuneLen(r)})
				}
			}
			splitBehavior(text, ms, behavior, emit)
		}, nil
	case "Digits":
		return func(text string, _ bool, emit func(string)) {
			var ms [][2]int
			for i, r := range text {
				if unicode.IsDigit(r) {
					if !c.IndividualDigits && len(ms) > 0 && ms[len(ms)-1][1] == i {
						ms[len(ms)-1][1] = i + utf8.RuneLen(r)
						continue
					}
					ms = append(ms, [2]int{i, i + utf8.RuneLen(r)})
				}
			}
			splitBehavior(text, ms, "Isolated", emit)
		}, nil
	}
	return nil, fmt.Errorf("type %q is not supported (supported: Sequence, Metaspace, Split, WhitespaceSplit, Whitespace, BertPreTokenizer, Punctuation, Digits)", c.Type)
}

// buildDecoder returns the decoder steps and the per-token rewrites that give a token's
// text inside a sequence (TokenBytes).
func buildDecoder(raw json.RawMessage) ([]decodeStep, []func(string) string, error) {
	c, err := decodeComponent(raw)
	if err != nil || c == nil {
		return nil, nil, err
	}
	switch c.Type {
	case "Sequence":
		var steps []decodeStep
		var per []func(string) string
		for i, sub := range c.Decoders {
			s, p, err := buildDecoder(sub)
			if err != nil {
				return nil, nil, fmt.Errorf("decoders[%d]: %w", i, err)
			}
			steps = append(steps, s...)
			per = append(per, p...)
		}
		return steps, per, nil
	case "Replace":
		var r struct {
			Pattern *hfPattern `json:"pattern"`
			Content string     `json:"content"`
		}
		if err := decodeAs(raw, &r); err != nil {
			return nil, nil, err
		}
		if r.Pattern == nil || r.Pattern.String == nil {
			return nil, nil, errors.New("Replace decoder: only String patterns are supported")
		}
		from := *r.Pattern.String
		to := r.Content
		return []decodeStep{decodeReplace(from, to)}, []func(string) string{func(s string) string { return strings.ReplaceAll(s, from, to) }}, nil
	case "ByteFallback":
		return []decodeStep{decodeByteFallback}, nil, nil
	case "Fuse":
		return []decodeStep{decodeFuse}, nil, nil
	case "Strip":
		var s struct {
			Content string `json:"content"`
			Start   int    `json:"start"`
			Stop    int    `json:"stop"`
		}
		if err := decodeAs(raw, &s); err != nil {
			return nil, nil, err
		}
		if utf8.RuneCountInString(s.Content) != 1 || s.Start < 0 || s.Stop < 0 {
			return nil, nil, fmt.Errorf("Strip decoder: content %q, start %d, stop %d: want one character and counts >= 0", s.Content, s.Start, s.Stop)
		}
		r, _ := utf8.DecodeRuneInString(s.Content)
		return []decodeStep{decodeStrip(r, s.Start, s.Stop)}, nil, nil
	case "Metaspace":
		var m metaspaceSpec
		if err := decodeAs(raw, &m); err != nil {
			return nil, nil, err
		}
		repl, err := m.replacement()
		if err != nil {
			return nil, nil, err
		}
		scheme, err := m.scheme()
		if err != nil {
			return nil, nil, err
		}
		return []decodeStep{decodeMetaspace(repl, scheme != "never")}, []func(string) string{func(s string) string { return strings.ReplaceAll(s, repl, " ") }}, nil
	case "WordPiece":
		var w struct {
			Prefix  *string `json:"prefix"`
			Cleanup *bool   `json:"cleanup"`
		}
		if err := decodeAs(raw, &w); err != nil {
			return nil, nil, err
		}
		prefix, cleanup := "##", true
		if w.Prefix != nil {
			prefix = *w.Prefix
		}
		if w.Cleanup != nil {
			cleanup = *w.Cleanup
		}
		return []decodeStep{decodeWordPiece(prefix, cleanup)}, []func(string) string{func(s string) string {
			return wordPieceDecodeToken(s, prefix, cleanup, false)
		}}, nil
	}
	return nil, nil, fmt.Errorf("type %q is not supported (supported: Sequence, Replace, ByteFallback, Fuse, Strip, Metaspace, WordPiece)", c.Type)
}

// postProcessorIDs returns the ids a post-processor puts before and after a single
// sequence: TemplateProcessing's special tokens around $A, BertProcessing's and
// RobertaProcessing's cls and sep; none for ByteLevel.
func postProcessorIDs(raw json.RawMessage) (prefix, suffix []uint32, err error) {
	c, err := decodeComponent(raw)
	if err != nil || c == nil {
		return nil, nil, err
	}
	switch c.Type {
	case "Sequence":
		for i, sub := range c.Processors {
			p, s, err := postProcessorIDs(sub)
			if err != nil {
				return nil, nil, fmt.Errorf("processors[%d]: %w", i, err)
			}
			prefix = append(prefix, p...)
			suffix = append(suffix, s...)
		}
		return prefix, suffix, nil
	case "TemplateProcessing":
		return templateIDs(c)
	case "BertProcessing", "RobertaProcessing":
		var b struct {
			Sep []json.RawMessage `json:"sep"`
			Cls []json.RawMessage `json:"cls"`
		}
		if err := decodeAs(raw, &b); err != nil {
			return nil, nil, err
		}
		cls, err := processorToken("cls", b.Cls)
		if err != nil {
			return nil, nil, err
		}
		sep, err := processorToken("sep", b.Sep)
		if err != nil {
			return nil, nil, err
		}
		return []uint32{cls}, []uint32{sep}, nil
	}
	return nil, nil, nil
}

// processorToken reads BertProcessing's ["[SEP]", 102].
func processorToken(what string, pair []json.RawMessage) (uint32, error) {
	var id int64
	if len(pair) != 2 || json.Unmarshal(pair[1], &id) != nil || id < 0 || id > math.MaxInt32 {
		return 0, fmt.Errorf("%s is not a [token, id] pair", what)
	}
	return uint32(id), nil
}

// templateIDs reads TemplateProcessing's "single": the special tokens before and after
// the sequence $A.
func templateIDs(c *hfComponent) (prefix, suffix []uint32, err error) {
	seen := false
	for _, item := range c.Single {
		if _, ok := item["Sequence"]; ok {
			seen = true
			continue
		}
		rawSpecial, ok := item["SpecialToken"]
		if !ok {
			continue
		}
		var st struct {
			ID string `json:"id"`
		}
		if err := json.Unmarshal(rawSpecial, &st); err != nil {
			return nil, nil, fmt.Errorf("TemplateProcessing single: %v", err)
		}
		sp, ok := c.SpecialTokens[st.ID]
		if !ok {
			return nil, nil, fmt.Errorf("TemplateProcessing: special token %q is not in special_tokens", st.ID)
		}
		for _, id := range sp.IDs {
			if id < 0 || id > math.MaxInt32 {
				return nil, nil, fmt.Errorf("TemplateProcessing: id %d of %q is out of range", id, st.ID)
			}
			if seen {
				suffix = append(suffix, uint32(id))
			} else {
				prefix = append(prefix, uint32(id))
			}
		}
	}
	return prefix, suffix, nil
}
