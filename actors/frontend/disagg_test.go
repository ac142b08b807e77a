package frontend

import (
	"context"
	"errors"
	"io"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/turbine-llm/turbine/gateway"
	"github.com/turbine-llm/turbine/messages"
)

// The disaggregation decisions as gateway.DisaggInfo spells them.
var (
	decisionAggregated            = messages.DisaggDecision_DISAGG_AGGREGATED.Label()
	decisionRemote                = messages.DisaggDecision_DISAGG_REMOTE.Label()
	decisionLocalShortPrefill     = messages.DisaggDecision_DISAGG_LOCAL_SHORT_PREFILL.Label()
	decisionLocalNoPrefillWorkers = messages.DisaggDecision_DISAGG_LOCAL_NO_PREFILL_WORKERS.Label()
	decisionLocalRequested        = messages.DisaggDecision_DISAGG_LOCAL_REQUESTED.Label()
)

// eventually polls cond (actors answer asynchronously) for up to 10 s.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// readN reads n chunks (or to the end) with ctx and returns them and the error that
// stopped it (nil after n chunks, io.EOF at the end).
func (h *harness) readN(ctx context.Context, n int) ([]*messages.TokenChunk, error) {
	var out []*messages.TokenChunk
	for n < 0 || len(out) < n {
		ch, err := h.stream.Recv(ctx)
		if err != nil {
			return out, err
		}
		out = append(out, ch)
	}
	return out, nil
}

func tokensOf(chunks []*messages.TokenChunk) []uint32 {
	var out []uint32
	for _, ch := range chunks {
		out = append(out, ch.TokenIds...)
	}
	return out
}

// checkFreed checks that every id the router handed out (requests and prefill legs)
// was freed exactly once.
func (h *harness) checkFreed(t *testing.T) {
	t.Helper()
	r := h.router
	r.mu.Lock()
	defer r.mu.Unlock()
	freed, routed := slices.Clone(r.freed), slices.Clone(r.routed)
	slices.Sort(freed)
	slices.Sort(routed)
	if !slices.Equal(freed, routed) {
		t.Errorf("freed %v, want every routed id once: %v", r.freed, r.routed)
	}
}

// legs returns worker w's Generate messages split into prefill legs and the others.
func legs(w *scriptedWorker) (prefill, other []*messages.Generate) {
	gens, _ := w.calls()
	for _, g := range gens {
		if g.Sampling.GetDisagg().GetLeg() == messages.Leg_LEG_PREFILL {
			prefill = append(prefill, g)
		} else {
			other = append(other, g)
		}
	}
	return prefill, other
}

func releaseIDs(w *scriptedWorker) []string {
	var ids []string
	for _, r := range w.released() {
		ids = append(ids, r.RequestId)
	}
	return ids
}

// checkPrefillLeg checks a prefill leg's Generate: the whole prompt, one token, no
// min_tokens, the rest of the sampling kept.
func checkPrefillLeg(t *testing.T, g *messages.Generate) {
	t.Helper()
	sp := g.Sampling
	if !slices.Equal(g.TokenIds, []uint32{1, 2, 3, 4, 5}) || sp.MaxTokens != 1 || sp.MinTokens != 0 ||
		!sp.IgnoreEos || sp.GetSeed() != 7 || sp.Disagg.GetKvTransferParams() != "" {
		t.Errorf("prefill leg %v: want the prompt, max_tokens 1, min_tokens 0, seed 7, no transfer parameters", g)
	}
}

