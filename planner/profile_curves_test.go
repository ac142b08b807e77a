package planner

import (
	"cmp"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"sort"
	"sync"
	"testing"
)

// The reference reading of a profile: the points interpolated directly, every call
// building its curves from them (the definition of docs/reference.md §27.1, before the
// curves were laid out once). The laid-out curves must answer bit for bit as it does.

func refTTFT(e *EngineProfile, isl float64) float64 {
	xs, ys := refPrefillCurve(e, func(p PrefillPoint) float64 { return p.TTFTMs })
	v := interp(xs, ys, isl)
	if isl < xs[0] {
		v = math.Max(v, ys[0]*isl/xs[0])
	}
	return math.Max(0.01, v)
}

func refPrefillThroughput(e *EngineProfile, isl float64) float64 {
	xs, ys := refPrefillCurve(e, func(p PrefillPoint) float64 { return p.TokensPerSecPerGPU })
	isl = math.Max(xs[0], math.Min(xs[len(xs)-1], isl))
	return interp(xs, ys, isl)
}

func refPrefillCurve(e *EngineProfile, y func(PrefillPoint) float64) ([]float64, []float64) {
	xs, ys := make([]float64, len(e.Prefill)), make([]float64, len(e.Prefill))
	for i, pt := range e.Prefill {
		xs[i], ys[i] = float64(pt.ISL), y(pt)
	}
	return xs, ys
}

func refITL(e *EngineProfile, usage, context float64) float64 {
	var cs []float64
	for _, pt := range e.Decode {
		if c := float64(pt.Context); len(cs) == 0 || cs[len(cs)-1] != c {
			cs = append(cs, c)
		}
	}
	itlAt := func(context, usage float64) float64 {
		var xs, ys []float64
		for _, pt := range e.Decode {
			if float64(pt.Context) == context {
				if n := len(xs); n > 0 && xs[n-1] == pt.KVUsage {
					ys[n-1] = math.Max(ys[n-1], pt.ITLMs)
					continue
				}
				xs, ys = append(xs, pt.KVUsage), append(ys, pt.ITLMs)
			}
		}
		usage = math.Max(xs[0], math.Min(xs[len(xs)-1], usage))
		return interp(xs, ys, usage)
	}
	context = math.Max(cs[0], math.Min(cs[len(cs)-1], context))
	i := sort.SearchFloat64s(cs, context)
	if cs[i] == context || i == 0 {
		return itlAt(cs[i], usage)
	}
	c0, c1 := cs[i-1], cs[i]
	y0, y1 := itlAt(c0, usage), itlAt(c1, usage)
	return y0 + (y1-y0)*(context-c0)/(c1-c0)
}

func refDecodeThroughput(e *EngineProfile, blockSize int, itlTargetMs, context float64) (float64, bool) {
	context = math.Max(1, context)
	capacity := float64(e.KVBlocks) * float64(blockSize)
	at := func(batch float64) (tput, itl float64) {
		itl = refITL(e, math.Min(1, batch*context/capacity), context)
		return batch / (itl / 1000) / float64(e.TensorParallelSize), itl
	}
	single, itl := at(1)
	best := 0.0
	if itl <= itlTargetMs {
		best = single
	}
	for step := 1; step <= 100; step++ {
		batch := math.Min(float64(e.MaxNumSeqs), math.Floor(float64(step)/100*capacity/context))
		if batch < 1 {
			continue
		}
		if tput, itl := at(batch); itl <= itlTargetMs {
			best = math.Max(best, tput)
		}
	}
	if best == 0 {
		return single, false
	}
	return best, true
}

