package bench

import (
	"errors"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"
)

func mustLength(t *testing.T, s string) Length {
	t.Helper()
	l, err := ParseLength(s)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func commonPrefix(a, b []uint32) int {
	n := 0
	for n < min(len(a), len(b)) && a[n] == b[n] {
		n++
	}
	return n
}

// TestSyntheticSharedPrefix: two requests of a group share exactly the prefix's tokens
// (whether the prefix ends on a block boundary, inside a block or inside the first
// block); requests of different groups share no token block and no leading token.
func TestSyntheticSharedPrefix(t *testing.T) {
	for _, tc := range []struct {
		name                  string
		isl                   string
		groups, prefix, block int
	}{
		{"prefix ends inside a block", "uniform:1200:3000", 4, 1000, 512},
		{"prefix of whole blocks", "normal:2000:400", 3, 1024, 512},
		{"prefix inside the first block", "300", 2, 100, 512},
		{"one group", "lognormal:900:300", 1, 600, 64},
	} {
		t.Run(tc.name, func(t *testing.T) {
			spec := SyntheticSpec{ISL: mustLength(t, tc.isl), OSL: FixedLength(8), Rate: 10, Requests: 60,
				PrefixGroups: tc.groups, PrefixTokens: tc.prefix, BlockTokens: tc.block, Seed: 5}
			reqs, err := spec.Generate()
			if err != nil {
				t.Fatal(err)
			}
			prompts := make([][]uint32, len(reqs))
			texts := make([][]uint32, len(reqs)) // words, as indexes in the list
			for i, r := range reqs {
				if r.InputLength <= tc.prefix || r.PrefixTokens != tc.prefix {
					t.Fatalf("request %d: %d tokens, prefix %d; want more than the prefix of %d", i, r.InputLength, r.PrefixTokens, tc.prefix)
				}
				if prompts[i], err = Tokens(r, tc.block); err != nil {
					t.Fatal(err)
				}
				text, err := Text(r, tc.block)
				if err != nil {
					t.Fatal(err)
				}
				texts[i] = wordIDs(strings.Split(text, " "))
			}
			groups := map[int64]int{}
			for i, a := range reqs {
				groups[a.PrefixID]++
				for j := i + 1; j < len(reqs); j++ {
					b := reqs[j]
					n := commonPrefix(prompts[i], prompts[j])
					words := commonPrefix(texts[i], texts[j])
					if a.PrefixID == b.PrefixID {
						// The tokens after the prefix are the requests' own: equal only by a
						// 1-in-90,000 chance (which these seeds do not hit).
						if n != tc.prefix {
							t.Fatalf("requests %d and %d of one group share %d leading tokens, want %d", i, j, n, tc.prefix)
						}
						if words < tc.prefix {
							t.Fatalf("requests %d and %d of one group share %d leading words, want at least %d", i, j, words, tc.prefix)
						}
						continue
					}
					if n != 0 {
						t.Fatalf("requests %d and %d of different groups share %d leading tokens", i, j, n)
					}
					for _, id := range a.HashIDs {
						if slices.Contains(b.HashIDs, id) {
							t.Fatalf("requests %d and %d of different groups share hash id %d", i, j, id)
						}
					}
				}
			}
			if len(groups) != tc.groups {
				t.Fatalf("%d groups used, want %d", len(groups), tc.groups)
			}
			// The ceiling: every request after its group's first hits exactly the prefix.
			var want, total float64
			for i, r := range reqs {
				total += float64(r.InputLength)
				for j := range i {
					if reqs[j].PrefixID == r.PrefixID {
						want += float64(tc.prefix)
						break
					}
				}
			}
			if got := Ceiling(reqs, tc.block); math.Abs(got-want/total) > 1e-12 {
				t.Fatalf("Ceiling %v, want %v", got, want/total)
			}
		})
	}
}

// wordIDs maps words to their index in the list, so commonPrefix can compare them.
func wordIDs(ws []string) []uint32 {
	index := make(map[string]uint32, len(words))
	for i, w := range words {
		index[w] = uint32(i)
	}
	out := make([]uint32, len(ws))
	for i, w := range ws {
		out[i] = index[w]
	}
	return out
}

// TestSyntheticDeterministic: the same spec gives the same workload; another seed
// another; Generator's first requests are Generate's.
func TestSyntheticDeterministic(t *testing.T) {
	spec := SyntheticSpec{ISL: mustLength(t, "normal:500:100"), OSL: mustLength(t, "uniform:10:50"), Rate: 20, Requests: 50,
		PrefixGroups: 3, PrefixTokens: 100, BlockTokens: 64, Seed: 11}
	a, err := spec.Generate()
	if err != nil {
		t.Fatal(err)
	}
	b, _ := spec.Generate()
	spec.Seed = 12
	c, _ := spec.Generate()
	same := func(x, y Request) bool {
		return x.Arrival == y.Arrival && x.InputLength == y.InputLength && x.OutputLength == y.OutputLength &&
			x.PrefixID == y.PrefixID && slices.Equal(x.HashIDs, y.HashIDs)
	}
	differ := false
	for i := range a {
		if !same(a[i], b[i]) {
			t.Fatalf("request %d: %+v then %+v with the same seed", i, a[i], b[i])
		}
		differ = differ || a[i].InputLength != c[i].InputLength
		if o := a[i].OutputLength; o < 10 || o > 50 {
			t.Fatalf("request %d: output length %d outside uniform:10:50", i, o)
		}
	}
	if !differ {
		t.Error("seeds 11 and 12 gave the same input lengths")
	}
	spec.Seed = 11
	g, err := spec.Generator()
	if err != nil {
		t.Fatal(err)
	}
	for i := range 10 {
		if r := g.Next(); !same(r, a[i]) {
			t.Fatalf("Generator request %d = %+v, Generate's %+v", i, r, a[i])
		}
	}
}

// TestSyntheticFixedMatchesSynthetic: fixed lengths without a prefix draw only the
// arrivals, as Synthetic does, so seeded workloads are the same as before.
func TestSyntheticFixedMatchesSynthetic(t *testing.T) {
	spec := SyntheticSpec{ISL: FixedLength(100), OSL: FixedLength(7), Rate: 50, Requests: 30, BlockTokens: 64, Seed: 1}
	a, err := spec.Generate()
	if err != nil {
		t.Fatal(err)
	}
	b, err := Synthetic(30, 100, 7, 64, 50, rand.New(rand.NewPCG(1, 0)))
	if err != nil {
		t.Fatal(err)
	}
	for i := range a {
		if a[i].Arrival != b[i].Arrival || a[i].InputLength != b[i].InputLength || !slices.Equal(a[i].HashIDs, b[i].HashIDs) {
			t.Fatalf("request %d: %+v, Synthetic's %+v", i, a[i], b[i])
		}
	}
}

// TestSyntheticDuration: with a duration, Poisson arrivals are drawn until it.
func TestSyntheticDuration(t *testing.T) {
	const rate, d = 40.0, 50 * time.Second
	reqs, err := SyntheticSpec{ISL: FixedLength(10), OSL: FixedLength(2), Rate: rate, Duration: d, BlockTokens: 16, Seed: 3}.Generate()
	if err != nil {
		t.Fatal(err)
	}
	// 2,000 expected; the Poisson count's SD is about 45.
	if n := len(reqs); n < 1800 || n > 2200 {
		t.Fatalf("%d requests in %v at %v/s, want about %v", n, d, rate, rate*d.Seconds())
	}
	if last := reqs[len(reqs)-1].Arrival; last >= d || last < d-time.Second {
		t.Fatalf("last arrival %v, want just before %v", last, d)
	}
	if _, err := (SyntheticSpec{ISL: FixedLength(10), OSL: FixedLength(2), Duration: d, BlockTokens: 16}).Generate(); err == nil {
		t.Fatal("a duration without a rate: no error")
	}
}

func TestSyntheticCheck(t *testing.T) {
	good := SyntheticSpec{ISL: FixedLength(100), OSL: FixedLength(10), Requests: 5, BlockTokens: 16}
	if err := good.Check(); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		edit func(*SyntheticSpec)
		want string
	}{
		{"block", func(s *SyntheticSpec) { s.BlockTokens = 0 }, "block size 0"},
		{"rate", func(s *SyntheticSpec) { s.Rate = -1 }, "rate -1"},
		{"rate NaN", func(s *SyntheticSpec) { s.Rate = math.NaN() }, "rate NaN"},
		{"duration", func(s *SyntheticSpec) { s.Duration = -time.Second }, "duration -1s"},
		{"requests", func(s *SyntheticSpec) { s.Requests = 0 }, "0 requests"},
		{"too many", func(s *SyntheticSpec) { s.Requests = MaxSyntheticRequests + 1 }, "at most"},
		{"too long", func(s *SyntheticSpec) { s.Rate, s.Duration = 1e6, time.Hour }, "requests expected"},
		{"output", func(s *SyntheticSpec) { s.OSL = FixedLength(0) }, "output length 0"},
		{"input", func(s *SyntheticSpec) { s.ISL = FixedLength(0) }, "input length 0"},
		{"prefix without groups", func(s *SyntheticSpec) { s.PrefixTokens = 10 }, "0 groups, 10 tokens"},
		{"groups without prefix", func(s *SyntheticSpec) { s.PrefixGroups = 2 }, "2 groups, 0 tokens"},
		{"prefix as long as the prompt", func(s *SyntheticSpec) { s.PrefixGroups, s.PrefixTokens = 2, 100 }, "shortest prompt (100 tokens)"},
		{"uniform below the prefix", func(s *SyntheticSpec) { s.ISL, s.PrefixGroups, s.PrefixTokens = mustLength(t, "uniform:50:500"), 1, 60 }, "shortest prompt (50 tokens)"},
		{"normal mean below the prefix", func(s *SyntheticSpec) { s.ISL, s.PrefixGroups, s.PrefixTokens = mustLength(t, "normal:50:500"), 1, 60 }, "mean prompt (50 tokens)"},
		{"rate below MinRate", func(s *SyntheticSpec) { s.Rate = 1e-12 }, "rate 1e-12 requests/s: want 0 (all at once) or a number from 1e-06"},
		{"rate 1e-300 for an hour", func(s *SyntheticSpec) { s.Rate, s.Duration = 1e-300, time.Hour }, "rate 1e-300"},
		{"rate +Inf", func(s *SyntheticSpec) { s.Rate = math.Inf(1) }, "rate +Inf"},
		{"duration beyond MaxArrival", func(s *SyntheticSpec) { s.Rate, s.Duration = 1e-6, MaxArrival+time.Second }, "duration 720h0m1s: want at most 720h0m0s"},
		{"too many groups", func(s *SyntheticSpec) { s.PrefixGroups, s.PrefixTokens = 100_000_000, 10 }, "100000000 shared prefix groups: want at most 1000000"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := good
			tc.edit(&s)
			err := s.Check()
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want one containing %q", err, tc.want)
			}
			if _, gerr := s.Generate(); gerr == nil {
				t.Fatal("Generate: no error")
			}
		})
	}
}

