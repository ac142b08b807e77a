package kv

import (
	"errors"
	"fmt"
	"hash/fnv"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"
)

// near reports whether got is within a relative 1e-9 of want (the terms are sums and
// products of the same figures in another order).
func near(got, want float64) bool {
	return math.Abs(got-want) <= 1e-9*math.Max(1, math.Abs(want))
}

func TestPredictTTFT(t *testing.T) {
	p := DefaultProfile()
	pf := func(tok float64) float64 { ms, _ := p.PrefillMs(tok); return ms }
	dec := p.DecodeMs
	// memory wait for the 1,000-token prompt (63 blocks of 16) on a 1,000-block worker
	// with 990 active: the 53 blocks beyond the cache free in 53/990 of the decode time
	// of a request (the 990 blocks free over one).
	frac := (990.0 + 63 - 1000) / 990
	for _, tc := range []struct {
		name   string
		prompt int
		c      Candidate
		want   Prediction
	}{
		{"idle, nothing cached", 1000, Candidate{},
			Prediction{PrefillMs: pf(1000), Speed: 1, OwnPrefillMs: pf(1000)}},
		{"prefix cached: only the rest is computed", 1000, Candidate{OverlapBlocks: 50},
			Prediction{PrefillMs: pf(200), Speed: 1, OwnPrefillMs: pf(200)}},
		{"whole prompt cached: the last token is still computed", 1024, Candidate{OverlapBlocks: 64},
			Prediction{PrefillMs: pf(1), Speed: 1, OwnPrefillMs: pf(1)}},
		{"overlap beyond the prompt", 1024, Candidate{OverlapBlocks: 100},
			Prediction{PrefillMs: pf(1), Speed: 1, OwnPrefillMs: pf(1)}},
		{"queued prefill, no requests: no decode term", 1000, Candidate{ActivePrefillTokens: 5000},
			Prediction{QueueMs: pf(5000), PrefillMs: pf(6000) - pf(5000), Speed: 1, OwnPrefillMs: pf(1000)}},
		{"queued prefill with requests: one step's decode", 1000,
			Candidate{ActivePrefillTokens: 5000, ActiveRequests: 2},
			Prediction{QueueMs: pf(5000), PrefillMs: pf(6000) - pf(5000), DecodeMs: dec(0), Speed: 1, OwnPrefillMs: pf(1000)}},
		{"queue and prompt across a chunk: two steps' decode at the KV usage", 1000,
			Candidate{ActivePrefillTokens: 8000, ActiveRequests: 1, ActiveBlocks: 500, TotalBlocks: 1000},
			Prediction{QueueMs: pf(8000), PrefillMs: pf(9000) - pf(8000), DecodeMs: 2 * dec(0.5), Speed: 1, OwnPrefillMs: pf(1000)}},
		{"the queue's head computing for 40 ms after the lag: 40 ms less queue", 1000,
			Candidate{ActivePrefillTokens: 5000, ActiveRequests: 2, PrefillElapsedMs: 40 + 4*dec(0)},
			Prediction{QueueMs: pf(5000) - 40, PrefillMs: pf(6000) - pf(5000), DecodeMs: dec(0), Speed: 1, OwnPrefillMs: pf(1000)}},
		{"the lag is four decode steps at the worker's KV usage", 1000,
			Candidate{ActivePrefillTokens: 5000, ActiveRequests: 2, ActiveBlocks: 600, TotalBlocks: 1000, PrefillElapsedMs: 40 + 4*dec(0.6)},
			Prediction{QueueMs: pf(5000) - 40, PrefillMs: pf(6000) - pf(5000), DecodeMs: dec(0.6), Speed: 1, OwnPrefillMs: pf(1000)}},
		{"within the lag: the whole queue", 1000,
			Candidate{ActivePrefillTokens: 5000, ActiveRequests: 2, PrefillElapsedMs: 3 * dec(0)},
			Prediction{QueueMs: pf(5000), PrefillMs: pf(6000) - pf(5000), DecodeMs: dec(0), Speed: 1, OwnPrefillMs: pf(1000)}},
		{"running past the queue's prediction: no queue left, not less", 1000,
			Candidate{ActivePrefillTokens: 5000, ActiveRequests: 1, PrefillElapsedMs: 10000},
			Prediction{PrefillMs: pf(6000) - pf(5000), DecodeMs: dec(0), Speed: 1, OwnPrefillMs: pf(1000)}},
		{"a worker twice as slow: its elapsed time counts half in the profile's terms, lag included", 1000,
			Candidate{ActivePrefillTokens: 5000, ActiveRequests: 1, SpeedFactor: 2, PrefillElapsedMs: 2 * (40 + 4*dec(0))},
			Prediction{QueueMs: 2 * (pf(5000) - 40), PrefillMs: 2 * (pf(6000) - pf(5000)), DecodeMs: 2 * dec(0), Speed: 2, OwnPrefillMs: 2 * pf(1000)}},
		{"decoding requests, nothing queued", 1000, Candidate{ActiveRequests: 3, ActiveBlocks: 250, TotalBlocks: 1000},
			Prediction{PrefillMs: pf(1000), DecodeMs: dec(0.25), Speed: 1, OwnPrefillMs: pf(1000)}},
		{"active blocks without a known capacity: usage 0, no memory wait", 1000,
			Candidate{ActiveRequests: 1, ActiveBlocks: 1 << 20},
			Prediction{PrefillMs: pf(1000), DecodeMs: dec(0), Speed: 1, OwnPrefillMs: pf(1000)}},
		{"cache overflowing: wait for the default decode", 1000,
			Candidate{ActiveRequests: 4, ActiveBlocks: 990, TotalBlocks: 1000},
			Prediction{PrefillMs: pf(1000), DecodeMs: dec(0.99), MemoryWaitMs: frac * defaultDecodeTokens * dec(0.99),
				Speed: 1, OwnPrefillMs: pf(1000)}},
		{"cache overflowing: wait for the observed decode", 1000,
			Candidate{ActiveRequests: 4, ActiveBlocks: 990, TotalBlocks: 1000, MeanDecodeSeconds: 2.5},
			Prediction{PrefillMs: pf(1000), DecodeMs: dec(0.99), MemoryWaitMs: frac * 2500, Speed: 1, OwnPrefillMs: pf(1000)}},
		{"prompt already active: no new blocks, no wait", 1000,
			Candidate{ActiveRequests: 4, ActiveBlocks: 990, ActivePrefixBlocks: 63, TotalBlocks: 1000},
			Prediction{PrefillMs: pf(1000), DecodeMs: dec(0.99), Speed: 1, OwnPrefillMs: pf(1000)}},
		{"exactly full with the request: no wait", 1000,
			Candidate{ActiveRequests: 4, ActiveBlocks: 937, TotalBlocks: 1000},
			Prediction{PrefillMs: pf(1000), DecodeMs: dec(0.937), Speed: 1, OwnPrefillMs: pf(1000)}},
		{"one block past full with the request: a wait", 1000,
			Candidate{ActiveRequests: 4, ActiveBlocks: 938, TotalBlocks: 1000, MeanDecodeSeconds: 2},
			Prediction{PrefillMs: pf(1000), DecodeMs: dec(0.938), MemoryWaitMs: (1001.0/1000 - 1) / 0.938 * 2000, Speed: 1, OwnPrefillMs: pf(1000)}},
		{"85 % full with the request: no wait (the engine admits what fits)", 1000,
			Candidate{ActiveRequests: 4, ActiveBlocks: 790, TotalBlocks: 1000},
			Prediction{PrefillMs: pf(1000), DecodeMs: dec(0.79), Speed: 1, OwnPrefillMs: pf(1000)}},
		{"a prompt larger than an idle cache: a long wait, not ∞", 1000,
			Candidate{ActiveRequests: 0, ActiveBlocks: 0, TotalBlocks: 50, MeanDecodeSeconds: 2},
			Prediction{PrefillMs: pf(1000), MemoryWaitMs: (63.0/50 - 1) / minMemoryUse * 2000, Speed: 1, OwnPrefillMs: pf(1000)}},
		{"a worker twice as slow: every profiled term doubles", 1000,
			Candidate{ActivePrefillTokens: 5000, ActiveRequests: 4, ActiveBlocks: 990, TotalBlocks: 1000, SpeedFactor: 2},
			Prediction{QueueMs: 2 * pf(5000), PrefillMs: 2 * (pf(6000) - pf(5000)), DecodeMs: 2 * dec(0.99),
				MemoryWaitMs: 2 * frac * defaultDecodeTokens * dec(0.99), Speed: 2, OwnPrefillMs: 2 * pf(1000)}},
		{"a worker twice as slow: an observed decode time is not scaled again", 1000,
			Candidate{ActiveRequests: 4, ActiveBlocks: 990, TotalBlocks: 1000, SpeedFactor: 2, MeanDecodeSeconds: 2.5},
			Prediction{PrefillMs: 2 * pf(1000), DecodeMs: 2 * dec(0.99), MemoryWaitMs: frac * 2500, Speed: 2, OwnPrefillMs: 2 * pf(1000)}},
		{"sequence slots free: no slot wait", 1000, Candidate{ActiveRequests: 3, MaxNumSeqs: 4, MeanDecodeSeconds: 2},
			Prediction{PrefillMs: pf(1000), DecodeMs: dec(0), Speed: 1, OwnPrefillMs: pf(1000)}},
		{"every slot taken: one request ahead finishes in a quarter of the observed decode", 1000,
			Candidate{ActiveRequests: 4, MaxNumSeqs: 4, MeanDecodeSeconds: 2},
			Prediction{PrefillMs: pf(1000), DecodeMs: dec(0), SlotWaitMs: 500, Speed: 1, OwnPrefillMs: pf(1000)}},
		{"three queued beyond the slots: four ahead", 1000,
			Candidate{ActiveRequests: 7, MaxNumSeqs: 4, MeanDecodeSeconds: 2},
			Prediction{PrefillMs: pf(1000), DecodeMs: dec(0), SlotWaitMs: 2000, Speed: 1, OwnPrefillMs: pf(1000)}},
		{"every slot taken, decode not observed: the default decode", 1000,
			Candidate{ActiveRequests: 2, MaxNumSeqs: 2},
			Prediction{PrefillMs: pf(1000), DecodeMs: dec(0), SlotWaitMs: defaultDecodeTokens * dec(0) / 2, Speed: 1, OwnPrefillMs: pf(1000)}},
		{"slots unknown: no slot wait", 1000, Candidate{ActiveRequests: 1000, MeanDecodeSeconds: 2},
			Prediction{PrefillMs: pf(1000), DecodeMs: dec(0), Speed: 1, OwnPrefillMs: pf(1000)}},
		{"a worker twice as slow: the observed decode in the slot wait is not scaled again", 1000,
			Candidate{ActiveRequests: 4, MaxNumSeqs: 4, MeanDecodeSeconds: 2, SpeedFactor: 2},
			Prediction{PrefillMs: 2 * pf(1000), DecodeMs: 2 * dec(0), SlotWaitMs: 500, Speed: 2, OwnPrefillMs: 2 * pf(1000)}},
		{"a faster worker", 1000, Candidate{SpeedFactor: 0.5},
			Prediction{PrefillMs: 0.5 * pf(1000), Speed: 0.5, OwnPrefillMs: 0.5 * pf(1000)}},
		{"speed not learnt yet (0): as profiled", 1000, Candidate{SpeedFactor: 0},
			Prediction{PrefillMs: pf(1000), Speed: 1, OwnPrefillMs: pf(1000)}},
		{"negative speed: as profiled", 1000, Candidate{SpeedFactor: -3},
			Prediction{PrefillMs: pf(1000), Speed: 1, OwnPrefillMs: pf(1000)}},
		{"NaN speed: as profiled", 1000, Candidate{SpeedFactor: math.NaN()},
			Prediction{PrefillMs: pf(1000), Speed: 1, OwnPrefillMs: pf(1000)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := PredictTTFT(&p, tc.prompt, 16, &tc.c)
			w := tc.want
			if !near(got.QueueMs, w.QueueMs) || !near(got.PrefillMs, w.PrefillMs) || !near(got.DecodeMs, w.DecodeMs) ||
				!near(got.MemoryWaitMs, w.MemoryWaitMs) || !near(got.SlotWaitMs, w.SlotWaitMs) || got.Speed != w.Speed ||
				!near(got.OwnPrefillMs, w.OwnPrefillMs) {
				t.Errorf("PredictTTFT = %+v\n want %+v", got, w)
			}
			if !near(got.Total(), w.QueueMs+w.PrefillMs+w.DecodeMs+w.MemoryWaitMs+w.SlotWaitMs) {
				t.Errorf("Total %v, want the sum of the five terms of %+v", got.Total(), w)
			}
		})
	}
	t.Run("nil profile is the default", func(t *testing.T) {
		c := Candidate{ActivePrefillTokens: 3000, ActiveRequests: 2, ActiveBlocks: 850, TotalBlocks: 1000}
		if a, b := PredictTTFT(nil, 2000, 16, &c), PredictTTFT(&p, 2000, 16, &c); a != b {
			t.Errorf("nil profile %+v, default %+v", a, b)
		}
	})
	t.Run("block size 0 counts as 1", func(t *testing.T) {
		c := Candidate{OverlapBlocks: 10}
		if got := PredictTTFT(&p, 100, 0, &c); !near(got.PrefillMs, pf(90)) {
			t.Errorf("PrefillMs %v, want %v", got.PrefillMs, pf(90))
		}
	})
}