// randomEngine draws an engine profile that passes Validate: a few prefill points,
// decode points over a few contexts with repeated usages, in no order.
func randomEngine(rng *rand.Rand) EngineProfile {
	e := EngineProfile{TensorParallelSize: 1 + rng.IntN(4), KVBlocks: 1 + rng.IntN(5000), MaxNumSeqs: 1 + rng.IntN(300)}
	isl := 0
	for range 1 + rng.IntN(6) {
		isl += 1 + rng.IntN(3000)
		e.Prefill = append(e.Prefill, PrefillPoint{ISL: isl, TTFTMs: 0.5 + 300*rng.Float64(), TokensPerSecPerGPU: 1 + 5e4*rng.Float64()})
	}
	contexts := make([]int, 1+rng.IntN(4))
	for i := range contexts {
		contexts[i] = 1 + rng.IntN(20000)
	}
	for range 1 + rng.IntN(30) {
		u := float64(rng.IntN(11)) / 10 // repeats happen
		e.Decode = append(e.Decode, DecodePoint{Context: contexts[rng.IntN(len(contexts))], Batch: 1, KVUsage: u,
			ITLMs: 0.5 + 60*rng.Float64(), TokensPerSecPerGPU: 1})
	}
	return e
}

// sameBits: a and b are the same float64, bit for bit.
func sameBits(a, b float64) bool { return math.Float64bits(a) == math.Float64bits(b) }

// outcome is f's value, or what it panicked with.
func outcome[T any](f func() T) (v T, panicked any) {
	defer func() { panicked = recover() }()
	return f(), nil
}

// checkSame fails unless got and want both panic or both return the same value
// (compared by same).
func checkSame[T any](t *testing.T, what string, same func(a, b T) bool, got, want func() T) {
	t.Helper()
	g, gp := outcome(got)
	w, wp := outcome(want)
	switch {
	case gp != nil && wp != nil:
	case gp != nil || wp != nil:
		t.Fatalf("%s: panic %v, reference panic %v", what, gp, wp)
	case !same(g, w):
		t.Fatalf("%s = %v, reference %v", what, g, w)
	}
}

// checkAgainstReference reads e through every method and through Timing at random
// points inside and outside the measured ones (and on them) and fails on the first
// answer that differs from the reference reading by a bit (or panics where it does
// not: a profile never validated may hold decode points in an order no reading
// survives).
func checkAgainstReference(t *testing.T, name string, e *EngineProfile, rng *rand.Rand, n int) {
	t.Helper()
	tm := e.Timing()
	maxISL := float64(e.Prefill[len(e.Prefill)-1].ISL)
	maxCtx := 0.0
	for _, pt := range e.Decode {
		maxCtx = math.Max(maxCtx, float64(pt.Context))
	}
	for range n {
		tok := rng.IntN(int(2*maxISL)+10) - 5
		if rng.IntN(4) == 0 {
			tok = e.Prefill[rng.IntN(len(e.Prefill))].ISL // on a measured prompt
		}
		isl := float64(tok)
		checkSame(t, fmt.Sprintf("%s: PrefillMillis(%d)", name, tok), sameBits,
			func() float64 { return tm.PrefillMillis(tok) },
			func() float64 {
				if tok <= 0 {
					return 0
				}
				return refTTFT(e, isl)
			})
		checkSame(t, fmt.Sprintf("%s: TTFT(%v)", name, isl), sameBits,
			func() float64 { return e.TTFT(isl) }, func() float64 { return refTTFT(e, isl) })
		checkSame(t, fmt.Sprintf("%s: PrefillThroughput(%v)", name, isl), sameBits,
			func() float64 { return e.PrefillThroughput(isl) }, func() float64 { return refPrefillThroughput(e, isl) })

		u, ctx := rng.Float64()*1.4-0.2, rng.Float64()*2*maxCtx
		if rng.IntN(4) == 0 {
			pt := e.Decode[rng.IntN(len(e.Decode))] // on a measured point
			u, ctx = pt.KVUsage, float64(pt.Context)
		}
		ref := func() float64 { return refITL(e, u, ctx) }
		checkSame(t, fmt.Sprintf("%s: DecodeMillis(%v, %v)", name, u, ctx), sameBits,
			func() float64 { return tm.DecodeMillis(u, ctx) }, ref)
		checkSame(t, fmt.Sprintf("%s: ITL(%v, %v)", name, u, ctx), sameBits,
			func() float64 { return e.ITL(u, ctx) }, ref)
	}
	type throughput struct {
		tokens float64
		ok     bool
	}
	sameThroughput := func(a, b throughput) bool { return sameBits(a.tokens, b.tokens) && a.ok == b.ok }
	for range max(1, n/20) {
		target, ctx := 1+80*rng.Float64(), rng.Float64()*2*maxCtx
		checkSame(t, fmt.Sprintf("%s: DecodeThroughput(16, %v, %v)", name, target, ctx), sameThroughput,
			func() throughput { v, ok := e.DecodeThroughput(16, target, ctx); return throughput{v, ok} },
			func() throughput { v, ok := refDecodeThroughput(e, 16, target, ctx); return throughput{v, ok} })
	}
}

