package bench

import (
	"math"
	"math/rand/v2"
	"strings"
	"testing"
)

func TestParseLength(t *testing.T) {
	for _, tc := range []struct {
		in, want string // want: String() of the parsed Length
		min      int
		max      int
		bounded  bool
	}{
		{"1024", "1024", 1024, 1024, true},
		{" 7 ", "7", 7, 7, true},
		{"uniform:512:2048", "uniform:512:2048", 512, 2048, true},
		{"uniform:3:3", "uniform:3:3", 3, 3, true},
		{"normal:1024:256", "normal:1024:256", 1, MaxLength, false},
		{"normal:100.5:0", "normal:100.5:0", 1, MaxLength, false},
		{"lognormal:800:1200", "lognormal:800:1200", 1, MaxLength, false},
		// Lengths of a million tokens and more are written as integers, not 1e+06.
		{"1000000", "1000000", 1000000, 1000000, true},
		{"16777216", "16777216", MaxLength, MaxLength, true},
		{"uniform:1000000:16777216", "uniform:1000000:16777216", 1000000, MaxLength, true},
		{"normal:16777216:2000000", "normal:16777216:2000000", 1, MaxLength, false},
		{"lognormal:1234567.25:0.000001", "lognormal:1234567.25:0.000001", 1, MaxLength, false},
	} {
		l, err := ParseLength(tc.in)
		if err != nil {
			t.Errorf("%q: %v", tc.in, err)
			continue
		}
		hi, bounded := l.Max()
		if l.String() != tc.want || l.Min() != tc.min || hi != tc.max || bounded != tc.bounded {
			t.Errorf("%q = %s, min %d, max %d %v; want %s, %d, %d %v", tc.in, l, l.Min(), hi, bounded, tc.want, tc.min, tc.max, tc.bounded)
		}
		if again, err := ParseLength(l.String()); err != nil || again != l {
			t.Errorf("%q: String %q does not parse back: %v", tc.in, l, err)
		}
	}
}

// TestParseLengthErrors: every error quotes the bad part.
func TestParseLengthErrors(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"", `"": want N, uniform:MIN:MAX`},
		{"lots", `"lots": want N, uniform:MIN:MAX`},
		{"0", `N "0": want an integer from 1`},
		{"-5", `N "-5"`},
		{"1.5", `N "1.5"`},
		{"99999999", `N "99999999"`},
		{"gauss:1:2", `unknown distribution "gauss"`},
		{"uniform:512", `"uniform:512": want uniform:MIN:MAX`},
		{"uniform:1:2:3", `want uniform:MIN:MAX`},
		{"uniform:x:9", `MIN "x"`},
		{"uniform:0:9", `MIN "0"`},
		{"uniform:5:", `MAX ""`},
		{"uniform:2048:512", "MIN 2048 is above MAX 512"},
		{"normal:1024", `want normal:MEAN:SD`},
		{"normal:abc:1", `MEAN "abc": want a number from 1`},
		{"normal:0.5:1", `MEAN "0.5"`},
		{"normal:100:-1", `SD "-1": want a number from 0`},
		{"normal:100:NaN", `SD "NaN"`},
		{"lognormal:100:Inf", `SD "Inf"`},
		{"lognormal:100", `want lognormal:MEAN:SD`},
	} {
		_, err := ParseLength(tc.in)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: error %v, want one containing %s", tc.in, err, tc.want)
		}
	}
}

// draws returns n draws of spec at least lo from a generator seeded with seed.
func draws(t *testing.T, spec string, lo, n int, seed uint64) []int {
	t.Helper()
	l, err := ParseLength(spec)
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(seed, 0))
	out := make([]int, n)
	for i := range out {
		out[i] = l.Draw(rng, lo)
	}
	return out
}

func meanSD(xs []int) (mean, sd float64) {
	for _, x := range xs {
		mean += float64(x)
	}
	mean /= float64(len(xs))
	for _, x := range xs {
		sd += (float64(x) - mean) * (float64(x) - mean)
	}
	return mean, math.Sqrt(sd / float64(len(xs)-1))
}

