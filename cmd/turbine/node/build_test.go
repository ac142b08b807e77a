package node

import (
	"errors"
	"flag"
	"io"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/turbine-llm/turbine/cmd/turbine/internal/options"
	"github.com/turbine-llm/turbine/engines/mocker/launch"
	"github.com/turbine-llm/turbine/engines/mocker/server"
	"github.com/turbine-llm/turbine/messages"
	"google.golang.org/protobuf/proto"
)

const fixture = "../testdata/tiny-qwen3"

var errTestBinary = errors.New("the mock engines run as a test binary")

// bootBuilder returns the builder of a node started with args (turbine's flags only).
func bootBuilder(t *testing.T, args ...string) *builder {
	t.Helper()
	o := Defaults()
	_, help, err := options.Parse(options.Command{Name: "node", Flags: func(fs *flag.FlagSet) { flags(&o, fs) },
		Validate: o.Validate, Log: &o.Log}, args, io.Discard)
	if err != nil || help {
		t.Fatalf("parse %v: %v", args, err)
	}
	card, err := o.Engine.NodeCard(o.EngineName, o.Launch)
	if err != nil {
		t.Fatal(err)
	}
	return &builder{o: o, boot: card, self: "/usr/local/bin/turbine"}
}

func TestBuilderRealEngines(t *testing.T) {
	for _, tc := range []struct {
		name    string
		args    []string
		req     func(boot *messages.ModelCard) *messages.StartWorker
		argv    []string // expected, after the executable; "…" skips the rest
		timeout time.Duration
	}{
		{"vllm boot worker: the engine derives the context length",
			[]string{"--engine", "vllm", "--model", fixture, "--served-model-name", "qwen"},
			func(boot *messages.ModelCard) *messages.StartWorker {
				return &messages.StartWorker{Engine: "vllm", TensorParallelSize: 1, Card: boot, EngineArgs: []string{"--enforce-eager"}}
			},
			[]string{"serve", fixture, "--served-model-name", "qwen", "--host", "127.0.0.1", "--port", "8000",
				"--tensor-parallel-size", "1", "--block-size", "64", "--enable-prefix-caching", "--enable-prompt-tokens-details", "--max-num-seqs", "256",
				"--max-num-batched-tokens", "8192", "--kv-events-config", "…"},
			options.RealEngineReadyTimeout},
		{"sglang with --max-model-len, --python, a memory share and --ready-timeout",
			[]string{"--engine", "sglang", "--model", fixture, "--max-model-len", "4096", "--python", "/venv/bin/python",
				"--gpu-memory-utilization", "0.8", "--ready-timeout", "30s"},
			func(boot *messages.ModelCard) *messages.StartWorker {
				return &messages.StartWorker{Engine: "sglang", TensorParallelSize: 2, Card: boot}
			},
			[]string{"-m", "sglang.launch_server", "--model-path", fixture, "--served-model-name", fixture, "--host", "127.0.0.1",
				"--port", "8000", "--tp-size", "2", "--mem-fraction-static", "0.8", "--page-size", "64", "--context-length", "4096", "…"},
			30 * time.Second},
		{"trtllm worker of another model: its folder from the card, its context length",
			[]string{"--engine", "trtllm", "--model", fixture, "--engine-executable", "/opt/trt/bin/trtllm-serve"},
			func(boot *messages.ModelCard) *messages.StartWorker {
				c := proto.Clone(boot).(*messages.ModelCard)
				c.Model, c.ContextLength = "other", 2048
				return &messages.StartWorker{Engine: "trtllm", TensorParallelSize: 1, Card: c}
			},
			[]string{fixture, "--host", "127.0.0.1", "--port", "8000", "--backend", "pytorch", "--tp_size", "1",
				"--max_batch_size", "256", "--max_num_tokens", "8192", "--max_seq_len", "2048", "--extra_llm_api_options", "…"},
			options.RealEngineReadyTimeout},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := bootBuilder(t, tc.args...)
			req := tc.req(b.boot)
			cfg, err := b.worker("n-0", req, []int{3})
			if err != nil {
				t.Fatal(err)
			}
			if c, ok := cfg.Launcher.(io.Closer); ok {
				defer c.Close()
			}
			argv, _ := cfg.Launcher.Command("127.0.0.1", 8000, "tcp://127.0.0.1:5557")
			got := argv[1:]
			if i := slices.Index(tc.argv, "…"); i >= 0 {
				got = got[:min(i, len(got))]
				tc.argv = tc.argv[:i]
			}
			if !slices.Equal(got, tc.argv) {
				t.Fatalf("argv %q\nwant %q", argv[1:], tc.argv)
			}
			if cfg.Card.Engine != req.Engine || cfg.ReadyTimeout != tc.timeout || !slices.Contains(cfg.Env, "CUDA_VISIBLE_DEVICES=3") {
				t.Fatalf("card engine %q, ready timeout %v, env %v", cfg.Card.Engine, cfg.ReadyTimeout, cfg.Env)
			}
		})
	}
}

