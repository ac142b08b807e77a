package node

import (
	"testing"

	"github.com/turbine-llm/turbine/engines/mocker/launch"
	"github.com/turbine-llm/turbine/engines/vllm"
	"github.com/turbine-llm/turbine/messages"
)

// TestBuilderKvbm: every worker names its node (WorkerInfo.node_id), and with
// --kvbm-external a vLLM engine is started with LMCache pointed at the node's block
// manager (lm:// when served, else resp://); without a block manager, none.
func TestBuilderKvbm(t *testing.T) {
	for _, tc := range []struct {
		args []string
		url  string // LMCache's remote URL, "" for no block manager
	}{
		{nil, ""},
		{[]string{"--kvbm-external", "--kvbm-lm-port", "7001"}, "lm://127.0.0.1:7001"},
		{[]string{"--kvbm-external", "--kvbm-lm-port", "-1", "--kvbm-resp-port", "7000"}, "resp://127.0.0.1:7000"},
	} {
		args := append([]string{"--node-id", "gpu-7", "--model", fixture, "--engine", "vllm", "--workers", "0"}, tc.args...)
		b := bootBuilder(t, args...)
		if b.o.Kvbm.External {
			b.kvbm = b.o.Kvbm.ExternalEndpoints()
		}
		cfg, err := b.worker("gpu-7-0", &messages.StartWorker{Engine: "vllm", Card: b.boot, TensorParallelSize: 1}, []int{0})
		if err != nil {
			t.Fatal(err)
		}
		if cfg.NodeID != "gpu-7" {
			t.Errorf("%v: worker node %q, want gpu-7", tc.args, cfg.NodeID)
		}
		mcfg, err := b.worker("gpu-7-1", &messages.StartWorker{Engine: "mocker", Card: b.boot}, nil)
		if err != nil {
			t.Fatal(err)
		}
		if m := mcfg.Launcher.(*launch.Mocker); m.KvbmURL != b.kvbm.RESP {
			t.Errorf("%v: mock engine offloads to %q, want %q", tc.args, m.KvbmURL, b.kvbm.RESP)
		}
		k := cfg.Launcher.(*vllm.Launcher).Spec().KVBM
		switch {
		case tc.url == "" && k != nil:
			t.Errorf("%v: a block manager %+v without one", tc.args, k)
		case tc.url != "" && (k == nil || k.RemoteURL != tc.url):
			t.Errorf("%v: block manager %+v, want %s", tc.args, k, tc.url)
		}
	}
}
