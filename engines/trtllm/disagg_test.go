package trtllm

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

func roleEngine(t *testing.T, role server.Role, mock bool) (*server.Server, *Engine) {
	t.Helper()
	srv, url := enginetest.StartMock(t, server.Options{Params: server.Params{Engine: enginetest.MockConfig(100, 3), Dialect: server.DialectTRTLLM,
		Role: role, KVTransfer: server.KVTransferOptions{BytesPerToken: 256}}}, nil)
	c, err := New(url, nil)
	if err != nil {
		t.Fatal(err)
	}
	e, err := NewEngine(c, EngineOptions{Model: "m", BlockSize: 16, ReleaseKV: mockRelease(mock)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	return srv, e
}

// mockRelease is the KV release the mock engine's launcher gives the adapter (mock), or
// none, as on trtllm-serve.
func mockRelease(mock bool) func(ctx context.Context, requestID, kvTransferParams string) error {
	if mock {
		return server.ReleaseTRTLLM
	}
	return nil
}

func run(ctx context.Context, e *Engine, p []uint32, s *messages.SamplingParams) ([]engines.Chunk, error) {
	var out []engines.Chunk
	err := e.Generate(ctx, "r", p, s, func(c engines.Chunk) error { out = append(out, c); return nil })
	return out, err
}

func tokens(cs []engines.Chunk) []uint32 {
	var out []uint32
	for _, c := range cs {
		out = append(out, c.TokenIDs...)
	}
	return out
}

func waitFree(t *testing.T, s *server.Server) {
	t.Helper()
	eventually(t, "no pinned or active blocks", func() bool {
		st := s.Stats()
		return st.ActiveBlocks == 0 && st.PinnedBlocks == 0 && s.TransferStats().Pins == 0
	})
}

// TestDisaggregatedLegs: a context_only leg's chunk carries disaggregated_params; the
// generation_only leg given them produces the aggregated output; ReleaseKV frees a
// context leg's blocks on the mock engine and does nothing on trtllm-serve.
func TestDisaggregatedLegs(t *testing.T) {
	_, agg := roleEngine(t, server.RoleAggregated, true)
	preSrv, pre := roleEngine(t, server.RolePrefill, true)
	decSrv, dec := roleEngine(t, server.RoleDecode, true)
	ctx := enginetest.Ctx(t)
	p := enginetest.Prompt(40)
	base := func() *messages.SamplingParams { return &messages.SamplingParams{MaxTokens: 10, IgnoreEos: true} }
	cs, err := run(ctx, agg, p, base())
	if err != nil {
		t.Fatal(err)
	}
	want := tokens(cs)

	prefill := func() string {
		t.Helper()
		s := base()
		s.Disagg = &messages.DisaggParams{Leg: messages.Leg_LEG_PREFILL}
		cs, err := run(ctx, pre, p, s)
		if err != nil {
			t.Fatal(err)
		}
		var dp map[string]any
		if len(cs) != 1 || cs[0].FinishReason != "length" || json.Unmarshal([]byte(cs[0].KVTransferParams), &dp) != nil ||
			dp["request_type"] != "context_only" || dp["encoded_opaque_state"] == nil || cs[0].PromptTokens != 40 {
			t.Fatalf("context leg %+v", cs)
		}
		return cs[0].KVTransferParams
	}
	decode := func(params string) *messages.SamplingParams {
		s := base()
		s.Disagg = &messages.DisaggParams{Leg: messages.Leg_LEG_DECODE, KvTransferParams: params}
		return s
	}

	cs, err = run(ctx, dec, p, decode(prefill()))
	if err != nil {
		t.Fatal(err)
	}
	if got := tokens(cs); !slices.Equal(got, want) {
		t.Fatalf("generation leg %v, want %v", got, want)
	}
	if ts := decSrv.TransferStats(); ts.Reads != 1 {
		t.Fatalf("transfers %+v", ts)
	}
	waitFree(t, preSrv)

	params := prefill()
	real, err := NewEngine(pre.c, EngineOptions{Model: "m", BlockSize: 16})
	if err != nil {
		t.Fatal(err)
	}
	if err := real.ReleaseKV(ctx, "r", params); err != nil || preSrv.Stats().PinnedRequests != 1 {
		t.Fatalf("trtllm-serve's ReleaseKV: %v %+v", err, preSrv.Stats())
	}
	if err := pre.ReleaseKV(ctx, "r", params); err != nil {
		t.Fatal(err)
	}
	waitFree(t, preSrv)
	if _, err := run(ctx, dec, p, decode(params)); !errors.Is(err, engines.ErrKVTransfer) || !strings.Contains(err.Error(), "KV transfer from") {
		t.Fatalf("generation leg after the release: %v, want engines.ErrKVTransfer", err)
	}
	if err := pre.ReleaseKV(ctx, "r", "{}"); err == nil {
		t.Fatal("parameters without a handle released")
	}
	for _, s := range []*messages.SamplingParams{decode(""), decode("[]"), {MaxTokens: 1, Disagg: &messages.DisaggParams{Leg: messages.Leg(9)}}} {
		if _, err := run(ctx, dec, p, s); err == nil {
			t.Fatalf("leg %+v accepted", s.Disagg)
		}
	}
	waitFree(t, preSrv)
	waitFree(t, decSrv)
}

// TestContextLegCancelled: a context_only leg cancelled once its engine pinned the
// prompt's blocks, before the answer naming them arrived, still passes that answer to
// fn on the mock engine (whose blocks ReleaseKV then frees) and reports the
// cancellation; on trtllm-serve, which cannot release pinned blocks on request, a leg
// not answered yet is aborted at once.
func TestContextLegCancelled(t *testing.T) {
	for _, tc := range []struct {
		name string
		mock bool
	}{
		{"mock engine: answered after the cancel", true},
		{"trtllm-serve: aborted before its answer", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			gate := enginetest.NewGate("/v1/completions", !tc.mock, tc.mock)
			srv, url := enginetest.StartMock(t, server.Options{Params: server.Params{Engine: enginetest.MockConfig(100, 3), Dialect: server.DialectTRTLLM,
				Role: server.RolePrefill, KVTransfer: server.KVTransferOptions{BytesPerToken: 256}}}, gate.Wrap)
			t.Cleanup(func() { gate.OpenAdmit(); gate.OpenAnswer() })
			c, err := New(url, nil)
			if err != nil {
				t.Fatal(err)
			}
			e, err := NewEngine(c, EngineOptions{Model: "m", BlockSize: 16, ReleaseKV: mockRelease(tc.mock)})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { e.Close() })
			ctx, cancel := context.WithCancel(enginetest.Ctx(t))
			var chunks []engines.Chunk
			done := make(chan error, 1)
			go func() {
				done <- e.Generate(ctx, "leg", enginetest.Prompt(40), &messages.SamplingParams{MaxTokens: 1,
					Disagg: &messages.DisaggParams{Leg: messages.Leg_LEG_PREFILL}}, func(c engines.Chunk) error { chunks = append(chunks, c); return nil })
			}()
			if tc.mock {
				<-gate.Writing
			} else {
				<-gate.Arrived
			}
			cancel()
			gate.OpenAnswer()
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
				waitFree(t, srv)
				return
			}
			var dp map[string]any
			if len(chunks) != 1 || json.Unmarshal([]byte(chunks[0].KVTransferParams), &dp) != nil || dp["encoded_opaque_state"] == nil {
				t.Fatalf("chunks %+v: want the answer with the pinned blocks' handle", chunks)
			}
			if st := srv.Stats(); st.PinnedRequests != 1 {
				t.Fatalf("pinned %+v, want the leg's blocks", st)
			}
			if err := e.ReleaseKV(enginetest.Ctx(t), "leg", chunks[0].KVTransferParams); err != nil {
				t.Fatal(err)
			}
			waitFree(t, srv)
		})
	}
}
