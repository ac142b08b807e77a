package kv

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

func TestRegistry(t *testing.T) {
	r := DefaultPolicies()
	if got := fmt.Sprint(r.Names()); got != "[cache-aware kv random round-robin ttft]" {
		t.Fatalf("names %s", got)
	}
	if err := r.Register(PolicyKV, func() Policy { return KVPolicy{} }); !errors.Is(err, ErrDuplicatePolicy) {
		t.Fatalf("duplicate registration: %v", err)
	}
	if _, err := r.New("least-loaded"); !errors.Is(err, ErrUnknownPolicy) {
		t.Fatalf("unknown policy: %v", err)
	}
	// Registries are values: one registry's additions do not leak into another.
	if err := r.Register("first", func() Policy { return firstPolicy{} }); err != nil {
		t.Fatal(err)
	}
	if _, err := DefaultPolicies().New("first"); !errors.Is(err, ErrUnknownPolicy) {
		t.Fatal("registration leaked into a fresh registry")
	}
}

type firstPolicy struct{}

func (firstPolicy) Select(in *SelectInput, _ *rand.Rand) (int, error) {
	if len(in.Candidates) == 0 {
		return 0, ErrNoWorkers
	}
	return 0, nil
}

func randomInput(rng *rand.Rand, n int) *SelectInput {
	in := &SelectInput{PromptTokens: rng.IntN(4000), BlockSize: 16, OverlapWeight: rng.Float64() * 4}
	if rng.IntN(2) == 0 {
		in.Temperature = rng.Float64()
	}
	in.PromptBlocks = in.PromptTokens / 16
	for i := 0; i < n; i++ {
		in.Candidates = append(in.Candidates, Candidate{
			Worker: WorkerID(i * 2), ID: fmt.Sprint("w", i),
			OverlapBlocks:       rng.IntN(in.PromptBlocks + 1),
			ActiveBlocks:        rng.IntN(1000),
			ActivePrefixBlocks:  rng.IntN(in.PromptBlocks + 1),
			ActivePrefillTokens: int64(rng.IntN(8000)),
			IndexedBlocks:       rng.IntN(5000),
		})
	}
	return in
}

// TestPolicyConformance runs every registered policy through the contract of Policy
// and through a Router with busy and excluded workers.
func TestPolicyConformance(t *testing.T) {
	reg := DefaultPolicies()
	for _, name := range reg.Names() {
		t.Run(name, func(t *testing.T) {
			p, _ := reg.New(name)
			if _, err := p.Select(&SelectInput{BlockSize: 16}, rand.New(rand.NewPCG(1, 1))); !errors.Is(err, ErrNoWorkers) {
				t.Fatalf("no candidates: %v", err)
			}
			rng := rand.New(rand.NewPCG(2, 2))
			for i := 0; i < 500; i++ {
				in := randomInput(rng, 1+rng.IntN(70))
				got, err := p.Select(in, rng)
				if err != nil || got < 0 || got >= len(in.Candidates) {
					t.Fatalf("Select = %d, %v for %d candidates", got, err, len(in.Candidates))
				}
				if got, err := p.Select(in, nil); err != nil || got < 0 || got >= len(in.Candidates) {
					t.Fatalf("Select with nil rng = %d, %v", got, err)
				}
			}
			// Same seed, same choices (fresh policy values, so stateful policies agree).
			pick := func() []int {
				p, _ := reg.New(name)
				rng := rand.New(rand.NewPCG(3, 3))
				var out []int
				for i := 0; i < 50; i++ {
					got, _ := p.Select(randomInput(rng, 8), rng)
					out = append(out, got)
				}
				return out
			}
			if a, b := pick(), pick(); fmt.Sprint(a) != fmt.Sprint(b) {
				t.Fatalf("not deterministic under a seed: %v vs %v", a, b)
			}

			// Through a Router: busy and excluded workers never get traffic.
			cfg := DefaultConfig(4)
			cfg.Policy = name
			cfg.Busy = BusyThresholds{PrefillTokens: 100}
			r, err := NewRouter(cfg)
			if err != nil {
				t.Fatal(err)
			}
			for _, id := range []string{"a", "b", "c", "d"} {
				if _, err := r.Register(WorkerSpec{ID: id, BlockSize: 4, TotalBlocks: 100, Ready: id != "d"}); err != nil {
					t.Fatal(err)
				}
			}
			// make "a" busy: one long request whose prefill is not done
			if d, err := r.Route(RouteInput{RequestID: "long", Tokens: make([]uint32, 400), Exclude: []string{"b", "c"}}, t0, rng); err != nil || d.WorkerID != "a" {
				t.Fatalf("pinning the long request: %+v %v", d, err)
			}
			for i := 0; i < 40; i++ {
				d, err := r.Route(RouteInput{RequestID: fmt.Sprint("r", i), Tokens: make([]uint32, 8), Exclude: []string{"c"}}, t0, rng)
				if err != nil {
					t.Fatal(err)
				}
				if d.WorkerID != "b" {
					t.Fatalf("request %d went to %s (a busy, c excluded, d not ready)", i, d.WorkerID)
				}
				r.Free(fmt.Sprint("r", i))
			}
			if _, err := r.Route(RouteInput{RequestID: "x", Tokens: make([]uint32, 8), Exclude: []string{"b", "c"}}, t0, rng); !errors.Is(err, ErrAllBusy) {
				t.Fatalf("only a busy worker left: %v", err)
			}
			if _, err := r.Route(RouteInput{RequestID: "x", Exclude: []string{"a", "b", "c"}}, t0, rng); !errors.Is(err, ErrNoWorkers) {
				t.Fatalf("all excluded: %v", err)
			}
			r.PrefillDone("long")
			if d, err := r.Route(RouteInput{RequestID: "y", Exclude: []string{"b", "c"}}, t0, rng); err != nil || d.WorkerID != "a" {
				t.Fatalf("after prefill done a is free again: %+v %v", d, err)
			}
		})
	}
}

