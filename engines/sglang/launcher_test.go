package sglang

import (
	"encoding/json"
	"flag"
	"slices"
	"strings"
	"testing"

	"github.com/turbine-llm/turbine/engines/internal/enginetest"
	"github.com/turbine-llm/turbine/engines/launcher"
)

var rewrite = flag.Bool("rewrite", false, "rewrite the golden command lines under testdata/commands/")

// TestCommandGolden checks SGLang's command lines against testdata/commands.
func TestCommandGolden(t *testing.T) {
	e := launcher.EngineSGLang
	for _, tc := range []struct {
		name string
		spec launcher.Spec
	}{
		{"sglang-full", enginetest.FullSpec(e)},
		{"sglang-minimal", enginetest.MinimalSpec(e)},
		{"sglang-decode", enginetest.WithRole(enginetest.MinimalSpec(e), launcher.RoleDecode)},
		{"sglang-prefill", func() launcher.Spec {
			s := enginetest.WithRole(enginetest.MinimalSpec(e), launcher.RolePrefill)
			s.BootstrapPort = 8998
			return s
		}()},
		{"sglang-python", enginetest.WithExecutables(enginetest.MinimalSpec(e))},
		{"sglang-reasoning", enginetest.WithReasoning(enginetest.MinimalSpec(e), "deepseek_r1")},
		{"sglang-reasoning-unknown", enginetest.WithReasoning(enginetest.MinimalSpec(e), "mistral")},
		{"sglang-lora", enginetest.WithLoras(enginetest.FullSpec(e), 4, 64)},
		{"sglang-lora-default-rank", enginetest.WithLoras(enginetest.MinimalSpec(e), 2, 0)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l, err := NewLauncher(tc.spec)
			if err != nil {
				t.Fatal(err)
			}
			enginetest.Golden(t, tc.name, enginetest.RenderCommand(l), *rewrite)
		})
	}
}

func TestNewLauncherRefuses(t *testing.T) {
	for _, tc := range []struct {
		name   string
		mutate func(*launcher.Spec)
		want   string
	}{
		{"sglang chunk", func(s *launcher.Spec) { s.MaxNumBatchedTokens = 100 },
			"--chunked-prefill-size) 100 is not a multiple of the KV block size (--page-size) 64"},
		{"no GPU", func(s *launcher.Spec) { s.TensorParallelSize = 0 }, "tensor parallel size 0"},
		{"negative LoRA slots", func(s *launcher.Spec) { s.MaxLoras = -1 }, "max LoRA adapters -1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := enginetest.FullSpec(launcher.EngineSGLang)
			tc.mutate(&s)
			l, err := NewLauncher(s)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("NewLauncher = %v, %v; want an error containing %q", l, err, tc.want)
			}
		})
	}
}

// TestConnectClient: the launcher connects an Engine, and for a malformed URL an engine
// that fails every call.
func TestConnectClient(t *testing.T) {
	l, err := NewLauncher(enginetest.FullSpec(launcher.EngineSGLang))
	if err != nil {
		t.Fatal(err)
	}
	if e, ok := l.Connect("http://127.0.0.1:8000").(*Engine); !ok {
		t.Fatalf("Connect gave %T, want a *sglang.Engine", e)
	}
	if b, ok := l.Connect("not a url").(launcher.FailedEngine); !ok || b.Err == nil {
		t.Fatalf("Connect of a malformed URL: want an engine that fails every call")
	}
}

// TestBootstrap: a prefill engine's bootstrap port is picked free at each Command and
// named by Bootstrap on the Command's host.
func TestBootstrap(t *testing.T) {
	l, err := NewLauncher(enginetest.WithRole(enginetest.MinimalSpec(launcher.EngineSGLang), launcher.RolePrefill))
	if err != nil {
		t.Fatal(err)
	}
	argv, _ := l.Command("10.0.0.5", 8000, "tcp://127.0.0.1:5557")
	host, port, ok := l.Bootstrap()
	if !ok || host != "10.0.0.5" || argv[slices.Index(argv, "--disaggregation-bootstrap-port")+1] != itoa(port) {
		t.Fatalf("SGLang bootstrap %s:%d %v in %q", host, port, ok, argv)
	}
}

func itoa(n int) string { b, _ := json.Marshal(n); return string(b) }
