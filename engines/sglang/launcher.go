package sglang

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"

	"github.com/turbine-llm/turbine/engines"
	"github.com/turbine-llm/turbine/engines/launcher"
	"github.com/turbine-llm/turbine/kv"
)

// DefaultPython runs SGLang's launch_server module when the spec names no interpreter.
const DefaultPython = "python3"

// DefaultMaxLoraRank is the --max-lora-rank given to SGLang when the spec sets none:
// SGLang started with adapters but no --lora-paths needs one (vLLM's default, 16).
const DefaultMaxLoraRank = 16

// reasoningParsers maps vLLM's reasoning parser names to SGLang's
// (sglang/srt/parser/reasoning_parser.py); a name SGLang lacks is not passed.
var reasoningParsers = map[string]string{
	"deepseek_r1": "deepseek-r1", "qwen3": "qwen3", "kimi_k2": "kimi_k2", "glm45": "glm45", "openai_gptoss": "gpt-oss",
}

// kvEventsConfig is SGLang's --kv-events-config JSON
// (python/sglang/srt/disaggregation/kv_events.py, KVEventsConfig): no enable key; a
// "zmq" publisher is on.
type kvEventsConfig struct {
	Publisher string `json:"publisher"`
	Endpoint  string `json:"endpoint"`
	Topic     string `json:"topic"`
}

// kvEventsJSON renders SGLang's --kv-events-config for a ZMQ publisher at endpoint.
func kvEventsJSON(endpoint string) string {
	b, _ := json.Marshal(kvEventsConfig{Publisher: "zmq", Endpoint: endpoint, Topic: launcher.KVEventsTopic})
	return string(b)
}

// Launcher launches SGLang's HTTP server. Command renders (flag names as SGLang's
// python/sglang/srt/server_args.py derives them from ServerArgs' fields; bracketed ones
// only when the spec sets them):
//
//	<python> -m sglang.launch_server --model-path <model> --served-model-name <name>
//	  --host <host> --port <port> --tp-size <tp> [--mem-fraction-static <f>]
//	  --page-size <b> [--context-length <n>] [--max-running-requests <n>]
//	  [--chunked-prefill-size <n>] --enable-metrics --kv-events-config <json>
//	  [--disaggregation-mode prefill|decode] [--disaggregation-bootstrap-port <port>]
//	  [--reasoning-parser <name>] [--is-embedding]
//	  [--enable-lora --max-loras-per-batch <n> --max-loaded-loras <n> --max-lora-rank <r>
//	   --lora-target-modules all] <extra...>
//
// A prefill engine gets --disaggregation-bootstrap-port: Spec.BootstrapPort, or a free
// port picked at each Command (SGLang's default, 8998, would collide between two prefill
// engines on one machine); Bootstrap names it for the worker to advertise. The transfer
// backend is SGLang's default (mooncake); choose another with Extra
// (--disaggregation-transfer-backend nixl).
//
// LoRA adapters (Spec.MaxLoras > 0, docs/reference.md §26.1) are loaded at run time
// through /load_lora_adapter, with no --lora-paths at start: SGLang then needs the rank
// limit (the spec's, else DefaultMaxLoraRank) and the modules adapters may target (all
// of them). --max-loras-per-batch and --max-loaded-loras are both the spec's count, so
// that the server holds what the worker placed and evicts nothing on its own.
//
// --enable-metrics makes GET /metrics answer (the worker's load scrape). The KV events
// config is {"publisher":"zmq","endpoint":<kv endpoint>,"topic":"kv-events"}; SGLang's
// radix cache (prefix caching) is on by default. SGLang asserts that the chunked prefill
// size is a multiple of the page size, which NewLauncher checks.
type Launcher struct {
	spec      launcher.Spec
	bootstrap launcher.BootstrapAddr // the latest Command's bootstrap server (prefill)
}

// NewLauncher returns the launcher of SGLang for spec. Errors: an invalid spec
// (launcher.Spec.Validate), and a chunked prefill size that is not a multiple of the
// block size.
func NewLauncher(spec launcher.Spec) (*Launcher, error) {
	if err := spec.Validate(); err != nil {
		return nil, err
	}
	spec = spec.WithDefaults()
	if spec.Python == "" {
		spec.Python = DefaultPython
	}
	if n := spec.MaxNumBatchedTokens; n > 0 && n%spec.BlockSize != 0 {
		return nil, fmt.Errorf("launcher: sglang: max batched tokens (--chunked-prefill-size) %d is not a multiple of the KV block size (--page-size) %d",
			n, spec.BlockSize)
	}
	return &Launcher{spec: spec}, nil
}

