package trtllm

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/turbine-llm/turbine/engines"
	"github.com/turbine-llm/turbine/engines/internal/enginetest"
	"github.com/turbine-llm/turbine/engines/mocker/server"
	"github.com/turbine-llm/turbine/messages"
)

// TestLoraBodies: a request's LoRA adapter is the completion's lora_request, with the
// folder and id recorded by LoadLora (golden bodies in testdata/lora_bodies.golden; go
// test -update rewrites them).
func TestLoraBodies(t *testing.T) {
	enginetest.GoldenBodiesOf(t, "lora_bodies.golden", enginetest.LoraCases(), func(s *messages.SamplingParams) ([]byte, error) {
		r, err := requestFrom("m", "r1", []uint32{1, 2, 3}, s)
		if err != nil {
			return nil, err
		}
		var table loraTable
		if err := table.add("other", "/adapters/other"); err != nil {
			return nil, err
		}
		if err := table.add("sql-lora", "/adapters/sql-lora-v2"); err != nil {
			return nil, err
		}
		if err := table.attach(&r, s.GetLoraName(), s.GetLoraPath()); err != nil {
			return nil, err
		}
		return completionBody(r)
	})
}

// TestLoraTable: what LoadLora records, what UnloadLora forgets, and the lora_request a
// request gets: the recorded adapter, or one recorded on demand from the request's
// folder; each adapter an id of its own.
func TestLoraTable(t *testing.T) {
	var table loraTable
	var inv *engines.InvalidRequestError
	if err := table.add("a", "/a"); err != nil {
		t.Fatal(err)
	}
	if err := table.add("a", "/a2"); !errors.As(err, &inv) || inv.Status != 400 {
		t.Fatalf("a second load: %v", err)
	}
	if err := table.remove("b"); !errors.As(err, &inv) || inv.Status != 404 {
		t.Fatalf("an unload of an unknown adapter: %v", err)
	}
	attach := func(name, path string) (loraRequest, error) {
		r := CompletionRequest{Extra: map[string]any{}}
		err := table.attach(&r, name, path)
		lr, _ := r.Extra["lora_request"].(loraRequest)
		return lr, err
	}
	for _, tc := range []struct {
		name, path string
		want       loraRequest
		wantErr    string
	}{
		{"a", "", loraRequest{"a", 1, "/a"}, ""},
		{"a", "/elsewhere", loraRequest{"a", 1, "/a"}, ""}, // the recorded folder wins
		{"b", "/b", loraRequest{"b", 2, "/b"}, ""},         // recorded on demand
		{"b", "", loraRequest{"b", 2, "/b"}, ""},
		{"c", "", loraRequest{}, "not loaded"},
		{"", "", loraRequest{}, ""},
	} {
		got, err := attach(tc.name, tc.path)
		if got != tc.want || (err == nil) != (tc.wantErr == "") || (err != nil && !strings.Contains(err.Error(), tc.wantErr)) {
			t.Fatalf("attach(%q, %q) = %+v, %v; want %+v, %q", tc.name, tc.path, got, err, tc.want, tc.wantErr)
		}
		if err != nil && errors.As(err, &inv) {
			t.Fatalf("an adapter the worker did not load is the client's fault: %v", err)
		}
	}
	if err := table.remove("a"); err != nil {
		t.Fatal(err)
	}
	if err := table.add("a", "/a"); err != nil {
		t.Fatal(err)
	}
	if got, _ := attach("a", ""); got.ID != 3 {
		t.Fatalf("a reloaded adapter has id %d, want a new one (3)", got.ID)
	}
}