// TestCurvesReadAsThePoints: validated profiles (the fixture, a swept profile, random
// ones) and profiles built in code and never validated (decode points in any order)
// read bit for bit as the reference reading, through the methods and through Timing.
func TestCurvesReadAsThePoints(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 7))
	reads, profiles := 2000, 300
	if testing.Short() {
		reads, profiles = 500, 60
	}
	for _, p := range []*Profile{smallProfile(t), sweptProfile(t)} {
		for i := range p.Parallel {
			checkAgainstReference(t, p.Model, &p.Parallel[i], rng, reads)
		}
	}
	for k := range profiles {
		e := randomEngine(rng)
		checkAgainstReference(t, "random, not validated, in no order", &e, rng, 100)
		sorted := e
		sorted.Decode = slices.Clone(e.Decode)
		slices.SortStableFunc(sorted.Decode, func(a, b DecodePoint) int {
			return cmp.Or(cmp.Compare(a.Context, b.Context), cmp.Compare(a.KVUsage, b.KVUsage))
		})
		checkAgainstReference(t, "random, not validated, sorted", &sorted, rng, 100)
		p := &Profile{Version: ProfileVersion, Engine: "mocker", BlockSize: 16, Parallel: []EngineProfile{e}}
		p.Parallel[0].Prefill, p.Parallel[0].Decode = slices.Clone(e.Prefill), slices.Clone(e.Decode)
		if err := p.Validate(); err != nil {
			t.Fatalf("random profile %d: %v", k, err)
		}
		if p.Parallel[0].curves == nil {
			t.Fatal("Validate kept no curves")
		}
		checkAgainstReference(t, "random, validated", &p.Parallel[0], rng, 200)
	}
}

