package mocker

import (
	"slices"
	"strings"
	"testing"

	"github.com/turbine-llm/turbine/kv"
)

// TestPinnedBlocksReturnToZero runs a prefill leg (HoldBlocks) through each way it can
// end and checks that the pinned and active blocks return to zero.
func TestPinnedBlocksReturnToZero(t *testing.T) {
	prompt := seqTokens(1, 14) // three full blocks of 4 and a partial one
	allStop := []uint32{100, 101, 102, 103, 104, 105, 106, 107, 108, 109}
	for _, tc := range []struct {
		name string
		req  Request
		// end frees the request after the run (nil: nothing to do).
		end        func(e *Engine, id string) bool
		wantPinned bool
	}{
		{"release after a length finish", Request{MaxTokens: 1, HoldBlocks: true, IgnoreEOS: true},
			func(e *Engine, id string) bool { return e.Release(id) }, true},
		{"abort of a pinned request", Request{MaxTokens: 1, HoldBlocks: true, IgnoreEOS: true},
			func(e *Engine, id string) bool { return e.Abort(id) }, true},
		{"several tokens, then release", Request{MaxTokens: 3, HoldBlocks: true, IgnoreEOS: true},
			func(e *Engine, id string) bool { return e.Release(id) }, true},
		{"stop finish is not pinned", Request{MaxTokens: 1, HoldBlocks: true, IgnoreEOS: true, StopTokenIDs: allStop},
			nil, false},
		{"without HoldBlocks", Request{MaxTokens: 1, IgnoreEOS: true}, nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEngine(t, smallConfig())
			r := tc.req
			r.ID, r.Prompt = "p", prompt
			mustAdd(t, e, r)
			rr := run(t, e, t0)
			last := rr.last["p"]
			if last.Pinned != tc.wantPinned {
				t.Fatalf("Pinned = %v, want %v (%+v)", last.Pinned, tc.wantPinned, last)
			}
			st := e.Stats()
			if tc.wantPinned {
				// The block table covers every computed token: the prompt and all
				// output tokens but the last.
				want := ceilDiv(len(prompt)+r.MaxTokens-1, 4)
				if len(last.BlockIDs) != want || st.PinnedRequests != 1 || st.PinnedBlocks != want || st.ActiveBlocks != want {
					t.Fatalf("pinned %d blocks %v, stats %+v; want %d", len(last.BlockIDs), last.BlockIDs, st, want)
				}
				if err := e.Add(Request{ID: "p", Prompt: prompt, MaxTokens: 1}); err == nil || !strings.Contains(err.Error(), "duplicate") {
					t.Fatalf("a pinned id was reused: %v", err)
				}
				if !tc.end(e, "p") {
					t.Fatal("the pinned request was not found")
				}
				if e.Release("p") || e.Abort("p") {
					t.Fatal("a released request was released again")
				}
			} else if len(last.BlockIDs) != 0 {
				t.Fatalf("unpinned output lists blocks %v", last.BlockIDs)
			}
			st = e.Stats()
			if st.PinnedBlocks != 0 || st.PinnedRequests != 0 || st.ActiveBlocks != 0 || e.HasWork() {
				t.Fatalf("blocks left: %+v", st)
			}
			// The prompt's full blocks stay in the prefix cache after the release.
			if st.CachedBlocks < 3 {
				t.Fatalf("prefix cache lost the prompt: %+v", st)
			}
		})
	}
}

// TestPinnedBlocksHoldMemory: pinned blocks are not evicted, so a request that needs
// them waits until they are released.
func TestPinnedBlocksHoldMemory(t *testing.T) {
	cfg := smallConfig()
	cfg.NumGPUBlocks = 8
	cfg.MaxModelLen = 32
	e := newEngine(t, cfg)
	mustAdd(t, e, Request{ID: "p", Prompt: seqTokens(1, 24), MaxTokens: 1, HoldBlocks: true, IgnoreEOS: true})
	rr := run(t, e, t0)
	if !rr.last["p"].Pinned || e.Stats().PinnedBlocks != 6 {
		t.Fatalf("not pinned: %+v", e.Stats())
	}
	mustAdd(t, e, Request{ID: "q", Prompt: seqTokens(500, 12), MaxTokens: 1, IgnoreEOS: true})
	if r := e.Step(rr.end); !r.Idle {
		t.Fatalf("a request needing pinned blocks was scheduled: %+v", r)
	}
	e.Release("p")
	rr = run(t, e, rr.end)
	if len(rr.tokens["q"]) != 1 {
		t.Fatal("the request did not run after the release")
	}
	if st := e.Stats(); st.ActiveBlocks != 0 {
		t.Fatalf("blocks left: %+v", st)
	}
}

