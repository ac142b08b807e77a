package model

import (
	"encoding/json"
	"maps"
	"math/rand"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// tinyMerges are the merges of the tiny test tokenizer, in order; token 256+i is the
// result of merge i.
var tinyMerges = [][2]string{
	{"h", "e"}, {"l", "l"}, {"he", "ll"}, {"hell", "o"}, {"Ġ", "w"}, {"o", "r"}, {"Ġw", "or"},
	{"l", "d"}, {"Ġwor", "ld"}, {"Ġ", "Ġ"}, {"ĠĠ", "ĠĠ"}, {"a", "b"}, {"ab", "ab"}, {"b", "a"},
}

// tinyTokenizerJSON builds a small byte-level BPE tokenizer.json: ids 0..255 are the
// bytes, then one token per merge, then added tokens.
func tinyTokenizerJSON() map[string]any {
	vocab := map[string]any{}
	for b := range 256 {
		vocab[byteLevel.encode([]byte{byte(b)})] = b
	}
	var merges []any
	for i, m := range tinyMerges {
		vocab[m[0]+m[1]] = 256 + i
		merges = append(merges, m[0]+" "+m[1])
	}
	n := 256 + len(tinyMerges)
	added := []any{
		map[string]any{"id": n, "content": "<|begin|>", "special": true},
		map[string]any{"id": n + 1, "content": "<|end|>", "special": true},
		map[string]any{"id": n + 2, "content": "<tool>", "special": false},
		map[string]any{"id": n + 3, "content": "[L]", "special": true, "lstrip": true},
		map[string]any{"id": n + 4, "content": "[R]", "special": true, "rstrip": true},
		map[string]any{"id": n + 5, "content": "cat", "special": false, "single_word": true},
		map[string]any{"id": n + 6, "content": "<|end|>x", "special": true},
	}
	return map[string]any{
		"version":      "1.0",
		"added_tokens": added,
		"normalizer":   nil,
		"pre_tokenizer": map[string]any{"type": "Sequence", "pretokenizers": []any{
			map[string]any{"type": "Split", "pattern": map[string]any{"Regex": qwen2Pattern}, "behavior": "Isolated", "invert": false},
			map[string]any{"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": false, "use_regex": false},
		}},
		"post_processor": map[string]any{"type": "TemplateProcessing",
			"single":         []any{map[string]any{"SpecialToken": map[string]any{"id": "<|begin|>", "type_id": 0}}, map[string]any{"Sequence": map[string]any{"id": "A", "type_id": 0}}},
			"special_tokens": map[string]any{"<|begin|>": map[string]any{"id": "<|begin|>", "ids": []any{n}, "tokens": []any{"<|begin|>"}}},
		},
		"decoder": map[string]any{"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": false, "use_regex": false},
		"model":   map[string]any{"type": "BPE", "vocab": vocab, "merges": merges, "ignore_merges": false},
	}
}

func tinyTokenizerConfig() map[string]any {
	return map[string]any{
		"bos_token":                 "<|begin|>",
		"eos_token":                 map[string]any{"content": "<|end|>", "__type": "AddedToken"},
		"pad_token":                 nil,
		"additional_special_tokens": []any{"[L]", map[string]any{"content": "[R]"}},
		"model_max_length":          1e30,
		"chat_template":             "{{ bos_token }}{% for m in messages %}[{{ m.role }}]{{ m.content }}{{ eos_token }}{% endfor %}{% if add_generation_prompt %}[assistant]{% endif %}",
	}
}

func mustJSON(tb testing.TB, v any) []byte {
	tb.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		tb.Fatal(err)
	}
	return b
}

// writeModelDir writes an HF model folder with the given files (values are marshalled
// unless they are strings) and returns its path.
func writeModelDir(tb testing.TB, files map[string]any) string {
	tb.Helper()
	dir := tb.TempDir()
	for name, v := range files {
		data, ok := v.(string)
		if !ok {
			data = string(mustJSON(tb, v))
		}
		if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o644); err != nil {
			tb.Fatal(err)
		}
	}
	return dir
}

