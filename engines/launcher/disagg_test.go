package launcher

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/turbine-llm/turbine/engines"
	"github.com/turbine-llm/turbine/engines/internal/enginetest"
	"github.com/turbine-llm/turbine/engines/mocker"
	"github.com/turbine-llm/turbine/engines/mocker/kvtransfer"
	"github.com/turbine-llm/turbine/engines/mocker/server"
	"github.com/turbine-llm/turbine/gateway/preprocess"
	"github.com/turbine-llm/turbine/messages"
)

// disaggMock runs a mock engine in process for disaggregated tests (small KV transfers).
func disaggMock(t *testing.T, dialect server.Dialect, role server.Role) (*server.Server, string) {
	t.Helper()
	model, err := preprocess.LoadModel("builtin:cl100k_base")
	if err != nil {
		t.Fatal(err)
	}
	cfg := mocker.DefaultConfig()
	cfg.BlockSize, cfg.NumGPUBlocks, cfg.MaxModelLen, cfg.SpeedupRatio, cfg.Seed = testBlock, 512, 4096, 1000, 5
	s, err := server.New(server.Options{Engine: cfg, ServedModelName: "m", Model: model, Dialect: dialect, Role: role,
		KVTransfer: server.KVTransferOptions{BytesPerToken: 512}, PollWait: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	s.Start()
	hs := httptest.NewServer(s.Handler())
	t.Cleanup(func() {
		hs.Close()
		_ = s.Close()
	})
	return s, hs.URL
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

func tokensOf(chunks []engines.Chunk) []uint32 {
	var out []uint32
	for _, c := range chunks {
		out = append(out, c.TokenIDs...)
	}
	return out
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

func disaggPrompt() []uint32 {
	p := make([]uint32, 50) // three full blocks of 16 and two tokens
	for i := range p {
		p[i] = uint32(700 + 3*i)
	}
	return p
}

// TestVLLMDisaggregatedLegs drives the vLLM adapter's legs against two mock engines:
// the prefill leg's chunk carries kv_transfer_params, the decode leg given them produces
// the aggregated output, and ReleaseKV frees blocks a decode leg will not read.
func TestVLLMDisaggregatedLegs(t *testing.T) {
	preSrv, preURL := disaggMock(t, server.DialectVLLM, server.RolePrefill)
	decSrv, decURL := disaggMock(t, server.DialectVLLM, server.RoleDecode)
	m := &Mocker{Model: "m", BlockSize: testBlock, Role: RolePrefill}
	pre, dec := m.Connect(preURL), m.Connect(decURL)
	prompt := disaggPrompt()
	sampling := func(leg, params string) *messages.SamplingParams {
		s := &messages.SamplingParams{MaxTokens: 12, IgnoreEos: true}
		if leg != "" {
			s.Disagg = &messages.DisaggParams{Leg: leg, KvTransferParams: params}
		}
		return s
	}
	agg, err := collect(t, dec, "agg", prompt, sampling("", ""))
	if err != nil {
		t.Fatal(err)
	}
	want := tokensOf(agg)

	prefill := func(id string) string {
		t.Helper()
		chunks, err := collect(t, pre, id, prompt, sampling(LegPrefill, ""))
		if err != nil {
			t.Fatal(err)
		}
		if len(chunks) != 1 || chunks[0].FinishReason != "length" || len(chunks[0].TokenIDs) != 1 || chunks[0].PromptTokens != len(prompt) {
			t.Fatalf("prefill leg chunks %+v", chunks)
		}
		var kp map[string]any
		if err := json.Unmarshal([]byte(chunks[0].KVTransferParams), &kp); err != nil || kp["do_remote_prefill"] != true ||
			len(kp["remote_block_ids"].([]any)) != 3 {
			t.Fatalf("prefill leg kv_transfer_params %q", chunks[0].KVTransferParams)
		}
		if st := preSrv.Stats(); st.PinnedRequests != 1 {
			t.Fatalf("prefill engine %+v", st)
		}
		return chunks[0].KVTransferParams
	}

	// The whole flow.
	params := prefill("r1")
	chunks, err := collect(t, dec, "r1", prompt, sampling(LegDecode, params))
	if err != nil {
		t.Fatal(err)
	}
	if got := tokensOf(chunks); !slices.Equal(got, want) {
		t.Fatalf("decode leg %v, want %v", got, want)
	}
	if last := chunks[len(chunks)-1]; last.KVTransferParams != "" || last.PromptTokens != len(prompt) || last.CompletionTokens != 12 {
		t.Fatalf("decode leg's last chunk %+v", last)
	}
	idle(t, preSrv)

	// A decode leg refused by its engine: the worker releases the prefill leg's blocks.
	params = prefill("r2")
	var kp map[string]any
	json.Unmarshal([]byte(params), &kp)
	kp["remote_engine_id"] = "someone-else"
	bad, _ := json.Marshal(kp)
	if _, err := collect(t, dec, "r2", prompt, sampling(LegDecode, string(bad))); err == nil || !strings.Contains(err.Error(), "remote_engine_id") {
		t.Fatalf("refused decode leg: %v", err)
	}
	rel, ok := pre.(engines.KVReleaser)
	if !ok {
		t.Fatal("the mock engine's vLLM client is no KVReleaser")
	}
	if err := rel.ReleaseKV(context.Background(), "r2", params); err != nil {
		t.Fatal(err)
	}
	idle(t, preSrv)
	if err := rel.ReleaseKV(context.Background(), "r2", params); err != nil {
		t.Fatalf("a second release: %v", err)
	}
	if err := rel.ReleaseKV(context.Background(), "r0", ""); err != nil {
		t.Fatalf("releasing nothing: %v", err)
	}
	if err := rel.ReleaseKV(context.Background(), "r0", "{"); err == nil {
		t.Fatal("malformed parameters released")
	}

	// A real vLLM has no release API: ReleaseKV does nothing.
	params = prefill("r3")
	real := (&VLLM{spec: Spec{ServedModelName: "m"}}).Connect(preURL)
	if err := real.(engines.KVReleaser).ReleaseKV(context.Background(), "r3", params); err != nil {
		t.Fatal(err)
	}
	if st := preSrv.Stats(); st.PinnedRequests != 1 {
		t.Fatalf("the real vLLM's ReleaseKV released: %+v", st)
	}
	rel.ReleaseKV(context.Background(), "r3", params)
	idle(t, preSrv)

	// Malformed legs are refused before anything is sent.
	for _, s := range []*messages.SamplingParams{sampling("middle", ""), sampling(LegDecode, ""), sampling(LegDecode, "[1]")} {
		if _, err := collect(t, dec, "x", prompt, s); err == nil {
			t.Fatalf("leg %+v accepted", s.Disagg)
		}
	}
	idle(t, preSrv)
	idle(t, decSrv)
}

// TestMockerRoleCommand: the mock engine's command line carries the role and transfer
// flags; an SGLang-dialect prefill engine's transfer port is its bootstrap port.
func TestMockerRoleCommand(t *testing.T) {
	m := &Mocker{Executable: "turbine", Model: "m", Tokenizer: "builtin:cl100k_base", BlockSize: 16, Role: RolePrefill,
		KVTransferBandwidth: 1e9, KVBytesPerToken: 4096, KVTransferTimeout: 30 * time.Second, KVLoadFailurePolicy: "recompute"}
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
	m.Dialect = EngineSGLang
	argv, _ = m.Command("127.0.0.1", 8000, "tcp://127.0.0.1:5557")
	host, port, ok := m.Bootstrap()
	if !ok || host != "127.0.0.1" || port == 0 || !slices.Contains(argv, "--kv-transfer-port") ||
		argv[slices.Index(argv, "--kv-transfer-port")+1] != itoa(port) {
		t.Fatalf("bootstrap %s:%d %v in %q", host, port, ok, argv)
	}
	m.Role = RoleDecode
	m.Command("127.0.0.1", 8000, "tcp://127.0.0.1:5557")
	if _, _, ok := m.Bootstrap(); ok {
		t.Fatal("a decode engine has a bootstrap address")
	}
	m.Role = ""
	argv, _ = m.Command("127.0.0.1", 8000, "tcp://127.0.0.1:5557")
	if slices.Contains(argv, "--role") {
		t.Fatalf("an aggregated engine got --role: %q", argv)
	}

	l, err := New(withRole(minimal(EngineSGLang), RolePrefill))
	if err != nil {
		t.Fatal(err)
	}
	argv, _ = l.Command("10.0.0.5", 8000, "tcp://127.0.0.1:5557")
	host, port, ok = l.(Bootstrapper).Bootstrap()
	if !ok || host != "10.0.0.5" || argv[slices.Index(argv, "--disaggregation-bootstrap-port")+1] != itoa(port) {
		t.Fatalf("SGLang bootstrap %s:%d %v in %q", host, port, ok, argv)
	}
}

func itoa(n int) string { b, _ := json.Marshal(n); return string(b) }

// TestVLLMPrefillLegCancelled: a prefill leg cancelled once its engine pinned the
// prompt's blocks, before the answer naming them arrived, still passes that answer to
// fn on the mock engine (whose blocks ReleaseKV then frees) and reports the
// cancellation; on vLLM, which cannot release pinned blocks on request, a leg not
// answered yet is aborted at once.
func TestVLLMPrefillLegCancelled(t *testing.T) {
	for _, tc := range []struct {
		name string
		mock bool
	}{
		{"mock engine: answered after the cancel", true},
		{"vLLM: aborted before its answer", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// The mock engine's answer is held once written (blocks pinned); on vLLM the
			// request itself is held, so that the cancel comes before any answer.
			gate := enginetest.NewGate("/v1/completions", !tc.mock, tc.mock)
			srv, url := enginetest.StartMock(t, server.Options{Engine: enginetest.MockConfig(100, 3), Dialect: server.DialectVLLM,
				Role: server.RolePrefill, KVTransfer: server.KVTransferOptions{BytesPerToken: 512}}, gate.Wrap)
			t.Cleanup(func() { gate.OpenAdmit(); gate.OpenAnswer() })
			e := newVLLMEngine(url, "m", tc.mock)
			ctx, cancel := context.WithCancel(enginetest.Ctx(t))
			var chunks []engines.Chunk
			done := make(chan error, 1)
			go func() {
				done <- e.Generate(ctx, "leg", disaggPrompt(), &messages.SamplingParams{MaxTokens: 1,
					Disagg: &messages.DisaggParams{Leg: LegPrefill}}, func(c engines.Chunk) error { chunks = append(chunks, c); return nil })
			}()
			if tc.mock {
				<-gate.Writing
			} else {
				<-gate.Arrived
			}
			cancel()
			gate.OpenAnswer()
			var err error
			select {
			case err = <-done:
			case <-time.After(10 * time.Second):
				t.Fatal("Generate did not return within 10 s of the cancel")
			}
			if !errors.Is(err, context.Canceled) {
				t.Fatalf("Generate returned %v, want context.Canceled", err)
			}
			if !tc.mock {
				if len(chunks) != 0 {
					t.Fatalf("an aborted leg passed chunks %+v", chunks)
				}
				gate.OpenAdmit()
				idle(t, srv)
				return
			}
			var kp struct {
				Blocks []int `json:"remote_block_ids"`
			}
			if len(chunks) != 1 || json.Unmarshal([]byte(chunks[0].KVTransferParams), &kp) != nil || len(kp.Blocks) != 3 {
				t.Fatalf("chunks %+v: want the answer naming 3 pinned blocks", chunks)
			}
			if st := srv.Stats(); st.PinnedRequests != 1 {
				t.Fatalf("pinned %+v, want the leg's blocks", st)
			}
			if err := e.(engines.KVReleaser).ReleaseKV(enginetest.Ctx(t), "leg", chunks[0].KVTransferParams); err != nil {
				t.Fatal(err)
			}
			idle(t, srv)
		})
	}
}

// TestDecodeLegKVLoadFailure: in every dialect, a decode leg whose prefill engine is
// gone (nothing listens at its transfer port) fails with engines.ErrKVTransfer, whose
// tag survives the worker's "engine: <error>" text; a malformed decode leg fails with
// an ordinary error.
func TestDecodeLegKVLoadFailure(t *testing.T) {
	gone := deadPort(t)
	prompt := disaggPrompt()
	for _, tc := range []struct {
		dialect string
		leg     *messages.DisaggParams
	}{
		{EngineVLLM, &messages.DisaggParams{Leg: LegDecode, KvTransferParams: `{"do_remote_prefill":true,"remote_engine_id":"e",` +
			`"remote_block_ids":[0,1,2],"remote_host":"127.0.0.1","remote_port":` + itoa(gone) + `,"remote_request_id":"p1"}`}},
		{EngineSGLang, &messages.DisaggParams{Leg: LegDecode, BootstrapHost: "127.0.0.1", BootstrapPort: int32(gone), BootstrapRoom: 9}},
		{EngineTRTLLM, &messages.DisaggParams{Leg: LegDecode, KvTransferParams: `{"request_type":"context_only","ctx_request_id":5,` +
			`"first_gen_tokens":[1],"encoded_opaque_state":"` + kvHandle(gone) + `"}`}},
	} {
		t.Run(tc.dialect, func(t *testing.T) {
			srv, url := disaggMock(t, server.Dialect(tc.dialect), server.RoleDecode)
			e := (&Mocker{Model: "m", BlockSize: testBlock, Dialect: tc.dialect, Role: RoleDecode}).Connect(url)
			if c, ok := e.(interface{ Close() error }); ok {
				t.Cleanup(func() { c.Close() })
			}
			_, err := collect(t, e, "d1", prompt, &messages.SamplingParams{MaxTokens: 4, IgnoreEos: true, Disagg: tc.leg})
			if !errors.Is(err, engines.ErrKVTransfer) || !engines.IsKVTransferFailure("engine: "+err.Error()) {
				t.Fatalf("decode leg without its prefill engine: %v, want engines.ErrKVTransfer", err)
			}
			_, err = collect(t, e, "d2", prompt, &messages.SamplingParams{MaxTokens: 4, IgnoreEos: true, MinTokens: 9})
			if err == nil || errors.Is(err, engines.ErrKVTransfer) || engines.IsKVTransferFailure(err.Error()) {
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
