package bench

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"
	"strings"
)

// MaxLength is the largest token count a Length takes or draws (2^24 tokens, far above
// any model's context): larger parameters are refused and heavy tails are cut there.
const MaxLength = 1 << 24

// lengthKind is the shape of a Length.
type lengthKind uint8

const (
	lengthFixed lengthKind = iota
	lengthUniform
	lengthNormal
	lengthLognormal
)

// Length is a distribution of token counts: a synthetic workload's input lengths (ISL)
// or output lengths (OSL). The zero value is the fixed length 0. Written (ParseLength,
// String) as one of:
//
//	N                   always N tokens
//	uniform:MIN:MAX     an integer drawn uniformly from MIN..MAX (both included); vLLM's
//	                    --random-range-ratio R around L is uniform:L·(1−R):L·(1+R)
//	normal:MEAN:SD      a normal draw (AIPerf's and GenAI-Perf's mean and stddev),
//	                    rounded to an integer
//	lognormal:MEAN:SD   a log-normal draw whose mean and standard deviation (of the
//	                    token counts themselves, not of their logarithm) are MEAN and SD,
//	                    rounded: a right-skewed shape like that of real prompt lengths
//
// Every draw has a lower bound (Draw's lo: at least 1 token, more with a shared prefix).
// Normal and log-normal draws are truncated there: drawn from the distribution
// conditioned on being at least the bound (by inverting the CDF, one uniform variate per
// draw), not clamped, so no value piles up at the bound. Draws are cut at MaxLength.
type Length struct {
	kind lengthKind
	a, b float64 // fixed: a; uniform: a..b; normal and lognormal: mean a, SD b
}

// FixedLength is the Length that is always n tokens.
func FixedLength(n int) Length { return Length{kind: lengthFixed, a: float64(n)} }

// lengthSyntax is how a Length is written, for error messages.
const lengthSyntax = "N, uniform:MIN:MAX, normal:MEAN:SD or lognormal:MEAN:SD"

// ParseLength parses a Length written as described on Length. Parameters are token
// counts from 1 to MaxLength (MIN, MAX and N integers; MEAN and SD numbers, SD >= 0).
// Errors quote the bad part and say what was wanted.
func ParseLength(s string) (Length, error) {
	s = strings.TrimSpace(s)
	name, rest, found := strings.Cut(s, ":")
	if !found {
		if _, err := strconv.ParseFloat(s, 64); err != nil {
			return Length{}, fmt.Errorf("%q: want %s", s, lengthSyntax)
		}
		n, err := lengthInt("N", s)
		if err != nil {
			return Length{}, err
		}
		return FixedLength(n), nil
	}
	params := strings.Split(rest, ":")
	switch name {
	case "uniform":
		if len(params) != 2 {
			return Length{}, fmt.Errorf("%q: want uniform:MIN:MAX", s)
		}
		lo, err := lengthInt("MIN", params[0])
		if err != nil {
			return Length{}, err
		}
		hi, err := lengthInt("MAX", params[1])
		if err != nil {
			return Length{}, err
		}
		if lo > hi {
			return Length{}, fmt.Errorf("%q: MIN %d is above MAX %d", s, lo, hi)
		}
		return Length{kind: lengthUniform, a: float64(lo), b: float64(hi)}, nil
	case "normal", "lognormal":
		if len(params) != 2 {
			return Length{}, fmt.Errorf("%q: want %s:MEAN:SD", s, name)
		}
		mean, err := lengthFloat("MEAN", params[0], 1)
		if err != nil {
			return Length{}, err
		}
		sd, err := lengthFloat("SD", params[1], 0)
		if err != nil {
			return Length{}, err
		}
		kind := lengthNormal
		if name == "lognormal" {
			kind = lengthLognormal
		}
		return Length{kind: kind, a: mean, b: sd}, nil
	}
	return Length{}, fmt.Errorf("%q: unknown distribution %q (want %s)", s, name, lengthSyntax)
}

// lengthInt parses parameter name of a Length: an integer from 1 to MaxLength.
func lengthInt(name, s string) (int, error) {
	n, err := strconv.Atoi(strings.TrimSpace(s))
	if err != nil || n < 1 || n > MaxLength {
		return 0, fmt.Errorf("%s %q: want an integer from 1 to %d", name, s, MaxLength)
	}
	return n, nil
}