func TestDisaggStream(t *testing.T) {
	ok := func() *scriptedWorker { return &scriptedWorker{failAfter: -1} }
	cases := []struct {
		name      string
		opts      harnessOpts
		workers   []*scriptedWorker
		cancelAt  int // close the stream after this many chunks (-1: read to the end)
		tokens    []uint32
		finish    string // of the last chunk read ("" when cancelled)
		cached    int32  // the last chunk's cached tokens, when > 0
		errPart   string
		info      gateway.DisaggInfo
		events    []string // recorder events that must appear (in order, others may be between)
		check     func(t *testing.T, h *harness)
		waitFirst func(h *harness) bool // with cancelAt 0: cancel once this holds
	}{
		{
			name: "remote", opts: harnessOpts{prefill: []*scriptedWorker{ok()}}, workers: []*scriptedWorker{ok()},
			cancelAt: -1, tokens: wantTokens, finish: "length",
			info:   gateway.DisaggInfo{Decision: decisionRemote, PrefillWorker: "p0", DecodeWorker: "w0"},
			events: []string{"decided:m/remote", "prefill_leg:m", "transfer_wait:m"},
			check: func(t *testing.T, h *harness) {
				pre, _ := legs(h.prefill[0])
				_, dec := legs(h.workers[0])
				if len(pre) != 1 || len(dec) != 1 {
					t.Fatalf("p0 got %d prefill legs, w0 %d decode legs; want 1 each", len(pre), len(dec))
				}
				checkPrefillLeg(t, pre[0])
				d := dec[0]
				if d.Sampling.Disagg.GetLeg() != messages.Leg_LEG_DECODE || d.Sampling.Disagg.KvTransferParams != kvParamsFor(pre[0].RequestId) ||
					d.Sampling.MaxTokens != 8 || d.Sampling.MinTokens != 6 || !slices.Equal(d.TokenIds, []uint32{1, 2, 3, 4, 5}) {
					t.Errorf("decode leg %v: want the prompt, max_tokens 8, min_tokens 6 and p0's transfer parameters", d)
				}
				if pre[0].Sampling.Disagg.BootstrapRoom != 0 || d.Sampling.Disagg.BootstrapRoom != 0 {
					t.Error("bootstrap room set without a bootstrap address")
				}
				if r := releaseIDs(h.prefill[0]); len(r) != 0 {
					t.Errorf("ReleaseKv %v after a decode leg that produced tokens", r)
				}
				h.router.mu.Lock()
				defer h.router.mu.Unlock()
				if !slices.Contains(h.router.prefill, pre[0].RequestId) || !slices.Contains(h.router.prefill, d.RequestId) {
					t.Errorf("PrefillDone for %v, want the prefill leg %s and the decode leg %s", h.router.prefill, pre[0].RequestId, d.RequestId)
				}
			},
		},
		{
			// The prompt was computed on p0: its prefix-cache hit (3 tokens) is the
			// request's, not the 5 that w0 reports for the KV it loaded.
			name: "cached tokens are the prefill worker's",
			opts: harnessOpts{prefill: []*scriptedWorker{{failAfter: -1, cached: 3}}}, workers: []*scriptedWorker{ok()},
			cancelAt: -1, tokens: wantTokens, finish: "length",
			info:   gateway.DisaggInfo{Decision: decisionRemote, PrefillWorker: "p0", DecodeWorker: "w0"},
			cached: 3,
		},
		{
			name: "sglang bootstrap sends both legs at once", opts: harnessOpts{prefill: []*scriptedWorker{ok()}, bootstrap: true},
			workers: []*scriptedWorker{ok()}, cancelAt: -1, tokens: wantTokens, finish: "length",
			info:   gateway.DisaggInfo{Decision: decisionRemote, PrefillWorker: "p0", DecodeWorker: "w0"},
			events: []string{"decided:m/remote"},
			check: func(t *testing.T, h *harness) {
				// The decode leg may finish before p0 has even taken its leg.
				eventually(t, "p0's prefill leg", func() bool { gens, _ := h.prefill[0].calls(); return len(gens) > 0 })
				pre, _ := legs(h.prefill[0])
				_, dec := legs(h.workers[0])
				if len(pre) != 1 || len(dec) != 1 {
					t.Fatalf("p0 got %d prefill legs, w0 %d decode legs; want 1 each", len(pre), len(dec))
				}
				checkPrefillLeg(t, pre[0])
				p, d := pre[0].Sampling.Disagg, dec[0].Sampling.Disagg
				if p.BootstrapHost != "10.0.0.7" || p.BootstrapPort != 8998 || p.BootstrapRoom == 0 || p.BootstrapRoom >= 1<<63 ||
					d.BootstrapHost != p.BootstrapHost || d.BootstrapPort != p.BootstrapPort || d.BootstrapRoom != p.BootstrapRoom ||
					d.Leg != messages.Leg_LEG_DECODE || d.KvTransferParams != "" {
					t.Errorf("prefill %v, decode %v: want the same bootstrap address and 63-bit room on both", p, d)
				}
			},
		},
		{
			name: "short prompt stays local", opts: harnessOpts{prefill: []*scriptedWorker{ok()}, local: messages.DisaggDecision_DISAGG_LOCAL_SHORT_PREFILL},
			workers: []*scriptedWorker{ok()}, cancelAt: -1, tokens: wantTokens, finish: "length",
			info:   gateway.DisaggInfo{Decision: decisionLocalShortPrefill, DecodeWorker: "w0"},
			events: []string{"decided:m/local_short_prefill"},
			check: func(t *testing.T, h *harness) {
				if gens, _ := h.prefill[0].calls(); len(gens) != 0 {
					t.Errorf("p0 got %d Generate for a local request", len(gens))
				}
				_, dec := legs(h.workers[0])
				if len(dec) != 1 || dec[0].Sampling.Disagg != nil {
					t.Errorf("w0 got %v, want one aggregated Generate (no disagg parameters)", dec)
				}
			},
		},
		{
			name: "no prefill worker falls back", opts: harnessOpts{prefill: []*scriptedWorker{}},
			workers: []*scriptedWorker{ok()}, cancelAt: -1, tokens: wantTokens, finish: "length",
			info:   gateway.DisaggInfo{Decision: decisionLocalNoPrefillWorkers, DecodeWorker: "w0"},
			events: []string{"decided:m/local_no_prefill_workers"},
		},
		{
			name:     "client gone during the prefill leg",
			opts:     harnessOpts{prefill: []*scriptedWorker{{failAfter: 0, fault: "stall"}}},
			workers:  []*scriptedWorker{ok()},
			cancelAt: 0,
			waitFirst: func(h *harness) bool {
				gens, _ := h.prefill[0].calls()
				return len(gens) == 1
			},
			info: gateway.DisaggInfo{Decision: decisionRemote, PrefillWorker: "p0", DecodeWorker: "w0"},
			check: func(t *testing.T, h *harness) {
				pre, _ := legs(h.prefill[0])
				// p0 never answers, not even the cancel: ReleaseKv waits for the
				// PrefillReleaseWait, which runs out.
				if tm := h.clock.await(t, timerPrefillRelease, 0); tm.d != 200*time.Millisecond || !tm.fire() {
					t.Fatalf("prefill release timer of %v, want Config.PrefillReleaseWait (200ms), not yet fired", tm.d)
				}
				eventually(t, "p0's Cancel and ReleaseKv", func() bool {
					_, c := h.prefill[0].calls()
					return len(c) == 1 && len(h.prefill[0].released()) == 1
				})
				_, c := h.prefill[0].calls()
				if c[0] != pre[0].RequestId || releaseIDs(h.prefill[0])[0] != pre[0].RequestId {
					t.Errorf("p0 cancels %v releases %v, want its prefill leg %s", c, releaseIDs(h.prefill[0]), pre[0].RequestId)
				}
				if gens, cancels := h.workers[0].calls(); len(gens) != 0 || len(cancels) != 0 {
					t.Errorf("w0 got %d Generate and cancels %v; the decode leg was never sent", len(gens), cancels)
				}
			},
		},
		{
			name:     "client gone during the transfer",
			opts:     harnessOpts{prefill: []*scriptedWorker{ok()}},
			workers:  []*scriptedWorker{{failAfter: 0, fault: "stall"}},
			cancelAt: 0,
			waitFirst: func(h *harness) bool {
				gens, _ := h.workers[0].calls()
				return len(gens) == 1
			},
			info: gateway.DisaggInfo{Decision: decisionRemote, PrefillWorker: "p0", DecodeWorker: "w0"},
			check: func(t *testing.T, h *harness) {
				pre, _ := legs(h.prefill[0])
				_, dec := legs(h.workers[0])
				eventually(t, "w0's Cancel and p0's ReleaseKv", func() bool {
					_, c := h.workers[0].calls()
					return len(c) == 1 && len(h.prefill[0].released()) == 1
				})
				_, c := h.workers[0].calls()
				r := h.prefill[0].released()[0]
				if c[0] != dec[0].RequestId || r.RequestId != pre[0].RequestId || r.KvTransferParams != kvParamsFor(pre[0].RequestId) {
					t.Errorf("w0 cancels %v, p0 release %v; want the decode leg cancelled and the prefill leg's blocks released", c, r)
				}
				if _, pc := h.prefill[0].calls(); len(pc) != 0 {
					t.Errorf("p0 cancels %v after its leg finished", pc)
				}
			},
		},
		{
			name:     "client gone during decode",
			opts:     harnessOpts{prefill: []*scriptedWorker{ok()}},
			workers:  []*scriptedWorker{{failAfter: 3, fault: "stall"}},
			cancelAt: 3, tokens: wantTokens[:3],
			info: gateway.DisaggInfo{Decision: decisionRemote, PrefillWorker: "p0", DecodeWorker: "w0"},
			check: func(t *testing.T, h *harness) {
				_, dec := legs(h.workers[0])
				eventually(t, "w0's Cancel", func() bool { _, c := h.workers[0].calls(); return len(c) == 1 })
				if _, c := h.workers[0].calls(); c[0] != dec[0].RequestId {
					t.Errorf("w0 cancels %v, want %s", c, dec[0].RequestId)
				}
				if r := releaseIDs(h.prefill[0]); len(r) != 0 {
					t.Errorf("ReleaseKv %v after the decode leg read the blocks", r)
				}
			},
		},
		{
			name:    "prefill worker lost: another prefill worker",
			opts:    harnessOpts{prefill: []*scriptedWorker{{failAfter: 0, fault: "stop"}, ok()}},
			workers: []*scriptedWorker{ok()}, cancelAt: -1, tokens: wantTokens, finish: "length",
			info:   gateway.DisaggInfo{Decision: decisionRemote, PrefillWorker: "p1", DecodeWorker: "w0"},
			events: []string{"decided:m/remote", "retried:m/worker_terminated", "decided:m/remote", "prefill_leg:m"},
			check: func(t *testing.T, h *harness) {
				h.router.mu.Lock()
				routes := slices.Clone(h.router.routes)
				h.router.mu.Unlock()
				if len(routes) != 2 || !slices.Equal(routes[1].ExcludePrefillWorkers, []string{"p0"}) || routes[1].LocalPrefill ||
					len(routes[1].ExcludeWorkers) != 0 {
					t.Fatalf("routes %v: want a second one excluding prefill worker p0 only", routes)
				}
				_, dec := legs(h.workers[0])
				pre, _ := legs(h.prefill[1])
				if len(dec) != 1 || len(pre) != 1 || dec[0].Sampling.Disagg.KvTransferParams != kvParamsFor(pre[0].RequestId) {
					t.Errorf("w0 decode legs %v, p1 prefill legs %v: want one each, the decode leg with p1's parameters", dec, pre)
				}
			},
		},
		{
			name:    "two prefill legs fail: local prefill",
			opts:    harnessOpts{prefill: []*scriptedWorker{{failAfter: 0, fault: "stop"}, {failAfter: 0, fault: "error"}, ok()}},
			workers: []*scriptedWorker{ok()}, cancelAt: -1, tokens: wantTokens, finish: "length",
			info:   gateway.DisaggInfo{Decision: decisionLocalRequested, DecodeWorker: "w0"},
			events: []string{"retried:m/worker_terminated", "retried:m/engine_error", "decided:m/local_requested"},
			check: func(t *testing.T, h *harness) {
				h.router.mu.Lock()
				routes := slices.Clone(h.router.routes)
				h.router.mu.Unlock()
				if len(routes) != 3 || !routes[2].LocalPrefill || !slices.Equal(routes[2].ExcludePrefillWorkers, []string{"p0", "p1"}) {
					t.Fatalf("routes %v: want a third one with local prefill", routes)
				}
				_, dec := legs(h.workers[0])
				if len(dec) != 1 || dec[0].Sampling.Disagg != nil {
					t.Errorf("w0 got %v, want one aggregated Generate", dec)
				}
				if gens, _ := h.prefill[2].calls(); len(gens) != 0 {
					t.Errorf("p2 got %d Generate", len(gens))
				}
				eventually(t, "p1's ReleaseKv", func() bool { return len(h.prefill[1].released()) > 0 })
				if r := releaseIDs(h.prefill[1]); len(r) != 1 {
					t.Errorf("p1 (engine failure) releases %v, want its prefill leg released", r)
				}
			},
		},
		{
			name: "stalled prefill leg is retried",
			opts: harnessOpts{prefill: []*scriptedWorker{{failAfter: 0, fault: "stall"}, ok()}, stall: 200 * time.Millisecond,
				stallAfter: []int{0}},
			workers: []*scriptedWorker{ok()}, cancelAt: -1, tokens: wantTokens, finish: "length",
			info:   gateway.DisaggInfo{Decision: decisionRemote, PrefillWorker: "p1", DecodeWorker: "w0"},
			events: []string{"retried:m/stalled"},
			check: func(t *testing.T, h *harness) {
				// The stall may end the leg before p0 has even taken it: its Generate is
				// handled before the Cancel sent after it.
				eventually(t, "p0's Cancel", func() bool { _, c := h.prefill[0].calls(); return len(c) == 1 })
				pre, _ := legs(h.prefill[0])
				if _, c := h.prefill[0].calls(); len(pre) != 1 || c[0] != pre[0].RequestId {
					t.Errorf("p0 got prefill legs %v and cancels %v: want one leg, cancelled", pre, c)
				}
			},
		},
		{
			name:    "decode leg rejected: prefill releases",
			opts:    harnessOpts{prefill: []*scriptedWorker{ok()}},
			workers: []*scriptedWorker{{failAfter: 0, fault: "fatal"}}, cancelAt: -1, finish: "error", errPart: "bad request",
			info:   gateway.DisaggInfo{Decision: decisionRemote, PrefillWorker: "p0", DecodeWorker: "w0"},
			events: []string{"released:m"},
			check: func(t *testing.T, h *harness) {
				pre, _ := legs(h.prefill[0])
				eventually(t, "p0's ReleaseKv", func() bool { return len(h.prefill[0].released()) > 0 })
				r := h.prefill[0].released()
				if len(r) != 1 || r[0].RequestId != pre[0].RequestId || r[0].KvTransferParams != kvParamsFor(pre[0].RequestId) {
					t.Errorf("p0 releases %v, want its leg %s with its transfer parameters", r, pre[0].RequestId)
				}
			},
		},
		{
			name:    "decode leg failed: prefill releases, request migrates",
			opts:    harnessOpts{prefill: []*scriptedWorker{ok()}, limit: 3},
			workers: []*scriptedWorker{{failAfter: 0, fault: "error"}, ok()}, cancelAt: -1, tokens: wantTokens, finish: "length",
			info:   gateway.DisaggInfo{Decision: decisionRemote, PrefillWorker: "p0", DecodeWorker: "w1"},
			events: []string{"decided:m/remote", "released:m", "decided:m/remote"},
			check: func(t *testing.T, h *harness) {
				pre, _ := legs(h.prefill[0])
				eventually(t, "p0's ReleaseKv", func() bool { return len(h.prefill[0].released()) > 0 })
				if len(pre) != 2 || !slices.Equal(releaseIDs(h.prefill[0]), []string{pre[0].RequestId}) {
					t.Errorf("p0 legs %d releases %v, want 2 legs and the first released", len(pre), releaseIDs(h.prefill[0]))
				}
				if !slices.Equal(h.migrated, []string{"m/engine_error"}) {
					t.Errorf("migrations %v", h.migrated)
				}
			},
		},
		{
			name:    "decode leg cannot load its KV: prefill retried elsewhere, then local on the same decode worker",
			opts:    harnessOpts{prefill: []*scriptedWorker{ok(), ok(), ok()}, limit: 3},
			workers: []*scriptedWorker{{failAfter: 0, fault: "kv"}, ok()}, cancelAt: -1, tokens: wantTokens, finish: "length",
			info:   gateway.DisaggInfo{Decision: decisionLocalRequested, DecodeWorker: "w0"},
			events: []string{"decided:m/remote", "retried:m/kv_transfer", "decided:m/remote", "retried:m/kv_transfer", "decided:m/local_requested"},
			check: func(t *testing.T, h *harness) {
				h.router.mu.Lock()
				routes := slices.Clone(h.router.routes)
				h.router.mu.Unlock()
				if len(routes) != 3 || !slices.Equal(routes[1].ExcludePrefillWorkers, []string{"p0"}) ||
					!slices.Equal(routes[2].ExcludePrefillWorkers, []string{"p0", "p1"}) || !routes[2].LocalPrefill {
					t.Fatalf("routes %v: want p0, then p0 and p1 excluded, then local prefill", routes)
				}
				for _, r := range routes {
					if len(r.ExcludeWorkers) != 0 {
						t.Fatalf("route %v excludes decode workers: the decode worker was blamed for a KV load failure", r)
					}
				}
				if len(h.migrated) != 0 {
					t.Errorf("migrations %v, want none", h.migrated)
				}
				_, dec := legs(h.workers[0])
				if len(dec) != 3 || dec[2].Sampling.Disagg != nil {
					t.Errorf("w0 got %v: want two decode legs, then the request prefilled locally", dec)
				}
				if gens, _ := h.workers[1].calls(); len(gens) != 0 {
					t.Errorf("w1 got %d Generate: the request left its decode worker", len(gens))
				}
				eventually(t, "p0's and p1's ReleaseKv", func() bool {
					return len(h.prefill[0].released()) == 1 && len(h.prefill[1].released()) == 1
				})
			},
		},
		{
			name:    "decode leg cannot load its KV from the only prefill worker: the decode worker prefills",
			opts:    harnessOpts{prefill: []*scriptedWorker{ok()}},
			workers: []*scriptedWorker{{failAfter: 0, fault: "kv"}}, cancelAt: -1, tokens: wantTokens, finish: "length",
			info:   gateway.DisaggInfo{Decision: decisionLocalNoPrefillWorkers, DecodeWorker: "w0"},
			events: []string{"decided:m/remote", "retried:m/kv_transfer", "decided:m/local_no_prefill_workers"},
		},
		{
			name:    "decode leg cannot load its KV, disaggregation enforced: the decode worker prefills",
			opts:    harnessOpts{prefill: []*scriptedWorker{ok()}, enforce: true},
			workers: []*scriptedWorker{{failAfter: 0, fault: "kv"}}, cancelAt: -1, tokens: wantTokens, finish: "length",
			info:   gateway.DisaggInfo{Decision: decisionLocalRequested, DecodeWorker: "w0"},
			events: []string{"decided:m/remote", "retried:m/kv_transfer", "decided:m/local_requested"},
		},
		{
			name:    "KV load failure without a prefill leg is an engine failure",
			opts:    harnessOpts{limit: 3},
			workers: []*scriptedWorker{{failAfter: 0, fault: "kvall"}, ok()}, cancelAt: -1, tokens: wantTokens, finish: "length",
			info: gateway.DisaggInfo{Decision: decisionAggregated},
			check: func(t *testing.T, h *harness) {
				if !slices.Equal(h.migrated, []string{"m/engine_error"}) {
					t.Errorf("migrations %v, want one engine_error", h.migrated)
				}
			},
		},
		{
			name:    "prefill leg refused: the client gets the error",
			opts:    harnessOpts{prefill: []*scriptedWorker{{failAfter: 0, fault: "fatal"}}},
			workers: []*scriptedWorker{ok()}, cancelAt: -1, finish: "error", errPart: "prefill leg on p0: engine: bad request",
			info: gateway.DisaggInfo{Decision: decisionRemote, PrefillWorker: "p0", DecodeWorker: "w0"},
			check: func(t *testing.T, h *harness) {
				if gens, _ := h.workers[0].calls(); len(gens) != 0 {
					t.Errorf("w0 got %d Generate after the prefill leg failed", len(gens))
				}
			},
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			h := buildHarness(t, c.opts, c.workers...)
			if h.startErr != nil {
				t.Fatal(h.startErr)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			var chunks []*messages.TokenChunk
			var err error
			switch {
			case c.cancelAt == 0:
				// The client leaves while Recv waits: once the leg named by waitFirst runs.
				gone, leave := context.WithCancel(ctx)
				go func() {
					defer leave()
					for !c.waitFirst(h) && gone.Err() == nil {
						time.Sleep(5 * time.Millisecond)
					}
				}()
				chunks, err = h.readN(gone, -1)
				if !errors.Is(err, context.Canceled) {
					t.Fatalf("Recv with the client gone: %v", err)
				}
			case c.cancelAt > 0:
				chunks, err = h.readN(ctx, c.cancelAt)
				if err != nil {
					t.Fatal(err)
				}
			default:
				chunks, err = h.readN(ctx, -1)
				if !errors.Is(err, io.EOF) {
					t.Fatalf("Recv: %v", err)
				}
			}
			if got := tokensOf(chunks); !slices.Equal(got, c.tokens) {
				t.Errorf("tokens %v, want %v", got, c.tokens)
			}
			if c.finish != "" {
				last := chunks[len(chunks)-1]
				if last.FinishReason != c.finish || !strings.Contains(last.Error, c.errPart) || (c.errPart == "") != (last.Error == "") {
					t.Errorf("last chunk %v: want finish %q with error %q", last, c.finish, c.errPart)
				}
				if c.finish == "length" && (last.PromptTokens != 5 || last.CompletionTokens != 8) {
					t.Errorf("usage %d+%d, want 5+8", last.PromptTokens, last.CompletionTokens)
				}
				if c.cached > 0 && last.CachedTokens != c.cached {
					t.Errorf("cached tokens %d, want %d", last.CachedTokens, c.cached)
				}
			}
			if got := h.stream.Disagg(); got != c.info {
				t.Errorf("Disagg() = %+v, want %+v", got, c.info)
			}
			h.stream.Close()
			if c.check != nil {
				c.check(t, h)
			}
			h.checkFreed(t)
			events := h.rec.list()
			rest := events
			for _, e := range c.events {
				i := slices.Index(rest, e)
				if i < 0 {
					t.Errorf("events %v: want %v in order", events, c.events)
					break
				}
				rest = rest[i+1:]
			}
		})
	}
}

