package kv

import (
	"math/rand/v2"
	"testing"
)

// termSum adds a candidate's terms.
func termSum(terms []Term) float64 {
	var s float64
	for _, t := range terms {
		s += t.Value
	}
	return s
}

func term(terms []Term, name string) (float64, bool) {
	for _, t := range terms {
		if t.Name == name {
			return t.Value, true
		}
	}
	return 0, false
}

func TestKVPolicyExplainTermsSumToCost(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   SelectInput
		c    Candidate
		want [2]float64 // weighted_prefill_blocks, decode_blocks
	}{
		{"idle, nothing cached", SelectInput{PromptTokens: 100, PromptBlocks: 6, BlockSize: 16, OverlapWeight: 1},
			Candidate{}, [2]float64{100.0 / 16, 6}},
		{"prefix cached and active", SelectInput{PromptTokens: 100, PromptBlocks: 6, BlockSize: 16, OverlapWeight: 1},
			Candidate{OverlapBlocks: 4, ActivePrefixBlocks: 4, ActiveBlocks: 30, ActivePrefillTokens: 40},
			[2]float64{(40 + 36) / 16.0, 32}},
		{"weight 4", SelectInput{PromptTokens: 64, PromptBlocks: 4, BlockSize: 16, OverlapWeight: 4},
			Candidate{OverlapBlocks: 1, ActiveBlocks: 10}, [2]float64{4 * 48 / 16.0, 14}},
		{"weight 0: load only", SelectInput{PromptTokens: 64, PromptBlocks: 4, BlockSize: 16, OverlapWeight: 0},
			Candidate{ActiveBlocks: 7, ActivePrefillTokens: 500}, [2]float64{0, 11}},
		{"overlap beyond the prompt clamps", SelectInput{PromptTokens: 10, PromptBlocks: 2, BlockSize: 4, OverlapWeight: 2},
			Candidate{OverlapBlocks: 5, ActivePrefixBlocks: 3}, [2]float64{0, 0}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cost, terms := KVPolicy{}.Explain(&tc.in, &tc.c)
			if want := KVCost(&tc.in, &tc.c); cost != want {
				t.Errorf("cost %v, KVCost %v", cost, want)
			}
			if s := termSum(terms); s != cost {
				t.Errorf("terms %v sum to %v, cost %v", terms, s, cost)
			}
			w, _ := term(terms, TermWeightedPrefillBlocks)
			d, _ := term(terms, TermDecodeBlocks)
			if len(terms) != 2 || w != tc.want[0] || d != tc.want[1] {
				t.Errorf("terms %v, want %s=%v %s=%v", terms, TermWeightedPrefillBlocks, tc.want[0], TermDecodeBlocks, tc.want[1])
			}
		})
	}
}

func TestCacheAwareExplainFollowsSelect(t *testing.T) {
	p := NewCacheAwarePolicy()
	for _, tc := range []struct {
		name  string
		cands []Candidate
		stage float64
	}{
		{"imbalanced: least loaded", []Candidate{{ActiveRequests: 200, OverlapBlocks: 10}, {ActiveRequests: 3}}, stageLoad},
		{"balanced, a good match", []Candidate{{ActiveRequests: 2, OverlapBlocks: 1}, {ActiveRequests: 5, OverlapBlocks: 8}}, stageCache},
		{"balanced, no good match: smallest cache", []Candidate{{IndexedBlocks: 900, OverlapBlocks: 1}, {IndexedBlocks: 20}}, stageSize},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := SelectInput{Candidates: tc.cands, PromptTokens: 160, PromptBlocks: 10, BlockSize: 16}
			chosen, err := p.Select(&in, nil)
			if err != nil {
				t.Fatal(err)
			}
			for i := range tc.cands {
				cost, terms := p.Explain(&in, &tc.cands[i])
				if s, ok := term(terms, TermStage); !ok || s != tc.stage {
					t.Errorf("candidate %d: stage %v, want %v", i, s, tc.stage)
				}
				chosenCost, _ := p.Explain(&in, &tc.cands[chosen])
				if cost < chosenCost {
					t.Errorf("candidate %d costs %v, below the chosen %d's %v", i, cost, chosen, chosenCost)
				}
				if r, _ := term(terms, TermMatchRatio); r != MatchRatio(&in, &tc.cands[i]) {
					t.Errorf("candidate %d: match ratio %v", i, r)
				}
			}
		})
	}
}

// explainRouter is a router with policy over fleet (parseFleet); prompts with more than
// 8 uncached tokens go remote when there are prefill workers.
func explainRouter(t *testing.T, policy, fleet string) *Router {
	t.Helper()
	cfg := DefaultConfig(disaggBS)
	cfg.Policy = policy
	cfg.Disagg.MaxLocalPrefillTokens = 8
	r, err := NewRouter(cfg)
	if err != nil {
		t.Fatal(err)
	}
	parseFleet(t, r, fleet)
	return r
}