func TestBuilderMocker(t *testing.T) {
	b := bootBuilder(t, "--model", fixture, "--served-model-name", "tiny", "--mocker-dialect", "sglang",
		"--kv-bytes-per-token", "4096", "--kv-transfer-bandwidth", "1e9", "--kv-load-failure-policy", "fail")
	if b.boot.Model != "tiny" || b.boot.ContextLength != 40960 || b.boot.Tokenizer != fixture ||
		!slices.Equal(b.boot.EosTokenIds, []uint32{261}) || b.boot.Architecture.GetArchitecture() != "Qwen3ForCausalLM" {
		t.Fatalf("boot card from the model folder: %v", b.boot)
	}
	cfg, err := b.worker("n-0", &messages.StartWorker{Engine: "mocker", Card: b.boot, EngineArgs: []string{"--seed", "3"}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	m, ok := cfg.Launcher.(*launch.Mocker)
	if !ok || m.Params.Dialect != "sglang" || m.Executable != "/usr/local/bin/turbine" || !slices.Equal(m.Extra, []string{"--seed", "3"}) ||
		m.Params.Engine.MaxModelLen != 40960 || cfg.ReadyTimeout != options.DefaultEngine().ReadyTimeout ||
		m.Params.KVTransfer.BytesPerToken != 4096 || m.Params.KVTransfer.Bandwidth != 1e9 || m.Params.KVTransfer.LoadFailurePolicy != "fail" {
		t.Fatalf("launcher %#v, ready timeout %v", cfg.Launcher, cfg.ReadyTimeout)
	}
	b.self, b.selfErr = "", errTestBinary
	if _, err := b.worker("n-1", &messages.StartWorker{Engine: "mocker", Card: b.boot}, nil); err != errTestBinary {
		t.Fatalf("mocker without a turbine binary: %v", err)
	}
}

func TestBuilderRefuses(t *testing.T) {
	b := bootBuilder(t, "--engine", "sglang", "--model", fixture, "--max-num-batched-tokens", "1000")
	_, err := b.worker("n-0", &messages.StartWorker{Engine: "sglang", TensorParallelSize: 1, Card: b.boot}, []int{0})
	if err == nil || !strings.Contains(err.Error(), "engine sglang: launcher: sglang: max batched tokens (--chunked-prefill-size) 1000") {
		t.Fatalf("error %v", err)
	}
}

func TestSplitEngineArgs(t *testing.T) {
	for _, tc := range []struct{ in, flags, engine []string }{
		{[]string{"--engine", "vllm"}, []string{"--engine", "vllm"}, nil},
		{[]string{"--engine", "vllm", "--", "--enforce-eager", "--", "x"}, []string{"--engine", "vllm"}, []string{"--enforce-eager", "--", "x"}},
		{[]string{"--"}, []string{}, []string{}},
	} {
		f, e := splitEngineArgs(tc.in)
		if !slices.Equal(f, tc.flags) || !slices.Equal(e, tc.engine) {
			t.Fatalf("splitEngineArgs(%q) = %q, %q", tc.in, f, e)
		}
	}
}

func TestDiscoverFakeGPUs(t *testing.T) {
	gpus, cpuOnly := discover(zerolog.Nop(), "2")
	if cpuOnly || len(gpus) != 2 || gpus[1].Index != 1 || !strings.Contains(gpus[1].Name, FakeGPUsEnv) {
		t.Fatalf("discover with %s=2: %v, cpu only %v", FakeGPUsEnv, gpus, cpuOnly)
	}
}

func TestBootTensorParallelSize(t *testing.T) {
	for _, tc := range []struct {
		engine   string
		tp, want int
	}{{"mocker", 0, 0}, {"mocker", 2, 2}, {"vllm", 0, 1}, {"trtllm", 4, 4}} {
		o := Options{EngineName: tc.engine, TensorParallelSize: tc.tp}
		if got := o.bootTensorParallelSize(); got != tc.want {
			t.Fatalf("%s with --tensor-parallel-size %d: %d GPUs, want %d", tc.engine, tc.tp, got, tc.want)
		}
	}
}

// TestBuilderRole: --worker-role reaches every worker's registration and its engine's
// launch (a real engine's spec; the mock engine's role).
func TestBuilderRole(t *testing.T) {
	for _, role := range []string{"aggregated", "prefill", "decode"} {
		t.Run(role, func(t *testing.T) {
			b := bootBuilder(t, "--engine", "vllm", "--model", fixture, "--worker-role", role)
			cfg, err := b.worker("n-0", &messages.StartWorker{Engine: "vllm", TensorParallelSize: 1, Card: b.boot}, []int{0})
			if err != nil {
				t.Fatal(err)
			}
			if cfg.Role != role {
				t.Fatalf("worker role %q, want %q", cfg.Role, role)
			}
			argv, _ := cfg.Launcher.Command("127.0.0.1", 8000, "tcp://127.0.0.1:5557")
			transfer := slices.Contains(argv, "--kv-transfer-config")
			if transfer != (role != "aggregated") {
				t.Fatalf("role %s: argv %q (KV transfer configured: %v)", role, argv, transfer)
			}
		})
	}
	b := bootBuilder(t, "--worker-role", "prefill")
	cfg, err := b.worker("n-0", &messages.StartWorker{Engine: "mocker", Card: b.boot}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if m := cfg.Launcher.(*launch.Mocker); m.Params.Role != server.RolePrefill || cfg.Role != "prefill" {
		t.Fatalf("mocker role %q, worker role %q; want prefill", m.Params.Role, cfg.Role)
	}
	if _, err := options.ParseWorkerRole("--worker-role", ""); err != nil {
		t.Fatalf("empty role: %v", err)
	}
}
