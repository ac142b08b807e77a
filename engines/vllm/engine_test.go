package vllm

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/turbine-llm/turbine/engines"
	"github.com/turbine-llm/turbine/engines/internal/enginetest"
	"github.com/turbine-llm/turbine/engines/mocker/server"
	"github.com/turbine-llm/turbine/messages"
)

// disaggMock runs a mock engine in vLLM's dialect for disaggregated tests (small KV
// transfers).
func disaggMock(t *testing.T, role server.Role) (*server.Server, string) {
	t.Helper()
	cfg := enginetest.MockConfig(1000, 5)
	return enginetest.StartMock(t, server.Options{Params: server.Params{Engine: cfg, Dialect: server.DialectVLLM, Role: role,
		KVTransfer: server.KVTransferOptions{BytesPerToken: 512}}}, nil)
}

// mockEngine is the adapter as the mock engine's launcher connects it: with the mock
// engine's KV release.
func mockEngine(url string) engines.Engine {
	return Connect(url, EngineOptions{Model: "m", ReleaseKV: server.ReleaseVLLM})
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
	preSrv, preURL := disaggMock(t, server.RolePrefill)
	decSrv, decURL := disaggMock(t, server.RoleDecode)
	pre, dec := mockEngine(preURL), mockEngine(decURL)
	prompt := disaggPrompt()
	sampling := func(leg messages.Leg, params string) *messages.SamplingParams {
		s := &messages.SamplingParams{MaxTokens: 12, IgnoreEos: true}
		if leg != messages.Leg_LEG_AGGREGATED {
			s.Disagg = &messages.DisaggParams{Leg: leg, KvTransferParams: params}
		}
		return s
	}
	agg, err := collect(t, dec, "agg", prompt, sampling(messages.Leg_LEG_AGGREGATED, ""))
	if err != nil {
		t.Fatal(err)
	}
	want := tokensOf(agg)

	prefill := func(id string) string {
		t.Helper()
		chunks, err := collect(t, pre, id, prompt, sampling(messages.Leg_LEG_PREFILL, ""))
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
	chunks, err := collect(t, dec, "r1", prompt, sampling(messages.Leg_LEG_DECODE, params))
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
	if _, err := collect(t, dec, "r2", prompt, sampling(messages.Leg_LEG_DECODE, string(bad))); err == nil || !strings.Contains(err.Error(), "remote_engine_id") {
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
	real := Connect(preURL, EngineOptions{Model: "m"})
	if err := real.(engines.KVReleaser).ReleaseKV(context.Background(), "r3", params); err != nil {
		t.Fatal(err)
	}
	if st := preSrv.Stats(); st.PinnedRequests != 1 {
		t.Fatalf("the real vLLM's ReleaseKV released: %+v", st)
	}
	rel.ReleaseKV(context.Background(), "r3", params)
	idle(t, preSrv)

	// Malformed legs are refused before anything is sent.
	for _, s := range []*messages.SamplingParams{sampling(messages.Leg(9), ""), sampling(messages.Leg_LEG_DECODE, ""),
		sampling(messages.Leg_LEG_DECODE, "[1]")} {
		if _, err := collect(t, dec, "x", prompt, s); err == nil {
			t.Fatalf("leg %+v accepted", s.Disagg)
		}
	}
	idle(t, preSrv)
	idle(t, decSrv)
}

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
			srv, url := enginetest.StartMock(t, server.Options{Params: server.Params{Engine: enginetest.MockConfig(100, 3),
				Dialect: server.DialectVLLM, Role: server.RolePrefill, KVTransfer: server.KVTransferOptions{BytesPerToken: 512}}}, gate.Wrap)
			t.Cleanup(func() { gate.OpenAdmit(); gate.OpenAnswer() })
			o := EngineOptions{Model: "m"}
			if tc.mock {
				o.ReleaseKV = server.ReleaseVLLM
			}
			e := Connect(url, o)
			ctx, cancel := context.WithCancel(enginetest.Ctx(t))
			var chunks []engines.Chunk
			done := make(chan error, 1)
			go func() {
				done <- e.Generate(ctx, "leg", disaggPrompt(), &messages.SamplingParams{MaxTokens: 1,
					Disagg: &messages.DisaggParams{Leg: messages.Leg_LEG_PREFILL}}, func(c engines.Chunk) error { chunks = append(chunks, c); return nil })
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
