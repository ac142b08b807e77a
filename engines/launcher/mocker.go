package launcher

import (
	"context"
	"net"
	"strconv"
	"sync"
	"time"

	"github.com/turbine-llm/turbine/engines"
	"github.com/turbine-llm/turbine/kv"
)

// Mocker launches the mock engine (`turbine mocker`). Its flags follow vLLM's names. By
// default it speaks vLLM's HTTP dialect and publishes KV events in vLLM's ZMQ wire format;
// with Dialect EngineSGLang it serves SGLang's native API (same ZMQ events), with
// EngineTRTLLM trtllm-serve's (KV events polled over HTTP), and Connect and
// SubscribeKVEvents use the matching clients, as for the real engine.
type Mocker struct {
	// Executable is the turbine binary (os.Executable() in `turbine serve`).
	Executable          string
	Model               string // served model name
	Tokenizer           string // builtin:... or an HF model folder
	BlockSize           int    // tokens per KV block
	NumGPUBlocks        int
	MaxNumSeqs          int
	MaxNumBatchedTokens int
	MaxModelLen         int // tokens
	SpeedupRatio        float64
	MeanOutputTokens    int
	Seed                int64
	// Dialect is "" or EngineVLLM (vLLM's), EngineSGLang or EngineTRTLLM.
	Dialect string
	// Role is the worker's part in disaggregated serving ("" for aggregated), passed as
	// --role. Every mock engine serves both legs (as vLLM's kv_both); the SGLang dialect
	// takes the leg of a request with bootstrap fields from it.
	Role Role
	// KVTransferPort is the mock engine's KV transfer port (--kv-transfer-port): 0
	// leaves the choice to the engine, except for an SGLang-dialect prefill engine, whose
	// port is its bootstrap port (Bootstrap) and is picked free at each Command.
	KVTransferPort int
	// KVTransferBandwidth in bytes per second (--kv-transfer-bandwidth), KVBytesPerToken
	// (--kv-bytes-per-token) and KVTransferTimeout (--kv-transfer-timeout); zero values
	// leave the mock engine's defaults (64e9 bytes/s; the model folder's KV size, else
	// 131072; 480 s).
	KVTransferBandwidth float64
	KVBytesPerToken     int64
	KVTransferTimeout   time.Duration
	// KVLoadFailurePolicy (--kv-load-failure-policy: "fail" or "recompute"); "" leaves
	// the mock engine's default (fail).
	KVLoadFailurePolicy string
	// ToolCallParser and ReasoningParser (--tool-call-parser, --reasoning-parser: vLLM's
	// parser names, those of the model card) make the mock engine answer like a model
	// of that family (engines/mocker/persona); "" passes neither flag.
	ToolCallParser, ReasoningParser string
	// Extra arguments appended untouched.
	Extra []string

	mu        sync.Mutex
	bases     map[string]string // trtllm dialect: KV endpoint of the latest Command -> base URL
	bootstrap string            // host:port of the latest Command's bootstrap (SGLang prefill)
}

