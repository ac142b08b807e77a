package model

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
)

// TestTokenStringRealVocabularies checks TokenString against the vocabulary of every real
// tokenizer, as HF's id_to_token reads it: an added token's content (added tokens are
// looked up first), else the key of model.vocab (an object of strings to ids; Unigram's
// a list of [piece, score] pairs, ids by position). Ids past the vocabulary are unknown.
func TestTokenStringRealVocabularies(t *testing.T) {
	for _, name := range realModels {
		t.Run(name, func(t *testing.T) {
			m, _ := realModel(t, name)
			data, err := os.ReadFile(filepath.Join(realModelDir(t, name), fileTokenizer))
			if err != nil {
				t.Fatal(err)
			}
			var f struct {
				AddedTokens []struct {
					ID      uint32 `json:"id"`
					Content string `json:"content"`
				} `json:"added_tokens"`
				Model struct {
					Vocab json.RawMessage `json:"vocab"`
				} `json:"model"`
			}
			if err := json.Unmarshal(data, &f); err != nil {
				t.Fatal(err)
			}
			want := map[uint32]string{}
			var byKey map[string]uint32
			var pieces [][2]any
			switch {
			case json.Unmarshal(f.Model.Vocab, &byKey) == nil:
				for s, id := range byKey {
					want[id] = s
				}
			case json.Unmarshal(f.Model.Vocab, &pieces) == nil:
				for id, p := range pieces {
					want[uint32(id)] = p[0].(string)
				}
			default:
				t.Fatalf("model.vocab is neither an object nor a list: %.80s", f.Model.Vocab)
			}
			for _, a := range f.AddedTokens {
				want[a.ID] = a.Content
			}
			tok := m.Tokenizer
			bad := 0
			for id, s := range want {
				if got, ok := tok.TokenString(id); !ok || got != s {
					if bad++; bad <= 10 {
						t.Errorf("TokenString(%d) = %q, %v; want %q", id, got, ok, s)
					}
				}
			}
			if bad > 10 {
				t.Errorf("... %d ids wrong in all", bad)
			}
			for _, id := range []uint32{uint32(tok.VocabSize()), uint32(tok.VocabSize()) + 1000, ^uint32(0)} {
				if got, ok := tok.TokenString(id); ok || got != "" {
					t.Errorf("TokenString(%d) past the vocabulary = %q, %v", id, got, ok)
				}
			}
		})
	}
}

// TestTokenStringBuiltin checks the embedded tiktoken encodings: special tokens as
// written, other tokens' bytes in the byte-level alphabet.
func TestTokenStringBuiltin(t *testing.T) {
	m, err := LoadModel("builtin:cl100k_base")
	if err != nil {
		t.Fatal(err)
	}
	tok := m.Tokenizer
	ids := tok.Encode("<|im_start|>Hello world\n\té<|endoftext|>")
	want := []string{"<|im_start|>", "Hello", "Ġworld", "Ċ", "ĉ", "Ã©", "<|endoftext|>"}
	if len(ids) != len(want) {
		var got []string
		for _, id := range ids {
			s, _ := tok.TokenString(id)
			got = append(got, s)
		}
		t.Fatalf("ids %v (%q), want %d tokens %q", ids, got, len(want), want)
	}
	for i, id := range ids {
		if got, ok := tok.TokenString(id); !ok || got != want[i] {
			t.Errorf("TokenString(%d) = %q, %v; want %q", id, got, ok, want[i])
		}
	}
	if got, ok := tok.TokenString(uint32(tok.VocabSize())); ok {
		t.Errorf("TokenString past the vocabulary = %q", got)
	}
}

// TestTokenStringByteLevelAddedTokens: on a byte-level BPE tokenizer, an added token is
// named by its content even where that differs from its bytes in the byte-level alphabet
// (a space, a newline, a non-ASCII character); ordinary tokens by their vocabulary key.
func TestTokenStringByteLevelAddedTokens(t *testing.T) {
	tok := tinyTokenizerJSON()
	n := 256 + len(tinyMerges)
	tok["added_tokens"] = append(tok["added_tokens"].([]any),
		map[string]any{"id": n + 7, "content": "<| sp |>", "special": true},
		map[string]any{"id": n + 8, "content": "<é\n>", "special": false},
	)
	spec, err := parseTokenizerJSON(mustJSON(t, tok), "tokenizer.json")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		id   uint32
		want string
		ok   bool
	}{
		{' ', "Ġ", true},
		{'\n', "Ċ", true},
		{'a', "a", true},
		{0xE9, "é", true},
		{0xAD, "Ń", true},
		{uint32(n), "<|begin|>", true},
		{uint32(n + 2), "<tool>", true},
		{uint32(n + 7), "<| sp |>", true},
		{uint32(n + 8), "<é\n>", true},
		{uint32(n + 9), "", false},
	} {
		if got, ok := spec.tok.TokenString(c.id); got != c.want || ok != c.ok {
			t.Errorf("TokenString(%d) = %q, %v; want %q, %v", c.id, got, ok, c.want, c.ok)
		}
	}
}