// TestLoraAgainstMockEngine: requests under each recorded adapter reach the mock engine's
// trtllm dialect, which loads each on demand (one slot: each switch evicts the other);
// outputs differ from the base model's and from each other; both legs of a
// disaggregated request carry the adapter.
func TestLoraAgainstMockEngine(t *testing.T) {
	srv, url := enginetest.StartLoraMock(t, server.DialectTRTLLM, 1)
	c, err := New(url, nil)
	if err != nil {
		t.Fatal(err)
	}
	e, err := NewEngine(c, EngineOptions{Model: "m", BlockSize: 16})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	ctx := enginetest.Ctx(t)
	for name, r := range map[string]int{"a": 8, "b": 4} {
		if err := e.LoadLora(ctx, name, enginetest.AdapterDir(t, r)); err != nil {
			t.Fatal(err)
		}
	}
	outs := map[string][]uint32{}
	for i, lora := range []string{"", "a", "b", "a"} {
		got, err := enginetest.GenerateIDs(ctx, e, lora)
		if err != nil || len(got) != 8 {
			t.Fatalf("adapter %q: %v %v", lora, got, err)
		}
		if prev, ok := outs[lora]; ok && !slices.Equal(prev, got) {
			t.Fatalf("adapter %q answered %v, then %v", lora, prev, got)
		}
		outs[lora] = got
		if st, want := srv.Stats(), uint64(i); st.LoraLoads != want {
			t.Fatalf("after %d requests the engine loaded %d adapters, want %d", i+1, st.LoraLoads, want)
		}
	}
	if slices.Equal(outs[""], outs["a"]) || slices.Equal(outs["a"], outs["b"]) || slices.Equal(outs[""], outs["b"]) {
		t.Fatalf("adapters answer alike: %v", outs)
	}
	if err := e.UnloadLora(ctx, "b"); err != nil {
		t.Fatal(err)
	}
	if _, err := enginetest.GenerateIDs(ctx, e, "b"); err == nil || !strings.Contains(err.Error(), "not loaded") {
		t.Fatalf("a request with an unloaded adapter: %v", err)
	}
}

// TestLoraDisaggregatedLegs: both legs carry the adapter, so the generation leg's output
// is the adapter's aggregated output.
func TestLoraDisaggregatedLegs(t *testing.T) {
	engine := func(role server.Role) *Engine {
		cfg := enginetest.MockConfig(100, 3)
		cfg.MaxLoras, cfg.MaxLoraRank = 1, 16
		_, url := enginetest.StartMock(t, server.Options{Params: server.Params{Engine: cfg, Dialect: server.DialectTRTLLM,
			Role: role, KVTransfer: server.KVTransferOptions{BytesPerToken: 256}}}, nil)
		c, err := New(url, nil)
		if err != nil {
			t.Fatal(err)
		}
		e, err := NewEngine(c, EngineOptions{Model: "m", BlockSize: 16, ReleaseKV: server.ReleaseTRTLLM})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { e.Close() })
		return e
	}
	agg, pre, dec := engine(server.RoleAggregated), engine(server.RolePrefill), engine(server.RoleDecode)
	ctx := enginetest.Ctx(t)
	dir := enginetest.AdapterDir(t, 8)
	for _, e := range []*Engine{agg, pre, dec} {
		if err := e.LoadLora(ctx, "a", dir); err != nil {
			t.Fatal(err)
		}
	}
	p := enginetest.Prompt(40)
	s := func(lora string, leg messages.Leg, params string) *messages.SamplingParams {
		out := &messages.SamplingParams{MaxTokens: 10, IgnoreEos: true, LoraName: lora}
		if leg != messages.Leg_LEG_AGGREGATED {
			out.Disagg = &messages.DisaggParams{Leg: leg, KvTransferParams: params}
		}
		return out
	}
	base, err := run(ctx, agg, p, s("", messages.Leg_LEG_AGGREGATED, ""))
	if err != nil {
		t.Fatal(err)
	}
	want, err := run(ctx, agg, p, s("a", messages.Leg_LEG_AGGREGATED, ""))
	if err != nil {
		t.Fatal(err)
	}
	first, err := run(ctx, pre, p, s("a", messages.Leg_LEG_PREFILL, ""))
	if err != nil || len(first) != 1 {
		t.Fatalf("context leg %+v %v", first, err)
	}
	got, err := run(ctx, dec, p, s("a", messages.Leg_LEG_DECODE, first[0].KVTransferParams))
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(tokens(got), tokens(want)) || slices.Equal(tokens(want), tokens(base)) || first[0].TokenIDs[0] != tokens(want)[0] {
		t.Fatalf("legs %v (context leg's first token %d), want the adapter's %v, not the base model's %v",
			tokens(got), first[0].TokenIDs[0], tokens(want), tokens(base))
	}
}
