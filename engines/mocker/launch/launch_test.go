package launch

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/turbine-llm/turbine/engines"
	"github.com/turbine-llm/turbine/engines/internal/enginehttp"
	"github.com/turbine-llm/turbine/engines/internal/enginetest"
	"github.com/turbine-llm/turbine/engines/mocker/kvtransfer"
	"github.com/turbine-llm/turbine/engines/mocker/server"
	"github.com/turbine-llm/turbine/kv"
	"github.com/turbine-llm/turbine/messages"
)

const testBlock = 16

// mocker is a Mocker of the engines the tests start: blocks of testBlock tokens, dialect
// d, role r.
func mocker(t *testing.T, d server.DialectName, r server.Role) *Mocker {
	t.Helper()
	p := server.DefaultParams()
	p.Engine.BlockSize, p.Dialect, p.Role = testBlock, d, r
	m, err := New(Config{Executable: "turbine", Model: "m", Tokenizer: "builtin:cl100k_base", Params: p})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func TestNewRefusesUnknownDialect(t *testing.T) {
	if _, err := New(Config{Params: server.Params{Dialect: "tgi"}}); err == nil || !strings.Contains(err.Error(), `dialect "tgi"`) {
		t.Fatalf("New with dialect tgi: %v", err)
	}
}

// TestMockerParserFlags: the mock engine plays the model family the worker's parsers
// name (--tool-call-parser, --reasoning-parser), and gets neither flag without them.
func TestMockerParserFlags(t *testing.T) {
	m := mocker(t, "", "")
	m.Params.ToolCallParser, m.Params.ReasoningParser = "hermes", "qwen3"
	argv, _ := m.Command("127.0.0.1", 8000, "tcp://127.0.0.1:5557")
	line := strings.Join(argv, " ")
	for _, want := range []string{"--tool-call-parser hermes", "--reasoning-parser qwen3"} {
		if !strings.Contains(line, want) {
			t.Errorf("command %q lacks %q", line, want)
		}
	}
	m.Params.ToolCallParser, m.Params.ReasoningParser = "", ""
	argv, _ = m.Command("127.0.0.1", 8000, "tcp://127.0.0.1:5557")
	if line := strings.Join(argv, " "); strings.Contains(line, "parser") {
		t.Fatalf("a mock engine without parsers got %q", line)
	}
}

// TestMockerRoleCommand: the mock engine's command line carries the role and transfer
// flags; an SGLang-dialect prefill engine's transfer port is its bootstrap port.
func TestMockerRoleCommand(t *testing.T) {
	m := mocker(t, "", server.RolePrefill)
	m.Params.KVTransfer = server.KVTransferOptions{Bandwidth: 1e9, BytesPerToken: 4096, Timeout: 30 * time.Second,
		LoadFailurePolicy: "recompute"}
	argv, _ := m.Command("127.0.0.1", 8000, "tcp://127.0.0.1:5557")
	line := strings.Join(argv, " ")
	for _, want := range []string{"--role prefill", "--kv-transfer-host 127.0.0.1 --kv-transfer-port 0", "--kv-transfer-bandwidth 1e+09",
		"--kv-bytes-per-token 4096", "--kv-transfer-timeout 30s", "--kv-load-failure-policy recompute"} {
		if !strings.Contains(line, want) {
			t.Errorf("command %q lacks %q", line, want)
		}
	}
	if _, _, ok := m.Bootstrap(); ok {
		t.Fatal("a vLLM-dialect mock engine has a bootstrap address")
	}
	m.Params.Dialect = server.DialectSGLang
	argv, _ = m.Command("127.0.0.1", 8000, "tcp://127.0.0.1:5557")
	host, port, ok := m.Bootstrap()
	if !ok || host != "127.0.0.1" || port == 0 || !slices.Contains(argv, "--kv-transfer-port") ||
		argv[slices.Index(argv, "--kv-transfer-port")+1] != itoa(port) {
		t.Fatalf("bootstrap %s:%d %v in %q", host, port, ok, argv)
	}
	m.Params.Role = server.RoleDecode
	m.Command("127.0.0.1", 8000, "tcp://127.0.0.1:5557")
	if _, _, ok := m.Bootstrap(); ok {
		t.Fatal("a decode engine has a bootstrap address")
	}
	m.Params.Role = ""
	argv, _ = m.Command("127.0.0.1", 8000, "tcp://127.0.0.1:5557")
	if slices.Contains(argv, "--role") {
		t.Fatalf("an aggregated engine got --role: %q", argv)
	}
}

func itoa(n int) string { b, _ := json.Marshal(n); return string(b) }

// TestCommandCarriesTheParameters: the command line's flags, parsed as `turbine mocker`
// parses them (server.Params.Flags), give back the launcher's parameters, with the KV
// transfer port's address of the start and the dialect's KV event settings.
func TestCommandCarriesTheParameters(t *testing.T) {
	for _, d := range server.Dialects {
		t.Run(string(d), func(t *testing.T) {
			m := mocker(t, d, server.RoleDecode)
			m.Params.Engine.Seed, m.Params.KVTransfer.BytesPerToken, m.Params.ToolCallParser = 7, 4096, "hermes"
			m.Extra = []string{"--max-num-seqs", "3"}
			argv, _ := m.Command("10.0.0.1", 8000, "tcp://127.0.0.1:5557")
			got := server.DefaultParams()
			fs := flag.NewFlagSet("mocker", flag.ContinueOnError)
			got.Flags(fs)
			var host, model, tokenizer, events string
			var port int
			fs.StringVar(&host, "host", "", "")
			fs.IntVar(&port, "port", 0, "")
			fs.StringVar(&model, "served-model-name", "", "")
			fs.StringVar(&tokenizer, "tokenizer", "", "")
			fs.StringVar(&events, "kv-events-config", "", "")
			if argv[0] != "turbine" || argv[1] != "mocker" {
				t.Fatalf("argv %q", argv)
			}
			if err := fs.Parse(argv[2:]); err != nil {
				t.Fatal(err)
			}
			want := m.Params
			want.KVTransfer.Host, want.Engine.MaxNumSeqs = "10.0.0.1", 3
			if d == server.DialectTRTLLM {
				want.EventBufferMaxSize = 16384
			} else if !strings.Contains(events, `"endpoint":"tcp://127.0.0.1:5557"`) {
				t.Fatalf("--kv-events-config %q", events)
			}
			if got != want || host != "10.0.0.1" || port != 8000 || model != "m" || tokenizer != "builtin:cl100k_base" {
				t.Fatalf("parsed %+v (%s:%d %s %s)\nwant %+v", got, host, port, model, tokenizer, want)
			}
		})
	}
}

// TestEngineClientsBoundIdleConnections: after a burst of streams twice the idle bound,
// each dialect's engine client keeps at most the bound of connections open to its
// engine; the others are closed as their streams end.
func TestEngineClientsBoundIdleConnections(t *testing.T) {
	bound := enginehttp.MaxIdleConnsPerEngine
	n := 2 * bound
	for _, tc := range []struct {
		dialect server.DialectName
		path    string
	}{
		{server.DialectVLLM, "/v1/completions"},
		{server.DialectSGLang, "/generate"},
		{server.DialectTRTLLM, "/v1/completions"},
	} {
		t.Run(string(tc.dialect), func(t *testing.T) {
			cfg := enginetest.MockConfig(1000, 1)
			cfg.NumGPUBlocks = 4 * n
			srv, err := server.New(server.Options{Params: server.Params{Engine: cfg, Dialect: tc.dialect}, ServedModelName: "m",
				Model: enginetest.Model(t)})
			if err != nil {
				t.Fatal(err)
			}
			srv.Start()
			t.Cleanup(func() { _ = srv.Close() })
			hs, conns := enginetest.ServeCounted(t, enginetest.Burst(n, tc.path, srv.Handler()))
			e := mocker(t, tc.dialect, "").Connect(hs.URL)
			ctx := enginetest.Ctx(t)
			errs := make(chan error, n)
			var wg sync.WaitGroup
			for i := range n {
				wg.Add(1)
				go func() {
					defer wg.Done()
					prompt := enginetest.Prompt(16)
					prompt[0] = uint32(1000 + i)
					errs <- e.Generate(ctx, fmt.Sprintf("r%d", i), prompt, &messages.SamplingParams{MaxTokens: 2, IgnoreEos: true},
						func(engines.Chunk) error { return nil })
				}()
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				if err != nil {
					t.Fatalf("Generate: %v", err)
				}
			}
			conns.WaitFor(t, fmt.Sprintf("after a burst of %d streams", n), func(open, _ int) bool { return open <= bound })
		})
	}
}

// disaggMock runs a mock engine in process for disaggregated tests (small KV transfers).
func disaggMock(t *testing.T, dialect server.DialectName, role server.Role) (*server.Server, string) {
	t.Helper()
	return enginetest.StartMock(t, server.Options{Params: server.Params{Engine: enginetest.MockConfig(1000, 5), Dialect: dialect,
		Role: role, KVTransfer: server.KVTransferOptions{BytesPerToken: 512}}, PollWait: 50 * time.Millisecond}, nil)
}

// collect runs a request and returns its chunks.
func collect(t *testing.T, e engines.Engine, id string, prompt []uint32, s *messages.SamplingParams) ([]engines.Chunk, error) {
	t.Helper()
	var out []engines.Chunk
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	err := e.Generate(ctx, id, prompt, s, func(c engines.Chunk) error { out = append(out, c); return nil })
	return out, err
}

// idle waits until a mock engine holds no request and no pinned or active block.
func idle(t *testing.T, s *server.Server) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		st := s.Stats()
		if st.Running+st.Waiting == 0 && st.ActiveBlocks == 0 && st.PinnedBlocks == 0 && s.TransferStats().Pins == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("engine not idle: %+v", st)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// TestDecodeLegKVLoadFailure: in every dialect, a decode leg whose prefill engine is
// gone (nothing listens at its transfer port) fails with engines.ErrKVTransfer, whose
// tag survives the worker's "engine: <error>" text; a malformed decode leg fails with
// an ordinary error.
func TestDecodeLegKVLoadFailure(t *testing.T) {
	gone := deadPort(t)
	prompt := make([]uint32, 50) // three full blocks of 16 and two tokens
	for i := range prompt {
		prompt[i] = uint32(700 + 3*i)
	}
	for _, tc := range []struct {
		dialect server.DialectName
		leg     *messages.DisaggParams
	}{
		{server.DialectVLLM, &messages.DisaggParams{Leg: messages.Leg_LEG_DECODE, KvTransferParams: `{"do_remote_prefill":true,"remote_engine_id":"e",` +
			`"remote_block_ids":[0,1,2],"remote_host":"127.0.0.1","remote_port":` + itoa(gone) + `,"remote_request_id":"p1"}`}},
		{server.DialectSGLang, &messages.DisaggParams{Leg: messages.Leg_LEG_DECODE, BootstrapHost: "127.0.0.1", BootstrapPort: int32(gone), BootstrapRoom: 9}},
		{server.DialectTRTLLM, &messages.DisaggParams{Leg: messages.Leg_LEG_DECODE, KvTransferParams: `{"request_type":"context_only","ctx_request_id":5,` +
			`"first_gen_tokens":[1],"encoded_opaque_state":"` + kvHandle(gone) + `"}`}},
	} {
		t.Run(string(tc.dialect), func(t *testing.T) {
			srv, url := disaggMock(t, tc.dialect, server.RoleDecode)
			e := mocker(t, tc.dialect, server.RoleDecode).Connect(url)
			if c, ok := e.(interface{ Close() error }); ok {
				t.Cleanup(func() { c.Close() })
			}
			_, err := collect(t, e, "d1", prompt, &messages.SamplingParams{MaxTokens: 4, IgnoreEos: true, Disagg: tc.leg})
			if !errors.Is(err, engines.ErrKVTransfer) {
				t.Fatalf("decode leg without its prefill engine: %v, want engines.ErrKVTransfer", err)
			}
			_, err = collect(t, e, "d2", prompt, &messages.SamplingParams{MaxTokens: 4, IgnoreEos: true, MinTokens: 9})
			if err == nil || errors.Is(err, engines.ErrKVTransfer) {
				t.Fatalf("a refused aggregated request: %v, want an error that is no KV transfer failure", err)
			}
			idle(t, srv)
		})
	}
}

// deadPort returns a local TCP port nothing listens on.
func deadPort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	return port
}

// kvHandle is the mock engine's TensorRT-LLM opaque state of context request 5 on a
// transfer port.
func kvHandle(port int) string {
	return kvtransfer.Handle{EngineID: "e", Host: "127.0.0.1", Port: port, Key: "5", BlockIDs: []int64{0, 1, 2}}.Encode()
}

// TestSubscribeUnknownEndpoint: the trtllm dialect's poller refuses an endpoint no
// Command named.
func TestSubscribeUnknownEndpoint(t *testing.T) {
	m := mocker(t, server.DialectTRTLLM, "")
	err := m.SubscribeKVEvents(context.Background(), "tcp://127.0.0.1:1", func(kv.Batch) {})
	if err == nil || errors.Is(err, context.Canceled) {
		t.Fatalf("SubscribeKVEvents of an unknown endpoint: %v", err)
	}
}
