// Package launch starts Turbine's mock engine (`turbine mocker`, engines/mocker/server)
// for a worker: its command line, rendered from the mock engine's parameters
// (server.Params.Args), and the client of the dialect it speaks, which is the real
// engine's own adapter (engines/vllm, engines/sglang, engines/trtllm) given the mock
// engine's KV release (server.ReleaseVLLM, server.ReleaseTRTLLM). engines/registry lists
// it under launcher.EngineMocker.
package launch

import (
	"context"
	"strconv"

	"github.com/turbine-llm/turbine/engines"
	"github.com/turbine-llm/turbine/engines/launcher"
	"github.com/turbine-llm/turbine/engines/mocker/server"
	"github.com/turbine-llm/turbine/engines/sglang"
	"github.com/turbine-llm/turbine/engines/trtllm"
	"github.com/turbine-llm/turbine/engines/vllm"
	"github.com/turbine-llm/turbine/kv"
)

// Config is what a Mocker launches.
type Config struct {
	// Executable is the turbine binary (os.Executable() in `turbine serve`).
	Executable string
	// Model is the served model name (--served-model-name).
	Model string
	// Tokenizer is builtin:<encoding> or an HF model folder (--tokenizer).
	Tokenizer string
	// Params are the mock engine's parameters, passed as its flags. Their dialect ("" is
	// vLLM's) chooses the client Connect returns and how KV events arrive; their role
	// is what the worker registers as. KVTransfer.Host is each Command's host, and
	// KVTransfer.Port 0 lets the engine pick a free port, except for an SGLang-dialect
	// prefill engine: its transfer port is its bootstrap port (Bootstrap), picked free
	// at each Command.
	Params server.Params
	// NoKVEvents starts the engine without KV events (no --kv-events-config, no trtllm
	// event buffer): the worker registers so and the router routes it approximately
	// (docs/reference.md §3.4).
	NoKVEvents bool
	// KvbmURL is the node's KV block manager the engine offloads evicted KV blocks to
	// and onboards prefixes from (--kvbm-url resp://host:port; docs/reference.md §9);
	// "" keeps Params.KvbmURL (none by default).
	KvbmURL string
	// KVBytesPerToken sizes those blocks (--kv-bytes-per-token); 0 keeps
	// Params.KVTransfer.BytesPerToken (the model folder's figure by default).
	KVBytesPerToken int64
	// Extra arguments, appended untouched.
	Extra []string
}

// Mocker launches the mock engine: by default it speaks vLLM's HTTP dialect and
// publishes KV events in vLLM's ZMQ wire format; in SGLang's dialect it serves SGLang's
// native API (same ZMQ events), in TensorRT-LLM's trtllm-serve's (KV events polled over
// HTTP). Connect and SubscribeKVEvents use the matching clients, as for the real engine.
type Mocker struct {
	Config

	events    trtllm.KVEventPoller   // trtllm dialect
	bootstrap launcher.BootstrapAddr // SGLang dialect, prefill role
}

// New returns the launcher of mock engines configured by c. Errors: an unknown dialect.
func New(c Config) (*Mocker, error) {
	if c.Params.Dialect != "" {
		if _, err := server.ParseDialect(string(c.Params.Dialect)); err != nil {
			return nil, err
		}
	}
	return &Mocker{Config: c}, nil
}

// dialect is how a worker drives a mock engine speaking one engine's HTTP dialect.
type dialect struct {
	// kvEvents returns the flags that have the engine m starts on host:port publish its
	// KV events for kvEndpoint.
	kvEvents func(m *Mocker, host string, port int, kvEndpoint string) []string
	// connect returns the client of the engine at baseURL.
	connect func(m *Mocker, baseURL string) engines.Engine
	// subscribe delivers the KV events of the engine started with endpoint.
	subscribe func(m *Mocker, ctx context.Context, endpoint string, fn func(kv.Batch)) error
	// bootstrap: a prefill engine advertises its KV transfer port as its bootstrap
	// address (SGLang's bootstrap server).
	bootstrap bool
}