// ttftIn is a SelectInput for a prompt of n tokens in blocks of 16.
func ttftIn(n int, cands ...Candidate) *SelectInput {
	return &SelectInput{Candidates: cands, PromptTokens: n, PromptBlocks: n / 16, BlockSize: 16}
}

func TestTTFTSelect(t *testing.T) {
	pol := NewTTFTPolicy()
	for _, tc := range []struct {
		name  string
		in    *SelectInput
		want  int
		rngOK bool // the choice does not depend on the rng (checked with several seeds)
	}{
		{"a cached worker wins at low load", ttftIn(4096, Candidate{ID: "cold"}, Candidate{ID: "warm", OverlapBlocks: 200, IndexedBlocks: 200}), 1, true},
		{"a longer hit wins", ttftIn(4096, Candidate{OverlapBlocks: 100}, Candidate{OverlapBlocks: 200}, Candidate{OverlapBlocks: 150}), 1, true},
		{"a light decode load does not outweigh a long hit",
			ttftIn(4096, Candidate{}, Candidate{OverlapBlocks: 240, ActiveRequests: 3, ActiveBlocks: 300, TotalBlocks: 1000}), 1, true},
		{"a busy worker loses to an idle one without a hit",
			ttftIn(1024, Candidate{ActivePrefillTokens: 30000, ActiveRequests: 5}, Candidate{}), 1, true},
		{"a nearly full cache sends the request elsewhere",
			ttftIn(4096, Candidate{OverlapBlocks: 200, ActiveRequests: 50, ActiveBlocks: 990, TotalBlocks: 1000}, Candidate{}), 1, true},
		{"a slower worker loses an otherwise equal choice",
			ttftIn(2048, Candidate{SpeedFactor: 1.5}, Candidate{SpeedFactor: 1}), 1, true},
		{"equal costs: the emptier cache", ttftIn(2048, Candidate{IndexedBlocks: 50}, Candidate{IndexedBlocks: 10}, Candidate{IndexedBlocks: 30}), 1, true},
		{"equal costs: the emptier cache, listed first", ttftIn(2048, Candidate{IndexedBlocks: 5}, Candidate{IndexedBlocks: 10}), 0, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for seed := uint64(0); seed < 20; seed++ {
				var rng *rand.Rand
				if seed > 0 {
					rng = rand.New(rand.NewPCG(seed, 7))
				}
				got, err := pol.Select(tc.in, rng)
				if err != nil || got != tc.want {
					t.Fatalf("seed %d: Select = %d, %v; want %d", seed, got, err, tc.want)
				}
			}
		})
	}

	t.Run("no candidates", func(t *testing.T) {
		if _, err := pol.Select(ttftIn(100), rand.New(rand.NewPCG(1, 2))); !errors.Is(err, ErrNoWorkers) {
			t.Errorf("Select: %v, want ErrNoWorkers", err)
		}
		if _, err := pol.Select(ttftIn(100), nil); !errors.Is(err, ErrNoWorkers) {
			t.Errorf("Select with nil rng: %v, want ErrNoWorkers", err)
		}
	})

	t.Run("equal costs and caches: a uniform draw", func(t *testing.T) {
		in := ttftIn(2048, Candidate{IndexedBlocks: 7}, Candidate{IndexedBlocks: 7}, Candidate{IndexedBlocks: 7}, Candidate{IndexedBlocks: 90})
		rng := rand.New(rand.NewPCG(3, 4))
		var n [4]int
		const draws = 3000
		for i := 0; i < draws; i++ {
			got, err := pol.Select(in, rng)
			if err != nil {
				t.Fatal(err)
			}
			n[got]++
		}
		// each of the three with probability 1/3: 1000 ± 200 is beyond 6 standard deviations
		for i := 0; i < 3; i++ {
			if n[i] < 800 || n[i] > 1200 {
				t.Errorf("counts %v: candidate %d far from %d", n, i, draws/3)
			}
		}
		if n[3] != 0 {
			t.Errorf("counts %v: the fuller cache was drawn", n)
		}
	})

	t.Run("costs within the band count as equal: fewer running requests win", func(t *testing.T) {
		busy := Candidate{ID: "busy", ActiveRequests: 2, IndexedBlocks: 0}
		for _, tc := range []struct {
			dearer float64 // the idle candidate's cost over the busy one's
			want   string
		}{
			{1.04, "idle"}, // 4 % dearer: within nearFraction
			{1.2, "busy"},  // 20 % dearer: clearly worse
		} {
			// The idle worker's speed factor scales its whole cost (it has no work term:
			// both compute the same), so it is set to make that cost tc.dearer × the busy one's.
			at1 := ttftIn(4096, busy, Candidate{ID: "idle", IndexedBlocks: 500})
			speed := tc.dearer * ttftCost(pol, at1, 0) / ttftCost(pol, at1, 1)
			idle := Candidate{ID: "idle", IndexedBlocks: 500, SpeedFactor: speed}
			in := ttftIn(4096, busy, idle)
			costBusy, costIdle := ttftCost(pol, in, 0), ttftCost(pol, in, 1)
			if costBusy >= costIdle {
				t.Fatalf("setup: busy %v, idle %v: the busy worker must be the cheaper", costBusy, costIdle)
			}
			got, err := pol.Select(in, nil)
			if err != nil || in.Candidates[got].ID != tc.want {
				t.Errorf("idle %v%% dearer: chose %s, %v; want %s", math.Round((costIdle/costBusy-1)*100), in.Candidates[got].ID, err, tc.want)
			}
		}
	})

	t.Run("nil rng is deterministic", func(t *testing.T) {
		in := ttftIn(2048, Candidate{IndexedBlocks: 9}, Candidate{IndexedBlocks: 7}, Candidate{IndexedBlocks: 7})
		for i := 0; i < 10; i++ {
			if got, err := pol.Select(in, nil); err != nil || got != 1 {
				t.Fatalf("Select = %d, %v; want 1, the first of the tied emptier caches", got, err)
			}
		}
	})
}

