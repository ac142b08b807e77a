package launcher

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"sync"

	"github.com/turbine-llm/turbine/engines"
	"github.com/turbine-llm/turbine/engines/sglang"
	"github.com/turbine-llm/turbine/engines/supervise"
	"github.com/turbine-llm/turbine/kv"
)

// SGLang launches SGLang's HTTP server. Command renders (flag names as SGLang's
// python/sglang/srt/server_args.py derives them from ServerArgs' fields; bracketed ones
// only when the spec sets them):
//
//	<python> -m sglang.launch_server --model-path <model> --served-model-name <name>
//	  --host <host> --port <port> --tp-size <tp> [--mem-fraction-static <f>]
//	  --page-size <b> [--context-length <n>] [--max-running-requests <n>]
//	  [--chunked-prefill-size <n>] --enable-metrics --kv-events-config <json>
//	  [--disaggregation-mode prefill|decode] [--disaggregation-bootstrap-port <port>]
//	  <extra...>
//
// A prefill engine gets --disaggregation-bootstrap-port: Spec.BootstrapPort, or a free
// port picked at each Command (SGLang's default, 8998, would collide between two prefill
// engines on one machine); Bootstrap names it for the worker to advertise. The transfer
// backend is SGLang's default (mooncake); choose another with Extra
// (--disaggregation-transfer-backend nixl).
//
// --enable-metrics makes GET /metrics answer (the worker's load scrape). The KV events
// config is {"publisher":"zmq","endpoint":<kv endpoint>,"topic":"kv-events"}; SGLang's
// radix cache (prefix caching) is on by default. SGLang asserts that the chunked prefill
// size is a multiple of the page size, which New checks.
type SGLang struct {
	spec Spec

	mu        sync.Mutex
	bootstrap string // host:port of the latest Command's bootstrap server (prefill)
}

func newSGLang(spec Spec) (*SGLang, error) {
	if n := spec.MaxNumBatchedTokens; n > 0 && n%spec.BlockSize != 0 {
		return nil, fmt.Errorf("launcher: sglang: max batched tokens (--chunked-prefill-size) %d is not a multiple of the KV block size (--page-size) %d",
			n, spec.BlockSize)
	}
	return &SGLang{spec: spec}, nil
}

// Command returns SGLang's argv for host:port with KV events on kvEndpoint.
func (l *SGLang) Command(host string, port int, kvEndpoint string) (argv, env []string) {
	s := l.spec
	argv = []string{s.Python, "-m", "sglang.launch_server",
		"--model-path", s.ModelPath,
		"--served-model-name", s.ServedModelName,
		"--host", host,
		"--port", strconv.Itoa(port),
		"--tp-size", strconv.Itoa(s.TensorParallelSize),
	}
	argv = appendFloat(argv, "--mem-fraction-static", s.GPUMemoryUtilization)
	argv = append(argv, "--page-size", strconv.Itoa(s.BlockSize))
	argv = appendInt(argv, "--context-length", s.MaxModelLen)
	argv = appendInt(argv, "--max-running-requests", s.MaxNumSeqs)
	argv = appendInt(argv, "--chunked-prefill-size", s.MaxNumBatchedTokens)
	argv = append(argv, "--enable-metrics", "--kv-events-config", sglangKVEventsJSON(kvEndpoint))
	bootstrap := ""
	if s.Role != "" {
		argv = append(argv, "--disaggregation-mode", string(s.Role))
	}
	if s.Role == RolePrefill {
		port := s.BootstrapPort
		if port == 0 {
			if p, err := freePort(host); err == nil {
				port = p
			}
		}
		if port > 0 {
			argv = append(argv, "--disaggregation-bootstrap-port", strconv.Itoa(port))
			bootstrap = net.JoinHostPort(host, strconv.Itoa(port))
		}
	}
	if name := sglangReasoningParsers[s.ReasoningParser]; name != "" {
		argv = append(argv, "--reasoning-parser", name)
	}
	l.mu.Lock()
	l.bootstrap = bootstrap
	l.mu.Unlock()
	return append(argv, s.Extra...), nil
}

// freePort is a free TCP port on host, or on every address when host is not one of
// this machine's (the engine binds it there).
func freePort(host string) (int, error) {
	if p, err := supervise.FreePort(host); err == nil {
		return p, nil
	}
	return supervise.FreePort("")
}

// Bootstrap returns the bootstrap address of the prefill engine the latest Command
// started (Bootstrapper); ok is false for other roles or before Command.
func (l *SGLang) Bootstrap() (host string, port int, ok bool) {
	l.mu.Lock()
	addr := l.bootstrap
	l.mu.Unlock()
	return splitBootstrap(addr)
}

// Connect returns an engines.Engine over SGLang's native API at baseURL (cumulative
// output ids, SGLang's default), reporting load in blocks of the spec's block size.
func (l *SGLang) Connect(baseURL string) engines.Engine {
	return connectSGLang(baseURL, l.spec.BlockSize)
}

// SubscribeKVEvents subscribes to SGLang's ZMQ KV events for the endpoint it was given.
func (l *SGLang) SubscribeKVEvents(ctx context.Context, endpoint string, fn func(kv.Batch)) error {
	return subscribeZMQ(ctx, endpoint, fn)
}

// Spec returns the spec the launcher was built from, with defaults filled in.
func (l *SGLang) Spec() Spec { return l.spec }

var (
	_ engines.Launcher = (*SGLang)(nil)
	_ Bootstrapper     = (*SGLang)(nil)
)

func connectSGLang(baseURL string, blockSize int) engines.Engine {
	c, err := sglang.New(baseURL, nil, sglang.Options{})
	if err != nil {
		return brokenEngine{err}
	}
	e, err := sglang.NewEngine(c, blockSize)
	if err != nil {
		return brokenEngine{err}
	}
	return e
}
