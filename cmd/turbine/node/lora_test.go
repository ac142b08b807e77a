package node

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/turbine-llm/turbine/engines/mocker/launch"
	"github.com/turbine-llm/turbine/messages"
	"google.golang.org/protobuf/proto"
)

// loraFolder writes a LoRA adapter folder adapting base under a new temporary folder.
func loraFolder(t *testing.T, base string, r int) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "adapter")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	cfg := fmt.Sprintf(`{"peft_type": "LORA", "base_model_name_or_path": %q, "r": %d, "lora_alpha": 16, "target_modules": ["q_proj"]}`, base, r)
	for name, data := range map[string]string{"adapter_config.json": cfg, "adapter_model.safetensors": "weights"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// TestBuilderLora: --lora, --max-loras and --max-lora-rank reach the boot model's
// workers (pinned adapters, slots, rank, the model folder adapters are checked against)
// and their engines (a real engine's LoRA flags, the mock engine's slots); a worker of
// another model gets the slots but not the adapters, which adapt the boot model.
func TestBuilderLora(t *testing.T) {
	abs, err := filepath.Abs(fixture)
	if err != nil {
		t.Fatal(err)
	}
	sql := loraFolder(t, abs, 8)
	b := bootBuilder(t, "--engine", "vllm", "--model", fixture, "--lora", "sql="+sql, "--max-lora-rank", "32")
	cfg, err := b.worker("n-0", &messages.StartWorker{Engine: "vllm", TensorParallelSize: 1, Card: b.boot}, []int{0})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.MaxLoras != 4 || cfg.MaxLoraRank != 32 || cfg.ModelPath != fixture || len(cfg.Loras) != 1 ||
		cfg.Loras[0].Name != "sql" || cfg.Loras[0].Path != sql || !cfg.Loras[0].Pinned {
		t.Fatalf("worker: %d slots, rank %d, model path %q, adapters %v", cfg.MaxLoras, cfg.MaxLoraRank, cfg.ModelPath, cfg.Loras)
	}
	argv, env := cfg.Launcher.Command("127.0.0.1", 8000, "tcp://127.0.0.1:5557")
	if i := slices.Index(argv, "--max-loras"); i < 0 || argv[i+1] != "4" || !slices.Contains(argv, "--enable-lora") {
		t.Errorf("vLLM argv %q env %q: want LoRA on with 4 slots", argv, env)
	}
	if i := slices.Index(argv, "--max-lora-rank"); i < 0 || argv[i+1] != "32" {
		t.Errorf("vLLM argv %q: want --max-lora-rank 32", argv)
	}
	other := proto.Clone(b.boot).(*messages.ModelCard)
	other.Model = "other"
	cfg, err = b.worker("n-1", &messages.StartWorker{Engine: "vllm", TensorParallelSize: 1, Card: other}, []int{1})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.MaxLoras != 4 || len(cfg.Loras) != 0 {
		t.Errorf("a worker of another model: %d slots, adapters %v", cfg.MaxLoras, cfg.Loras)
	}

	b = bootBuilder(t, "--model", fixture, "--served-model-name", "tiny", "--max-loras", "2")
	cfg, err = b.worker("n-0", &messages.StartWorker{Engine: "mocker", Card: b.boot}, nil)
	if err != nil {
		t.Fatal(err)
	}
	m := cfg.Launcher.(*launch.Mocker)
	if m.Params.Engine.MaxLoras != 2 || m.Params.Engine.MaxLoraRank != 16 || cfg.MaxLoras != 2 || cfg.ModelPath != fixture {
		t.Errorf("mock engine %d slots rank %d; worker %d slots, model path %q", m.Params.Engine.MaxLoras,
			m.Params.Engine.MaxLoraRank, cfg.MaxLoras, cfg.ModelPath)
	}
	b = bootBuilder(t)
	cfg, err = b.worker("n-0", &messages.StartWorker{Engine: "mocker", Card: b.boot}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if m := cfg.Launcher.(*launch.Mocker); m.Params.Engine.MaxLoras != 0 || cfg.MaxLoras != 0 || cfg.ModelPath != "" {
		t.Errorf("default: mock engine %d slots, worker %d, model path %q; want adapters off", m.Params.Engine.MaxLoras, cfg.MaxLoras, cfg.ModelPath)
	}
}

// TestRunRejectsBadLora: a bad --lora fails the node's start, before it joins the
// cluster, naming the flag and the reason.
func TestRunRejectsBadLora(t *testing.T) {
	other := loraFolder(t, "meta-llama/Llama-3.1-8B", 8)
	big := loraFolder(t, "Qwen/Qwen3-0.6B", 64)
	real := []string{"--engine", "vllm", "--model", fixture, "--served-model-name", "Qwen/Qwen3-0.6B", "--workers", "0"}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--lora", "sql"}, `flag -lora: "sql": want NAME=PATH`},
		{[]string{"--lora", "a=/x,b=/y", "--max-loras", "1"}, "--max-loras 1 cannot hold the 2 --lora adapters"},
		{[]string{"--max-lora-rank", "0"}, "--max-lora-rank 0"},
		{append(slices.Clone(real), "--lora", "sql=/nonexistent/sql"), "--lora sql=/nonexistent/sql: model: adapter folder /nonexistent/sql does not exist"},
		{append(slices.Clone(real), "--lora", "chat="+other), `--lora chat=` + other + `: model: adapter ` + other + ` adapts "meta-llama/Llama-3.1-8B"`},
		{append(slices.Clone(real), "--lora", "big="+big), "has rank 64, above the engine's max_lora_rank 16"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			err := Run(context.Background(), tc.args, io.Discard, io.Discard)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want one saying %q", err, tc.want)
			}
		})
	}
}