func TestRouteExplain(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	t.Run("kv: every candidate, costs as the policy's, the chosen one marked", func(t *testing.T) {
		r := explainRouter(t, PolicyKV, "a0 a1 a2")
		cache(t, r, "a1", 32)
		load(r, "a0", "busy", 40)
		d, err := r.Route(RouteInput{RequestID: "r", Tokens: prompt(40), Explain: true}, t0, rng)
		if err != nil {
			t.Fatal(err)
		}
		if len(d.Candidates) != 3 {
			t.Fatalf("candidates %+v, want 3", d.Candidates)
		}
		best := d.Candidates[0]
		for _, c := range d.Candidates {
			if c.Chosen != (c.WorkerID == d.WorkerID) {
				t.Errorf("candidate %s chosen=%v, decision %s", c.WorkerID, c.Chosen, d.WorkerID)
			}
			if termSum(c.Terms) != c.Cost {
				t.Errorf("candidate %s: terms %v, cost %v", c.WorkerID, c.Terms, c.Cost)
			}
			if c.Cost < best.Cost {
				best = c
			}
		}
		if !best.Chosen || d.WorkerID != "a1" || best.OverlapBlocks != 8 {
			t.Errorf("decision %s, candidates %+v: want a1, the cheapest, with its 8 cached blocks", d.WorkerID, d.Candidates)
		}
	})
	t.Run("not asked: nothing", func(t *testing.T) {
		r := explainRouter(t, PolicyKV, "a0 a1")
		d, err := r.Route(RouteInput{RequestID: "r", Tokens: prompt(40)}, t0, rng)
		if err != nil || d.Candidates != nil {
			t.Fatalf("candidates %+v, %v; want none", d.Candidates, err)
		}
		if r.explained != nil || r.explaining {
			t.Fatal("the router kept an explanation")
		}
	})
	t.Run("round-robin: prefix hits, no cost", func(t *testing.T) {
		r := explainRouter(t, PolicyRoundRobin, "a0 a1")
		cache(t, r, "a1", 16)
		d, err := r.Route(RouteInput{RequestID: "r", Tokens: prompt(40), Explain: true}, t0, rng)
		if err != nil || len(d.Candidates) != 2 {
			t.Fatalf("candidates %+v, %v", d.Candidates, err)
		}
		if c := d.Candidates[1]; c.WorkerID != "a1" || c.OverlapBlocks != 4 || c.Cost != 0 || c.Terms != nil {
			t.Errorf("a1: %+v", c)
		}
	})
	t.Run("disaggregated: the decode choice", func(t *testing.T) {
		r := explainRouter(t, PolicyKV, "d0:decode d1:decode p0:prefill p1:prefill")
		d, err := r.Route(RouteInput{RequestID: "r", Tokens: prompt(40), Explain: true}, t0, rng)
		if err != nil || d.Disagg != DisaggRemote {
			t.Fatalf("decision %+v, %v; want remote", d, err)
		}
		if len(d.Candidates) != 2 || d.Candidates[0].WorkerID[0] != 'd' || d.Candidates[1].WorkerID[0] != 'd' {
			t.Fatalf("candidates %+v, want the decode workers", d.Candidates)
		}
		for _, c := range d.Candidates {
			// The decode worker is chosen for load: the kv cost runs with overlap weight 0.
			if w, _ := term(c.Terms, TermWeightedPrefillBlocks); w != 0 {
				t.Errorf("%s: weighted prefill %v, want 0", c.WorkerID, w)
			}
		}
	})
	t.Run("pinned: the pinned worker alone", func(t *testing.T) {
		r := explainRouter(t, PolicyKV, "a0 a1")
		d, err := r.Route(RouteInput{RequestID: "r", Tokens: prompt(40), PinWorker: "a1", Explain: true}, t0, rng)
		if err != nil || d.WorkerID != "a1" {
			t.Fatalf("decision %+v, %v", d, err)
		}
		if len(d.Candidates) != 1 || !d.Candidates[0].Chosen || d.Candidates[0].WorkerID != "a1" || len(d.Candidates[0].Terms) != 2 {
			t.Fatalf("candidates %+v", d.Candidates)
		}
	})
	t.Run("a failed route explains nothing and keeps nothing", func(t *testing.T) {
		r := explainRouter(t, PolicyKV, "a0")
		if _, err := r.Route(RouteInput{RequestID: "r", Tokens: prompt(8), Exclude: []string{"a0"}, Explain: true}, t0, rng); err == nil {
			t.Fatal("routed with every worker excluded")
		}
		if r.explained != nil || r.explaining {
			t.Fatal("the router kept an explanation")
		}
	})
}
