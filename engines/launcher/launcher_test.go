package launcher

import (
	"flag"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/turbine-llm/turbine/engines/sglang"
	"github.com/turbine-llm/turbine/engines/trtllm"
)

var rewrite = flag.Bool("rewrite", false, "rewrite the golden command lines under testdata/commands/")

// full is a spec that sets every limit.
func full(engine string) Spec {
	return Spec{Engine: engine, ModelPath: "/models/Qwen3-8B", ServedModelName: "qwen3", TensorParallelSize: 2,
		GPUMemoryUtilization: 0.85, BlockSize: 64, MaxModelLen: 8192, MaxNumSeqs: 128, MaxNumBatchedTokens: 4096,
		Extra: []string{"--enforce-eager", "--seed", "7"}}
}

// minimal leaves every limit to the engine.
func minimal(engine string) Spec {
	return Spec{Engine: engine, ModelPath: "Qwen/Qwen3-8B", TensorParallelSize: 1, BlockSize: 16}
}

func withRole(s Spec, r Role) Spec { s.Role = r; return s }

func withReasoning(s Spec, name string) Spec { s.ReasoningParser = name; return s }

func withExecutables(s Spec) Spec {
	s.Executable, s.Python = "/opt/engine/bin/serve", "/opt/venv/bin/python"
	return s
}

// render returns a launcher's command for 127.0.0.1:8000 with KV events on
// tcp://127.0.0.1:5557, one argument per line, then its environment and, for TRTLLM, the
// options file. Values that change between runs (temporary paths, free ports) are
// replaced by placeholders.
func render(t *testing.T, spec Spec) string {
	t.Helper()
	l, err := New(spec)
	if err != nil {
		t.Fatal(err)
	}
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
	if tl, ok := l.(*TRTLLM); ok {
		opts, err := os.ReadFile(tl.OptionsPath())
		if err != nil {
			t.Fatal(err)
		}
		b.WriteString("# " + TRTLLMOptionsFile + "\n")
		b.Write(opts)
		if err := tl.Close(); err != nil {
			t.Fatal(err)
		}
	}
	out := b.String()
	if tl, ok := l.(*TRTLLM); ok {
		out = strings.ReplaceAll(out, tl.OptionsPath(), "<options file>")
	}
	return out
}

// TestCommandGolden checks every engine's command line against testdata/commands.
func TestCommandGolden(t *testing.T) {
	for _, tc := range []struct {
		name string
		spec Spec
	}{
		{"vllm-full", full(EngineVLLM)},
		{"vllm-minimal", minimal(EngineVLLM)},
		{"vllm-prefill", withRole(minimal(EngineVLLM), RolePrefill)},
		{"vllm-executable", withExecutables(minimal(EngineVLLM))},
		{"sglang-full", full(EngineSGLang)},
		{"sglang-minimal", minimal(EngineSGLang)},
		{"sglang-decode", withRole(minimal(EngineSGLang), RoleDecode)},
		{"sglang-prefill", func() Spec { s := withRole(minimal(EngineSGLang), RolePrefill); s.BootstrapPort = 8998; return s }()},
		{"sglang-python", withExecutables(minimal(EngineSGLang))},
		{"trtllm-full", full(EngineTRTLLM)},
		{"trtllm-minimal", minimal(EngineTRTLLM)},
		{"trtllm-prefill", withRole(minimal(EngineTRTLLM), RolePrefill)},
		{"trtllm-decode", withRole(minimal(EngineTRTLLM), RoleDecode)},
		{"trtllm-executable", withExecutables(minimal(EngineTRTLLM))},
		{"vllm-reasoning", withReasoning(minimal(EngineVLLM), "qwen3")},
		{"sglang-reasoning", withReasoning(minimal(EngineSGLang), "deepseek_r1")},
		{"sglang-reasoning-unknown", withReasoning(minimal(EngineSGLang), "mistral")},
		{"trtllm-reasoning", withReasoning(minimal(EngineTRTLLM), "qwen3")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := render(t, tc.spec)
			path := filepath.Join("testdata", "commands", tc.name+".txt")
			if *rewrite {
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
				t.Fatalf("command of %s:\n%s\nwant (%s):\n%s", tc.name, got, path, want)
			}
		})
	}
}

