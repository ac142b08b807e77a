package bench

import (
	"strings"
	"testing"

	"github.com/turbine-llm/turbine/model"
)

// TestWordsAreSingleTokens: every word of the text vocabulary is one token, with and
// without a leading space, in cl100k_base and o200k_base, and no word repeats.
func TestWordsAreSingleTokens(t *testing.T) {
	seen := map[string]bool{}
	for _, w := range words {
		if seen[w] {
			t.Errorf("word %q repeats", w)
		}
		seen[w] = true
	}
	for _, name := range []string{"builtin:cl100k_base", "builtin:o200k_base"} {
		m, err := model.LoadModel(name)
		if err != nil {
			t.Fatal(err)
		}
		for _, w := range words {
			if a, b := m.Tokenizer.Encode(w), m.Tokenizer.Encode(" "+w); len(a) != 1 || len(b) != 1 {
				t.Errorf("%s: %q is %d tokens, %q %d", name, w, len(a), " "+w, len(b))
			}
		}
	}
}

// TestText: a text prompt has one word per prompt token, which cl100k_base reads as
// exactly that many tokens, and the same hash ids give the same words.
func TestText(t *testing.T) {
	m, err := model.LoadModel("builtin:cl100k_base")
	if err != nil {
		t.Fatal(err)
	}
	a := Request{InputLength: 1000, HashIDs: []int64{1, 2}}
	b := Request{InputLength: 700, HashIDs: []int64{1, 3}}
	ta, err := Text(a, 512)
	if err != nil {
		t.Fatal(err)
	}
	tb, err := Text(b, 512)
	if err != nil {
		t.Fatal(err)
	}
	wa, wb := strings.Split(ta, " "), strings.Split(tb, " ")
	if len(wa) != 1000 || len(wb) != 700 {
		t.Fatalf("%d and %d words, want 1000 and 700", len(wa), len(wb))
	}
	if n := len(m.Tokenizer.Encode(ta)); n != 1000 {
		t.Fatalf("cl100k_base reads %d tokens, want 1000", n)
	}
	if !strings.HasPrefix(tb, strings.Join(wa[:512], " ")+" ") {
		t.Fatal("the shared first block is not shared text")
	}
	if _, err := Text(Request{InputLength: 600, HashIDs: []int64{1}}, 512); err == nil {
		t.Fatal("one block of 512 for 600 tokens: no error")
	}
}