func tinyModel(tb testing.TB) *Model {
	tb.Helper()
	dir := writeModelDir(tb, map[string]any{fileTokenizer: tinyTokenizerJSON(), fileTokenizerConfig: tinyTokenizerConfig()})
	m, err := loadUncached(dir)
	if err != nil {
		tb.Fatal(err)
	}
	return m
}

func TestTinyTokenizerEncode(t *testing.T) {
	m := tinyModel(t)
	n := uint32(256 + len(tinyMerges))
	begin, end, tool, lTok, rTok, cat, endX := n, n+1, n+2, n+3, n+4, n+5, n+6
	ids := func(s string) []uint32 { // the byte tokens of s
		var out []uint32
		for _, b := range []byte(s) {
			out = append(out, uint32(b))
		}
		return out
	}
	tests := []struct {
		text string
		want []uint32
	}{
		{"", nil},
		{"hello", []uint32{259}},
		{"hello world", []uint32{259, 264}},
		{"hellohello", []uint32{259, 259}},
		{"  world", []uint32{32, 264}},        // "\s+(?!\S)" leaves one space to " world"
		{"    x", []uint32{265, 32, 32, 120}}, // "   " → ĠĠ Ġ ("ĠĠĠ" is no token), then " x"
		{"abab", []uint32{268}},
		{"bab", []uint32{98, 267}}, // ab (267) merges before ba (269)
		{"<|begin|>hi<|end|>", append(append([]uint32{begin}, ids("hi")...), end)},
		{"<|end|>x", []uint32{endX}}, // longest added token at a position wins
		{"a<tool>b", []uint32{97, tool, 98}},
		{"x  [L]  y", append(append(ids("x"), lTok), ids("  y")...)}, // lstrip absorbs the spaces before
		{"x  [R]  y", append([]uint32{120, 265, rTok}, ids("y")...)}, // rstrip absorbs the spaces after
		{"a cat.", append(append(ids("a "), cat), ids(".")...)},
		{"concat", ids("concat")}, // single_word: not inside a word
	}
	for _, tc := range tests {
		got := m.Tokenizer.Encode(tc.text)
		if !slices.Equal(got, tc.want) {
			t.Errorf("Encode(%q) = %v, want %v", tc.text, got, tc.want)
		}
	}
	if got := m.EncodePrompt("hello"); !slices.Equal(got, []uint32{begin, 259}) {
		t.Errorf("EncodePrompt = %v", got)
	}
	if m.BOSToken != "<|begin|>" || m.EOSToken != "<|end|>" || !slices.Equal(m.EOSTokenIDs, []uint32{end}) || m.ContextLength != 0 {
		t.Errorf("BOS %q EOS %q %v context %d", m.BOSToken, m.EOSToken, m.EOSTokenIDs, m.ContextLength)
	}
	if m.Tokenizer.IsSpecial(tool) || !m.Tokenizer.IsSpecial(end) || m.Tokenizer.VocabSize() != int(n)+7 {
		t.Errorf("IsSpecial(<tool>) %v IsSpecial(<|end|>) %v vocab %d", m.Tokenizer.IsSpecial(tool), m.Tokenizer.IsSpecial(end), m.Tokenizer.VocabSize())
	}
	got, err := m.ApplyChatTemplate([]ChatMessage{{Role: "user", Content: "hi"}}, nil, true)
	if want := "<|begin|>[user]hi<|end|>[assistant]"; err != nil || got != want {
		t.Errorf("ApplyChatTemplate = %q, %v; want %q", got, err, want)
	}
}