// dialects are the mock engine's dialects, by name.
var dialects = map[server.DialectName]dialect{
	server.DialectVLLM: {
		kvEvents: zmqEvents,
		connect: func(m *Mocker, baseURL string) engines.Engine {
			return vllm.Connect(baseURL, vllm.EngineOptions{Model: m.Model, ReleaseKV: server.ReleaseVLLM})
		},
		subscribe: zmqSubscribe,
	},
	server.DialectSGLang: {
		kvEvents: zmqEvents,
		connect: func(m *Mocker, baseURL string) engines.Engine {
			return sglang.Connect(baseURL, m.Params.Engine.BlockSize)
		},
		subscribe: zmqSubscribe,
		bootstrap: true,
	},
	server.DialectTRTLLM: {
		kvEvents: func(m *Mocker, host string, port int, kvEndpoint string) []string {
			m.events.Started(kvEndpoint, host, port)
			if m.Params.EventBufferMaxSize > 0 {
				return nil // rendered with the parameters
			}
			return []string{"--event-buffer-max-size", strconv.Itoa(trtllm.DefaultKVEventBufferSize)}
		},
		connect: func(m *Mocker, baseURL string) engines.Engine {
			return trtllm.Connect(baseURL, trtllm.EngineOptions{Model: m.Model, BlockSize: m.Params.Engine.BlockSize,
				ReleaseKV: server.ReleaseTRTLLM})
		},
		subscribe: func(m *Mocker, ctx context.Context, endpoint string, fn func(kv.Batch)) error {
			return m.events.Subscribe(ctx, endpoint, m.Params.Engine.BlockSize, fn)
		},
	},
}

// zmqEvents is vLLM's --kv-events-config for a ZMQ publisher at kvEndpoint.
func zmqEvents(_ *Mocker, _ string, _ int, kvEndpoint string) []string {
	return []string{"--kv-events-config", vllm.KVEventsJSON(kvEndpoint)}
}

func zmqSubscribe(_ *Mocker, ctx context.Context, endpoint string, fn func(kv.Batch)) error {
	return launcher.SubscribeZMQ(ctx, endpoint, fn)
}

// dialect returns the dialect of m's parameters (vLLM's when none or unknown).
func (m *Mocker) dialect() dialect {
	if d, ok := dialects[m.Params.Dialect]; ok {
		return d
	}
	return dialects[server.DialectVLLM]
}

// Command returns the mock engine's argv for host:port with KV events on kvEndpoint:
//
//	<executable> mocker --host <host> --port <port> --served-model-name <model>
//	  --tokenizer <tokenizer> <parameters> <KV events> --kv-transfer-host <host>
//	  --kv-transfer-port <port> <extra...>
//
// where the parameters are server.Params.Args (with KvbmURL and KVBytesPerToken when
// set) and the KV events vLLM's
// --kv-events-config JSON, or for the trtllm dialect an event buffer (none with
// NoKVEvents).
func (m *Mocker) Command(host string, port int, kvEndpoint string) (argv, env []string) {
	d := m.dialect()
	argv = []string{m.Executable, "mocker",
		"--host", host,
		"--port", strconv.Itoa(port),
		"--served-model-name", m.Model,
		"--tokenizer", m.Tokenizer,
	}
	p := m.Params
	if m.KvbmURL != "" {
		p.KvbmURL = m.KvbmURL
	}
	if m.KVBytesPerToken != 0 {
		p.KVTransfer.BytesPerToken = m.KVBytesPerToken
	}
	argv = append(argv, p.Args()...)
	if !m.NoKVEvents {
		argv = append(argv, d.kvEvents(m, host, port, kvEndpoint)...)
	}
	xport, bootstrap := m.Params.KVTransfer.Port, 0
	if d.bootstrap && m.Params.Role == server.RolePrefill {
		if xport == 0 {
			if p, err := launcher.FreePort(host); err == nil {
				xport = p
			}
		}
		bootstrap = xport
	}
	m.bootstrap.Set(host, bootstrap)
	argv = append(argv, "--kv-transfer-host", host, "--kv-transfer-port", strconv.Itoa(xport))
	return append(argv, m.Extra...), nil
}

// Bootstrap returns the bootstrap address of an SGLang-dialect prefill engine started by
// the latest Command (its KV transfer port), which both legs of a disaggregated request
// are given (docs/reference.md §6); ok is false for other dialects and roles, or before
// Command.
func (m *Mocker) Bootstrap() (host string, port int, ok bool) { return m.bootstrap.Bootstrap() }

// Connect returns the client of the mock engine's dialect at baseURL.
func (m *Mocker) Connect(baseURL string) engines.Engine { return m.dialect().connect(m, baseURL) }

// SubscribeKVEvents subscribes to the mock engine's KV events: ZMQ in vLLM's wire format
// at the endpoint it was given, or for the trtllm dialect POST /kv_cache_events of the
// engine its latest Command started.
func (m *Mocker) SubscribeKVEvents(ctx context.Context, endpoint string, fn func(kv.Batch)) error {
	if m.NoKVEvents {
		<-ctx.Done() // nothing is published
		return ctx.Err()
	}
	return m.dialect().subscribe(m, ctx, endpoint, fn)
}

// KVEvents reports whether the engines m starts publish KV events (engines.KVEventSource).
func (m *Mocker) KVEvents() bool { return !m.NoKVEvents }

var (
	_ engines.Launcher      = (*Mocker)(nil)
	_ launcher.Bootstrapper = (*Mocker)(nil)
	_ engines.KVEventSource = (*Mocker)(nil)
)