// Command returns the mock engine's argv for host:port with KV events on kvEndpoint.
func (m *Mocker) Command(host string, port int, kvEndpoint string) (argv, env []string) {
	argv = []string{m.Executable, "mocker",
		"--host", host,
		"--port", strconv.Itoa(port),
		"--served-model-name", m.Model,
		"--tokenizer", m.Tokenizer,
		"--block-size", strconv.Itoa(m.BlockSize),
		"--num-gpu-blocks-override", strconv.Itoa(m.NumGPUBlocks),
		"--max-num-seqs", strconv.Itoa(m.MaxNumSeqs),
		"--max-num-batched-tokens", strconv.Itoa(m.MaxNumBatchedTokens),
		"--max-model-len", strconv.Itoa(m.MaxModelLen),
		"--speedup-ratio", strconv.FormatFloat(m.SpeedupRatio, 'g', -1, 64),
		"--mean-output-tokens", strconv.Itoa(m.MeanOutputTokens),
		"--seed", strconv.FormatInt(m.Seed, 10),
	}
	switch m.Dialect {
	case EngineTRTLLM:
		m.mu.Lock()
		m.bases = map[string]string{kvEndpoint: "http://" + net.JoinHostPort(host, strconv.Itoa(port))}
		m.mu.Unlock()
		argv = append(argv, "--dialect", m.Dialect, "--event-buffer-max-size", strconv.Itoa(DefaultKVEventBufferSize))
	case EngineSGLang:
		argv = append(argv, "--dialect", m.Dialect, "--kv-events-config", vllmKVEventsJSON(kvEndpoint))
	default:
		argv = append(argv, "--kv-events-config", vllmKVEventsJSON(kvEndpoint))
	}
	if m.Role != "" {
		argv = append(argv, "--role", string(m.Role))
	}
	xport := m.KVTransferPort
	if xport == 0 && m.Dialect == EngineSGLang && m.Role == RolePrefill {
		if p, err := freePort(host); err == nil {
			xport = p
		}
	}
	m.mu.Lock()
	m.bootstrap = ""
	if m.Dialect == EngineSGLang && m.Role == RolePrefill && xport > 0 {
		m.bootstrap = net.JoinHostPort(host, strconv.Itoa(xport))
	}
	m.mu.Unlock()
	argv = append(argv, "--kv-transfer-host", host, "--kv-transfer-port", strconv.Itoa(xport))
	if m.KVTransferBandwidth > 0 {
		argv = append(argv, "--kv-transfer-bandwidth", strconv.FormatFloat(m.KVTransferBandwidth, 'g', -1, 64))
	}
	if m.KVBytesPerToken > 0 {
		argv = append(argv, "--kv-bytes-per-token", strconv.FormatInt(m.KVBytesPerToken, 10))
	}
	if m.KVTransferTimeout > 0 {
		argv = append(argv, "--kv-transfer-timeout", m.KVTransferTimeout.String())
	}
	if m.KVLoadFailurePolicy != "" {
		argv = append(argv, "--kv-load-failure-policy", m.KVLoadFailurePolicy)
	}
	if m.ToolCallParser != "" {
		argv = append(argv, "--tool-call-parser", m.ToolCallParser)
	}
	if m.ReasoningParser != "" {
		argv = append(argv, "--reasoning-parser", m.ReasoningParser)
	}
	argv = append(argv, m.Extra...)
	return argv, nil
}

// Bootstrap returns the bootstrap address of an SGLang-dialect prefill engine started by
// the latest Command (its KV transfer port), which both legs of a disaggregated request
// are given (docs/reference.md §6); ok is false for other dialects and roles, or before Command.
func (m *Mocker) Bootstrap() (host string, port int, ok bool) {
	m.mu.Lock()
	addr := m.bootstrap
	m.mu.Unlock()
	return splitBootstrap(addr)
}

func splitBootstrap(addr string) (string, int, bool) {
	if addr == "" {
		return "", 0, false
	}
	h, p, err := net.SplitHostPort(addr)
	if err != nil {
		return "", 0, false
	}
	n, err := strconv.Atoi(p)
	return h, n, err == nil
}

// Connect returns the client of the mock engine's dialect at baseURL.
func (m *Mocker) Connect(baseURL string) engines.Engine {
	switch m.Dialect {
	case EngineSGLang:
		return connectSGLang(baseURL, m.BlockSize)
	case EngineTRTLLM:
		return connectTRTLLM(baseURL, m.Model, m.BlockSize, true)
	}
	return newVLLMEngine(baseURL, m.Model, true)
}

// SubscribeKVEvents subscribes to the mock engine's KV events: ZMQ in vLLM's wire format
// at the endpoint it was given, or for the trtllm dialect POST /kv_cache_events of the
// engine its latest Command started.
func (m *Mocker) SubscribeKVEvents(ctx context.Context, endpoint string, fn func(kv.Batch)) error {
	if m.Dialect != EngineTRTLLM {
		return subscribeZMQ(ctx, endpoint, fn)
	}
	m.mu.Lock()
	base, ok := m.bases[endpoint]
	m.mu.Unlock()
	if !ok {
		return errNoEngineAt(endpoint)
	}
	return pollTRTLLM(ctx, base, m.BlockSize, fn)
}

var (
	_ engines.Launcher = (*Mocker)(nil)
	_ Bootstrapper     = (*Mocker)(nil)
)