// TestTTFTHotPrefixSpills loads the worker that caches most of a prompt with queued
// prefill and checks the choice moves to an idle, cold worker exactly where recomputing
// the prompt there is no longer clearly dearer (outside the band of equal predictions).
func TestTTFTHotPrefixSpills(t *testing.T) {
	p := DefaultProfile()
	pf := func(tok float64) float64 { ms, _ := p.PrefillMs(tok); return ms }
	const prompt, cachedBlocks = 4096, 240 // 3,840 tokens cached, 256 to compute
	newTok := float64(prompt - cachedBlocks*16)
	for _, tc := range []struct {
		weight   float64
		min, max int64 // where the crossover must land (queued tokens)
	}{
		// the compute a hit saves counts too: the cached worker keeps the request longer
		{DefaultWorkWeight, 5500, 7500},
		// TTFT alone: spill as soon as the cached worker is slower to the first token
		{0, 2500, 4200},
	} {
		t.Run(fmt.Sprint("work weight ", tc.weight), func(t *testing.T) {
			pol := TTFTPolicy{WorkWeight: tc.weight, SessionSlack: DefaultSessionSlack}
			// The model, written out: the cached worker has one request in flight (one
			// decode step per prefill step, empty cache), the other worker is idle.
			// The work term counts the compute beyond the cheapest candidate's (the cached
			// one's); each worker carries one request in flight, its fair share, so the
			// whole weight applies (hotDiscount 1).
			costCached := func(q int64) float64 {
				ms, steps := p.PrefillMs(float64(q) + newTok)
				return ms + steps*p.DecodeMs(0)
			}
			coldMs, coldSteps := p.PrefillMs(prompt)
			costCold := coldMs + coldSteps*p.DecodeMs(0) + tc.weight*(pf(prompt)-pf(newTok))
			var cross int64 = -1
			for q := int64(0); q <= 20000; q++ {
				// the cold worker, idle, wins as soon as its cost is within the band of
				// predictions counted as equal (its fewer running requests then decide)
				if c := costCached(q); costCold <= c+math.Max(nearMs, nearFraction*c) {
					cross = q
					break
				}
			}
			if cross < tc.min || cross > tc.max {
				t.Fatalf("crossover at %d queued tokens, want %d..%d", cross, tc.min, tc.max)
			}
			sel := func(q int64) int {
				in := ttftIn(prompt,
					Candidate{ID: "cached", OverlapBlocks: cachedBlocks, IndexedBlocks: 5000, ActivePrefillTokens: q, ActiveRequests: 1},
					Candidate{ID: "cold", ActiveRequests: 1})
				got, err := pol.Select(in, nil)
				if err != nil {
					t.Fatal(err)
				}
				return got
			}
			for _, q := range []int64{0, cross / 2, cross - 1} {
				if got := sel(q); got != 0 {
					t.Errorf("%d tokens queued on the cached worker: chose %d, want the cached worker", q, got)
				}
			}
			for _, q := range []int64{cross, cross + 1, 2 * cross, 100000} {
				if got := sel(q); got != 1 {
					t.Errorf("%d tokens queued on the cached worker: chose %d, want the cold worker", q, got)
				}
			}
			t.Logf("work weight %v: spills at %d queued tokens", tc.weight, cross)
		})
	}
}

// TestTTFTReplicaCredit: with a demand of n earlier requests on the prefix, a worker
// without it bears only 1/n of what recomputing the prefix adds to its predicted TTFT and
// to its own prefill (share (n − 1)/n, docs/reference.md §3.6), so the cached worker's
// queue at which a request spills falls as n grows; n ≤ 1 is the plain policy; a holder
// gets no credit; Explain shows the credit as a term of its own.
func TestTTFTReplicaCredit(t *testing.T) {
	p := DefaultProfile()
	pf := func(tok float64) float64 { ms, _ := p.PrefillMs(tok); return ms }
	const prompt, cachedBlocks = 8000, 375 // 6,000 tokens cached, 2,000 to compute
	newTok := float64(prompt - cachedBlocks*16)
	pol := NewTTFTPolicy()
	costCached := func(q int64) float64 {
		ms, steps := p.PrefillMs(float64(q) + newTok)
		return ms + steps*p.DecodeMs(0)
	}
	// The cold worker, written out: unshared, and as if it held the prefix. Each worker
	// carries one request in flight, its fair share, so the whole work weight applies.
	coldMs, coldSteps := p.PrefillMs(prompt)
	heldMs, heldSteps := p.PrefillMs(newTok)
	cold, held := coldMs+coldSteps*p.DecodeMs(0), heldMs+heldSteps*p.DecodeMs(0)
	in := func(q int64, n float64) *SelectInput {
		in := ttftIn(prompt,
			Candidate{ID: "cached", OverlapBlocks: cachedBlocks, IndexedBlocks: 5000, ActivePrefillTokens: q, ActiveRequests: 1},
			Candidate{ID: "cold", ActiveRequests: 1})
		in.PrefixDemand = n
		return in
	}
	// No credit below a demand of 1 (nor for a demand that is not a number): the plain
	// crossover; then, as the demand grows, an ever earlier one.
	plain, prev := int64(-1), int64(math.MaxInt64)
	for _, n := range []float64{0, 0.5, 1, math.NaN(), math.Inf(1), -2, 1.5, 3, 15, 63} {
		t.Run(fmt.Sprint("demand ", n), func(t *testing.T) {
			f := 0.0
			if n > 1 && !math.IsInf(n, 0) {
				f = (n - 1) / n
			}
			// With prefill queued on the cached worker, one candidate of two is busy: the
			// work term weighs 1 + (DefaultBusyWorkScale − 1)/8 times (busyScale).
			busy := 1 + (DefaultBusyWorkScale-1)/8
			work := DefaultWorkWeight * busy * (pf(prompt) - f*(pf(prompt)-pf(newTok)) - pf(newTok))
			costCold := cold - f*(cold-held) + work
			var cross int64 = -1
			for q := int64(0); q <= 50000; q++ {
				if c := costCached(q); costCold <= c+math.Max(nearMs, nearFraction*c) {
					cross = q
					break
				}
			}
			switch {
			case cross < 0:
				t.Fatalf("no crossover")
			case plain < 0:
				plain = cross
			case f == 0 && cross != plain:
				t.Fatalf("crossover at %d queued tokens, want %d as with no demand", cross, plain)
			case f > 0 && cross >= min(prev, plain):
				t.Fatalf("crossover at %d queued tokens, want below %d (less demand)", cross, min(prev, plain))
			}
			if f > 0 {
				prev = cross
			}
			for _, tc := range []struct {
				q    int64
				want int
			}{{0, 0}, {cross - 1, 0}, {cross, 1}, {2*cross + 1000, 1}} {
				if tc.q < 0 {
					continue
				}
				if got, err := pol.Select(in(tc.q, n), nil); err != nil || got != tc.want {
					t.Errorf("%d tokens queued on the cached worker: chose %d (%v), want %d", tc.q, got, err, tc.want)
				}
			}
			x := in(cross, n)
			for i, c := range x.Candidates {
				_, terms := pol.Explain(x, &c)
				credit, ok := term(terms, "replica_credit_ms")
				switch {
				case i == 0 && ok:
					t.Errorf("the holder got a replica credit: %v", terms)
				case i == 1 && f == 0 && ok:
					t.Errorf("a credit with a demand of %v: %v", n, terms)
				case i == 1 && f > 0 && !near(-credit, f*(cold-held)):
					t.Errorf("credit %v, want -%v", credit, f*(cold-held))
				}
			}
			t.Logf("demand %v: spills at %d queued tokens", n, cross)
		})
	}
}

