package trtllm

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/turbine-llm/turbine/engines"
	"github.com/turbine-llm/turbine/engines/launcher"
	"github.com/turbine-llm/turbine/kv"
)

// Defaults of the launcher.
const (
	// DefaultExecutable runs trtllm-serve when the spec names none (looked up on PATH).
	DefaultExecutable = "trtllm-serve"
	// DefaultKVEventBufferSize is trtllm-serve's kv_cache_config.event_buffer_max_size
	// (KV events kept between two polls of POST /kv_cache_events; 0 turns events off).
	DefaultKVEventBufferSize = 16384
)

// OptionsFile is the name of the extra_llm_api_options file in a Launcher's temporary
// folder.
const OptionsFile = "extra_llm_api_options.yaml"

// Launcher launches trtllm-serve (PyTorch backend). Command renders (flag names as
// TensorRT-LLM's tensorrt_llm/commands/serve.py registers them; bracketed ones only when
// the spec sets them):
//
//	<executable> <model> --host <host> --port <port> --backend pytorch --tp_size <tp>
//	  [--max_batch_size <n>] [--max_num_tokens <n>] [--max_seq_len <n>]
//	  [--kv_cache_free_gpu_memory_fraction <f>] --extra_llm_api_options <file> <extra...>
//
// The file (Options) turns on block reuse and the KV event buffer that POST
// /kv_cache_events drains, sets tokens_per_block to the spec's block size, and turns on
// the iteration stats GET /metrics answers. trtllm-serve replaces its whole
// kv_cache_config with the file's, so the file repeats free_gpu_memory_fraction. The file
// lives in a temporary folder from NewLauncher until Close.
//
// trtllm-serve has no served-model-name flag: it serves a model folder under the folder's
// base name (any other model under the name given), and the client sends that name.
// Its KV events are polled over HTTP (Client.PollKVEvents), not ZMQ: SubscribeKVEvents
// finds the engine by the KV endpoint its Command was given (KVEventPoller).
type Launcher struct {
	spec   launcher.Spec
	dir    string // temporary folder holding the options file
	model  string // the model name trtllm-serve serves
	events KVEventPoller
}

// NewLauncher returns the launcher of trtllm-serve for spec, which holds a temporary
// file until its Close. Errors: an invalid spec (launcher.Spec.Validate), an embedding
// model (ErrNoEmbeddings), and a temporary file that cannot be written.
func NewLauncher(spec launcher.Spec) (*Launcher, error) {
	if err := spec.Validate(); err != nil {
		return nil, err
	}
	if spec.Pooling {
		return nil, ErrNoEmbeddings
	}
	spec = withDefaults(spec)
	dir, err := os.MkdirTemp(spec.TempDir, "turbine-trtllm-")
	if err != nil {
		return nil, fmt.Errorf("launcher: trtllm: folder for %s: %w", OptionsFile, err)
	}
	l := &Launcher{spec: spec, dir: dir, model: modelName(spec.ModelPath)}
	if err := l.writeOptions(); err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	return l, nil
}

// withDefaults fills in spec's defaults, the engine-neutral ones and trtllm-serve's.
func withDefaults(spec launcher.Spec) launcher.Spec {
	spec = spec.WithDefaults()
	if spec.Executable == "" {
		spec.Executable = DefaultExecutable
	}
	if spec.KVEventBufferSize == 0 {
		spec.KVEventBufferSize = DefaultKVEventBufferSize
	}
	return spec
}

// modelName is the name trtllm-serve serves model under: a folder's base name, else
// model as given (tensorrt_llm/serve/openai_server.py).
func modelName(model string) string {
	if fi, err := os.Stat(model); err == nil && fi.IsDir() {
		return filepath.Base(filepath.Clean(model))
	}
	return model
}

// OptionsPath is the extra_llm_api_options file the engine is given.
func (l *Launcher) OptionsPath() string { return filepath.Join(l.dir, OptionsFile) }

func (l *Launcher) writeOptions() error {
	if err := os.WriteFile(l.OptionsPath(), []byte(Options(l.spec)), 0o600); err != nil {
		return fmt.Errorf("launcher: trtllm: %w", err)
	}
	return nil
}

