package vllm

import (
	"context"
	"encoding/json"
	"strconv"

	"github.com/turbine-llm/turbine/engines"
	"github.com/turbine-llm/turbine/engines/launcher"
	"github.com/turbine-llm/turbine/engines/supervise"
	"github.com/turbine-llm/turbine/kv"
)

// DefaultExecutable runs vLLM when the spec names none (looked up on PATH).
const DefaultExecutable = "vllm"

// KVEventsConfig is vLLM's --kv-events-config JSON (docs/reference.md §1).
type KVEventsConfig struct {
	EnableKVCacheEvents bool   `json:"enable_kv_cache_events"`
	Publisher           string `json:"publisher"`
	Endpoint            string `json:"endpoint"`
	Topic               string `json:"topic"`
}

// KVEventsJSON renders vLLM's --kv-events-config for a ZMQ publisher at endpoint on
// launcher.KVEventsTopic (the mock engine reads the same).
func KVEventsJSON(endpoint string) string {
	b, _ := json.Marshal(KVEventsConfig{EnableKVCacheEvents: true, Publisher: "zmq", Endpoint: endpoint, Topic: launcher.KVEventsTopic})
	return string(b)
}

// Launcher launches vLLM's OpenAI server. Command renders (flag names as vLLM's
// vllm/engine/arg_utils.py registers them; bracketed ones only when the spec sets them):
//
//	<executable> serve <model> --served-model-name <name> --host <host> --port <port>
//	  --tensor-parallel-size <tp> [--gpu-memory-utilization <f>] --block-size <b>
//	  --enable-prefix-caching --enable-prompt-tokens-details [--max-model-len <n>] [--max-num-seqs <n>]
//	  [--max-num-batched-tokens <n>] --kv-events-config <json>
//	  [--kv-transfer-config {"kv_connector":"NixlConnector","kv_role":"kv_both"}]
//	  [--kv-transfer-config {"kv_connector":"LMCacheConnectorV1","kv_role":"kv_both"}]
//	  [--reasoning-parser <name>] [--runner pooling]
//	  [--enable-lora --max-loras <n> --max-cpu-loras <n> [--max-lora-rank <r>]] <extra...>
//
// The KV events config is vLLM's KVEventsConfig (vllm/config/kv_events.py):
// {"enable_kv_cache_events":true,"publisher":"zmq","endpoint":<kv endpoint>,"topic":"kv-events"}.
// A prefill or decode role adds the NIXL connector with kv_role kv_both (docs/reference.md §6: the
// role of each request is set by its kv_transfer_params) and the environment
// VLLM_NIXL_SIDE_CHANNEL_PORT=<a free port>, so that several workers on one machine do not
// collide on vLLM's default side-channel port.
//
// LoRA adapters (Spec.MaxLoras > 0, docs/reference.md §26.1): --enable-lora with
// --max-loras and --max-cpu-loras both the spec's count (the worker decides which
// adapters the engine holds, so vLLM's CPU cache never evicts one on its own), the rank
// limit when the spec sets one (vLLM's default is 16), and the environment
// VLLM_ALLOW_RUNTIME_LORA_UPDATING=True, without which vLLM serves no
// /v1/load_lora_adapter.
//
// A node's KV block manager (Spec.KVBM, docs/reference.md §9.5): LMCache's connector
// (LMCacheConnectorV1, kv_both; with a disaggregated role, vLLM's MultiConnector of NIXL
// and LMCache) and LMCacheEnv's environment.
type Launcher struct{ spec launcher.Spec }

// NewLauncher returns the launcher of vLLM for spec. Errors: an invalid spec
// (launcher.Spec.Validate).
func NewLauncher(spec launcher.Spec) (*Launcher, error) {
	if err := spec.Validate(); err != nil {
		return nil, err
	}
	spec = spec.WithDefaults()
	if spec.Executable == "" {
		spec.Executable = DefaultExecutable
	}
	return &Launcher{spec: spec}, nil
}