func TestTTFTSessionSlack(t *testing.T) {
	// Three twins at the profile's speed make the fleet's median speed 1, so that the
	// session's worker's speed scales all its terms (outside the speed noise band, within
	// which it counts as the fleet's: docs/reference.md §3.6).
	base := Candidate{ID: "best", OverlapBlocks: 10, SpeedFactor: 1}
	session := func(speed float64) Candidate {
		c := base
		c.ID, c.SessionWorker, c.SpeedFactor = "session", true, speed
		return c
	}
	for _, tc := range []struct {
		name  string
		slack float64
		c     Candidate // the session's worker; all its terms scale with its speed
		keep  bool
	}{
		{"the session's worker is the best", DefaultSessionSlack, session(0.8), true},
		{"as good as the best", DefaultSessionSlack, session(1), true},
		{"5 % dearer: within the speed noise", DefaultSessionSlack, session(1.05), true},
		{"50 % dearer", DefaultSessionSlack, session(1.5), false},
		{"29 % dearer, slack 30 %", 0.3, session(1.29), true},
		{"31 % dearer, slack 30 %", 0.3, session(1.31), false},
		{"no slack, 20 % dearer", 0, session(1.2), false},
		{"no slack, as good", 0, session(1), true},
		{"wider slack", 0.6, session(1.5), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pol := TTFTPolicy{WorkWeight: DefaultWorkWeight, SessionSlack: tc.slack}
			for _, order := range [][]Candidate{{tc.c, base, base, base}, {base, base, base, tc.c}} {
				in := ttftIn(2048, order...)
				got, err := pol.Select(in, rand.New(rand.NewPCG(1, 1)))
				if err != nil {
					t.Fatal(err)
				}
				if kept := in.Candidates[got].SessionWorker; kept != tc.keep {
					t.Errorf("order %s,%s: chose %s, want session kept=%v", order[0].ID, order[3].ID, in.Candidates[got].ID, tc.keep)
				}
			}
		})
	}
}

// TestTTFTSessionSlackBoundary: at the default slack, the session's worker is kept while
// its cost is at most 10 % above the best's, here made dearer by tokens queued on it.
func TestTTFTSessionSlackBoundary(t *testing.T) {
	pol := NewTTFTPolicy()
	in := func(q int64) *SelectInput {
		return ttftIn(2048, Candidate{ID: "best", OverlapBlocks: 10},
			Candidate{ID: "session", OverlapBlocks: 10, SessionWorker: true, ActivePrefillTokens: q})
	}
	cross := int64(-1)
	for q := int64(0); q < 100000; q++ {
		x := in(q)
		if ttftCost(pol, x, 1) > (1+DefaultSessionSlack)*ttftCost(pol, x, 0) {
			cross = q
			break
		}
	}
	if cross <= 0 {
		t.Fatalf("no crossover (%d)", cross)
	}
	for _, tc := range []struct {
		q    int64
		keep bool
	}{{0, true}, {cross - 1, true}, {cross, false}, {2 * cross, false}} {
		got, err := pol.Select(in(tc.q), rand.New(rand.NewPCG(1, 1)))
		if err != nil {
			t.Fatal(err)
		}
		if kept := got == 1; kept != tc.keep {
			t.Errorf("%d tokens queued on the session's worker: kept %v, want %v", tc.q, kept, tc.keep)
		}
	}
}

// TestTTFTSpeedNoise: learnt speeds within about 10 % of the fleet's median count as the
// median, so a uniform fleet's noise does not steer requests; a real difference does.
func TestTTFTSpeedNoise(t *testing.T) {
	for _, tc := range []struct {
		name   string
		speeds []float64
		want   int // -1: any but fewest
		fewest int // the worker with the fewest requests in flight (1; the others 2)
	}{
		{"noise above: the fewest requests win", []float64{1, 1, 1, 1.09}, 3, 3},
		{"noise below: a faster worker by 7 % does not win on speed", []float64{1, 1, 1, 0.93}, 0, 0},
		{"a slow worker loses", []float64{1, 1, 1, 1.3}, -1, 3},
		{"unknown speeds (1) within the noise of the known median", []float64{0, 0, 0, 1.08, 1.08}, 4, 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var cands []Candidate
			for i, f := range tc.speeds {
				c := Candidate{ID: fmt.Sprint("w", i), SpeedFactor: f, ActiveRequests: 2, ActivePrefillTokens: 512}
				if i == tc.fewest {
					c.ActiveRequests = 1
				}
				cands = append(cands, c)
			}
			got, err := NewTTFTPolicy().Select(ttftIn(4096, cands...), rand.New(rand.NewPCG(1, 2)))
			if err != nil {
				t.Fatal(err)
			}
			if tc.want >= 0 && got != tc.want || tc.want < 0 && got == tc.fewest {
				t.Errorf("chose %d, want %d (-1: any but the last)", got, tc.want)
			}
		})
	}
}

