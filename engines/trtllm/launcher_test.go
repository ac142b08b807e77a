package trtllm

import (
	"context"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/turbine-llm/turbine/engines/internal/enginetest"
	"github.com/turbine-llm/turbine/engines/launcher"
	"github.com/turbine-llm/turbine/kv"
)

var rewrite = flag.Bool("rewrite", false, "rewrite the golden command lines under testdata/commands/")

// render is the launcher's command (enginetest.RenderCommand) and its options file, with
// the file's temporary path replaced by a placeholder.
func render(t *testing.T, spec launcher.Spec) string {
	t.Helper()
	l, err := NewLauncher(spec)
	if err != nil {
		t.Fatal(err)
	}
	out := enginetest.RenderCommand(l)
	opts, err := os.ReadFile(l.OptionsPath())
	if err != nil {
		t.Fatal(err)
	}
	out += "# " + OptionsFile + "\n" + string(opts)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	return strings.ReplaceAll(out, l.OptionsPath(), "<options file>")
}

// TestCommandGolden checks trtllm-serve's command lines and options files against
// testdata/commands.
func TestCommandGolden(t *testing.T) {
	e := launcher.EngineTRTLLM
	for _, tc := range []struct {
		name string
		spec launcher.Spec
	}{
		{"trtllm-full", enginetest.FullSpec(e)},
		{"trtllm-minimal", enginetest.MinimalSpec(e)},
		{"trtllm-prefill", enginetest.WithRole(enginetest.MinimalSpec(e), launcher.RolePrefill)},
		{"trtllm-decode", enginetest.WithRole(enginetest.MinimalSpec(e), launcher.RoleDecode)},
		{"trtllm-executable", enginetest.WithExecutables(enginetest.MinimalSpec(e))},
		{"trtllm-reasoning", enginetest.WithReasoning(enginetest.MinimalSpec(e), "qwen3")},
		{"trtllm-lora", enginetest.WithLoras(enginetest.FullSpec(e), 4, 64)},
		{"trtllm-lora-default-rank", enginetest.WithLoras(enginetest.MinimalSpec(e), 2, 0)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			enginetest.Golden(t, tc.name, render(t, tc.spec), *rewrite)
		})
	}
}

func TestNewLauncherRefuses(t *testing.T) {
	for _, tc := range []struct {
		name   string
		mutate func(*launcher.Spec)
		want   string
	}{
		{"trtllm temp dir", func(s *launcher.Spec) { s.TempDir = "/nonexistent/tmp" }, "/nonexistent/tmp"},
		{"no GPU", func(s *launcher.Spec) { s.TensorParallelSize = 0 }, "tensor parallel size 0"},
		{"negative LoRA rank", func(s *launcher.Spec) { s.MaxLoras, s.MaxLoraRank = 2, -1 }, "max LoRA rank -1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := enginetest.FullSpec(launcher.EngineTRTLLM)
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
	s := enginetest.FullSpec(launcher.EngineTRTLLM)
	s.TempDir = t.TempDir()
	l, err := NewLauncher(s)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	e, ok := l.Connect("http://127.0.0.1:8000").(*Engine)
	if !ok || e.opts.ReleaseKV != nil {
		t.Fatalf("Connect gave %T, want a *trtllm.Engine without a KV release", e)
	}
	_ = e.Close()
	if b, ok := l.Connect("not a url").(launcher.FailedEngine); !ok || b.Err == nil {
		t.Fatalf("Connect of a malformed URL: want an engine that fails every call")
	}
}

// TestOptionsFileLifetime: the file exists from NewLauncher to Close, is written again by
// Command when removed, and the model name sent is the folder's base name.
func TestOptionsFileLifetime(t *testing.T) {
	model := t.TempDir()
	s := enginetest.MinimalSpec(launcher.EngineTRTLLM)
	s.ModelPath, s.TempDir = model, t.TempDir()
	tl, err := NewLauncher(s)
	if err != nil {
		t.Fatal(err)
	}
	if tl.model != filepath.Base(model) {
		t.Fatalf("model name %q, want the folder's base name %q", tl.model, filepath.Base(model))
	}
	if err := os.Remove(tl.OptionsPath()); err != nil {
		t.Fatal(err)
	}
	tl.Command("127.0.0.1", 8000, "tcp://127.0.0.1:5557")
	if b, err := os.ReadFile(tl.OptionsPath()); err != nil || string(b) != Options(s) {
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
	if got := modelName("Qwen/Qwen3-8B"); got != "Qwen/Qwen3-8B" {
		t.Fatalf("model name of a hub name: %q", got)
	}
}

// TestSubscribeUnknownEndpoint: the poller refuses an endpoint no Command named.
func TestSubscribeUnknownEndpoint(t *testing.T) {
	s := enginetest.MinimalSpec(launcher.EngineTRTLLM)
	s.TempDir = t.TempDir()
	l, err := NewLauncher(s)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	err = l.SubscribeKVEvents(context.Background(), "tcp://127.0.0.1:1", func(kv.Batch) {})
	if err == nil || errors.Is(err, context.Canceled) {
		t.Fatalf("SubscribeKVEvents of an unknown endpoint: %v", err)
	}
}