// lengthFloat parses parameter name of a Length: a number from least to MaxLength.
func lengthFloat(name, s string, least float64) (float64, error) {
	x, err := strconv.ParseFloat(strings.TrimSpace(s), 64)
	if err != nil || !(x >= least) || x > MaxLength {
		return 0, fmt.Errorf("%s %q: want a number from %g to %d", name, s, least, MaxLength)
	}
	return x, nil
}

// String writes l as ParseLength reads it: every parameter in plain decimal notation
// (16777216, 1500.5; never an exponent such as 1.6777216e+07, which N, MIN and MAX do
// not accept).
func (l Length) String() string {
	f := func(x float64) string { return strconv.FormatFloat(x, 'f', -1, 64) }
	switch l.kind {
	case lengthUniform:
		return "uniform:" + f(l.a) + ":" + f(l.b)
	case lengthNormal:
		return "normal:" + f(l.a) + ":" + f(l.b)
	case lengthLognormal:
		return "lognormal:" + f(l.a) + ":" + f(l.b)
	}
	return f(l.a)
}

// Fixed reports whether l is one fixed length (no draw).
func (l Length) Fixed() bool { return l.kind == lengthFixed }

// Min is the least token count l gives before any bound: N, MIN, or 1 for the normal and
// log-normal shapes (whose draws are truncated at Draw's bound).
func (l Length) Min() int {
	switch l.kind {
	case lengthFixed, lengthUniform:
		return int(l.a)
	}
	return 1
}

// Max is the largest token count l gives; false for the normal and log-normal shapes,
// which have no bound but MaxLength.
func (l Length) Max() (int, bool) {
	switch l.kind {
	case lengthFixed:
		return int(l.a), true
	case lengthUniform:
		return int(l.b), true
	}
	return MaxLength, false
}

// Mean is l's mean before truncation, in tokens.
func (l Length) Mean() float64 {
	if l.kind == lengthUniform {
		return (l.a + l.b) / 2
	}
	return l.a
}

// Draw returns one token count from l that is at least lo (lo >= 1) and at most
// MaxLength. A fixed length draws nothing from rng (it may be nil then); the others take
// exactly one variate per draw, so a seeded rng gives the same sequence every time. A
// fixed N or a uniform MIN below lo is raised to lo; normal and log-normal draws are
// truncated at lo (see Length).
func (l Length) Draw(rng *rand.Rand, lo int) int {
	lo = min(max(lo, 1), MaxLength)
	var x float64
	switch l.kind {
	case lengthFixed:
		return min(max(int(l.a), lo), MaxLength)
	case lengthUniform:
		a, b := max(int(l.a), lo), max(int(l.b), lo)
		return a + rng.IntN(b-a+1)
	case lengthNormal:
		// Truncated below at lo−0.5, so that the rounded draw is at least lo.
		x = truncNormal(rng.Float64(), l.a, l.b, float64(lo)-0.5)
	case lengthLognormal:
		// The log-normal's parameters from the mean m and SD s of the draws:
		// σ² = ln(1 + s²/m²), μ = ln m − σ²/2.
		s2 := math.Log1p((l.b / l.a) * (l.b / l.a))
		x = math.Exp(truncNormal(rng.Float64(), math.Log(l.a)-s2/2, math.Sqrt(s2), math.Log(float64(lo)-0.5)))
	}
	if math.IsNaN(x) || x > MaxLength {
		return MaxLength
	}
	return min(max(int(math.Round(x)), lo), MaxLength)
}

// truncNormal maps u (uniform in [0, 1)) to a draw of the normal distribution with mean
// mu and standard deviation sd conditioned on being at least lo: the inverse CDF at
// F(lo) + u·(1 − F(lo)). With sd 0 it is max(mu, lo).
func truncNormal(u, mu, sd, lo float64) float64 {
	if sd == 0 {
		return max(mu, lo)
	}
	p0 := 0.5 * math.Erfc(-(lo-mu)/(sd*math.Sqrt2)) // F(lo)
	p := p0 + u*(1-p0)
	if p >= 1 {
		p = math.Nextafter(1, 0)
	}
	x := mu + sd*math.Sqrt2*math.Erfinv(2*p-1)
	return max(x, lo) // rounding at the extreme lower tail
}
