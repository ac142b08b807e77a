package configure

import (
	"bytes"
	"flag"
	"math"
	"os"
	"path/filepath"
	"testing"

	"github.com/turbine-llm/turbine/engines/mocker"
	"github.com/turbine-llm/turbine/planner"
)

var update = flag.Bool("update", false, "rewrite testdata/profile.json from the reference timing")

// fixtureTPExponent is the documented tensor-parallel model of the fixture profile: a
// TP-n engine's step times are the reference's divided by n^0.8, and it has n times the
// reference engine's KV blocks (docs/reference.md §27.6).
const fixtureTPExponent = 0.8

// fixtureProfile is testdata/profile.json: the reference mock engine's timing
// (mocker.PrefillMillis, mocker.DecodeMillis; docs/reference.md §7) at TP 1, 2 and 4,
// step times divided by n^0.8 and KV blocks times n. The reference decode time depends on
// KV usage only, so both contexts of each size carry the same curve; the contexts are
// those whose max_num_seqs sequences fill the cache (4096·n tokens) and a longer one.
func fixtureProfile() *planner.Profile {
	round := func(x float64, unit float64) float64 { return math.Round(x/unit) * unit }
	ref := mocker.DefaultConfig()
	p := &planner.Profile{Version: planner.ProfileVersion, Engine: "mocker", Model: "turbine-mock", BlockSize: ref.BlockSize}
	for _, tp := range []int{1, 2, 4} {
		div := math.Pow(float64(tp), fixtureTPExponent)
		e := planner.EngineProfile{TensorParallelSize: tp, KVBlocks: ref.NumGPUBlocks * tp, MaxNumSeqs: ref.MaxNumSeqs}
		for _, isl := range []int{1, 64, 128, 256, 512, 1024, 1536, 2048, 3072, 4096, 5120, 6144, 7168, 8192} {
			ttft := round(mocker.PrefillMillis(isl)/div, 1e-4)
			e.Prefill = append(e.Prefill, planner.PrefillPoint{ISL: isl, TTFTMs: ttft,
				TokensPerSecPerGPU: round(float64(isl)/(ttft/1000)/float64(tp), 0.1)})
		}
		capacity := float64(e.KVBlocks * p.BlockSize)
		for _, ctx := range []int{4096 * tp, 16384 * tp} {
			for step := 0; step <= 20; step++ {
				u := float64(step) / 20
				batch := max(1, int(u*capacity/float64(ctx)))
				itl := round(mocker.DecodeMillis(u)/div, 1e-4)
				e.Decode = append(e.Decode, planner.DecodePoint{Context: ctx, Batch: batch, KVUsage: u, ITLMs: itl,
					TokensPerSecPerGPU: round(float64(batch)/(itl/1000)/float64(tp), 0.1)})
			}
		}
		p.Parallel = append(p.Parallel, e)
	}
	return p
}

const fixturePath = "testdata/profile.json"

// TestFixtureProfile: testdata/profile.json is fixtureProfile's (go test -update
// rewrites it), a valid profile, and its TP 1 timing is the reference timing.
func TestFixtureProfile(t *testing.T) {
	var buf bytes.Buffer
	if err := fixtureProfile().Encode(&buf); err != nil {
		t.Fatal(err)
	}
	if *update {
		if err := os.WriteFile(filepath.FromSlash(fixturePath), buf.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := os.ReadFile(filepath.FromSlash(fixturePath))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, buf.Bytes()) {
		t.Fatalf("%s differs from the fixture generated here: go test -run TestFixtureProfile -update ./cmd/turbine/configure/", fixturePath)
	}
	p, err := planner.LoadProfile(fixturePath)
	if err != nil {
		t.Fatal(err)
	}
	e, err := p.ForTP(1)
	if err != nil {
		t.Fatal(err)
	}
	tm := e.Timing()
	for _, tok := range []int{1, 100, 1000, 4000, 8192} {
		if got, want := tm.PrefillMillis(tok), mocker.PrefillMillis(tok); math.Abs(got-want) > 0.05 {
			t.Errorf("prefill of %d tokens: %.4f ms, reference %.4f", tok, got, want)
		}
	}
	for _, u := range []float64{0, 0.13, 0.5, 0.77, 1} {
		if got, want := tm.DecodeMillis(u, 5000), mocker.DecodeMillis(u); math.Abs(got-want) > 0.05 {
			t.Errorf("decode at usage %v: %.4f ms, reference %.4f", u, got, want)
		}
	}
}

func BenchmarkProfileITL(b *testing.B) {
	e, _ := fixtureProfile().ForTP(2)
	tm := e.Timing()
	for i := 0; b.Loop(); i++ {
		tm.DecodeMillis(float64(i%1000)/1000, float64(3000+i%20000))
	}
}
