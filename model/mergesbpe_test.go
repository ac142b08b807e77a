package model

import (
	"math/rand"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"
)

// plainMergesBPE is the SentencePiece-style BPE of a whole word, written plainly: the
// word's characters (byte fallback, else unk, consecutive unks fused), then the adjacent
// pair with the lowest merge rank merged, leftmost on ties, until none has a merge. No
// cutting before "▁", no heap.
func plainMergesBPE(m *mergesBPEModel, word string) []uint32 {
	var ids []uint32
	lastUnk := false
	for i := 0; i < len(word); {
		_, size := utf8.DecodeRuneInString(word[i:])
		ch := word[i : i+size]
		i += size
		if id, ok := m.vocab[ch]; ok {
			ids, lastUnk = append(ids, id), false
			continue
		}
		ids, lastUnk = plainUnknown(m, ch, ids, lastUnk)
	}
	for {
		best, at := mergeRule{}, -1
		for i := 0; i+1 < len(ids); i++ {
			if r, ok := m.merges[pairKey(ids[i], ids[i+1])]; ok && (at < 0 || r.rank < best.rank) {
				best, at = r, i
			}
		}
		if at < 0 {
			return ids
		}
		ids = slices.Replace(ids, at, at+2, best.id)
	}
}

func plainUnknown(m *mergesBPEModel, ch string, ids []uint32, lastUnk bool) ([]uint32, bool) {
	if m.byteIDs != nil {
		var bs []uint32
		for i := 0; i < len(ch); i++ {
			if id := m.byteIDs[ch[i]]; id >= 0 {
				bs = append(bs, uint32(id))
			}
		}
		if len(bs) == len(ch) {
			return append(ids, bs...), false
		}
	}
	if m.unkID < 0 {
		return ids, lastUnk
	}
	if lastUnk && m.fuseUnk {
		return ids, true
	}
	return append(ids, uint32(m.unkID)), true
}

// pipelineWords returns the words a pipeline tokenizer hands its model for text.
func pipelineWords(tok *pipelineTokenizer, text string) []string {
	var out []string
	first := true
	split := func(text string, fn func(seg string, id uint32, isAdded bool)) { fn(text, 0, false) }
	if tok.added != nil {
		split = tok.added.split
	}
	split(text, func(seg string, _ uint32, isAdded bool) {
		defer func() { first = false }()
		if isAdded {
			return
		}
		if tok.normalize != nil {
			seg = tok.normalize(seg)
		}
		if tok.pre == nil {
			out = append(out, seg)
			return
		}
		tok.pre(seg, first, func(w string) {
			if w != "" {
				out = append(out, w)
			}
		})
	})
	return out
}

// TestMergesBPECutMatchesWholeWord checks on the real SentencePiece-style files that
// encoding a word in pieces cut before "▁" (and merging short pieces by scanning, long
// ones with the heap) gives the tokens of merging the whole word plainly: on the golden
// texts, random texts, and texts built to sit on the cut rules (runs of spaces, ">"
// before a space, characters outside the vocabulary before a space).
func TestMergesBPECutMatchesWholeWord(t *testing.T) {
	if testing.Short() {
		t.Skip("reads the real merges lists; skipped under -short")
	}
	for _, name := range []string{"llama2", "gemma3"} {
		t.Run(name, func(t *testing.T) {
			m, g := realModel(t, name)
			tok := m.Tokenizer.(*pipelineTokenizer)
			bm := tok.model.(*mergesBPEModel)
			if !bm.cutBeforeSpace {
				t.Fatal("the file has a one-character ▁ token but words are not cut")
			}
			var texts []string
			for _, c := range g.Encode {
				texts = append(texts, c.Text)
			}
			texts = append(texts, strings.Repeat(" ", 300)+"x", strings.Repeat("=", 500), "a > b >  c >>  d",
				"x\u0378 y\U000E0100 z\uFFFD w", "<b> </b>  <i> x", "  leading and trailing  ", "a\xff b\xfe\xff  c",
				strings.Repeat("ab ", 200), "x"+strings.Repeat(" ", 31)+"y"+strings.Repeat(" ", 32)+"z")
			r := rand.New(rand.NewSource(25))
			for range 300 {
				texts = append(texts, randomText(r, 1+r.Intn(160)))
			}
			words := 0
			for _, text := range texts {
				for _, w := range pipelineWords(tok, text) {
					words++
					want := plainMergesBPE(bm, w)
					if got := bm.encodeWord(w, nil); !slices.Equal(got, want) {
						t.Fatalf("word %q: encoded %v, merged whole %v", w, got, want)
					}
				}
			}
			t.Logf("%d words agree", words)
		})
	}
}