// Command returns vLLM's argv for host:port with KV events on kvEndpoint.
func (v *Launcher) Command(host string, port int, kvEndpoint string) (argv, env []string) {
	s := v.spec
	argv = []string{s.Executable, "serve", s.ModelPath,
		"--served-model-name", s.ServedModelName,
		"--host", host,
		"--port", strconv.Itoa(port),
		"--tensor-parallel-size", strconv.Itoa(s.TensorParallelSize),
	}
	argv = launcher.AppendFloat(argv, "--gpu-memory-utilization", s.GPUMemoryUtilization)
	// Prompt token details: the cached tokens of every answer, which the frontend compares
	// with the router's prediction (docs/reference.md §3.2).
	argv = append(argv, "--block-size", strconv.Itoa(s.BlockSize), "--enable-prefix-caching", "--enable-prompt-tokens-details")
	argv = launcher.AppendInt(argv, "--max-model-len", s.MaxModelLen)
	argv = launcher.AppendInt(argv, "--max-num-seqs", s.MaxNumSeqs)
	argv = launcher.AppendInt(argv, "--max-num-batched-tokens", s.MaxNumBatchedTokens)
	argv = append(argv, "--kv-events-config", KVEventsJSON(kvEndpoint))
	switch {
	case s.Role != "" && s.KVBM != nil:
		argv = append(argv, "--kv-transfer-config", multiConnectorJSON)
	case s.Role != "":
		argv = append(argv, "--kv-transfer-config", nixlConnectorJSON)
	case s.KVBM != nil:
		argv = append(argv, "--kv-transfer-config", lmcacheConnectorJSON)
	}
	if s.Role != "" {
		if p, err := supervise.FreePort(host); err == nil {
			env = append(env, "VLLM_NIXL_SIDE_CHANNEL_PORT="+strconv.Itoa(p))
		}
	}
	if s.KVBM != nil {
		env = append(env, LMCacheEnv(*s.KVBM)...)
	}
	if s.ReasoningParser != "" {
		argv = append(argv, "--reasoning-parser", s.ReasoningParser)
	}
	if s.Pooling {
		argv = append(argv, "--runner", "pooling")
	}
	if s.MaxLoras > 0 {
		n := strconv.Itoa(s.MaxLoras)
		argv = append(argv, "--enable-lora", "--max-loras", n, "--max-cpu-loras", n)
		argv = launcher.AppendInt(argv, "--max-lora-rank", s.MaxLoraRank)
		env = append(env, "VLLM_ALLOW_RUNTIME_LORA_UPDATING=True")
	}
	return append(argv, s.Extra...), env
}

// The --kv-transfer-config values: NIXL for a disaggregated role, LMCache's connector for
// a node's KV block manager, both through vLLM's MultiConnector (NIXL first) for a
// disaggregated worker on a node with one.
const (
	nixlConnectorJSON    = `{"kv_connector":"NixlConnector","kv_role":"kv_both"}`
	lmcacheConnectorJSON = `{"kv_connector":"LMCacheConnectorV1","kv_role":"kv_both"}`
	multiConnectorJSON   = `{"kv_connector":"MultiConnector","kv_role":"kv_both","kv_connector_extra_config":{"connectors":[` +
		nixlConnectorJSON + `,` + lmcacheConnectorJSON + `]}}`
)

// LMCacheEnv is the environment that points LMCache at a node's KV block manager
// (docs/reference.md §9.5): its remote URL, the chunk size, whether it keeps a host cache
// of its own, the identity serializer (the block manager stores opaque bytes), and
// PYTHONHASHSEED=0 so that LMCache's chunk hashes agree across processes.
func LMCacheEnv(k launcher.KVBM) []string {
	chunk := k.ChunkSize
	if chunk <= 0 {
		chunk = 256
	}
	local := "False"
	if k.LocalCPU {
		local = "True"
	}
	return []string{"LMCACHE_REMOTE_URL=" + k.RemoteURL, "LMCACHE_CHUNK_SIZE=" + strconv.Itoa(chunk),
		"LMCACHE_LOCAL_CPU=" + local, "LMCACHE_REMOTE_SERDE=naive", "PYTHONHASHSEED=0"}
}

// Connect returns an Engine for vLLM at baseURL, sending the served model name.
func (v *Launcher) Connect(baseURL string) engines.Engine {
	return Connect(baseURL, EngineOptions{Model: v.spec.ServedModelName})
}

// SubscribeKVEvents subscribes to vLLM's ZMQ KV events for the endpoint it was given.
func (v *Launcher) SubscribeKVEvents(ctx context.Context, endpoint string, fn func(kv.Batch)) error {
	return launcher.SubscribeZMQ(ctx, endpoint, fn)
}

// Spec returns the spec the launcher was built from, with defaults filled in.
func (v *Launcher) Spec() launcher.Spec { return v.spec }

var _ engines.Launcher = (*Launcher)(nil)