func TestTTFTExplain(t *testing.T) {
	pol := NewTTFTPolicy()
	in := ttftIn(3000,
		Candidate{ID: "idle"},
		Candidate{ID: "cached", OverlapBlocks: 150, ActivePrefillTokens: 9000, ActiveRequests: 3, ActiveBlocks: 400, TotalBlocks: 1000},
		Candidate{ID: "full", OverlapBlocks: 20, ActiveRequests: 30, ActiveBlocks: 900, TotalBlocks: 1000, SpeedFactor: 1.3},
		Candidate{ID: "full-observed", ActiveRequests: 30, ActiveBlocks: 900, TotalBlocks: 1000, SpeedFactor: 0.7, MeanDecodeSeconds: 4},
	)
	chosen, err := pol.Select(in, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := range in.Candidates {
		c := &in.Candidates[i]
		cost, terms := pol.Explain(in, c)
		if len(terms) != 6 {
			t.Fatalf("%s: terms %v", c.ID, terms)
		}
		var sum float64
		for _, name := range []string{"queue_ms", "prefill_ms", "decode_ms", "memory_wait_ms", "work_ms"} {
			v, ok := term(terms, name)
			if !ok {
				t.Fatalf("%s: no term %s in %v", c.ID, name, terms)
			}
			sum += v
		}
		if !near(sum, cost) {
			t.Errorf("%s: the ms terms %v add up to %v, cost %v", c.ID, terms, sum, cost)
		}
		pr := PredictTTFT(nil, in.PromptTokens, in.BlockSize, c)
		m := newTTFTModel(in.Profile, in.BlockSize)
		m.setFleetOf(in)
		q := m.sharedRequestOf(in)
		minOwn, weight := pol.work(in, &m, &q, hotDiscount(in.Candidates))
		if want := pr.Total() + weight*(ownPrefillMs(in, c)-minOwn); !near(cost, want) {
			t.Errorf("%s: cost %v, want the predicted TTFT plus the work, %v", c.ID, cost, want)
		}
		if s, _ := term(terms, "speed_factor"); s != pr.Speed {
			t.Errorf("%s: speed term %v, want %v", c.ID, s, pr.Speed)
		}
		if best, _ := pol.Explain(in, &in.Candidates[chosen]); cost < best {
			t.Errorf("%s costs %v, below the chosen %s's %v", c.ID, cost, in.Candidates[chosen].ID, best)
		}
	}
	for _, i := range []int{2, 3} {
		_, terms := pol.Explain(in, &in.Candidates[i])
		if m, _ := term(terms, "memory_wait_ms"); !(m > 0) {
			t.Errorf("%s: the nearly full worker shows no memory wait", in.Candidates[i].ID)
		}
	}
}

func TestLearnSpeed(t *testing.T) {
	avg := func(old, x float64) float64 { return math.Exp(0.95*math.Log(old) + 0.05*math.Log(x)) }
	for _, tc := range []struct {
		name       string
		old, ratio float64
		want       float64
	}{
		{"first observation taken as is", 0, 2, 2},
		{"first observation, faster", 0, 0.25, 0.25},
		{"first observation clamped high", 0, 5000, 1000},
		{"first observation clamped low", 0, 1e-6, 1e-3},
		{"log-space average", 1, 2, avg(1, 2)},
		{"a fast and a slow outlier weigh alike", 1, 0.5, 1 / avg(1, 2)},
		{"an observation at the current speed keeps it", 1.7, 1.7, 1.7},
		{"an outlier is clamped before averaging", 1, 1e9, avg(1, 1000)},
		{"a tiny ratio is clamped before averaging", 1, 1e-9, avg(1, 1e-3)},
		{"zero ignored", 1.5, 0, 1.5},
		{"negative ignored", 1.5, -2, 1.5},
		{"NaN ignored", 1.5, math.NaN(), 1.5},
		{"+Inf ignored", 1.5, math.Inf(1), 1.5},
		{"-Inf ignored", 1.5, math.Inf(-1), 1.5},
		{"NaN ignored before the first observation", 0, math.NaN(), 0},
	} {
		if got := learnSpeed(tc.old, tc.ratio); !near(got, tc.want) {
			t.Errorf("%s: learnSpeed(%v, %v) = %v, want %v", tc.name, tc.old, tc.ratio, got, tc.want)
		}
	}
	// A steady ratio is approached geometrically in log space: after n observations
	// the factor is old^(0.95^n) · r^(1−0.95^n).
	s := 1.0
	for i := 0; i < 100; i++ {
		s = learnSpeed(s, 3)
	}
	if want := math.Pow(3, 1-math.Pow(0.95, 100)); !near(s, want) {
		t.Errorf("100 observations of 3 from 1: %v, want %v", s, want)
	}
}

func TestSpeedFades(t *testing.T) {
	h, step := SpeedHalfLife, SpeedHalfLife/speedSteps
	for _, tc := range []struct {
		name    string
		factor  float64
		elapsed time.Duration
		want    float64
	}{
		{"fresh", 4, 0, 4},
		{"within the first step", 4, step - 1, 4},
		{"one half-life: half of it in log space", 4, h, 2},
		{"two half-lives", 4, 2 * h, math.Sqrt2},
		{"a fast factor too", 0.25, h, 0.5},
		{"one step", 4, step, math.Pow(4, math.Exp2(-1.0/speedSteps))},
		{"nothing learnt stays nothing", 0, time.Hour, 0},
		{"long gone", 1000, time.Hour, 1},
	} {
		// Resting on so many observations that only their age counts.
		if got := relaxedSpeed(tc.factor, 1, tc.elapsed, 1e12); !near(got, tc.want) {
			t.Errorf("%s: relaxedSpeed(%v, 1, %v, 1e12) = %v, want %v", tc.name, tc.factor, tc.elapsed, got, tc.want)
		}
	}
	// Toward the fleet's speed.
	for _, tc := range []struct {
		name          string
		factor, prior float64
		elapsed       time.Duration
		want          float64
	}{
		{"one half-life toward a fast fleet", 0.04, 0.01, h, 0.02},
		{"a slow one toward it", 0.16, 0.01, 2 * h, 0.02},
		{"long gone: the fleet's", 3, 0.05, time.Hour, 0.05},
		{"the fleet's stays", 0.05, 0.05, h, 0.05},
		{"no prior: 1", 4, 0, h, 2},
		{"NaN prior: 1", 4, math.NaN(), h, 2},
		{"+Inf prior: 1", 4, math.Inf(1), h, 2},
		{"nothing learnt stays nothing", 0, 0.05, time.Hour, 0},
	} {
		if got := relaxedSpeed(tc.factor, tc.prior, tc.elapsed, 1e12); !near(got, tc.want) {
			t.Errorf("%s: relaxedSpeed(%v, %v, %v, 1e12) = %v, want %v", tc.name, tc.factor, tc.prior, tc.elapsed, got, tc.want)
		}
	}
	// Few observations count for little against the fleet's speed.
	for _, tc := range []struct {
		name          string
		factor, prior float64
		elapsed       time.Duration
		observed      float64
		want          float64
	}{
		{"one: a third of the way", 8, 1, 0, 1, 2},
		{"two: half", 16, 1, 0, 2, 4},
		{"none counted: as one", 8, 1, 0, 0, 2},
		{"not a number: as one", 8, 1, 0, math.NaN(), 2},
		{"countless: all of it", 8, 1, 0, math.Inf(1), 8},
		{"a cold first request on a fast fleet", 0.27, 0.01, 0, 1, 0.03},
		{"one, a half-life old: a sixth", 64, 1, h, 1, 2},
		{"a fast factor too", 1.0 / 8, 1, 0, 1, 0.5},
	} {
		if got := relaxedSpeed(tc.factor, tc.prior, tc.elapsed, tc.observed); !near(got, tc.want) {
			t.Errorf("%s: relaxedSpeed(%v, %v, %v, %v) = %v, want %v", tc.name, tc.factor, tc.prior, tc.elapsed, tc.observed, got, tc.want)
		}
	}
	for _, tc := range []struct {
		name       string
		old, ratio float64
		elapsed    time.Duration
		want       float64
	}{
		{"fresh: learnSpeed", 100, 1, 0, math.Pow(100, 0.95)},
		{"a half-life old: the observation weighs 1 − 0.95/2", 100, 1, h, math.Pow(100, 0.475)},
		{"long gone: the observation is all", 100, 2, time.Hour, 2},
		{"a steady ratio is kept", 3, 3, h, 3},
	} {
		if got := learnSpeedAfter(tc.old, tc.ratio, tc.elapsed); !near(got, tc.want) {
			t.Errorf("%s: learnSpeedAfter(%v, %v, %v) = %v, want %v", tc.name, tc.old, tc.ratio, tc.elapsed, got, tc.want)
		}
	}
}

// TestUnobservedWorkerTakesFleetSpeed: on a fleet whose engines run far faster than the
// profile (a mock engine sped up, a GPU the profile underrates), the workers that served
// first learnt it; a worker not observed yet, or idle since its last observation, is
// taken at the fleet's speed, not the profile's, and gets its share. Taken at the
// profile's, it predicted 20 times slower and got no request while the others were
// less than 20 times as loaded; with no request, nothing corrected it.
func TestUnobservedWorkerTakesFleetSpeed(t *testing.T) {
	spread := func(t *testing.T, r *Router, now time.Time) []string {
		t.Helper()
		var got []string
		for i := range 3 {
			d, err := r.Route(RouteInput{RequestID: fmt.Sprint("p", i), Tokens: prompt(2048)}, now, nil)
			if err != nil {
				t.Fatal(err)
			}
			got = append(got, d.WorkerID)
		}
		return got
	}
	t.Run("not observed yet", func(t *testing.T) {
		r := ttftRouterN(t, 3)
		now := observe(t, r, "a", "w1", 0.05, t0)
		now = observe(t, r, "b", "w2", 0.05, now)
		if got := spread(t, r, now); !slices.Equal(got, []string{"w1", "w2", "w3"}) {
			t.Errorf("three requests at once went to %v, want w1 w2 w3 (w3 unobserved)", got)
		}
	})
	t.Run("idle since", func(t *testing.T) {
		r := ttftRouterN(t, 3)
		now := observe(t, r, "a", "w1", 0.05, t0)
		now = observe(t, r, "b", "w2", 0.05, now)
		now = observe(t, r, "c", "w3", 0.05, now)
		later := now.Add(10 * SpeedHalfLife)
		later = observe(t, r, "d", "w1", 0.05, later)
		later = observe(t, r, "e", "w2", 0.05, later)
		if got := spread(t, r, later); !slices.Equal(got, []string{"w1", "w2", "w3"}) {
			t.Errorf("three requests at once went to %v, want w1 w2 w3 (w3 idle for ten half-lives: %v)",
				got, r.byName["w3"].speedNow(r.clock(later), r.prior))
		}
	})
	t.Run("a cold first request", func(t *testing.T) {
		// w3's first request came 20 times slower than the fleet's (an engine warming up):
		// one observation weighs a third against the fleet's speed, so w3 counts as about
		// 2.7 times slower, not 20, and takes a request once the others queue two each.
		r := ttftRouterN(t, 3)
		now := t0
		for i := range 5 {
			now = observe(t, r, fmt.Sprint("a", i), "w1", 0.05, now)
			now = observe(t, r, fmt.Sprint("b", i), "w2", 0.05, now)
		}
		now = observe(t, r, "cold", "w3", 1, now)
		for i := range 8 {
			d, err := r.Route(RouteInput{RequestID: fmt.Sprint("p", i), Tokens: prompt(2048)}, now, nil)
			if err != nil {
				t.Fatal(err)
			}
			if d.WorkerID == "w3" {
				if i > 4 {
					t.Errorf("w3 took request %d, want one of the first five", i)
				}
				return
			}
		}
		t.Errorf("w3 took none of 8 requests at once after one slow first request")
	})
	t.Run("not observed yet, the others excluded", func(t *testing.T) {
		// A retry excludes w2: the candidates w1 and w3 hold one factor between them, but
		// the fleet's speed is every worker's.
		r := ttftRouterN(t, 3)
		now := observe(t, r, "a", "w1", 0.05, t0)
		now = observe(t, r, "b", "w2", 0.05, now)
		var got []string
		for i := range 2 {
			d, err := r.Route(RouteInput{RequestID: fmt.Sprint("p", i), Tokens: prompt(2048), Exclude: []string{"w2"}}, now, nil)
			if err != nil {
				t.Fatal(err)
			}
			got = append(got, d.WorkerID)
		}
		if !slices.Equal(got, []string{"w1", "w3"}) {
			t.Errorf("two requests at once, w2 excluded, went to %v, want w1 w3", got)
		}
	})
	t.Run("one observation is not the fleet's", func(t *testing.T) {
		// A single learnt factor may be the worker's own (it queued, it was paused): the
		// others stay at the profile's speed until a second worker is observed.
		r := ttftRouterN(t, 2)
		now := observe(t, r, "a", "w1", 50, t0)
		if d, err := r.Route(RouteInput{RequestID: "p", Tokens: prompt(2048)}, now, nil); err != nil || d.WorkerID != "w2" {
			t.Errorf("after one slow observation on w1: %+v %v, want w2", d, err)
		}
	})
}

// TestSpeedIgnoresEmptyObservations: a first token at the instant of its route (a ratio
// of 0) teaches nothing: the factor stays unlearnt, its evidence 0, and the worker does
// not count toward the fleet's speed.
func TestSpeedIgnoresEmptyObservations(t *testing.T) {
	r := ttftRouterN(t, 3)
	if _, err := r.Route(RouteInput{RequestID: "z", Tokens: prompt(1024), PinWorker: "w1"}, t0, nil); err != nil {
		t.Fatal(err)
	}
	if !r.PrefillDoneAt("z", t0) {
		t.Fatal("PrefillDoneAt: not active")
	}
	if rw := r.byName["w1"]; rw.speed != 0 || rw.evidence != 0 {
		t.Errorf("after a first token in 0 ms: speed %v, evidence %v; want nothing learnt", rw.speed, rw.evidence)
	}
	r.Free("z")
}

// TestFleetPriorFollowsTheFleet: the router's fleet speed is the log-space median of
// its workers' learnt factors once two have one, and is worked out again at once when
// the set of workers with a factor changes (a first factor learnt, such a worker
// removed), even when both happen between two routes.
func TestFleetPriorFollowsTheFleet(t *testing.T) {
	r := ttftRouterN(t, 3)
	route := func(now time.Time) float64 {
		t.Helper()
		if _, err := r.Route(RouteInput{RequestID: "p", Tokens: prompt(64)}, now, nil); err != nil {
			t.Fatal(err)
		}
		r.Free("p")
		return r.prior
	}
	now := observe(t, r, "a", "w1", 0.05, t0)
	if got := route(now); got != 1 {
		t.Errorf("one learnt factor: prior %v, want 1", got)
	}
	now = observe(t, r, "b", "w2", 0.2, now)
	close := func(a, b float64) bool { return math.Abs(a/b-1) < 1e-4 } // observe's times are whole ns
	if got := route(now); !close(got, 0.1) {
		t.Errorf("factors 0.05 and 0.2: prior %v, want their log-space middle 0.1", got)
	}
	// w1 leaves and w3's first factor is learnt before the next route, within one step.
	if _, err := r.Route(RouteInput{RequestID: "c", Tokens: prompt(1024), PinWorker: "w3"}, now, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := r.RemoveWorker("w1"); err != nil {
		t.Fatal(err)
	}
	pred, _ := DefaultProfile().PrefillMs(1024)
	r.PrefillDoneAt("c", now.Add(ms(0.8*pred)))
	r.Free("c")
	if got := route(now.Add(ms(0.8 * pred))); !close(got, 0.4) {
		t.Errorf("w2 at 0.2 and w3 at 0.8: prior %v, want 0.4", got)
	}
	if _, err := r.RemoveWorker("w2"); err != nil {
		t.Fatal(err)
	}
	if got := route(now.Add(ms(0.8 * pred))); got != 1 {
		t.Errorf("w2 gone, one learnt factor left: prior %v, want 1", got)
	}
}

// TestSpeedLearntAgainWithinAStep: a factor learnt again within the relaxation step of a
// route that used it is used at once (the cached value is dropped).
func TestSpeedLearntAgainWithinAStep(t *testing.T) {
	r := ttftRouterN(t, 2)
	now := observe(t, r, "a", "w1", 4, t0)
	before := r.byName["w1"].speedNow(r.clock(now), 1)
	now = observe(t, r, "b", "w1", 4, now)
	if after := r.byName["w1"].speedNow(r.clock(now), 1); !(after > before) {
		t.Errorf("a second observation of 4 within one step: %v, then %v; want it higher (more evidence)", before, after)
	}
}

// TestSpeedEvidenceFades: observations long past count as few: after ten half-lives
// idle, one new observation weighs about a third against the fleet's speed again.
func TestSpeedEvidenceFades(t *testing.T) {
	r := ttftRouterN(t, 2)
	now := t0
	for i := range 40 {
		now = observe(t, r, fmt.Sprint("a", i), "w1", 8, now)
	}
	// Each observation takes 8 predicted prefills (about 0.3 s), so the earliest fade.
	if e := r.byName["w1"].evidence; !(e > 15) {
		t.Fatalf("evidence %v after 40 observations in about 10 s, want over 15", e)
	}
	now = observe(t, r, "late", "w1", 8, now.Add(10*SpeedHalfLife))
	rw := r.byName["w1"]
	if !(rw.evidence < 1.1) {
		t.Errorf("evidence %v after ten half-lives idle and one observation, want about 1", rw.evidence)
	}
	if got := rw.speedNow(r.clock(now), 1); !(math.Abs(math.Log(got)-math.Log(rw.speed)/3) < 0.05) {
		t.Errorf("weighed factor %v from %v, want about its cube root %v", got, rw.speed, math.Cbrt(rw.speed))
	}
}

func TestFleetPrior(t *testing.T) {
	for _, tc := range []struct {
		name string
		v    []float64
		want float64
	}{
		{"none", nil, 1},
		{"one alone is its worker's own", []float64{0.05}, 1},
		{"two: the log-space middle", []float64{0.05, 0.2}, 0.1},
		{"odd: the middle one", []float64{4, 0.05, 1}, 1},
		{"even: the log-space middle of the two middle", []float64{0.01, 1, 4, 100}, 2},
		{"non-factors left out", []float64{0, -1, math.NaN(), math.Inf(1), 0.5, 2}, 1},
		{"left with one", []float64{0, math.NaN(), 3}, 1},
	} {
		if got := fleetPrior(slices.Clone(tc.v)); !near(got, tc.want) {
			t.Errorf("%s: fleetPrior(%v) = %v, want %v", tc.name, tc.v, got, tc.want)
		}
	}
}

// TestRouterForgetsQueuedSlowness: a worker whose first tokens came late while its
// requests queued in the engine (a factor of 50) and that then got no request is routed
// again once the factor has faded, and one observation at the profile's speed nearly
// clears it.
func TestRouterForgetsQueuedSlowness(t *testing.T) {
	r := ttftRouter(t)
	now := observe(t, r, "queued", "w1", 50, t0)
	in := RouteInput{RequestID: "probe", Tokens: prompt(2048)}
	if d, err := r.Route(in, now, nil); err != nil || d.WorkerID != "w2" {
		t.Fatalf("just after: %+v %v, want w2", d, err)
	}
	r.Free("probe")
	later := now.Add(10 * SpeedHalfLife)
	if d, err := r.Route(in, later, nil); err != nil || d.WorkerID != "w1" {
		t.Fatalf("ten half-lives later: %+v %v, want w1 (its factor %v relaxed to %v)", d, err,
			r.byName["w1"].speed, r.byName["w1"].speedNow(r.clock(later), r.prior))
	}
	r.Free("probe")
	observe(t, r, "calm", "w1", 1, later)
	if s := r.byName["w1"].speed; s > 1.01 {
		t.Errorf("factor %v after an observation at the profile's speed ten half-lives on, want about 1", s)
	}
}

func TestSmooth(t *testing.T) {
	for _, tc := range []struct {
		name   string
		old, x float64
		want   float64
	}{
		{"first value taken as is", 0, 3, 3},
		{"moving average", 2, 4, 0.95*2 + 0.05*4},
		{"zero is a value", 2, 0, 0.95 * 2},
		{"negative ignored", 2, -1, 2},
		{"NaN ignored", 2, math.NaN(), 2},
		{"+Inf ignored", 2, math.Inf(1), 2},
		{"NaN before the first value", 0, math.NaN(), 0},
	} {
		if got := smooth(tc.old, tc.x); !near(got, tc.want) {
			t.Errorf("%s: smooth(%v, %v) = %v, want %v", tc.name, tc.old, tc.x, got, tc.want)
		}
	}
}

// ttftRouter is a TTFT-policy router over two idle workers, w1 and w2, with equal
// (empty) caches, blocks of 16 tokens and 1,000 blocks each. Their KV events are the
// whole index: a silent worker does not turn approximate (its routed prompts would
// count as cached).
func ttftRouter(t *testing.T) *Router {
	t.Helper()
	return ttftRouterN(t, 2)
}

// ttftRouterN is ttftRouter over n workers, w1 … wn.
func ttftRouterN(t *testing.T, n int) *Router {
	t.Helper()
	cfg := DefaultConfig(16)
	cfg.Policy = PolicyTTFT
	cfg.ApproxAfterRequests = 0
	r, err := NewRouter(cfg)
	if err != nil {
		t.Fatal(err)
	}
	for i := range n {
		if _, err := r.Register(WorkerSpec{ID: fmt.Sprint("w", i+1), BlockSize: 16, TotalBlocks: 1000, Ready: true, Epoch: 1}); err != nil {
			t.Fatal(err)
		}
	}
	return r
}

func fnv32(s string) uint32 {
	h := fnv.New32a()
	h.Write([]byte(s))
	return h.Sum32()
}

// ms converts milliseconds to a duration.
func ms(v float64) time.Duration { return time.Duration(v * float64(time.Millisecond)) }

// observe routes a 1,024-token request pinned to worker on the idle fleet at now and
// reports its first token slowness times the profile's prediction later; it returns
// the time the request was freed at.
func observe(t *testing.T, r *Router, id, worker string, slowness float64, now time.Time) time.Time {
	t.Helper()
	toks := make([]uint32, 1024)
	base := uint32(fnv32(id)%1000) * 2000 // a prompt of its own
	for i := range toks {
		toks[i] = base + uint32(i)
	}
	d, err := r.Route(RouteInput{RequestID: id, Tokens: toks, PinWorker: worker}, now, nil)
	if err != nil || d.WorkerID != worker {
		t.Fatalf("route %s: %+v %v", id, d, err)
	}
	pred, _ := DefaultProfile().PrefillMs(1024) // idle worker, nothing cached
	now = now.Add(ms(slowness * pred))
	if !r.PrefillDoneAt(id, now) {
		t.Fatalf("PrefillDoneAt(%s): not active", id)
	}
	if !r.Free(id) {
		t.Fatalf("Free(%s): not active", id)
	}
	return now
}

func TestRouterLearnsSpeed(t *testing.T) {
	t.Run("a slower worker loses an otherwise equal choice", func(t *testing.T) {
		r := ttftRouter(t)
		in := RouteInput{RequestID: "probe", Tokens: prompt(2048)}
		// Nothing learnt: equal costs, equal caches, no rng: the first worker.
		d, err := r.Route(in, t0, nil)
		if err != nil || d.WorkerID != "w1" {
			t.Fatalf("before learning: %+v %v, want w1", d, err)
		}
		r.Free("probe")
		now := observe(t, r, "slow", "w1", 2, t0)
		if s := r.byName["w1"].speed; !(math.Abs(s-2) < 1e-3) {
			t.Errorf("w1 speed %v after a first token twice as late as predicted, want 2", s)
		}
		if s := r.byName["w2"].speed; s != 0 {
			t.Errorf("w2 speed %v, nothing observed", s)
		}
		d, err = r.Route(in, now, nil)
		if err != nil || d.WorkerID != "w2" {
			t.Fatalf("after learning: %+v %v, want w2, the faster worker", d, err)
		}
	})
	// The prediction a first token is compared with must not carry the speed already
	// learnt, else the factor measures the remaining error and settles at the square
	// root of the worker's true slowness.
	for _, slowness := range []float64{2, 0.5, 4} {
		t.Run(fmt.Sprint("steady slowness ", slowness), func(t *testing.T) {
			r := ttftRouter(t)
			now := t0
			for i := 0; i < 60; i++ {
				now = observe(t, r, fmt.Sprint("r", i), "w1", slowness, now.Add(time.Second))
			}
			if s := r.byName["w1"].speed; math.Abs(s/slowness-1) > 0.01 {
				t.Errorf("speed %v after 60 observations at %v× the profile, want %v", s, slowness, slowness)
			}
		})
	}
}

func TestRouterLearnsDecodeSeconds(t *testing.T) {
	r := ttftRouter(t)
	rw := r.byName["w1"]
	run := func(id string, decode time.Duration, now time.Time) {
		t.Helper()
		if _, err := r.Route(RouteInput{RequestID: id, Tokens: prompt(64), PinWorker: "w1"}, now, nil); err != nil {
			t.Fatal(err)
		}
		first := now.Add(50 * time.Millisecond)
		r.PrefillDoneAt(id, first)
		if !r.FreeAt(id, first.Add(decode)) {
			t.Fatalf("FreeAt(%s): not active", id)
		}
	}
	run("a", 3*time.Second, t0)
	if !near(rw.decodeSecs, 3) {
		t.Fatalf("decode seconds %v after one request of 3 s, want 3", rw.decodeSecs)
	}
	run("b", 5*time.Second, t0.Add(10*time.Second))
	if want := 0.95*3 + 0.05*5; !near(rw.decodeSecs, want) {
		t.Fatalf("decode seconds %v, want %v", rw.decodeSecs, want)
	}
	// A request freed before its first token teaches nothing, and is still freed.
	if _, err := r.Route(RouteInput{RequestID: "c", Tokens: prompt(64), PinWorker: "w1"}, t0.Add(20*time.Second), nil); err != nil {
		t.Fatal(err)
	}
	before := rw.decodeSecs
	if !r.FreeAt("c", t0.Add(60*time.Second)) || rw.decodeSecs != before {
		t.Errorf("FreeAt before the first token: decode seconds %v, want %v unchanged", rw.decodeSecs, before)
	}
	if r.FreeAt("c", t0.Add(61*time.Second)) || r.FreeAt("never", t0) {
		t.Error("FreeAt of an inactive request reported it active")
	}
	if l := r.active.Load(rw.id); l != (Load{}) {
		t.Errorf("load %+v left behind", l)
	}
	// The candidate carries it to the policy.
	if c := r.candidate(rw, r.active.Load(rw.id)); c.MeanDecodeSeconds != rw.decodeSecs {
		t.Errorf("candidate MeanDecodeSeconds %v, want %v", c.MeanDecodeSeconds, rw.decodeSecs)
	}
}

func TestRouteExplainTTFT(t *testing.T) {
	r := explainRouter(t, PolicyTTFT, "a0 a1 a2")
	cache(t, r, "a1", 192)
	load(r, "a0", "busy", 40)
	d, err := r.Route(RouteInput{RequestID: "r", Tokens: prompt(200), Explain: true}, t0, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(d.Candidates) != 3 || d.WorkerID != "a1" {
		t.Fatalf("decision %s, candidates %+v: want a1 (its cache) among 3", d.WorkerID, d.Candidates)
	}
	for _, c := range d.Candidates {
		var sum float64
		for _, name := range []string{"queue_ms", "prefill_ms", "decode_ms", "memory_wait_ms", "work_ms"} {
			v, _ := term(c.Terms, name)
			sum += v
		}
		if !near(sum, c.Cost) {
			t.Errorf("%s: ms terms %v add up to %v, cost %v", c.WorkerID, c.Terms, sum, c.Cost)
		}
		if c.Chosen != (c.WorkerID == "a1") {
			t.Errorf("%s chosen=%v", c.WorkerID, c.Chosen)
		}
	}
}

// ttftCost is candidate i's cost as Select weighs it.
func ttftCost(p TTFTPolicy, in *SelectInput, i int) float64 {
	v, _ := p.Explain(in, &in.Candidates[i])
	return v
}

// ownPrefillMs is the request's own prefill on c's idle engine at the profile's speed
// (ms), computed from the profile directly (the reference for the policy's own).
func ownPrefillMs(in *SelectInput, c *Candidate) float64 {
	prof := in.Profile
	if prof == nil {
		d := DefaultProfile()
		prof = &d
	}
	ms, _ := prof.PrefillMs(math.Max(float64(in.PromptTokens-c.OverlapBlocks*max(in.BlockSize, 1))-c.TierCreditTokens, 1))
	return ms
}

// TestFleetSpeed: the median of the learnt speed factors, unknown ones (0, negative, NaN,
// infinite) left out, 1 while none is known.
func TestFleetSpeed(t *testing.T) {
	for _, tc := range []struct {
		speeds []float64
		want   float64
	}{
		{nil, 1},
		{[]float64{0, -1, math.NaN(), math.Inf(1)}, 1},
		{[]float64{0.1}, 0.1},
		{[]float64{0.3, 0.1, 0.2}, 0.2},
		{[]float64{0.4, 0.1, 0.2, 0.3}, 0.25},
		{[]float64{2, 0, 4}, 3},
	} {
		cands := make([]Candidate, len(tc.speeds))
		for i, s := range tc.speeds {
			cands[i].SpeedFactor = s
		}
		if got, _ := fleetSpeed(cands); !near(got, tc.want) {
			t.Errorf("fleetSpeed(%v) = %v, want %v", tc.speeds, got, tc.want)
		}
	}
}

// TestReplicaCreditMatchesFullPrediction: the credit worked out from the prediction's
// prefill steps equals the one from a whole prediction with a hit of best blocks and no
// tier credit, for random candidates, fleets and demands.
func TestReplicaCreditMatchesFullPrediction(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 7))
	for i := 0; i < 20000; i++ {
		c, in, m, best := randomSharedCase(rng)
		prompt, bs := in.PromptTokens, in.BlockSize
		share := replicaShare(in.PrefixDemand)
		q := sharedRequest{promptTokens: prompt, promptBlocks: (prompt + bs - 1) / bs, best: best, share: share}
		q.heldTok = max(float64(prompt-best*bs), 1)
		q.heldMs, _ = m.prefill(q.heldTok)
		var pr Prediction
		cost, own, credit := m.shared(&q, &c, &pr)

		var ref, held Prediction
		r := newTTFTModel(nil, bs)
		r.setFleet(m.fleet, m.unobserved)
		r.predict(prompt, q.promptBlocks, &c, &ref)
		wantOwn, wantCredit := ref.OwnPrefillMs/ref.Speed, 0.0
		if share > 0 && c.OverlapBlocks < best {
			hc := c
			hc.OverlapBlocks, hc.TierCreditTokens = best, 0
			r.predict(prompt, q.promptBlocks, &hc, &held)
			wantCredit = max(ref.Total()-held.Total(), 0) * share
			wantOwn -= max(wantOwn-held.OwnPrefillMs/held.Speed, 0) * share
		}
		if !near(credit, wantCredit) || !near(own, wantOwn) || pr != ref || cost != ref.Total()-credit {
			t.Fatalf("case %d (%+v, prompt %d, bs %d, best %d): credit %v own %v, want %v %v", i, c, prompt, bs, best, credit, own, wantCredit, wantOwn)
		}
	}
}

// randomSharedCase draws a candidate, its request, a model with a fleet speed, and the
// longest hit among the request's candidates (blocks), for the replica credit's tests.
func randomSharedCase(rng *rand.Rand) (Candidate, *SelectInput, ttftModel, int) {
	bs := []int{1, 16, 64, 256}[rng.IntN(4)]
	prompt := 1 + rng.IntN(40000)
	best := rng.IntN(prompt/bs + 1)
	c := Candidate{
		OverlapBlocks:       rng.IntN(best + 1),
		ActiveBlocks:        rng.IntN(5000),
		ActiveRequests:      rng.IntN(300),
		ActivePrefixBlocks:  rng.IntN(prompt/bs + 1),
		ActivePrefillTokens: int64(rng.IntN(60000)) - 100,
		TotalBlocks:         int64(rng.IntN(6000)),
		MaxNumSeqs:          rng.IntN(300),
		SpeedFactor:         []float64{0, 0.5, 1, 1.04, 3}[rng.IntN(5)],
		MeanDecodeSeconds:   rng.Float64() * 5,
		AdapterLoadMs:       float64(rng.IntN(3)) * 40,
		AdapterEvicts:       rng.IntN(2) == 0,
		AdapterWaitMs:       float64(rng.IntN(3)-1) * 30,
		TierCreditTokens:    float64(rng.IntN(3) * 100),
		PrefillElapsedMs:    float64(rng.IntN(3)) * rng.Float64() * 2000,
	}
	in := &SelectInput{Candidates: []Candidate{c}, PromptTokens: prompt, BlockSize: bs, PrefixDemand: rng.Float64() * 50}
	m := newTTFTModel(nil, bs)
	m.setFleet([]float64{0, 1, 1.02}[rng.IntN(3)], []float64{1, 0.5, 2}[rng.IntN(3)])
	return c, in, m, best
}

// TestTTFTExplainAddsUp: with a prefix in demand and speeds inside and outside the noise
// band, every candidate's explained ms terms add up to its cost, and Select chooses a
// candidate whose cost is within the tie band of the lowest.
func TestTTFTExplainAddsUp(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 3))
	pol := NewTTFTPolicy()
	for i := 0; i < 3000; i++ {
		n := 1 + rng.IntN(8)
		var cands []Candidate
		for w := 0; w < n; w++ {
			cands = append(cands, Candidate{
				ID: fmt.Sprint("w", w), OverlapBlocks: rng.IntN(300), ActiveRequests: rng.IntN(20),
				ActivePrefillTokens: int64(rng.IntN(20000)), ActiveBlocks: rng.IntN(900), TotalBlocks: 1000,
				SpeedFactor: []float64{0, 1, 1.03, 0.96, 1.5, 0.6}[rng.IntN(6)], MaxNumSeqs: 16,
			})
		}
		in := ttftIn(4800, cands...)
		in.PrefixDemand = []float64{0, 1, 2.5, 40}[rng.IntN(4)]
		chosen, err := pol.Select(in, rand.New(rand.NewPCG(1, uint64(i))))
		if err != nil {
			t.Fatal(err)
		}
		low := math.Inf(1)
		costs := make([]float64, n)
		for w := range cands {
			cost, terms := pol.Explain(in, &in.Candidates[w])
			var sum float64
			for _, tm := range terms {
				if strings.HasSuffix(tm.Name, "_ms") {
					sum += tm.Value
				}
			}
			if !near(sum, cost) {
				t.Fatalf("case %d, %s: terms %v add up to %v, cost %v", i, cands[w].ID, terms, sum, cost)
			}
			costs[w], low = cost, min(low, cost)
		}
		if band := low + max(nearMs, nearFraction*low); costs[chosen] > band {
			t.Fatalf("case %d: chose %s at %v, the lowest cost %v", i, cands[chosen].ID, costs[chosen], low)
		}
	}
}

