package kv

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"
)

// TestRouteOnBlockHashes: a request that brings its prompt's block hashes and length
// (RouteInput.BlockHashes, PromptTokens) is routed exactly as the same request with its
// tokens — aggregated and disaggregated fleets, cached prefixes, a LoRA adapter, a cache
// salt, a pin, prompts with a partial last block and shorter than a block — and tracked
// the same (Stats after every route).
func TestRouteOnBlockHashes(t *testing.T) {
	cases := []struct {
		name   string
		fleet  string
		cache  map[string]int // worker → tokens of prompt(…) cached there
		disagg bool
	}{
		{name: "aggregated", fleet: "a0 a1 a2", cache: map[string]int{"a1": 24, "a2": 8}},
		{name: "disaggregated", fleet: "d0:decode d1:decode p0:prefill p1:prefill", cache: map[string]int{"p1": 4000, "d0": 12}, disagg: true},
	}
	inputs := []RouteInput{
		{Tokens: prompt(30)},
		{Tokens: prompt(24)},
		{Tokens: prompt(3)},
		{Tokens: prompt(4096)},
		{Tokens: prompt(2000), LocalPrefill: true},
		{Tokens: prompt(30), LoraName: "sql-lora"},
		{Tokens: prompt(30), CacheSalt: "tenant-1"},
		{Tokens: prompt(30), Exclude: []string{"a1", "d0"}},
		{Tokens: prompt(30), PinWorker: "a2"},
		{Tokens: prompt(30), PinWorker: "d1"},
		{Tokens: prompt(30), HasOverlapWeight: true, OverlapWeight: 4},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			build := func() *Router {
				cfg := DefaultConfig(disaggBS)
				cfg.Disagg.MaxLocalPrefillTokens = 1000
				r, err := NewRouter(cfg)
				if err != nil {
					t.Fatal(err)
				}
				parseFleet(t, r, c.fleet)
				for w, n := range c.cache {
					cache(t, r, w, n)
				}
				return r
			}
			byTokens, byHashes := build(), build()
			rngT, rngH := rand.New(rand.NewPCG(5, 5)), rand.New(rand.NewPCG(5, 5))
			for i, in := range inputs {
				in.RequestID = fmt.Sprint("r", i)
				dt, errT := byTokens.Route(in, t0, rngT)
				hin := in
				hin.BlockHashes = AppendSaltedSequenceHashes(nil, in.Tokens, disaggBS, in.LoraName, in.CacheSalt)
				hin.PromptTokens, hin.Tokens = len(in.Tokens), nil
				keep := slices.Clone(hin.BlockHashes)
				dh, errH := byHashes.Route(hin, t0, rngH)
				if (errT == nil) != (errH == nil) || !reflect.DeepEqual(dt, dh) {
					t.Fatalf("route %d (%d tokens): by tokens %+v %v, by hashes %+v %v", i, len(in.Tokens), dt, errT, dh, errH)
				}
				if !slices.Equal(keep, hin.BlockHashes) {
					t.Fatalf("route %d: the router changed the caller's block hashes", i)
				}
				if st, sh := byTokens.Stats(), byHashes.Stats(); !reflect.DeepEqual(st, sh) {
					t.Fatalf("route %d: stats by tokens %+v, by hashes %+v", i, st, sh)
				}
			}
			if st := byHashes.Stats(); c.disagg && st.Decisions[DisaggRemote] == 0 {
				t.Fatalf("no remote decision among the routes: %+v", st.Decisions)
			}
		})
	}
}

// TestRouteBlockHashesChecked: block hashes that are not one per full block of the
// prompt (made at another block size), or a negative length, are refused with
// ErrInvalidRequest and nothing is tracked; an empty prompt (no tokens, no hashes) is
// routed as before.
func TestRouteBlockHashesChecked(t *testing.T) {
	const bs = 16
	toks := prompt(100) // 6 full blocks of 16, 25 of 4
	cases := []struct {
		name    string
		in      RouteInput
		wantErr bool
	}{
		{"hashed at the router's block size", RouteInput{BlockHashes: SequenceHashes(toks, bs, ""), PromptTokens: 100}, false},
		{"hashed at block size 4", RouteInput{BlockHashes: SequenceHashes(toks, 4, ""), PromptTokens: 100}, true},
		{"hashed at block size 32", RouteInput{BlockHashes: SequenceHashes(toks, 32, ""), PromptTokens: 100}, true},
		{"length without hashes", RouteInput{PromptTokens: 100}, true},
		{"shorter than a block, no hashes", RouteInput{PromptTokens: 15}, false},
		{"negative length", RouteInput{PromptTokens: -1}, true},
		{"empty prompt", RouteInput{}, false},
		{"tokens win over hashes", RouteInput{Tokens: toks, BlockHashes: []uint64{1}, PromptTokens: 7}, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r, err := NewRouter(DefaultConfig(bs))
			if err != nil {
				t.Fatal(err)
			}
			if _, err := r.Register(WorkerSpec{ID: "w0", BlockSize: bs, Ready: true, Epoch: 1}); err != nil {
				t.Fatal(err)
			}
			c.in.RequestID = "r"
			d, err := r.Route(c.in, t0, rand.New(rand.NewPCG(1, 1)))
			if c.wantErr {
				if !errors.Is(err, ErrInvalidRequest) || r.ActiveRequests() != 0 {
					t.Fatalf("got %+v, %v, %d tracked; want ErrInvalidRequest, none tracked", d, err, r.ActiveRequests())
				}
				return
			}
			if err != nil || d.WorkerID != "w0" {
				t.Fatalf("got %+v, %v", d, err)
			}
			if want := c.in.promptTokens() / bs; d.PromptBlocks != want {
				t.Fatalf("prompt blocks %d, want %d", d.PromptBlocks, want)
			}
		})
	}
}