// spTokenizerJSON is a small SentencePiece-style BPE tokenizer.json (Gemma's layout:
// spaces become ▁, no pre-tokenizer split, byte fallback) with the given merges; the
// vocabulary is the merges' parts and results, "<unk>", the byte tokens and extra.
func spTokenizerJSON(merges [][2]string, extra ...string) map[string]any {
	vocab := map[string]any{"<unk>": 0}
	add := func(s string) {
		if _, ok := vocab[s]; !ok {
			vocab[s] = len(vocab)
		}
	}
	for b := range 256 {
		add(byteTokenName(byte(b)))
	}
	for _, s := range extra {
		add(s)
	}
	var ms []any
	for _, p := range merges {
		add(p[0])
		add(p[1])
		add(p[0] + p[1])
		ms = append(ms, []any{p[0], p[1]})
	}
	return map[string]any{
		"version":      "1.0",
		"added_tokens": []any{},
		"normalizer":   map[string]any{"type": "Replace", "pattern": map[string]any{"String": " "}, "content": "▁"},
		"pre_tokenizer": map[string]any{
			"type": "Split", "pattern": map[string]any{"String": " "}, "behavior": "MergedWithPrevious", "invert": false,
		},
		"decoder": map[string]any{"type": "Sequence", "decoders": []any{
			map[string]any{"type": "Replace", "pattern": map[string]any{"String": "▁"}, "content": " "},
			map[string]any{"type": "ByteFallback"}, map[string]any{"type": "Fuse"},
		}},
		"model": map[string]any{
			"type": "BPE", "unk_token": "<unk>", "fuse_unk": true, "byte_fallback": true,
			"vocab": vocab, "merges": ms,
		},
	}
}

func byteTokenName(b byte) string {
	const hex = "0123456789ABCDEF"
	return "<0x" + string(hex[b>>4]) + string(hex[b&15]) + ">"
}