// Command returns SGLang's argv for host:port with KV events on kvEndpoint.
func (l *Launcher) Command(host string, port int, kvEndpoint string) (argv, env []string) {
	s := l.spec
	argv = []string{s.Python, "-m", "sglang.launch_server",
		"--model-path", s.ModelPath,
		"--served-model-name", s.ServedModelName,
		"--host", host,
		"--port", strconv.Itoa(port),
		"--tp-size", strconv.Itoa(s.TensorParallelSize),
	}
	argv = launcher.AppendFloat(argv, "--mem-fraction-static", s.GPUMemoryUtilization)
	argv = append(argv, "--page-size", strconv.Itoa(s.BlockSize))
	argv = launcher.AppendInt(argv, "--context-length", s.MaxModelLen)
	argv = launcher.AppendInt(argv, "--max-running-requests", s.MaxNumSeqs)
	argv = launcher.AppendInt(argv, "--chunked-prefill-size", s.MaxNumBatchedTokens)
	argv = append(argv, "--enable-metrics", "--kv-events-config", kvEventsJSON(kvEndpoint))
	bootstrap := 0
	if s.Role != "" {
		argv = append(argv, "--disaggregation-mode", string(s.Role))
	}
	if s.Role == launcher.RolePrefill {
		port := s.BootstrapPort
		if port == 0 {
			if p, err := launcher.FreePort(host); err == nil {
				port = p
			}
		}
		if port > 0 {
			argv = append(argv, "--disaggregation-bootstrap-port", strconv.Itoa(port))
			bootstrap = port
		}
	}
	if name := reasoningParsers[s.ReasoningParser]; name != "" {
		argv = append(argv, "--reasoning-parser", name)
	}
	if s.Pooling {
		argv = append(argv, "--is-embedding")
	}
	if s.MaxLoras > 0 {
		rank := s.MaxLoraRank
		if rank == 0 {
			rank = DefaultMaxLoraRank
		}
		n := strconv.Itoa(s.MaxLoras)
		argv = append(argv, "--enable-lora", "--max-loras-per-batch", n, "--max-loaded-loras", n,
			"--max-lora-rank", strconv.Itoa(rank), "--lora-target-modules", "all")
	}
	l.bootstrap.Set(host, bootstrap)
	return append(argv, s.Extra...), nil
}

// Bootstrap returns the bootstrap address of the prefill engine the latest Command
// started (launcher.Bootstrapper); ok is false for other roles or before Command.
func (l *Launcher) Bootstrap() (host string, port int, ok bool) { return l.bootstrap.Bootstrap() }

// Connect returns an engines.Engine over SGLang's native API at baseURL (cumulative
// output ids, SGLang's default), reporting load in blocks of the spec's block size.
func (l *Launcher) Connect(baseURL string) engines.Engine {
	return Connect(baseURL, l.spec.BlockSize)
}

// SubscribeKVEvents subscribes to SGLang's ZMQ KV events for the endpoint it was given.
func (l *Launcher) SubscribeKVEvents(ctx context.Context, endpoint string, fn func(kv.Batch)) error {
	return launcher.SubscribeZMQ(ctx, endpoint, fn)
}

// Spec returns the spec the launcher was built from, with defaults filled in.
func (l *Launcher) Spec() launcher.Spec { return l.spec }

var (
	_ engines.Launcher      = (*Launcher)(nil)
	_ launcher.Bootstrapper = (*Launcher)(nil)
)

// Connect returns an Engine for the SGLang server at baseURL (a client of its own with
// the default Options), reporting load in blocks of blockSize tokens; a malformed
// baseURL or block size gives a launcher.FailedEngine.
func Connect(baseURL string, blockSize int) engines.Engine {
	c, err := New(baseURL, nil, Options{})
	if err != nil {
		return launcher.FailedEngine{Err: err}
	}
	e, err := NewEngine(c, blockSize)
	if err != nil {
		return launcher.FailedEngine{Err: err}
	}
	return e
}
