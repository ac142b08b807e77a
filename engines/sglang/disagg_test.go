package sglang

import (
	"context"
	"net"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/turbine-llm/turbine/engines"
	"github.com/turbine-llm/turbine/engines/internal/enginetest"
	"github.com/turbine-llm/turbine/engines/mocker/server"
	"github.com/turbine-llm/turbine/messages"
)

func roleEngine(t *testing.T, role server.Role) (*server.Server, *Engine) {
	t.Helper()
	srv, url := enginetest.StartMock(t, server.Options{Params: server.Params{Engine: enginetest.MockConfig(100, 7), Dialect: server.DialectSGLang,
		Role: role, KVTransfer: server.KVTransferOptions{BytesPerToken: 256}}}, nil)
	c, err := New(url, nil, Options{})
	if err != nil {
		t.Fatal(err)
	}
	e, err := NewEngine(c, 16)
	if err != nil {
		t.Fatal(err)
	}
	return srv, e
}

func generate(ctx context.Context, e *Engine, id string, p []uint32, s *messages.SamplingParams) ([]uint32, error) {
	var out []uint32
	err := e.Generate(ctx, id, p, s, func(c engines.Chunk) error {
		if c.KVTransferParams != "" {
			panic("SGLang returned transfer parameters")
		}
		out = append(out, c.TokenIDs...)
		return nil
	})
	return out, err
}

// TestDisaggregatedLegs sends both legs at once, as SGLang's router does, to a prefill
// and a decode mock engine: the decode leg's output is the aggregated one.
func TestDisaggregatedLegs(t *testing.T) {
	_, agg := roleEngine(t, server.RoleAggregated)
	preSrv, pre := roleEngine(t, server.RolePrefill)
	decSrv, dec := roleEngine(t, server.RoleDecode)
	ctx := enginetest.Ctx(t)
	p := enginetest.Prompt(40)
	want, err := generate(ctx, agg, "a", p, &messages.SamplingParams{MaxTokens: 10, IgnoreEos: true})
	if err != nil {
		t.Fatal(err)
	}
	host, port, _ := net.SplitHostPort(preSrv.KVTransferAddr())
	n, _ := strconv.Atoi(port)
	leg := func(name messages.Leg) *messages.SamplingParams {
		return &messages.SamplingParams{MaxTokens: 10, IgnoreEos: true, Disagg: &messages.DisaggParams{Leg: name,
			BootstrapHost: host, BootstrapPort: int32(n), BootstrapRoom: 1<<62 + 99}}
	}
	var wg sync.WaitGroup
	var got, first []uint32
	var decErr, preErr error
	wg.Add(2)
	go func() { defer wg.Done(); got, decErr = generate(ctx, dec, "r", p, leg(messages.Leg_LEG_DECODE)) }()
	go func() { defer wg.Done(); first, preErr = generate(ctx, pre, "r", p, leg(messages.Leg_LEG_PREFILL)) }()
	wg.Wait()
	if decErr != nil || preErr != nil {
		t.Fatalf("legs: %v %v", decErr, preErr)
	}
	if !slices.Equal(got, want) || len(first) != 1 || first[0] != want[0] {
		t.Fatalf("decode leg %v, prefill leg %v; want %v", got, first, want)
	}
	if ts := decSrv.TransferStats(); ts.Reads != 1 || ts.Bytes != 2*16*256 {
		t.Fatalf("decode transfers %+v", ts)
	}
	deadline := time.Now().Add(10 * time.Second)
	for _, s := range []*server.Server{preSrv, decSrv} {
		for st := s.Stats(); st.ActiveBlocks != 0 || st.PinnedBlocks != 0; st = s.Stats() {
			if time.Now().After(deadline) {
				t.Fatalf("blocks left: %+v", st)
			}
			time.Sleep(2 * time.Millisecond)
		}
	}

	for _, s := range []*messages.SamplingParams{
		{MaxTokens: 1, Disagg: &messages.DisaggParams{Leg: messages.Leg(3), BootstrapHost: host, BootstrapPort: 1}},
		{MaxTokens: 1, Disagg: &messages.DisaggParams{Leg: messages.Leg_LEG_DECODE, BootstrapPort: 1}},
		{MaxTokens: 1, Disagg: &messages.DisaggParams{Leg: messages.Leg_LEG_PREFILL, BootstrapHost: host}},
	} {
		if _, err := generate(ctx, dec, "x", p, s); err == nil {
			t.Fatalf("leg %+v accepted", s.Disagg)
		}
	}
}