// TestImportedPrefill: a decode leg whose prompt KV was imported computes only the last
// prompt token, stores the imported full blocks in its prefix cache (BlockStored) and
// generates exactly what an aggregated engine generates.
func TestImportedPrefill(t *testing.T) {
	prompt := seqTokens(1, 14)
	agg := newEngine(t, smallConfig())
	mustAdd(t, agg, Request{ID: "a", Prompt: prompt, MaxTokens: 10, IgnoreEOS: true})
	want := run(t, agg, t0)

	for _, tc := range []struct {
		name     string
		warm     []uint32 // a prompt run first on the decode engine (prefix-cache hits)
		imported int      // Request.ImportedTokens
		// want: imported and cached tokens of the output, prefill tokens of the first step
		wantImported, wantCached, wantPrefill int
	}{
		{"full blocks", nil, 12, 12, 0, 2},
		{"whole prompt", nil, 14, 13, 0, 1},
		{"nothing imported", nil, 0, 0, 0, 14},
		{"prefix hits first", prompt[:8], 12, 4, 8, 2},
		{"hits cover the import", prompt[:12], 8, 0, 12, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEngine(t, smallConfig())
			now := t0
			if tc.warm != nil {
				mustAdd(t, e, Request{ID: "w", Prompt: tc.warm, MaxTokens: 1, IgnoreEOS: true})
				now = run(t, e, now).end
			}
			mustAdd(t, e, Request{ID: "d", Prompt: prompt, MaxTokens: 10, IgnoreEOS: true, ImportedTokens: tc.imported})
			rr := run(t, e, now)
			if !slices.Equal(rr.tokens["d"], want.tokens["a"]) {
				t.Fatalf("tokens %v, want the aggregated run's %v", rr.tokens["d"], want.tokens["a"])
			}
			last := rr.last["d"]
			if last.ImportedTokens != tc.wantImported || last.CachedTokens != tc.wantCached || rr.steps[0].PrefillTokens != tc.wantPrefill {
				t.Fatalf("imported %d cached %d prefill %d; want %d %d %d", last.ImportedTokens, last.CachedTokens,
					rr.steps[0].PrefillTokens, tc.wantImported, tc.wantCached, tc.wantPrefill)
			}
			if d := rr.steps[0].Duration; d != StepDuration(tc.wantPrefill, false, 0, 1) {
				t.Fatalf("first step took %v, want the prefill of %d tokens", d, tc.wantPrefill)
			}
			// Every full prompt block is stored once on this engine, imported or not.
			stored := map[uint64]bool{}
			for _, ev := range rr.events {
				if ev.Kind == kv.BlockStored {
					for _, h := range ev.EngineHashes {
						stored[h] = true
					}
				}
			}
			for i, h := range engineHashes(prompt, 4) {
				if tc.warm != nil && (i+1)*4 <= len(tc.warm) {
					continue // stored by the warm-up request
				}
				if !stored[h] {
					t.Fatalf("prompt block %d has no BlockStored", i)
				}
			}
			if st := e.Stats(); st.ActiveBlocks != 0 || st.ImportedTokens != uint64(tc.wantImported) {
				t.Fatalf("stats %+v", st)
			}
		})
	}
}

// TestDisaggregatedMatchesAggregated: the prefill leg's first token and the decode leg's
// output are the aggregated run's.
func TestDisaggregatedMatchesAggregated(t *testing.T) {
	prompt := seqTokens(40, 23)
	agg := newEngine(t, smallConfig())
	mustAdd(t, agg, Request{ID: "a", Prompt: prompt, MaxTokens: 20})
	want := run(t, agg, t0).tokens["a"]

	pre := newEngine(t, smallConfig())
	mustAdd(t, pre, Request{ID: "p", Prompt: prompt, MaxTokens: 1, MinTokens: 1, HoldBlocks: true})
	pr := run(t, pre, t0)
	last := pr.last["p"]
	if !last.Pinned || pr.tokens["p"][0] != want[0] {
		t.Fatalf("prefill %+v, want first token %d", last, want[0])
	}
	full := len(prompt) / 4
	dec := newEngine(t, smallConfig())
	mustAdd(t, dec, Request{ID: "d", Prompt: prompt, MaxTokens: 20, ImportedTokens: full * 4})
	if got := run(t, dec, t0).tokens["d"]; !slices.Equal(got, want) {
		t.Fatalf("decode %v, want %v", got, want)
	}
	pre.Release("p")
	for _, e := range []*Engine{pre, dec} {
		if st := e.Stats(); st.ActiveBlocks != 0 || st.PinnedBlocks != 0 {
			t.Fatalf("blocks left: %+v", st)
		}
	}
}

func TestImportValidation(t *testing.T) {
	e := newEngine(t, smallConfig())
	for _, n := range []int{-1, 4} {
		if err := e.Add(Request{ID: "x", Prompt: seqTokens(1, 3), MaxTokens: 1, ImportedTokens: n}); err == nil ||
			!strings.Contains(err.Error(), "imported tokens") {
			t.Errorf("ImportedTokens %d: %v", n, err)
		}
	}
}