// TestLengthDraw checks bounds, determinism and the shape of 20,000 seeded draws of
// each distribution. The tolerances are several standard errors wide; with fixed seeds
// the draws are the same on every run.
func TestLengthDraw(t *testing.T) {
	const n = 20000
	for _, tc := range []struct {
		spec       string
		lo         int
		lowest     int // least value allowed
		highest    int // largest value allowed
		mean, sd   float64
		tolM, tolS float64 // relative tolerances of mean and SD
	}{
		{"1024", 1, 1024, 1024, 1024, 0, 0, 0},
		{"100", 300, 300, 300, 300, 0, 0, 0},
		{"uniform:512:2048", 1, 512, 2048, 1280, 1536 / math.Sqrt(12), 0.01, 0.02},
		{"uniform:1:4", 3, 3, 4, 3.5, 0.5, 0.02, 0.02},
		{"normal:1024:256", 1, 1, MaxLength, 1024, 256, 0.01, 0.02},
		{"normal:1000:0", 1, 1000, 1000, 1000, 0, 0, 0},
		// Truncated at 1: the mean of a standard normal truncated at 0 is σ·√(2/π).
		{"normal:1:100", 1, 1, MaxLength, 0.5 + 100*math.Sqrt(2/math.Pi), 100 * math.Sqrt(1-2/math.Pi), 0.03, 0.03},
		{"lognormal:800:1200", 1, 1, MaxLength, 800, 1200, 0.04, 0.15},
		{"lognormal:50:5", 1, 1, MaxLength, 50, 5, 0.01, 0.03},
	} {
		t.Run(tc.spec, func(t *testing.T) {
			xs := draws(t, tc.spec, tc.lo, n, 7)
			again := draws(t, tc.spec, tc.lo, n, 7)
			other := draws(t, tc.spec, tc.lo, n, 8)
			differs := false
			for i, x := range xs {
				if x < tc.lowest || x > tc.highest {
					t.Fatalf("draw %d = %d, outside [%d, %d]", i, x, tc.lowest, tc.highest)
				}
				if x != again[i] {
					t.Fatalf("draw %d: %d then %d with the same seed", i, x, again[i])
				}
				differs = differs || x != other[i]
			}
			if !differs && tc.sd > 0 {
				t.Error("seeds 7 and 8 gave the same draws")
			}
			mean, sd := meanSD(xs)
			if math.Abs(mean-tc.mean) > tc.tolM*tc.mean+1e-9 || math.Abs(sd-tc.sd) > tc.tolS*tc.sd+1e-9 {
				t.Errorf("mean %.2f, SD %.2f; want %.2f, %.2f", mean, sd, tc.mean, tc.sd)
			}
		})
	}
}

// TestLengthTruncation: a normal draw truncated at the bound is conditioned, not
// clamped: the bound gets no more draws than its neighbours.
func TestLengthTruncation(t *testing.T) {
	xs := draws(t, "normal:1000:300", 1000, 50000, 3)
	count := map[int]int{}
	for _, x := range xs {
		if x < 1000 {
			t.Fatalf("draw %d below the bound 1000", x)
		}
		count[x]++
	}
	// Draws in [999.5, 1000.5) round to 1000, in [1000.5, 1001.5) to 1001: about 133
	// each; a clamped normal would put half of all draws at 1000.
	if count[1000] > 2*count[1001] || count[1000] > 300 {
		t.Errorf("%d draws at the bound, %d at the next value: piled up", count[1000], count[1001])
	}
	mean, _ := meanSD(xs)
	if want := 1000 + 300*math.Sqrt(2/math.Pi); math.Abs(mean-want) > 5 {
		t.Errorf("mean %.1f, want %.1f (the half-normal's)", mean, want)
	}
}

// TestLengthFixedDrawsNothing: a fixed length takes no variate, so adding fixed lengths
// to a workload leaves its other draws unchanged.
func TestLengthFixedDrawsNothing(t *testing.T) {
	if got := FixedLength(12).Draw(nil, 1); got != 12 {
		t.Fatalf("fixed 12 drew %d", got)
	}
}