// TestBusyScale: the work term's multiplier is 1 with no prefill queued anywhere,
// BusyWorkScale with prefill queued everywhere, and 1 + (BusyWorkScale − 1)·b³ between;
// a scale of at most 1, not a number or infinite leaves the weight alone.
func TestBusyScale(t *testing.T) {
	cands := func(busy, n int) []Candidate {
		c := make([]Candidate, n)
		for i := range busy {
			c[i].ActivePrefillTokens = 100
		}
		return c
	}
	for _, tc := range []struct {
		scale   float64
		busy, n int
		want    float64
	}{
		{16, 0, 8, 1},
		{16, 8, 8, 16},
		{16, 4, 8, 1 + 15.0/8},
		{16, 1, 2, 1 + 15.0/8},
		{16, 6, 8, 1 + 15*0.421875},
		{16, 0, 0, 1},
		{1, 8, 8, 1},
		{0.5, 8, 8, 1},
		{math.NaN(), 8, 8, 1},
		{math.Inf(1), 8, 8, 1},
	} {
		p := TTFTPolicy{WorkWeight: 1, BusyWorkScale: tc.scale}
		if got := p.busyScale(cands(tc.busy, tc.n)); !near(got, tc.want) {
			t.Errorf("scale %v, %d of %d busy: %v, want %v", tc.scale, tc.busy, tc.n, got, tc.want)
		}
	}
	if NewTTFTPolicy().BusyWorkScale != DefaultBusyWorkScale {
		t.Errorf("the default policy's scale is %v", NewTTFTPolicy().BusyWorkScale)
	}
}
