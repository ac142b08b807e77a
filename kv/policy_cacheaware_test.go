package kv

import (
	"math/rand/v2"
	"testing"
)

func TestCacheAwarePolicy(t *testing.T) {
	p := NewCacheAwarePolicy()
	// 160 prompt tokens in blocks of 16: 10 blocks; ratio > 0.3 needs 4 blocks (0.4).
	in := func(cands ...Candidate) *SelectInput {
		return &SelectInput{PromptTokens: 160, PromptBlocks: 10, BlockSize: 16, Candidates: cands}
	}
	for _, tc := range []struct {
		name string
		in   *SelectInput
		want []int // acceptable choices
	}{
		{"balanced, best match above the threshold wins",
			in(Candidate{OverlapBlocks: 1}, Candidate{OverlapBlocks: 4, IndexedBlocks: 900}, Candidate{OverlapBlocks: 2}), []int{1}},
		{"balanced, best match at the threshold: smallest cache",
			in(Candidate{OverlapBlocks: 3, IndexedBlocks: 50}, Candidate{IndexedBlocks: 20}, Candidate{IndexedBlocks: 30}), []int{1}},
		{"balanced, empty caches: smallest cache, then fewer requests",
			in(Candidate{ActiveRequests: 10}, Candidate{ActiveRequests: 5}, Candidate{ActiveRequests: 7}), []int{1}},
		{"spread 64 requests is not above the absolute threshold (blocks do not count): cache wins",
			in(Candidate{ActiveRequests: 64, ActiveBlocks: 5000, OverlapBlocks: 10}, Candidate{}), []int{0}},
		{"spread 65 with an idle worker is imbalanced: least loaded wins over the cache",
			in(Candidate{ActiveRequests: 65, OverlapBlocks: 10}, Candidate{ActiveRequests: 3}, Candidate{ActiveRequests: 0}), []int{2}},
		{"spread above 64 but max within 1.5 × min is balanced",
			in(Candidate{ActiveRequests: 290, OverlapBlocks: 10}, Candidate{ActiveRequests: 200}), []int{0}},
		{"spread above 64 and max above 1.5 × min is imbalanced",
			in(Candidate{ActiveRequests: 301, OverlapBlocks: 10}, Candidate{ActiveRequests: 200}), []int{1}},
		{"equal requests: fewer active blocks",
			in(Candidate{ActiveRequests: 100, ActiveBlocks: 9}, Candidate{ActiveRequests: 100, ActiveBlocks: 4}, Candidate{ActiveRequests: 100, ActiveBlocks: 4, IndexedBlocks: 1}, Candidate{ActiveRequests: 200}), []int{1, 2}},
		{"equal best matches: lower load",
			in(Candidate{OverlapBlocks: 8, ActiveRequests: 3}, Candidate{OverlapBlocks: 8, ActiveRequests: 2}, Candidate{OverlapBlocks: 2}), []int{1}},
		{"overlap beyond the prompt counts as a full match",
			in(Candidate{OverlapBlocks: 12}, Candidate{}), []int{0}},
		{"equal everything: any",
			in(Candidate{}, Candidate{}, Candidate{}), []int{0, 1, 2}},
		{"one candidate", in(Candidate{ActiveBlocks: 1000}), []int{0}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, rng := range []*rand.Rand{nil, rand.New(rand.NewPCG(1, 2))} {
				got, err := p.Select(tc.in, rng)
				if err != nil || !contains(tc.want, got) {
					t.Fatalf("rng %v: Select = %d, %v; want one of %v", rng != nil, got, err, tc.want)
				}
			}
		})
	}
}

func TestCacheAwareEmptyPrompt(t *testing.T) {
	in := &SelectInput{BlockSize: 16, Candidates: []Candidate{{OverlapBlocks: 3, IndexedBlocks: 9}, {IndexedBlocks: 2}}}
	if got := MatchRatio(in, &in.Candidates[0]); got != 0 {
		t.Fatalf("match ratio of an empty prompt %v, want 0", got)
	}
	if got, _ := NewCacheAwarePolicy().Select(in, nil); got != 1 {
		t.Fatalf("empty prompt chose %d, want the smaller cache 1", got)
	}
}

// TestCacheAwareTieDraw: equal candidates share the traffic (a uniform draw).
func TestCacheAwareTieDraw(t *testing.T) {
	p := NewCacheAwarePolicy()
	in := &SelectInput{PromptTokens: 64, PromptBlocks: 4, BlockSize: 16, Candidates: []Candidate{
		{OverlapBlocks: 4, ActiveRequests: 1}, {OverlapBlocks: 4, ActiveRequests: 1}, {OverlapBlocks: 4, ActiveRequests: 2}}}
	rng := rand.New(rand.NewPCG(7, 7))
	count := map[int]int{}
	for range 2000 {
		got, _ := p.Select(in, rng)
		count[got]++
	}
	if count[2] != 0 || count[0] < 800 || count[1] < 800 {
		t.Fatalf("counts %v: want only 0 and 1, about evenly", count)
	}
}

// TestCacheAwareRouter routes through a Router: a prompt sharing a cached prefix
// follows it, a new prompt goes to the emptier cache.
func TestCacheAwareRouter(t *testing.T) {
	cfg := DefaultConfig(4)
	cfg.Policy = PolicyCacheAware
	r, err := NewRouter(cfg)
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"a", "b"} {
		if _, err := r.Register(WorkerSpec{ID: id, BlockSize: 4, TotalBlocks: 100, Ready: true}); err != nil {
			t.Fatal(err)
		}
	}
	prompt := make([]uint32, 16)
	for i := range prompt {
		prompt[i] = uint32(i + 1)
	}
	d, err := r.Route(RouteInput{RequestID: "first", Tokens: prompt}, t0, nil)
	if err != nil {
		t.Fatal(err)
	}
	r.Free("first")
	// the engine reports the prompt's 4 blocks as cached
	ev := Event{Kind: BlockStored, BlockSize: 4, TokenIDs: prompt, EngineHashes: []uint64{11, 12, 13, 14}}
	if need, err := r.ApplyBatch(d.WorkerID, 0, 1, []Event{ev}); need || err != nil {
		t.Fatalf("store: need dump %v, %v", need, err)
	}
	next := append(append([]uint32{}, prompt...), 99, 98, 97, 96)
	if d2, err := r.Route(RouteInput{RequestID: "second", Tokens: next}, t0, nil); err != nil || d2.WorkerID != d.WorkerID {
		t.Fatalf("follow-up %+v %v: want the worker caching its prefix, %s", d2, err, d.WorkerID)
	}
	r.Free("second")
	other := make([]uint32, 16)
	for i := range other {
		other[i] = uint32(1000 + i)
	}
	if d3, err := r.Route(RouteInput{RequestID: "third", Tokens: other}, t0, nil); err != nil || d3.WorkerID == d.WorkerID {
		t.Fatalf("new prompt %+v %v: want the empty cache, not %s", d3, err, d.WorkerID)
	}
}

func contains(xs []int, x int) bool {
	for _, v := range xs {
		if v == x {
			return true
		}
	}
	return false
}
