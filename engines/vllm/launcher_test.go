package vllm

import (
	"flag"
	"strings"
	"testing"

	"github.com/turbine-llm/turbine/engines/internal/enginetest"
	"github.com/turbine-llm/turbine/engines/launcher"
)

var rewrite = flag.Bool("rewrite", false, "rewrite the golden command lines under testdata/commands/")

// TestCommandGolden checks vLLM's command lines against testdata/commands.
func TestCommandGolden(t *testing.T) {
	e := launcher.EngineVLLM
	for _, tc := range []struct {
		name string
		spec launcher.Spec
	}{
		{"vllm-full", enginetest.FullSpec(e)},
		{"vllm-minimal", enginetest.MinimalSpec(e)},
		{"vllm-prefill", enginetest.WithRole(enginetest.MinimalSpec(e), launcher.RolePrefill)},
		{"vllm-executable", enginetest.WithExecutables(enginetest.MinimalSpec(e))},
		{"vllm-reasoning", enginetest.WithReasoning(enginetest.MinimalSpec(e), "qwen3")},
		{"vllm-lora", enginetest.WithLoras(enginetest.FullSpec(e), 4, 64)},
		{"vllm-lora-default-rank", enginetest.WithLoras(enginetest.MinimalSpec(e), 2, 0)},
		{"vllm-kvbm", withKVBM(enginetest.MinimalSpec(e), launcher.KVBM{RemoteURL: "lm://127.0.0.1:6381", ChunkSize: 256})},
		{"vllm-kvbm-prefill", withKVBM(enginetest.WithRole(enginetest.MinimalSpec(e), launcher.RolePrefill),
			launcher.KVBM{RemoteURL: "resp://127.0.0.1:6380", LocalCPU: true})},
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

// withKVBM returns s with a node's KV block manager.
func withKVBM(s launcher.Spec, k launcher.KVBM) launcher.Spec { s.KVBM = &k; return s }

// TestNewLauncherRefuses: an invalid spec is refused (launcher.Spec.Validate).
func TestNewLauncherRefuses(t *testing.T) {
	s := enginetest.FullSpec(launcher.EngineVLLM)
	s.TensorParallelSize = 0
	if l, err := NewLauncher(s); err == nil {
		t.Fatalf("NewLauncher = %v, want the spec refused", l)
	}
}

// TestNewLauncherRefusesLoraLimits: negative LoRA limits are refused.
func TestNewLauncherRefusesLoraLimits(t *testing.T) {
	for _, s := range []launcher.Spec{
		enginetest.WithLoras(enginetest.MinimalSpec(launcher.EngineVLLM), -1, 0),
		enginetest.WithLoras(enginetest.MinimalSpec(launcher.EngineVLLM), 2, -8),
	} {
		if l, err := NewLauncher(s); err == nil {
			t.Errorf("NewLauncher(max loras %d, rank %d) = %v, want the spec refused", s.MaxLoras, s.MaxLoraRank, l)
		}
	}
}

// TestConnectClient: the launcher connects an Engine, and for a malformed URL an engine
// that fails every call.
func TestConnectClient(t *testing.T) {
	l, err := NewLauncher(enginetest.FullSpec(launcher.EngineVLLM))
	if err != nil {
		t.Fatal(err)
	}
	if e, ok := l.Connect("http://127.0.0.1:8000").(*Engine); !ok || e.opts.Model != "qwen3" || e.opts.ReleaseKV != nil {
		t.Fatalf("Connect gave %T, want a *vllm.Engine for model qwen3 without a KV release", e)
	}
	if b, ok := l.Connect("not a url").(launcher.FailedEngine); !ok || b.Err == nil {
		t.Fatalf("Connect of a malformed URL: want an engine that fails every call")
	}
}

// TestLMCacheEnv: the environment that points LMCache at a block manager, with its
// values (the golden command lines mask numeric ones).
func TestLMCacheEnv(t *testing.T) {
	for _, tc := range []struct {
		k    launcher.KVBM
		want string
	}{
		{launcher.KVBM{RemoteURL: "lm://127.0.0.1:6381"},
			"LMCACHE_REMOTE_URL=lm://127.0.0.1:6381 LMCACHE_CHUNK_SIZE=256 LMCACHE_LOCAL_CPU=False LMCACHE_REMOTE_SERDE=naive PYTHONHASHSEED=0"},
		{launcher.KVBM{RemoteURL: "resp://h:1", ChunkSize: 512, LocalCPU: true},
			"LMCACHE_REMOTE_URL=resp://h:1 LMCACHE_CHUNK_SIZE=512 LMCACHE_LOCAL_CPU=True LMCACHE_REMOTE_SERDE=naive PYTHONHASHSEED=0"},
	} {
		if got := strings.Join(LMCacheEnv(tc.k), " "); got != tc.want {
			t.Errorf("LMCacheEnv(%+v) = %s, want %s", tc.k, got, tc.want)
		}
	}
}
