package enginetest

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/turbine-llm/turbine/engines"
	"github.com/turbine-llm/turbine/engines/mocker/server"
	"github.com/turbine-llm/turbine/messages"
)

// LoraCases are the requests of the LoRA adapter bodies (docs/reference.md §26.1): the
// base model, an adapter by name, an adapter with the folder a worker may load it from on
// demand, and an adapter with sampling fields.
func LoraCases() []SamplingCase {
	p := func(f func(s *messages.SamplingParams)) *messages.SamplingParams {
		s := &messages.SamplingParams{MaxTokens: 16}
		f(s)
		return s
	}
	return []SamplingCase{
		{"base_model", p(func(s *messages.SamplingParams) {})},
		{"lora_name", p(func(s *messages.SamplingParams) { s.LoraName = "sql-lora" })},
		{"lora_name_and_path", p(func(s *messages.SamplingParams) { s.LoraName, s.LoraPath = "sql-lora", "/adapters/sql-lora" })},
		{"lora_with_sampling", p(func(s *messages.SamplingParams) {
			s.LoraName, s.Seed, s.Temperature, s.StopTokenIds = "sql-lora", proto.Int64(5), proto.Float64(0.3), []uint32{2}
		})},
	}
}

// AdapterDir writes a LoRA adapter folder of rank r for the mock engine (its
// adapter_config.json; the mock engine reads no weights) and returns its path.
func AdapterDir(t testing.TB, r int) string {
	t.Helper()
	dir := t.TempDir()
	config := fmt.Sprintf(`{"base_model_name_or_path":"Qwen/Qwen3-8B","peft_type":"LORA","r":%d,"lora_alpha":16,"target_modules":["q_proj","v_proj"]}`, r)
	if err := os.WriteFile(filepath.Join(dir, "adapter_config.json"), []byte(config), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

// StartLoraMock starts the mock engine in dialect with maxLoras adapter slots (rank at
// most 16, loads of 1 ms) and returns it with its base URL.
func StartLoraMock(t testing.TB, dialect server.DialectName, maxLoras int) (*server.Server, string) {
	t.Helper()
	cfg := MockConfig(100, 0)
	cfg.MaxLoras, cfg.MaxLoraRank, cfg.LoraLoadMillis = maxLoras, 16, 100
	return StartMock(t, server.Options{Params: server.Params{Engine: cfg, Dialect: dialect}}, nil)
}

// GenerateIDs runs a request of 8 tokens (seeded, EOS ignored) on e with the LoRA
// adapter lora ("" for the base model) and returns its token ids. Errors: Generate's.
func GenerateIDs(ctx context.Context, e engines.Engine, lora string) ([]uint32, error) {
	var out []uint32
	s := &messages.SamplingParams{MaxTokens: 8, IgnoreEos: true, Seed: proto.Int64(3), LoraName: lora}
	err := e.Generate(ctx, "lora-"+lora, Prompt(40), s, func(ch engines.Chunk) error {
		out = append(out, ch.TokenIDs...)
		return nil
	})
	return out, err
}