// TestDisaggEnforced: with disaggregation enforced and no prefill worker, the request is
// refused with gateway.ErrNoPrefillWorkers (HTTP 503) and nothing is sent.
func TestDisaggEnforced(t *testing.T) {
	w := &scriptedWorker{failAfter: -1}
	h := buildHarness(t, harnessOpts{prefill: []*scriptedWorker{}, enforce: true}, w)
	if !errors.Is(h.startErr, gateway.ErrNoPrefillWorkers) || !errors.Is(h.startErr, gateway.ErrNoWorkers) {
		t.Fatalf("start: %v, want ErrNoPrefillWorkers (an ErrNoWorkers)", h.startErr)
	}
	if gens, _ := w.calls(); len(gens) != 0 {
		t.Errorf("w0 got %d Generate", len(gens))
	}
}

// TestDisaggReleaseAfterLateLastChunk: the client leaves while the prefill leg's last
// chunk is on its way (the engine finished and pinned the prompt's blocks, the stream
// had not taken the chunk yet): the ReleaseKv sent to the prefill worker carries that
// chunk's transfer parameters, without which the engine could not find the blocks.
func TestDisaggReleaseAfterLateLastChunk(t *testing.T) {
	pre := &scriptedWorker{failAfter: -1}
	h := buildHarness(t, harnessOpts{prefill: []*scriptedWorker{pre}}, &scriptedWorker{failAfter: -1})
	if h.startErr != nil {
		t.Fatal(h.startErr)
	}
	eventually(t, "the prefill leg's last chunk at the stream", func() bool { return len(h.stream.events) > 0 })
	h.stream.Close()
	eventually(t, "p0's ReleaseKv", func() bool { return len(pre.released()) > 0 })
	gens, cancels := pre.calls()
	r := pre.released()
	if len(r) != 1 || r[0].RequestId != gens[0].RequestId || r[0].KvTransferParams != kvParamsFor(gens[0].RequestId) {
		t.Fatalf("p0 releases %v, want its leg %s with its transfer parameters", r, gens[0].RequestId)
	}
	if len(cancels) != 1 {
		t.Errorf("p0 cancels %v, want its leg cancelled", cancels)
	}
	if gens, _ := h.workers[0].calls(); len(gens) != 0 {
		t.Errorf("w0 got %d Generate after the client left", len(gens))
	}
	h.checkFreed(t)
	if ev := h.rec.list(); !slices.Contains(ev, "released:m") {
		t.Errorf("events %v: want the release counted", ev)
	}
}