// Options renders the extra_llm_api_options YAML for spec (TensorRT-LLM's
// TorchLlmArgs: kv_cache_config is KvCacheConfig, tensorrt_llm/llmapi/llm_args.py):
//
//	kv_cache_config:
//	  enable_block_reuse: true
//	  tokens_per_block: <block size>
//	  event_buffer_max_size: <KV event buffer size>
//	  free_gpu_memory_fraction: <f>          # when the spec sets it
//	enable_iter_perf_stats: true
//	guided_decoding_backend: xgrammar
//	disable_overlap_scheduler: true          # prefill role (context server)
//	cache_transceiver_config:                # prefill and decode roles
//	  backend: DEFAULT
//	lora_config:                             # LoRA adapters (Spec.MaxLoras > 0)
//	  max_loras: <n>
//	  max_cpu_loras: <n>
//	  max_lora_rank: <r>                     # when the spec sets it (TensorRT-LLM's default: 64)
//
// TensorRT-LLM's disaggregated serving examples turn the overlap scheduler off on
// context servers (examples/disaggregated/README.md), and give both kinds of server a
// cache_transceiver_config; backend DEFAULT is NIXL. Without a guided_decoding_backend
// trtllm-serve accepts a response_format (an output constraint, docs/reference.md §16)
// and enforces nothing; xgrammar is the backend both its PyTorch and TensorRT backends
// implement. trtllm-serve has no API to load adapters: each request names its adapter and
// the folder to load it from (lora_request), and lora_config bounds how many the engine
// keeps on the GPU (max_loras) and in host memory (max_cpu_loras), both the spec's
// count (docs/reference.md §26.1).
func Options(spec launcher.Spec) string {
	s := withDefaults(spec)
	var b strings.Builder
	b.WriteString("# trtllm-serve --extra_llm_api_options written by turbine: KV cache events for\n")
	b.WriteString("# KV-aware routing, iteration stats for the load scrape.\n")
	b.WriteString("kv_cache_config:\n")
	b.WriteString("  enable_block_reuse: true\n")
	fmt.Fprintf(&b, "  tokens_per_block: %d\n", s.BlockSize)
	fmt.Fprintf(&b, "  event_buffer_max_size: %d\n", s.KVEventBufferSize)
	if s.GPUMemoryUtilization > 0 {
		fmt.Fprintf(&b, "  free_gpu_memory_fraction: %s\n", strconv.FormatFloat(s.GPUMemoryUtilization, 'g', -1, 64))
	}
	b.WriteString("enable_iter_perf_stats: true\n")
	b.WriteString("guided_decoding_backend: xgrammar\n")
	if s.Role == launcher.RolePrefill {
		b.WriteString("disable_overlap_scheduler: true\n")
	}
	if s.Role != "" {
		b.WriteString("cache_transceiver_config:\n  backend: DEFAULT\n")
	}
	if s.MaxLoras > 0 {
		fmt.Fprintf(&b, "lora_config:\n  max_loras: %d\n  max_cpu_loras: %d\n", s.MaxLoras, s.MaxLoras)
		if s.MaxLoraRank > 0 {
			fmt.Fprintf(&b, "  max_lora_rank: %d\n", s.MaxLoraRank)
		}
	}
	return b.String()
}

// Command returns trtllm-serve's argv for host:port. kvEndpoint is not given to the
// engine; it names this start for SubscribeKVEvents. The options file is written again
// if something removed it.
func (l *Launcher) Command(host string, port int, kvEndpoint string) (argv, env []string) {
	s := l.spec
	if _, err := os.Stat(l.OptionsPath()); err != nil {
		_ = os.MkdirAll(l.dir, 0o700)
		_ = l.writeOptions() // a failure shows in the engine's own error about the file
	}
	l.events.Started(kvEndpoint, host, port)
	argv = []string{s.Executable, s.ModelPath,
		"--host", host,
		"--port", strconv.Itoa(port),
		"--backend", "pytorch",
		"--tp_size", strconv.Itoa(s.TensorParallelSize),
	}
	argv = launcher.AppendInt(argv, "--max_batch_size", s.MaxNumSeqs)
	argv = launcher.AppendInt(argv, "--max_num_tokens", s.MaxNumBatchedTokens)
	argv = launcher.AppendInt(argv, "--max_seq_len", s.MaxModelLen)
	argv = launcher.AppendFloat(argv, "--kv_cache_free_gpu_memory_fraction", s.GPUMemoryUtilization)
	argv = append(argv, "--extra_llm_api_options", l.OptionsPath())
	return append(argv, s.Extra...), nil
}