// TestTinyTokenizerMatchesMergesBPE compares the rank-based encoder with a direct
// implementation of HF's merges-based BPE on random words of the tiny vocabulary.
func TestTinyTokenizerMatchesMergesBPE(t *testing.T) {
	m := tinyModel(t)
	tok := m.Tokenizer.(*bpeTokenizer)
	ranks := map[[2]string]int{}
	for i, mg := range tinyMerges {
		ranks[mg] = i
	}
	vocab := map[string]uint32{}
	for b, id := range tok.ranks {
		vocab[byteLevel.encode([]byte(b))] = id
	}
	r := rand.New(rand.NewSource(3))
	for range 3000 {
		var sb strings.Builder
		for range 1 + r.Intn(90) {
			sb.WriteByte("helowrdab "[r.Intn(10)])
		}
		text := sb.String()
		var want []uint32
		tok.splitPieces(0, text, func(piece string) {
			for _, s := range mergesBPE(byteLevel.encode([]byte(piece)), ranks, false, vocab) {
				want = append(want, vocab[s])
			}
		})
		if got := tok.Encode(text); !slices.Equal(got, want) {
			t.Fatalf("Encode(%q) = %v, merges-based BPE %v", text, got, want)
		}
	}
}

// mergesBPE is HF tokenizers' BPE, written plainly: repeatedly merge the adjacent pair
// with the lowest merge rank (leftmost on ties). With ignoreMerges, a word that is a
// token is returned whole.
func mergesBPE(word string, ranks map[[2]string]int, ignoreMerges bool, vocab map[string]uint32) []string {
	if _, ok := vocab[word]; ok && ignoreMerges {
		return []string{word}
	}
	var parts []string
	for _, r := range word {
		parts = append(parts, string(r))
	}
	for {
		best, at := -1, -1
		for i := 0; i+1 < len(parts); i++ {
			if rk, ok := ranks[[2]string{parts[i], parts[i+1]}]; ok && (best < 0 || rk < best) {
				best, at = rk, i
			}
		}
		if at < 0 {
			return parts
		}
		parts = append(parts[:at], append([]string{parts[at] + parts[at+1]}, parts[at+2:]...)...)
	}
}

// TestRealMergesEquivalence checks on the real Qwen3 and Llama-3.1 files that the
// rank-based encoder (rank = id) gives the same tokens as HF's merges-based BPE, on the
// pieces of the golden texts and of random texts.
func TestRealMergesEquivalence(t *testing.T) {
	if testing.Short() {
		t.Skip("reads the real merges lists; skipped under -short")
	}
	for _, name := range byteLevelModels {
		t.Run(name, func(t *testing.T) {
			m, g := realModel(t, name)
			tok := m.Tokenizer.(*bpeTokenizer)
			abs, err := filepath.Abs(realModelDir(t, name))
			if err != nil {
				t.Fatal(err)
			}
			v, ok := loadedMerges.Load(abs)
			if !ok {
				t.Fatalf("the load of %s was not seen", abs)
			}
			spec := v.(*hfSpec)
			vocab := make(map[string]uint32, len(tok.ranks))
			for b, id := range tok.ranks {
				vocab[byteLevel.encode([]byte(b))] = id
			}
			ranks := make(map[[2]string]int, len(spec.merges))
			for i, p := range spec.merges {
				if _, dup := ranks[p]; !dup {
					ranks[p] = i
				}
			}
			var texts []string
			for _, c := range g.Encode {
				texts = append(texts, c.Text)
			}
			r := rand.New(rand.NewSource(11))
			for range 100 {
				texts = append(texts, randomText(r, 1+r.Intn(120)))
			}
			pieces := map[string]bool{}
			for _, text := range texts {
				m.Tokenizer.(*bpeTokenizer).added.split(text, func(seg string, _ uint32, isAdded bool) {
					if !isAdded {
						tok.splitPieces(0, tok.normalize0(seg), func(p string) { pieces[p] = true })
					}
				})
			}
			for _, piece := range slices.Sorted(maps.Keys(pieces)) {
				var want []uint32
				for _, s := range mergesBPE(byteLevel.encode([]byte(piece)), ranks, spec.ignoreMerges, vocab) {
					want = append(want, vocab[s])
				}
				if got := tok.encodePiece(piece, nil, &bpeScratch{}); !slices.Equal(got, want) {
					t.Errorf("piece %q: rank-based %v, merges-based %v", piece, got, want)
				}
			}
			t.Logf("%d distinct pieces agree", len(pieces))
		})
	}
}