// TestMergesBPECutRules: a word is cut before "▁" only where no merge can join the
// character before it to the "▁" side; where one can, the word is merged whole.
func TestMergesBPECutRules(t *testing.T) {
	merges := [][2]string{ // in rank order
		{"▁", "b"},  // ▁b
		{"a", "▁b"}, // a▁b: "a" may not be cut from a ▁ after it
		{"▁", "▁"},  // ▁▁: nor ▁ from ▁
		{"▁", "c"},
		{">", "▁c"}, // >▁c: nor >
		{"c", "c"},
		{"d", ">"},
	}
	cases := []struct {
		name string
		text string
		want []string // the tokens' strings
		cuts []int    // the byte offsets in the word where encodeWord cuts
	}{
		{"free character before ▁", "c b", []string{"c", "▁b"}, []int{1}},
		{"a▁b joins a and ▁", "a b", []string{"a▁b"}, nil},
		{"▁▁ joins ▁ and ▁", "c  c", []string{"c", "▁▁", "c"}, []int{1}},
		{">▁c joins > and ▁", "d> cc", []string{"d", ">▁c", "c"}, nil},
		{"> joins, c does not", "d> cc cc", []string{"d", ">▁c", "c", "▁c", "c"}, []int{7}},
		{"byte fallback before ▁", "é b", []string{"<0xC3>", "<0xA9>", "▁b"}, nil},
		{"several cuts", "cc b cc b", []string{"cc", "▁b", "▁c", "c", "▁b"}, []int{2, 6, 11}},
	}
	cfg := map[string]any{"chat_template": "{% for m in messages %}{{ m.content }}{% endfor %}"}
	dir := writeModelDir(t, map[string]any{fileTokenizer: spTokenizerJSON(merges), fileTokenizerConfig: cfg})
	m, err := loadUncached(dir)
	if err != nil {
		t.Fatal(err)
	}
	tok := m.Tokenizer.(*pipelineTokenizer)
	bm := tok.model.(*mergesBPEModel)
	if !bm.cutBeforeSpace {
		t.Fatal("▁ is a token: words should be cut")
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			words := pipelineWords(tok, c.text)
			if len(words) != 1 {
				t.Fatalf("words %q, want one", words)
			}
			w := words[0]
			var cuts []int
			for i := 1; i < len(w); i++ {
				if strings.HasPrefix(w[i:], spaceMark) && bm.canCutAt(w, i) {
					cuts = append(cuts, i)
				}
			}
			if !slices.Equal(cuts, c.cuts) {
				t.Errorf("cuts in %q at %v, want %v", w, cuts, c.cuts)
			}
			var got []string
			for _, id := range m.Tokenizer.Encode(c.text) {
				got = append(got, tok.strs[id])
			}
			if !slices.Equal(got, c.want) {
				t.Errorf("Encode(%q) = %q, want %q", c.text, got, c.want)
			}
			if plain := plainMergesBPE(bm, w); !slices.Equal(m.Tokenizer.Encode(c.text), plain) {
				t.Errorf("Encode(%q) differs from the whole word merged plainly %v", c.text, plain)
			}
		})
	}

	// Without a one-character ▁ token the "▁" of a text is byte tokens: no cuts.
	dir = writeModelDir(t, map[string]any{fileTokenizer: spTokenizerJSON([][2]string{{"c", "c"}}), fileTokenizerConfig: cfg})
	if m, err = loadUncached(dir); err != nil {
		t.Fatal(err)
	}
	if m.Tokenizer.(*pipelineTokenizer).model.(*mergesBPEModel).cutBeforeSpace {
		t.Error("no ▁ token, yet words are cut")
	}
}

// TestMergeSmallMatchesHeap runs both merge loops of mergesBPEModel on the same symbol
// sequences (the real Gemma 3 merges, random words from a small alphabet so that many
// merges apply).
func TestMergeSmallMatchesHeap(t *testing.T) {
	if testing.Short() {
		t.Skip("reads the real merges lists; skipped under -short")
	}
	m, _ := realModel(t, "gemma3")
	bm := m.Tokenizer.(*pipelineTokenizer).model.(*mergesBPEModel)
	r := rand.New(rand.NewSource(7))
	alpha := []rune("▁▁▁eatn=-<>")
	for range 3000 {
		var ids []uint32
		for range 2 + r.Intn(smallMerge-1) {
			ids = append(ids, bm.vocab[string(alpha[r.Intn(len(alpha))])])
		}
		syms := make([]bpeSymbol, len(ids))
		for i, id := range ids {
			syms[i] = bpeSymbol{id: id, prev: int32(i) - 1, next: int32(i) + 1}
		}
		syms[len(syms)-1].next = -1
		bm.mergeAll(syms, nil)
		var heap []uint32
		for i := int32(0); i >= 0; i = syms[i].next {
			heap = append(heap, syms[i].id)
		}
		in := slices.Clone(ids)
		if small := bm.mergeSmall(ids); !slices.Equal(small, heap) {
			t.Fatalf("symbols %v: scan %v, heap %v", in, small, heap)
		}
	}
}