func TestNewRefuses(t *testing.T) {
	for _, tc := range []struct {
		name   string
		mutate func(*Spec)
		want   string
	}{
		{"unknown engine", func(s *Spec) { s.Engine = "llama.cpp" }, `unknown engine "llama.cpp" (want vllm, sglang, trtllm)`},
		{"mocker", func(s *Spec) { s.Engine = EngineMocker }, "launched by a Mocker"},
		{"no model", func(s *Spec) { s.ModelPath = "" }, "without a model path"},
		{"no GPU", func(s *Spec) { s.TensorParallelSize = 0 }, "tensor parallel size 0"},
		{"memory fraction", func(s *Spec) { s.GPUMemoryUtilization = 1.5 }, "GPU memory utilization 1.5"},
		{"block size", func(s *Spec) { s.BlockSize = 0 }, "KV block size 0"},
		{"negative limit", func(s *Spec) { s.MaxNumSeqs = -1 }, "must not be negative"},
		{"role", func(s *Spec) { s.Role = "both" }, `role "both"`},
		{"bootstrap port", func(s *Spec) { s.BootstrapPort = 70000 }, "bootstrap port 70000"},
		{"sglang chunk", func(s *Spec) { s.Engine = EngineSGLang; s.MaxNumBatchedTokens = 100 },
			"--chunked-prefill-size) 100 is not a multiple of the KV block size (--page-size) 64"},
		{"trtllm temp dir", func(s *Spec) { s.Engine = EngineTRTLLM; s.TempDir = "/nonexistent/tmp" }, "/nonexistent/tmp"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := full(EngineVLLM)
			tc.mutate(&s)
			l, err := New(s)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("New = %T, %v; want an error containing %q", l, err, tc.want)
			}
		})
	}
}

// TestConnectClients: each launcher connects the client of its engine's API.
func TestConnectClients(t *testing.T) {
	for _, tc := range []struct {
		engine string
		want   string
	}{
		{EngineVLLM, "*launcher.vllmEngine"},
		{EngineSGLang, "*sglang.Engine"},
		{EngineTRTLLM, "*trtllm.Engine"},
	} {
		t.Run(tc.engine, func(t *testing.T) {
			l, err := New(full(tc.engine))
			if err != nil {
				t.Fatal(err)
			}
			if c, ok := l.(interface{ Close() error }); ok {
				defer c.Close()
			}
			e := l.Connect("http://127.0.0.1:8000")
			if got := typeName(e); got != tc.want {
				t.Fatalf("Connect gave %s, want %s", got, tc.want)
			}
			if c, ok := e.(interface{ Close() error }); ok {
				_ = c.Close()
			}
			if b, ok := l.Connect("not a url").(brokenEngine); !ok || b.err == nil {
				t.Fatalf("Connect of a malformed URL: want an engine that fails every call")
			}
		})
	}
}

func typeName(v any) string {
	switch v.(type) {
	case *vllmEngine:
		return "*launcher.vllmEngine"
	case *sglang.Engine:
		return "*sglang.Engine"
	case *trtllm.Engine:
		return "*trtllm.Engine"
	case brokenEngine:
		return "launcher.brokenEngine"
	}
	return "unknown"
}

// TestTRTLLMOptionsFileLifetime: the file exists from New to Close, is written again by
// Command when removed, and the model name sent is the folder's base name.
func TestTRTLLMOptionsFileLifetime(t *testing.T) {
	model := t.TempDir()
	s := minimal(EngineTRTLLM)
	s.ModelPath, s.TempDir = model, t.TempDir()
	l, err := New(s)
	if err != nil {
		t.Fatal(err)
	}
	tl := l.(*TRTLLM)
	if tl.model != filepath.Base(model) {
		t.Fatalf("model name %q, want the folder's base name %q", tl.model, filepath.Base(model))
	}
	if err := os.Remove(tl.OptionsPath()); err != nil {
		t.Fatal(err)
	}
	tl.Command("127.0.0.1", 8000, "tcp://127.0.0.1:5557")
	if b, err := os.ReadFile(tl.OptionsPath()); err != nil || string(b) != TRTLLMOptions(s) {
		t.Fatalf("options file after Command: %q, %v", b, err)
	}
	if err := tl.Close(); err != nil {
		t.Fatal(err)
	}
	if err := tl.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if _, err := os.Stat(filepath.Dir(tl.OptionsPath())); !os.IsNotExist(err) {
		t.Fatalf("options folder after Close: %v, want it gone", err)
	}
	if got := trtllmModelName("Qwen/Qwen3-8B"); got != "Qwen/Qwen3-8B" {
		t.Fatalf("model name of a hub name: %q", got)
	}
}

// TestMockerParserFlags: the mock engine plays the model family the worker's parsers
// name (--tool-call-parser, --reasoning-parser), and gets neither flag without them.
func TestMockerParserFlags(t *testing.T) {
	m := &Mocker{Executable: "turbine", Model: "m", Tokenizer: "builtin:cl100k_base", BlockSize: 16,
		ToolCallParser: "hermes", ReasoningParser: "qwen3"}
	argv, _ := m.Command("127.0.0.1", 8000, "tcp://127.0.0.1:5557")
	line := strings.Join(argv, " ")
	for _, want := range []string{"--tool-call-parser hermes", "--reasoning-parser qwen3"} {
		if !strings.Contains(line, want) {
			t.Errorf("command %q lacks %q", line, want)
		}
	}
	m.ToolCallParser, m.ReasoningParser = "", ""
	argv, _ = m.Command("127.0.0.1", 8000, "tcp://127.0.0.1:5557")
	if line := strings.Join(argv, " "); strings.Contains(line, "parser") {
		t.Fatalf("a mock engine without parsers got %q", line)
	}
}