// Connect returns an Engine for trtllm-serve at baseURL. The worker closes it (it runs
// a stats collector) when the engine process ends.
func (l *Launcher) Connect(baseURL string) engines.Engine {
	return Connect(baseURL, EngineOptions{Model: l.model, BlockSize: l.spec.BlockSize})
}

// SubscribeKVEvents polls the KV cache events of the engine started with endpoint
// (KVEventPoller.Subscribe).
func (l *Launcher) SubscribeKVEvents(ctx context.Context, endpoint string, fn func(kv.Batch)) error {
	return l.events.Subscribe(ctx, endpoint, l.spec.BlockSize, fn)
}

// Close removes the options file and its folder. Safe to call more than once.
func (l *Launcher) Close() error {
	if err := os.RemoveAll(l.dir); err != nil {
		return fmt.Errorf("launcher: trtllm: %w", err)
	}
	return nil
}

// Spec returns the spec the launcher was built from, with defaults filled in.
func (l *Launcher) Spec() launcher.Spec { return l.spec }

var _ engines.Launcher = (*Launcher)(nil)

// Connect returns an Engine for the server speaking trtllm-serve's dialect at baseURL,
// with a client of its own (New); a malformed baseURL or options give a
// launcher.FailedEngine.
func Connect(baseURL string, o EngineOptions) engines.Engine {
	c, err := New(baseURL, nil)
	if err != nil {
		return launcher.FailedEngine{Err: err}
	}
	e, err := NewEngine(c, o)
	if err != nil {
		return launcher.FailedEngine{Err: err}
	}
	return e
}

// KVEventPoller is the KV event subscription of engines whose events are polled over
// HTTP (trtllm-serve, and the mock engine in its dialect): a launcher's Command tells it
// which engine a KV endpoint names (Started), and Subscribe polls that engine. Safe for
// concurrent use.
type KVEventPoller struct {
	mu    sync.Mutex
	bases map[string]string // KV endpoint of the latest start -> engine base URL
}

// Started records that the latest engine, serving on host:port, was started with
// kvEndpoint (which the engine itself is not given).
func (p *KVEventPoller) Started(kvEndpoint, host string, port int) {
	p.mu.Lock()
	p.bases = map[string]string{kvEndpoint: "http://" + net.JoinHostPort(host, strconv.Itoa(port))}
	p.mu.Unlock()
}

// Subscribe polls the KV cache events of the engine started with endpoint
// (Client.PollKVEvents), reported in blocks of blockSize tokens (the router's), once its
// GET /health answers: trtllm-serve loads the model for minutes before it serves. It
// returns nil when ctx ends. Errors: an endpoint the latest start was not given, and
// PollKVEvents' errors.
func (p *KVEventPoller) Subscribe(ctx context.Context, endpoint string, blockSize int, fn func(kv.Batch)) error {
	p.mu.Lock()
	base, ok := p.bases[endpoint]
	p.mu.Unlock()
	if !ok {
		return fmt.Errorf("launcher: trtllm: no engine was started with KV endpoint %s", endpoint)
	}
	c, err := New(base, nil)
	if err != nil {
		return err
	}
	for {
		hctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		err := c.Health(hctx)
		cancel()
		if err == nil {
			break
		}
		t := time.NewTimer(healthPoll)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-t.C:
		}
	}
	return c.PollKVEvents(ctx, PollConfig{BlockSize: blockSize}, fn)
}

// healthPoll is the pause between two readiness probes before KV event polling starts.
const healthPoll = 500 * time.Millisecond
