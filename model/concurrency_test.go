package model

import (
	"slices"
	"sync"
	"testing"
)

// TestConcurrentUse encodes and renders from several goroutines with shared models (one
// with a regexp2 pre-tokenizer), and loads one folder from several goroutines at once:
// run with -race.
func TestConcurrentUse(t *testing.T) {
	tok := tinyTokenizerJSON()
	tok["pre_tokenizer"] = map[string]any{"type": "Sequence", "pretokenizers": []any{
		map[string]any{"type": "Split", "pattern": map[string]any{"Regex": `\s+|\w+|[^\w\s]+`}, "behavior": "Isolated"},
		map[string]any{"type": "ByteLevel", "use_regex": false}}}
	dir := writeModelDir(t, map[string]any{fileTokenizer: tok, fileTokenizerConfig: tinyTokenizerConfig()})
	models := make([]*Model, 4)
	var wg sync.WaitGroup
	for i := range models {
		wg.Go(func() {
			m, err := LoadModel(dir)
			if err != nil {
				t.Error(err)
			}
			models[i] = m
		})
	}
	wg.Wait()
	for _, m := range models[1:] {
		if m != models[0] {
			t.Fatal("concurrent loads of one folder gave different models")
		}
	}
	shared := []*Model{models[0], builtinModel(t, "cl100k_base")}
	text := "hello world, <|end|> 你好 😀 it's 12345"
	want := make([][]uint32, len(shared))
	for i, m := range shared {
		want[i] = m.Tokenizer.Encode(text)
	}
	for range 4 {
		wg.Go(func() {
			for range 50 {
				for i, m := range shared {
					if got := m.Tokenizer.Encode(text); !slices.Equal(got, want[i]) {
						t.Errorf("concurrent Encode = %v, want %v", got, want[i])
					}
					if _, err := m.ApplyChatTemplate([]ChatMessage{{Role: "user", Content: text}}, nil, true); err != nil {
						t.Error(err)
					}
				}
			}
		})
	}
	wg.Wait()
}