// TestLoadErrors feeds broken or unsupported files to the loader: each error must name
// the file and say what is wrong.
func TestLoadErrors(t *testing.T) {
	type mutate func(tok, cfg map[string]any, files map[string]any)
	model := func(tok map[string]any) map[string]any { return tok["model"].(map[string]any) }
	tests := []struct {
		name   string
		mutate mutate
		want   string // substring of the error
	}{
		{"unigram", func(tok, _, _ map[string]any) {
			tok["model"] = map[string]any{"type": "Unigram", "vocab": []any{[]any{"<unk>", 0}}, "unk_id": 0}
		}, `tokenizer.json: pre_tokenizer: pretokenizers[1]: type "ByteLevel" is not supported`},
		{"unigram without unk_id", func(tok, _, _ map[string]any) {
			tok["pre_tokenizer"], tok["decoder"] = nil, nil
			tok["model"] = map[string]any{"type": "Unigram", "vocab": []any{[]any{"<unk>", 0}}}
		}, "Unigram without unk_id"},
		{"unigram unk_id out of range", func(tok, _, _ map[string]any) {
			tok["pre_tokenizer"], tok["decoder"] = nil, nil
			tok["model"] = map[string]any{"type": "Unigram", "vocab": []any{[]any{"<unk>", 0}}, "unk_id": 3}
		}, "unk_id 3 is not an id of the vocabulary"},
		{"unigram bad vocab", func(tok, _, _ map[string]any) {
			tok["model"] = map[string]any{"type": "Unigram", "vocab": []any{[]any{"<unk>"}}, "unk_id": 0}
		}, "vocab entry 0 is not a [token, score] pair"},
		{"wordpiece", func(tok, _, _ map[string]any) { model(tok)["type"] = "WordPiece" }, "WordPiece without unk_token"},
		{"dropout", func(tok, _, _ map[string]any) {
			tok["pre_tokenizer"], tok["decoder"] = nil, nil
			model(tok)["dropout"] = 0.1
		}, "model.dropout 0.1 is not supported"},
		{"metaspace scheme", func(tok, _, _ map[string]any) {
			tok["pre_tokenizer"] = map[string]any{"type": "Metaspace", "replacement": "▁", "prepend_scheme": "sometimes"}
		}, `Metaspace prepend_scheme "sometimes"`},
		{"precompiled not base64", func(tok, _, _ map[string]any) {
			tok["normalizer"] = map[string]any{"type": "Precompiled", "precompiled_charsmap": "%%"}
		}, "precompiled_charsmap is not base64"},
		{"metaspace", func(tok, _, _ map[string]any) {
			tok["pre_tokenizer"] = map[string]any{"type": "Metaspace", "replacement": "▁"}
		}, `decoder: type "ByteLevel" is not supported`},
		{"no byte level", func(tok, _, _ map[string]any) {
			tok["pre_tokenizer"] = map[string]any{"type": "Split", "pattern": map[string]any{"Regex": `\s+`}, "behavior": "Isolated"}
		}, `decoder: type "ByteLevel" is not supported`},
		{"split removed", func(tok, _, _ map[string]any) {
			tok["pre_tokenizer"] = map[string]any{"type": "Split", "pattern": map[string]any{"Regex": `\s+`}, "behavior": "Removed"}
		}, `decoder: type "ByteLevel" is not supported`},
		{"bad regex", func(tok, _, _ map[string]any) {
			tok["pre_tokenizer"] = map[string]any{"type": "Sequence", "pretokenizers": []any{
				map[string]any{"type": "Split", "pattern": map[string]any{"Regex": `(`}, "behavior": "Isolated"},
				map[string]any{"type": "ByteLevel", "use_regex": false}}}
		}, "pretokenizers[0]: Split pattern"},
		{"prefix space", func(tok, _, _ map[string]any) {
			tok["pre_tokenizer"] = map[string]any{"type": "ByteLevel", "add_prefix_space": true}
		}, "add_prefix_space=true is not supported"},
		{"normalizer", func(tok, _, _ map[string]any) { tok["normalizer"] = map[string]any{"type": "Nope"} }, `normalizer: type "Nope" is not supported`},
		{"decoder", func(tok, _, _ map[string]any) {
			tok["decoder"] = map[string]any{"type": "Sequence", "decoders": []any{map[string]any{"type": "ByteFallback"}}}
		}, `decoder: decoders[0]: type "ByteFallback" is not supported`},
		{"merges order", func(tok, _, _ map[string]any) {
			mg := model(tok)["merges"].([]any)
			mg[0], mg[1] = mg[1], mg[0]
		}, "merges are not in id order"},
		{"merge of unknown", func(tok, _, _ map[string]any) {
			model(tok)["merges"] = append(model(tok)["merges"].([]any), "x yz")
		}, `"yz" is not in the vocabulary`},
		{"not byte level vocab", func(tok, _, _ map[string]any) { model(tok)["vocab"].(map[string]any)["▁the"] = 9999 }, `entry "▁the" (id 9999) is not byte-level text`},
		{"missing byte", func(tok, _, _ map[string]any) { delete(model(tok)["vocab"].(map[string]any), "Ġ") }, "no token for byte 0x20"},
		{"duplicate id", func(tok, _, _ map[string]any) { model(tok)["vocab"].(map[string]any)["zz"] = 5 }, "id 5 is used by both"},
		{"negative id", func(tok, _, _ map[string]any) { model(tok)["vocab"].(map[string]any)["zz"] = -1 }, "id -1"},
		{"huge id", func(tok, _, _ map[string]any) { model(tok)["vocab"].(map[string]any)["zz"] = 1 << 30 }, "is out of range"},
		{"huge added id", func(tok, _, _ map[string]any) {
			tok["added_tokens"] = []any{map[string]any{"id": 1 << 40, "content": "<x>"}}
		}, "missing or out-of-range id"},
		{"empty vocab entry", func(tok, _, _ map[string]any) { model(tok)["vocab"].(map[string]any)[""] = 9999 }, "empty entry"},
		{"added without id", func(tok, _, _ map[string]any) {
			tok["added_tokens"] = []any{map[string]any{"content": "<x>"}}
		}, `added_tokens[0] ("<x>"): missing or out-of-range id`},
		{"added clashes with vocab", func(tok, _, _ map[string]any) {
			tok["added_tokens"] = []any{map[string]any{"id": 5, "content": "<x>"}}
		}, "added_tokens[0]: id 5"},
		{"not json", func(_, _, files map[string]any) { files[fileTokenizer] = "{" }, "tokenizer.json: not a tokenizer.json"},
		{"template list without default", func(_, cfg, _ map[string]any) {
			cfg["chat_template"] = []any{map[string]any{"name": "tool_use", "template": "x"}}
		}, `tokenizer_config.json: chat_template: a list of named templates without "default" (names: tool_use)`},
		{"eos not a token", func(_, cfg, _ map[string]any) { cfg["eos_token"] = "<|nope|>" }, `tokenizer_config.json: eos_token "<|nope|>" is not a token`},
		{"eos wrong type", func(_, cfg, _ map[string]any) { cfg["eos_token"] = 7 }, "eos_token: neither a string nor an object"},
		{"template syntax", func(_, cfg, _ map[string]any) { cfg["chat_template"] = "{% for %}" }, "chat template:"},
		{"generation config", func(_, _, files map[string]any) { files[GenerationConfigFile] = map[string]any{"eos_token_id": "x"} }, "generation_config.json: eos_token_id"},
		{"config", func(_, _, files map[string]any) {
			files[ConfigFile] = map[string]any{"max_position_embeddings": "long"}
		}, "config.json: max_position_embeddings"},
		{"missing tokenizer", func(_, _, files map[string]any) { delete(files, fileTokenizer) }, "tokenizer.json: open"},
		{"missing tokenizer config", func(_, _, files map[string]any) { delete(files, fileTokenizerConfig) }, "tokenizer_config.json: open"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tok, cfg := tinyTokenizerJSON(), tinyTokenizerConfig()
			files := map[string]any{fileTokenizer: tok, fileTokenizerConfig: cfg}
			tc.mutate(tok, cfg, files)
			dir := writeModelDir(t, files)
			_, err := LoadModel(dir)
			if err == nil {
				t.Fatalf("loaded; want an error containing %q", tc.want)
			}
			if !strings.Contains(err.Error(), tc.want) || !strings.HasPrefix(err.Error(), "model: ") || !strings.Contains(err.Error(), dir) {
				t.Errorf("error %q: want the folder, the prefix \"model: \" and %q", err, tc.want)
			}
		})
	}
	for _, source := range []string{"", filepath.Join(t.TempDir(), "absent")} {
		if _, err := LoadModel(source); err == nil {
			t.Errorf("LoadModel(%q) succeeded", source)
		}
	}
	file := filepath.Join(t.TempDir(), fileTokenizer)
	if err := os.WriteFile(file, []byte("{}"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadModel(file); err == nil || !strings.Contains(err.Error(), "is not a folder") {
		t.Errorf("LoadModel(file) = %v", err)
	}
}

// TestModelFiles covers config.json, generation_config.json, chat_template.jinja and the
// other accepted shapes of tokenizer_config.json.
func TestModelFiles(t *testing.T) {
	n := uint32(256 + len(tinyMerges))
	tests := []struct {
		name        string
		mutate      func(tok, cfg map[string]any, files map[string]any)
		context     int
		eos         []uint32
		prefix      []uint32
		prompt      string // rendered for one user message "hi" with a generation prompt
		contextNote string
	}{
		{name: "defaults", context: 0, eos: []uint32{n + 1}, prefix: []uint32{n}, prompt: "<|begin|>[user]hi<|end|>[assistant]"},
		{name: "config and generation config", mutate: func(_, _, files map[string]any) {
			files[ConfigFile] = map[string]any{"max_position_embeddings": 4096, "eos_token_id": 7}
			files[GenerationConfigFile] = map[string]any{"eos_token_id": []any{n + 1, 3}}
		}, context: 4096, eos: []uint32{n + 1, 3}, prefix: []uint32{n}, prompt: "<|begin|>[user]hi<|end|>[assistant]"},
		{name: "config eos without generation config", mutate: func(_, _, files map[string]any) {
			files[ConfigFile] = map[string]any{"text_config": map[string]any{"max_position_embeddings": 8192, "eos_token_id": []any{9}}}
		}, context: 8192, eos: []uint32{n + 1, 9}, prefix: []uint32{n}, prompt: "<|begin|>[user]hi<|end|>[assistant]"},
		{name: "smallest context key wins", mutate: func(_, _, files map[string]any) {
			files[ConfigFile] = map[string]any{"max_position_embeddings": 4096, "seq_length": 2048}
		}, context: 2048, eos: []uint32{n + 1}, prefix: []uint32{n}, prompt: "<|begin|>[user]hi<|end|>[assistant]"},
		{name: "model_max_length", mutate: func(_, cfg, _ map[string]any) { cfg["model_max_length"] = 32768 },
			context: 32768, eos: []uint32{n + 1}, prefix: []uint32{n}, prompt: "<|begin|>[user]hi<|end|>[assistant]"},
		{name: "chat_template.jinja overrides", mutate: func(_, _, files map[string]any) { files[fileChatTemplate] = "T{{ messages[0].content }}" },
			eos: []uint32{n + 1}, prefix: []uint32{n}, prompt: "Thi"},
		{name: "named templates", mutate: func(_, cfg, _ map[string]any) {
			cfg["chat_template"] = []any{map[string]any{"name": "tool_use", "template": "X"}, map[string]any{"name": "default", "template": "D{{ eos_token }}"}}
		}, eos: []uint32{n + 1}, prefix: []uint32{n}, prompt: "D<|end|>"},
		{name: "add_bos_token false", mutate: func(_, cfg, _ map[string]any) { cfg["add_bos_token"] = false },
			eos: []uint32{n + 1}, prefix: nil, prompt: "<|begin|>[user]hi<|end|>[assistant]"},
		{name: "add_bos_token true without post-processor", mutate: func(tok, cfg, _ map[string]any) {
			tok["post_processor"] = map[string]any{"type": "ByteLevel"}
			cfg["add_bos_token"] = true
		}, eos: []uint32{n + 1}, prefix: []uint32{n}, prompt: "<|begin|>[user]hi<|end|>[assistant]"},
		{name: "eos as a vocabulary token", mutate: func(_, cfg, _ map[string]any) { cfg["eos_token"] = "hello" },
			eos: []uint32{259}, prefix: []uint32{n}, prompt: "<|begin|>[user]hihello[assistant]"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tok, cfg := tinyTokenizerJSON(), tinyTokenizerConfig()
			files := map[string]any{fileTokenizer: tok, fileTokenizerConfig: cfg}
			if tc.mutate != nil {
				tc.mutate(tok, cfg, files)
			}
			m, err := loadUncached(writeModelDir(t, files))
			if err != nil {
				t.Fatal(err)
			}
			if m.ContextLength != tc.context || !slices.Equal(m.EOSTokenIDs, tc.eos) || !slices.Equal(m.PromptPrefixIDs, tc.prefix) {
				t.Errorf("context %d eos %v prefix %v; want %d %v %v", m.ContextLength, m.EOSTokenIDs, m.PromptPrefixIDs, tc.context, tc.eos, tc.prefix)
			}
			got, err := m.ApplyChatTemplate([]ChatMessage{{Role: "user", Content: "hi"}}, nil, true)
			if err != nil || got != tc.prompt {
				t.Errorf("prompt %q, %v; want %q", got, err, tc.prompt)
			}
		})
	}
}