func TestKVCost(t *testing.T) {
	in := &SelectInput{PromptTokens: 100, PromptBlocks: 6, BlockSize: 16, OverlapWeight: 2}
	cases := []struct {
		c    Candidate
		want float64
	}{
		// prefill (0 + 100-0)/16 = 6.25 → 12.5; decode 0 + 6
		{Candidate{}, 12.5 + 6},
		// overlap 4 → prefill (50 + 100-64)/16 = 5.375 → 10.75; decode 10 + (6-2)
		{Candidate{OverlapBlocks: 4, ActivePrefillTokens: 50, ActiveBlocks: 10, ActivePrefixBlocks: 2}, 10.75 + 14},
		// overlap beyond ISL clamps prefill to the active part
		{Candidate{OverlapBlocks: 7, ActivePrefixBlocks: 6}, 0},
	}
	for i, tc := range cases {
		if got := KVCost(in, &tc.c); math.Abs(got-tc.want) > 1e-12 {
			t.Errorf("case %d: cost %v, want %v", i, got, tc.want)
		}
	}
}

func TestKVPolicyArgminAndTies(t *testing.T) {
	p := KVPolicy{}
	in := &SelectInput{PromptTokens: 64, PromptBlocks: 4, BlockSize: 16, OverlapWeight: 1,
		Candidates: []Candidate{
			{Worker: 0, ActiveBlocks: 10},
			{Worker: 1, OverlapBlocks: 4, ActiveBlocks: 10}, // cheapest: no prefill
			{Worker: 2, ActiveBlocks: 12},
		}}
	if got, _ := p.Select(in, rand.New(rand.NewPCG(1, 1))); got != 1 {
		t.Fatalf("argmin chose %d, want 1", got)
	}
	// Equal costs: the emptier index wins, then a uniform draw among equals.
	in.Candidates = []Candidate{
		{Worker: 0, IndexedBlocks: 50},
		{Worker: 1, IndexedBlocks: 10},
		{Worker: 2, IndexedBlocks: 10},
		{Worker: 3, IndexedBlocks: 70},
	}
	rng := rand.New(rand.NewPCG(5, 5))
	count := map[int]int{}
	for i := 0; i < 2000; i++ {
		got, _ := p.Select(in, rng)
		count[got]++
	}
	if count[0] != 0 || count[3] != 0 || count[1] < 800 || count[2] < 800 {
		t.Fatalf("tie-break counts %v, want only 1 and 2, about evenly", count)
	}
}

func TestKVPolicySoftmax(t *testing.T) {
	p := KVPolicy{}
	in := &SelectInput{PromptTokens: 0, BlockSize: 16, OverlapWeight: 1, Temperature: 0.5,
		Candidates: []Candidate{{ActiveBlocks: 0}, {ActiveBlocks: 5}, {ActiveBlocks: 10}}}
	// costs 0, 5, 10; span 10: p ∝ exp(-0/0.5), exp(-0.5/0.5), exp(-1/0.5)
	w := []float64{1, math.Exp(-1), math.Exp(-2)}
	sum := w[0] + w[1] + w[2]
	rng := rand.New(rand.NewPCG(9, 9))
	const n = 20000
	count := make([]int, 3)
	for i := 0; i < n; i++ {
		got, _ := p.Select(in, rng)
		count[got]++
	}
	for i := range w {
		want := w[i] / sum
		if got := float64(count[i]) / n; math.Abs(got-want) > 0.015 {
			t.Errorf("candidate %d chosen %.3f of the time, want %.3f", i, got, want)
		}
	}
	// All costs equal: uniform.
	in.Candidates = []Candidate{{}, {}}
	count = make([]int, 2)
	for i := 0; i < 2000; i++ {
		got, _ := p.Select(in, rng)
		count[got]++
	}
	if count[0] < 900 || count[1] < 900 {
		t.Fatalf("equal costs under temperature: %v", count)
	}
}

func TestRoundRobin(t *testing.T) {
	p := &RoundRobinPolicy{}
	cands := func(ids ...WorkerID) *SelectInput {
		in := &SelectInput{}
		for _, id := range ids {
			in.Candidates = append(in.Candidates, Candidate{Worker: id})
		}
		return in
	}
	var got []WorkerID
	for _, in := range []*SelectInput{cands(0, 1, 2), cands(0, 1, 2), cands(0, 2), cands(0, 1, 2), cands(1, 2), cands(3, 1)} {
		i, _ := p.Select(in, nil)
		got = append(got, in.Candidates[i].Worker)
	}
	if fmt.Sprint(got) != "[0 1 2 0 1 3]" {
		t.Fatalf("round robin order %v", got)
	}
}
