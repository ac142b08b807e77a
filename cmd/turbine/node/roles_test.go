package node

import (
	"slices"
	"testing"

	"github.com/turbine-llm/turbine/engines/mocker/launch"
	"github.com/turbine-llm/turbine/engines/mocker/server"
	"github.com/turbine-llm/turbine/messages"
)

// TestBuilderForRole: a StartWorker's role replaces --worker-role for that worker alone
// (its registration and its engine's launch); the node's own builder is unchanged.
func TestBuilderForRole(t *testing.T) {
	b := bootBuilder(t, "--engine", "vllm", "--model", fixture)
	cfg, err := b.forRole("decode").worker("n-1", &messages.StartWorker{Engine: "vllm", TensorParallelSize: 1, Card: b.boot, Role: "decode"}, []int{0})
	if err != nil {
		t.Fatal(err)
	}
	argv, _ := cfg.Launcher.Command("127.0.0.1", 8000, "tcp://127.0.0.1:5557")
	if cfg.Role != "decode" || !slices.Contains(argv, "--kv-transfer-config") {
		t.Fatalf("worker role %q, argv %q; want decode with a KV transfer", cfg.Role, argv)
	}
	if b.o.WorkerRole != "aggregated" || b.forRole("") != b || b.forRole("aggregated") != b {
		t.Fatalf("the node's builder changed: role %q", b.o.WorkerRole)
	}
	mb := bootBuilder(t)
	cfg, err = mb.forRole("prefill").worker("n-2", &messages.StartWorker{Engine: "mocker", Card: mb.boot, Role: "prefill"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if m := cfg.Launcher.(*launch.Mocker); m.Params.Role != server.RolePrefill || cfg.Role != "prefill" {
		t.Fatalf("mocker role %q, worker role %q; want prefill", m.Params.Role, cfg.Role)
	}
}