func TestNoChatTemplate(t *testing.T) {
	cfg := tinyTokenizerConfig()
	delete(cfg, "chat_template")
	m, err := loadUncached(writeModelDir(t, map[string]any{fileTokenizer: tinyTokenizerJSON(), fileTokenizerConfig: cfg}))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.ApplyChatTemplate([]ChatMessage{{Role: "user", Content: "hi"}}, nil, true); err == nil || !strings.Contains(err.Error(), "has no chat template") {
		t.Errorf("ApplyChatTemplate without a template: %v", err)
	}
}

func TestLoadModelCache(t *testing.T) {
	dir := writeModelDir(t, map[string]any{fileTokenizer: tinyTokenizerJSON(), fileTokenizerConfig: tinyTokenizerConfig()})
	a, err := LoadModel(dir)
	if err != nil {
		t.Fatal(err)
	}
	b, err := LoadModel(dir + string(filepath.Separator) + ".")
	if err != nil || a != b {
		t.Errorf("second load of the same folder: %p %p %v", a, b, err)
	}
	// A failed load is not cached: fixing the files makes the next load succeed.
	bad := writeModelDir(t, map[string]any{fileTokenizer: "{", fileTokenizerConfig: tinyTokenizerConfig()})
	if _, err := LoadModel(bad); err == nil {
		t.Fatal("broken folder loaded")
	}
	if err := os.WriteFile(filepath.Join(bad, fileTokenizer), mustJSON(t, tinyTokenizerJSON()), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadModel(bad); err != nil {
		t.Errorf("load after fixing the file: %v", err)
	}
}