// TestSyntheticArrivalsBounded: a low rate never yields wrapped-around (negative)
// arrivals: Generate refuses arrivals beyond MaxArrival, a duration's loop ends, and
// Generator saturates at time.Duration's maximum.
func TestSyntheticArrivalsBounded(t *testing.T) {
	base := SyntheticSpec{ISL: FixedLength(5), OSL: FixedLength(1), BlockTokens: 16, Seed: 1}
	for _, tc := range []struct {
		name     string
		rate     float64
		requests int
		duration time.Duration
		want     string // error; "" none
	}{
		{"1000 requests at MinRate", MinRate, 1000, 0, "rate 1e-06 requests/s: request "},
		{"3 requests at MinRate", MinRate, 3, 0, ""},
		{"MinRate for 30 days", MinRate, 0, MaxArrival, ""},
		{"1 request per second for an hour", 1, 0, time.Hour, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := base
			s.Rate, s.Requests, s.Duration = tc.rate, tc.requests, tc.duration
			reqs, err := s.Generate()
			if tc.want != "" {
				if err == nil || !strings.Contains(err.Error(), tc.want) || !errors.Is(err, ErrLateArrival) {
					t.Fatalf("error %v, want one containing %q and wrapping ErrLateArrival", err, tc.want)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			for i, r := range reqs {
				if r.Arrival < 0 || r.Arrival > MaxArrival || (i > 0 && r.Arrival < reqs[i-1].Arrival) {
					t.Fatalf("request %d arrives at %v", i, r.Arrival)
				}
			}
		})
	}
	s := base
	s.Rate = MinRate
	g, err := s.Generator()
	if err != nil {
		t.Fatal(err)
	}
	// Mean gap 10^6 s: time.Duration's 9.2·10^9 s are passed after about 9,200 draws.
	var last time.Duration
	for i := range 20_000 {
		r := g.Next()
		if r.Arrival < last {
			t.Fatalf("request %d arrives at %v, before the previous one's %v", i, r.Arrival, last)
		}
		last = r.Arrival
	}
	if last != math.MaxInt64 {
		t.Fatalf("last arrival %v, want saturated at %v", last, time.Duration(math.MaxInt64))
	}
}

// TestSyntheticPrefixGroupIDs pins the hash ids of prefix groups (the same workload for
// a seed in every version): group k's whole blocks come first, from 2^48, then its
// remainder's id, group after group; then the requests' own blocks. A million groups
// cost no memory ahead.
func TestSyntheticPrefixGroupIDs(t *testing.T) {
	const base = int64(1) << 48
	s := SyntheticSpec{ISL: FixedLength(1024), OSL: FixedLength(1), Requests: 20, PrefixGroups: 3, PrefixTokens: 1000,
		BlockTokens: 512, Seed: 4}
	reqs, err := s.Generate()
	if err != nil {
		t.Fatal(err)
	}
	own := base + 3*2 // after 3 groups of 1 whole block and 1 remainder id
	for i, r := range reqs {
		k := (r.PrefixID - base - 1) / 2
		if k < 0 || k > 2 || r.PrefixID != base+2*k+1 || !slices.Equal(r.HashIDs, []int64{base + 2*k, own}) {
			t.Fatalf("request %d: prefix id %d, hash ids %v; want group k's [%d+2k, %d]", i, r.PrefixID, r.HashIDs, base, own)
		}
		own++
	}
	s.PrefixGroups, s.Requests = MaxPrefixGroups, 5
	reqs, err = s.Generate()
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range reqs {
		if r.HashIDs[1] != base+2*MaxPrefixGroups+int64(i) || r.HashIDs[0] != r.PrefixID-1 {
			t.Fatalf("request %d: hash ids %v, prefix id %d", i, r.HashIDs, r.PrefixID)
		}
	}
}
