package launcher

import (
	"context"
	"strconv"

	"github.com/turbine-llm/turbine/engines"
	"github.com/turbine-llm/turbine/engines/supervise"
	"github.com/turbine-llm/turbine/kv"
)

// VLLM launches vLLM's OpenAI server. Command renders (flag names as vLLM's
// vllm/engine/arg_utils.py registers them; bracketed ones only when the spec sets them):
//
//	<executable> serve <model> --served-model-name <name> --host <host> --port <port>
//	  --tensor-parallel-size <tp> [--gpu-memory-utilization <f>] --block-size <b>
//	  --enable-prefix-caching [--max-model-len <n>] [--max-num-seqs <n>]
//	  [--max-num-batched-tokens <n>] --kv-events-config <json>
//	  [--kv-transfer-config {"kv_connector":"NixlConnector","kv_role":"kv_both"}]
//	  [--reasoning-parser <name>] <extra...>
//
// The KV events config is vLLM's KVEventsConfig (vllm/config/kv_events.py):
// {"enable_kv_cache_events":true,"publisher":"zmq","endpoint":<kv endpoint>,"topic":"kv-events"}.
// A prefill or decode role adds the NIXL connector with kv_role kv_both (docs/reference.md §6: the
// role of each request is set by its kv_transfer_params) and the environment
// VLLM_NIXL_SIDE_CHANNEL_PORT=<a free port>, so that several workers on one machine do not
// collide on vLLM's default side-channel port.
type VLLM struct{ spec Spec }

// Command returns vLLM's argv for host:port with KV events on kvEndpoint.
func (v *VLLM) Command(host string, port int, kvEndpoint string) (argv, env []string) {
	s := v.spec
	argv = []string{s.Executable, "serve", s.ModelPath,
		"--served-model-name", s.ServedModelName,
		"--host", host,
		"--port", strconv.Itoa(port),
		"--tensor-parallel-size", strconv.Itoa(s.TensorParallelSize),
	}
	argv = appendFloat(argv, "--gpu-memory-utilization", s.GPUMemoryUtilization)
	argv = append(argv, "--block-size", strconv.Itoa(s.BlockSize), "--enable-prefix-caching")
	argv = appendInt(argv, "--max-model-len", s.MaxModelLen)
	argv = appendInt(argv, "--max-num-seqs", s.MaxNumSeqs)
	argv = appendInt(argv, "--max-num-batched-tokens", s.MaxNumBatchedTokens)
	argv = append(argv, "--kv-events-config", vllmKVEventsJSON(kvEndpoint))
	if s.Role != "" {
		argv = append(argv, "--kv-transfer-config", `{"kv_connector":"NixlConnector","kv_role":"kv_both"}`)
		if p, err := supervise.FreePort(host); err == nil {
			env = append(env, "VLLM_NIXL_SIDE_CHANNEL_PORT="+strconv.Itoa(p))
		}
	}
	if s.ReasoningParser != "" {
		argv = append(argv, "--reasoning-parser", s.ReasoningParser)
	}
	return append(argv, s.Extra...), env
}

// Connect returns a client for vLLM at baseURL, sending the served model name.
func (v *VLLM) Connect(baseURL string) engines.Engine {
	return newVLLMEngine(baseURL, v.spec.ServedModelName, false)
}

// SubscribeKVEvents subscribes to vLLM's ZMQ KV events for the endpoint it was given.
func (v *VLLM) SubscribeKVEvents(ctx context.Context, endpoint string, fn func(kv.Batch)) error {
	return subscribeZMQ(ctx, endpoint, fn)
}

// Spec returns the spec the launcher was built from, with defaults filled in.
func (v *VLLM) Spec() Spec { return v.spec }

var _ engines.Launcher = (*VLLM)(nil)

// appendInt appends flag and n when n > 0.
func appendInt(argv []string, flag string, n int) []string {
	if n <= 0 {
		return argv
	}
	return append(argv, flag, strconv.Itoa(n))
}

// appendFloat appends flag and f when f > 0.
func appendFloat(argv []string, flag string, f float64) []string {
	if f <= 0 {
		return argv
	}
	return append(argv, flag, strconv.FormatFloat(f, 'g', -1, 64))
}