// TestCurvesFollowThePoints: curves kept by Validate or laid out by Timing serve
// copies of the profile, and are not read once the points' slices are replaced or
// appended to; a profile validated again after its points changed in place reads the
// new points.
func TestCurvesFollowThePoints(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	p := sweptProfile(t)
	e := &p.Parallel[0]
	tm := e.Timing()

	cp := *e // a copy shares the kept curves
	if cp.curves != e.curves || !cp.curves.of(&cp) {
		t.Fatal("a copy of a validated profile does not read its kept curves")
	}
	checkAgainstReference(t, "copy", &cp, rng, 200)

	last := e.Decode[len(e.Decode)-1] // the longest context at full usage
	e.Decode = e.Decode[:len(e.Decode)-1]
	if got, was := tm.DecodeMillis(1, float64(last.Context)), last.ITLMs; got == was {
		t.Errorf("after the last decode point was cut off: Timing still reads it (%v)", got)
	}
	checkAgainstReference(t, "cut short, not validated", e, rng, 200)

	e.Decode = append(e.Decode[:len(e.Decode):len(e.Decode)], DecodePoint{Context: 1 << 20, Batch: 1, KVUsage: 0.5, ITLMs: 900, TokensPerSecPerGPU: 1})
	if got := e.ITL(0.5, 1<<20); got != 900 {
		t.Errorf("after a decode point was appended: ITL at its context = %v, want 900", got)
	}
	if got := tm.DecodeMillis(0.5, 1<<20); got != 900 {
		t.Errorf("after a decode point was appended: Timing's DecodeMillis at its context = %v, want 900", got)
	}
	checkAgainstReference(t, "appended, not validated", e, rng, 200)

	e.Prefill = []PrefillPoint{{ISL: 100, TTFTMs: 7, TokensPerSecPerGPU: 3}}
	if got := tm.PrefillMillis(5000); got != 7 {
		t.Errorf("after the prefill points were replaced: PrefillMillis = %v, want 7", got)
	}
	checkAgainstReference(t, "replaced, not validated", e, rng, 200)

	// Timing of a profile never validated, validated afterwards: it reads the sorted points.
	q := &Profile{Version: ProfileVersion, Engine: "mocker", BlockSize: 16, Parallel: []EngineProfile{randomEngine(rng)}}
	qe := &q.Parallel[0]
	slices.Reverse(qe.Decode)
	qt := qe.Timing()
	if err := q.Validate(); err != nil {
		t.Fatal(err)
	}
	for range 200 {
		u, ctx := rng.Float64(), 30000*rng.Float64()
		if got, want := qt.DecodeMillis(u, ctx), refITL(qe, u, ctx); !sameBits(got, want) {
			t.Fatalf("Timing taken before Validate: DecodeMillis(%v, %v) = %v, reference %v", u, ctx, got, want)
		}
	}

	// Changed in place, then validated again.
	kept := qe.curves
	for i := range qe.Decode {
		qe.Decode[i].ITLMs *= 2
	}
	if err := q.Validate(); err != nil {
		t.Fatal(err)
	}
	if qe.curves == kept {
		t.Fatal("Validate kept the old curves after the points changed in place")
	}
	checkAgainstReference(t, "changed in place, validated again", qe, rng, 200)
	again := qe.curves
	if err := q.Validate(); err != nil || qe.curves != again {
		t.Errorf("validating an unchanged profile replaced its curves (%v)", err)
	}
}

// TestProfileTimingAllocatesNothing: a step's time, and each reading of a validated
// profile, allocates nothing; so does Timing's step on a profile never validated.
func TestProfileTimingAllocatesNothing(t *testing.T) {
	e, err := sweptProfile(t).ForTP(2)
	if err != nil {
		t.Fatal(err)
	}
	raw := randomEngine(rand.New(rand.NewPCG(3, 4)))
	rawTiming := raw.Timing()
	for name, f := range map[string]func(){
		"Timing.DecodeMillis":  func() { e.Timing().DecodeMillis(0.37, 9000) },
		"Timing.PrefillMillis": func() { e.Timing().PrefillMillis(3000) },
		"TTFT":                 func() { e.TTFT(3000) },
		"PrefillThroughput":    func() { e.PrefillThroughput(3000) },
		"ITL":                  func() { e.ITL(0.37, 9000) },
		"DecodeThroughput":     func() { e.DecodeThroughput(16, 30, 9000) },
		"Timing of a profile not validated": func() {
			rawTiming.DecodeMillis(0.4, 100)
			rawTiming.PrefillMillis(700)
		},
	} {
		if n := testing.AllocsPerRun(100, f); n != 0 {
			t.Errorf("%s: %v allocations per call, want 0", name, n)
		}
	}
}

// TestProfileTimingConcurrentReaders: many engines of a simulation read one profile's
// timing at once, validated or not (the race detector watches).
func TestProfileTimingConcurrentReaders(t *testing.T) {
	valid, err := sweptProfile(t).ForTP(1)
	if err != nil {
		t.Fatal(err)
	}
	raw := randomEngine(rand.New(rand.NewPCG(5, 6)))
	var wg sync.WaitGroup
	for g := range 8 {
		e := valid
		if g%2 == 1 {
			e = &raw
		}
		wg.Go(func() {
			tm := e.Timing()
			for i := range 500 {
				tm.DecodeMillis(float64(i%100)/100, float64(100*i))
				tm.PrefillMillis(i * 10)
				e.ITL(float64(i%100)/100, float64(100*i))
			}
		})
	}
	wg.Wait()
}
