package configure

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/turbine-llm/turbine/planner"
)

// randomEngine draws a valid engine profile: a few prefill points, decode points over a
// few contexts with repeated usages, in no order.
func randomEngine(rng *rand.Rand) *planner.Profile {
	e := planner.EngineProfile{TensorParallelSize: 1, KVBlocks: 1 + rng.IntN(5000), MaxNumSeqs: 1 + rng.IntN(300)}
	isl := 0
	for range 1 + rng.IntN(6) {
		isl += 1 + rng.IntN(3000)
		e.Prefill = append(e.Prefill, planner.PrefillPoint{ISL: isl, TTFTMs: 0.5 + 300*rng.Float64(), TokensPerSecPerGPU: 1})
	}
	contexts := make([]int, 1+rng.IntN(4))
	for i := range contexts {
		contexts[i] = 1 + rng.IntN(20000)
	}
	for range 1 + rng.IntN(30) {
		u := float64(rng.IntN(11)) / 10 // repeats happen
		e.Decode = append(e.Decode, planner.DecodePoint{Context: contexts[rng.IntN(len(contexts))], Batch: 1, KVUsage: u,
			ITLMs: 0.5 + 60*rng.Float64(), TokensPerSecPerGPU: 1})
	}
	return &planner.Profile{Version: planner.ProfileVersion, BlockSize: 16, Parallel: []planner.EngineProfile{e}}
}

// TestTableTimingMatchesProfile: the laid-out timing answers as EngineProfile.Timing
// does, on the fixture and on random profiles, inside and outside the points.
func TestTableTimingMatchesProfile(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 7))
	profiles := []*planner.Profile{fixtureProfile()}
	for range 300 {
		profiles = append(profiles, randomEngine(rng))
	}
	for pi, p := range profiles {
		if err := p.Validate(); err != nil {
			t.Fatal(err)
		}
		for k := range p.Parallel {
			e := &p.Parallel[k]
			ref, fast := e.Timing(), newTableTiming(e)
			maxISL := float64(e.Prefill[len(e.Prefill)-1].ISL)
			maxCtx := float64(e.Decode[len(e.Decode)-1].Context)
			for range 200 {
				tok := rng.IntN(int(2*maxISL)+10) - 5
				if a, b := ref.PrefillMillis(tok), fast.PrefillMillis(tok); !same(a, b) {
					t.Fatalf("profile %d TP %d: prefill of %d tokens %v, table %v", pi, e.TensorParallelSize, tok, a, b)
				}
				u, ctx := rng.Float64()*1.4-0.2, rng.Float64()*2*maxCtx
				if rng.IntN(4) == 0 {
					ctx = float64(e.Decode[rng.IntN(len(e.Decode))].Context) // on a measured context
				}
				if a, b := ref.DecodeMillis(u, ctx), fast.DecodeMillis(u, ctx); !same(a, b) {
					t.Fatalf("profile %d TP %d: decode at usage %v, context %v: %v, table %v", pi, e.TensorParallelSize, u, ctx, a, b)
				}
			}
		}
	}
}

func same(a, b float64) bool { return math.Abs(a-b) <= 1e-9*math.Max(1, math.Abs(a)) }

func BenchmarkTableITL(b *testing.B) {
	e, _ := fixtureProfile().ForTP(2)
	tm := newTableTiming(e)
	for i := 0; b.Loop(); i++ {
		tm.DecodeMillis(float64(i%1000)/1000, float64(3000+i%20000))
	}
}
