package enginetest

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/turbine-llm/turbine/engines"
	"github.com/turbine-llm/turbine/engines/launcher"
)

// FullSpec is a spec of engine that sets every limit.
func FullSpec(engine string) launcher.Spec {
	return launcher.Spec{Engine: engine, ModelPath: "/models/Qwen3-8B", ServedModelName: "qwen3", TensorParallelSize: 2,
		GPUMemoryUtilization: 0.85, BlockSize: 64, MaxModelLen: 8192, MaxNumSeqs: 128, MaxNumBatchedTokens: 4096,
		Extra: []string{"--enforce-eager", "--seed", "7"}}
}

// MinimalSpec is a spec of engine that leaves every limit to the engine.
func MinimalSpec(engine string) launcher.Spec {
	return launcher.Spec{Engine: engine, ModelPath: "Qwen/Qwen3-8B", TensorParallelSize: 1, BlockSize: 16}
}

// WithRole is s with role r.
func WithRole(s launcher.Spec, r launcher.Role) launcher.Spec { s.Role = r; return s }

// WithReasoning is s with the reasoning parser name.
func WithReasoning(s launcher.Spec, name string) launcher.Spec { s.ReasoningParser = name; return s }

// WithExecutables is s with an engine executable and a Python interpreter of its own.
func WithExecutables(s launcher.Spec) launcher.Spec {
	s.Executable, s.Python = "/opt/engine/bin/serve", "/opt/venv/bin/python"
	return s
}

// RenderCommand returns l's command for 127.0.0.1:8000 with KV events on
// tcp://127.0.0.1:5557, one argument per line, then its environment, with free ports
// replaced by a placeholder.
func RenderCommand(l engines.Launcher) string {
	argv, env := l.Command("127.0.0.1", 8000, "tcp://127.0.0.1:5557")
	var b strings.Builder
	b.WriteString("# argv\n")
	for _, a := range argv {
		b.WriteString(a + "\n")
	}
	b.WriteString("# env\n")
	port := regexp.MustCompile(`=\d+$`)
	for _, e := range env {
		b.WriteString(port.ReplaceAllString(e, "=<free port>") + "\n")
	}
	return b.String()
}

// Golden compares got with the golden file testdata/commands/<name>.txt, or writes it
// there when rewrite is set.
func Golden(t testing.TB, name, got string, rewrite bool) {
	t.Helper()
	path := filepath.Join("testdata", "commands", name+".txt")
	if rewrite {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -rewrite to create it)", err)
	}
	if got != string(want) {
		t.Fatalf("command of %s:\n%s\nwant (%s):\n%s", name, got, path, want)
	}
}

// WithLoras is s with LoRA adapters on: n slots, adapters of rank at most rank (0: the
// engine's default).
func WithLoras(s launcher.Spec, n, rank int) launcher.Spec {
	s.MaxLoras, s.MaxLoraRank = n, rank
	return s
}
