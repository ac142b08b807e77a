package bench

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"time"
)

// MaxSyntheticRequests bounds a synthetic workload built ahead of a run (Generate):
// Requests, or the expected Rate × Duration.
const MaxSyntheticRequests = 10_000_000

// MinRate is the lowest Poisson arrival rate a synthetic workload takes, in requests per
// second (besides 0, a closed loop): one request every 11.6 days on average. At a lower
// rate even the second request would be expected after MaxArrival.
const MinRate = 1e-6

// MaxPrefixGroups bounds SyntheticSpec.PrefixGroups: with more groups than this, nearly
// every request of even the largest workload (MaxSyntheticRequests) would have a prefix
// of its own, which is no shared prefix at all.
const MaxPrefixGroups = 1_000_000

// SyntheticSpec describes a synthetic workload. Token counts are in tokens.
type SyntheticSpec struct {
	// ISL and OSL are the input (prompt) and output lengths, drawn per request.
	ISL, OSL Length
	// Rate > 0 (at least MinRate) gives Poisson arrivals of that many requests per
	// second; 0 makes every request arrive at once (a closed loop, paced by the runner's
	// concurrency).
	Rate float64
	// Requests is how many requests Generate builds when Duration is 0.
	Requests int
	// Duration > 0 (with Rate > 0) makes Generate draw arrivals until this offset from
	// the start instead: every request arriving before it. At most MaxArrival.
	Duration time.Duration
	// PrefixGroups > 0 with PrefixTokens > 0 gives the workload a shared prefix: each
	// request falls into one of PrefixGroups groups, drawn uniformly from the seeded
	// random source, and starts with its group's PrefixTokens-token prefix (see
	// Request.PrefixTokens: exactly those tokens are shared, also when the prefix ends
	// inside a block), followed by tokens of its own. Every prompt then has at least
	// PrefixTokens+1 tokens: ISL draws are bounded below there (see Length.Draw).
	// Different groups share no token block. PrefixGroups is at most MaxPrefixGroups.
	PrefixGroups, PrefixTokens int
	// BlockTokens is the number of prompt tokens per hash id.
	BlockTokens int
	// Lora names the LoRA adapters requests run with (none when Lora.Adapters is 0),
	// drawn from a stream of Seed's own: the same spec with and without adapters draws
	// the same arrivals, groups and lengths.
	Lora LoraSpec
	// Seed seeds every random draw: arrivals, groups and lengths, adapters.
	Seed uint64
}

// Check reports what makes s unusable; errors name the field in words.
func (s SyntheticSpec) Check() error {
	switch {
	case s.BlockTokens < 1:
		return fmt.Errorf("bench: block size %d tokens: want at least 1", s.BlockTokens)
	case s.Duration < 0:
		return fmt.Errorf("bench: duration %v: want >= 0", s.Duration)
	case s.Duration > MaxArrival:
		return fmt.Errorf("bench: duration %v: want at most %v (bench.MaxArrival)", s.Duration, MaxArrival)
	case s.Duration == 0 && s.Requests < 1:
		return fmt.Errorf("bench: %d requests: want at least 1", s.Requests)
	case s.Duration == 0 && s.Requests > MaxSyntheticRequests:
		return fmt.Errorf("bench: %d requests: want at most %d", s.Requests, MaxSyntheticRequests)
	case s.Duration > 0 && s.Rate*s.Duration.Seconds() > MaxSyntheticRequests:
		return fmt.Errorf("bench: rate %v requests/s for %v: %.0f requests expected, want at most %d", s.Rate, s.Duration, s.Rate*s.Duration.Seconds(), MaxSyntheticRequests)
	case s.OSL.Min() < 1:
		return fmt.Errorf("bench: output length %s: want at least 1 token", s.OSL)
	case s.ISL.Min() < 1:
		return fmt.Errorf("bench: input length %s: want at least 1 token", s.ISL)
	case s.PrefixGroups < 0 || s.PrefixTokens < 0 || (s.PrefixGroups > 0) != (s.PrefixTokens > 0):
		return fmt.Errorf("bench: shared prefix of %d groups, %d tokens: want both > 0, or both 0", s.PrefixGroups, s.PrefixTokens)
	case s.PrefixGroups > MaxPrefixGroups:
		return fmt.Errorf("bench: %d shared prefix groups: want at most %d", s.PrefixGroups, MaxPrefixGroups)
	}
	if err := checkRate(s.Rate); err != nil {
		return err
	}
	if err := s.Lora.Check(); err != nil {
		return err
	}
	return CheckPrefixFits(s.ISL, s.PrefixTokens)
}

// ErrLateArrival is wrapped by the errors of Synthetic, SyntheticSpec.Generate and Scale
// that refuse an arrival beyond MaxArrival.
var ErrLateArrival = errors.New("arrival beyond bench.MaxArrival")

// checkRate fails unless rate is 0 or a finite number of at least MinRate requests/s.
func checkRate(rate float64) error {
	if !(rate == 0 || rate >= MinRate) || math.IsInf(rate, 0) {
		return fmt.Errorf("bench: rate %v requests/s: want 0 (all at once) or a number from %g", rate, MinRate)
	}
	return nil
}

// CheckPrefixFits fails when a prompt drawn from isl could be shorter than a shared
// prefix of prefixTokens tokens plus one token of its own: a fixed length or a uniform
// MIN must exceed prefixTokens, and so must a normal or log-normal MEAN (their draws are
// then truncated below at prefixTokens+1).
func CheckPrefixFits(isl Length, prefixTokens int) error {
	if prefixTokens <= 0 {
		return nil
	}
	least, what := float64(isl.Min()), "shortest"
	if !isl.Fixed() && isl.kind != lengthUniform {
		least, what = isl.Mean(), "mean"
	}
	if least <= float64(prefixTokens) {
		return fmt.Errorf("bench: input length %s: its %s prompt (%g tokens) is not longer than the shared prefix of %d tokens", isl, what, least, prefixTokens)
	}
	return nil
}

// Generate builds s's workload: s.Requests requests, or with s.Duration every request
// arriving before it. Errors: what Check finds, a Duration without a Rate, and with
// Requests an arrival drawn beyond MaxArrival (the rate is too low for so many
// requests).
func (s SyntheticSpec) Generate() ([]Request, error) {
	if s.Duration > 0 && s.Rate == 0 {
		return nil, errors.New("bench: a synthetic workload of a duration needs a rate (a closed loop of a duration is generated as it is sent: Generator)")
	}
	if err := s.Check(); err != nil {
		return nil, err
	}
	g := newGenerator(s, rand.New(rand.NewPCG(s.Seed, 0)))
	if s.Duration == 0 {
		out := make([]Request, s.Requests)
		for i := range out {
			out[i] = g.Next()
			if _, err := arrivalAt(g.at, i, s.Rate); err != nil {
				return nil, err
			}
		}
		return out, nil
	}
	var out []Request
	for {
		r := g.Next()
		if r.Arrival >= s.Duration {
			return out, nil
		}
		out = append(out, r)
	}
}

// Generator draws s's requests one after the other, without end (s.Requests and
// s.Duration are not read): the source of a closed loop that runs for a duration
// (Runner.RunFor). Its first n requests are Generate's for Requests n.
func (s SyntheticSpec) Generator() (*Generator, error) {
	c := s
	c.Requests, c.Duration = 1, 0
	if err := c.Check(); err != nil {
		return nil, err
	}
	return newGenerator(s, rand.New(rand.NewPCG(s.Seed, 0))), nil
}

// Generator draws a synthetic workload's requests (SyntheticSpec.Generator). It is not
// safe for concurrent use.
type Generator struct {
	spec SyntheticSpec
	rng  *rand.Rand
	ids  *idSource
	// groupBase is the first hash id of the prefix groups: group k's whole blocks are
	// groupBase + k·(groupFull+1) + 0 … groupFull−1, and the id its remainder is
	// synthesized from is the next one (computed, not stored, so that many groups cost
	// no memory).
	groupBase int64
	groupFull int64   // whole blocks of a group's prefix
	at        float64 // seconds: the last arrival
	n         int     // requests drawn
	lora      *loraPicker
}

// newGenerator draws from rng (nil only when s draws nothing: fixed lengths, no rate and
// at most one prefix group).
func newGenerator(s SyntheticSpec, rng *rand.Rand) *Generator {
	g := &Generator{spec: s, rng: rng, ids: newIDSource(), lora: s.Lora.picker(s.Seed)}
	if s.PrefixGroups > 0 {
		g.groupBase, g.groupFull = g.ids.n, int64(s.PrefixTokens/s.BlockTokens)
		g.ids.n += int64(s.PrefixGroups) * (g.groupFull + 1) // the ids of the groups
	}
	return g
}

// Next draws the next request. Random draws, in this order and only where the spec asks
// for them: the arrival gap, the prefix group, the input length, the output length; and
// from the adapters' stream its LoRA adapter (LoraSpec). An
// arrival beyond time.Duration's range (a very low rate) saturates at its maximum;
// Generate refuses arrivals beyond MaxArrival.
func (g *Generator) Next() Request {
	s := g.spec
	if s.Rate > 0 && g.n > 0 {
		g.at += g.rng.ExpFloat64() / s.Rate
	}
	g.n++
	r := Request{Arrival: time.Duration(math.MaxInt64)}
	if ns := g.at * float64(time.Second); ns < math.MaxInt64 {
		r.Arrival = time.Duration(ns)
	}
	group := int64(-1)
	switch s.PrefixGroups {
	case 0:
	case 1:
		group = 0
	default:
		group = int64(g.rng.IntN(s.PrefixGroups))
	}
	lo := 1
	if group >= 0 {
		lo = s.PrefixTokens + 1
	}
	r.InputLength = s.ISL.Draw(g.rng, lo)
	r.OutputLength = s.OSL.Draw(g.rng, 1)
	r.Lora = g.lora.next()
	blocks := (r.InputLength + s.BlockTokens - 1) / s.BlockTokens
	if group < 0 {
		r.HashIDs = g.ids.next(r.InputLength, s.BlockTokens)
		return r
	}
	first := g.groupBase + group*(g.groupFull+1)
	r.PrefixTokens, r.PrefixID = s.PrefixTokens, first+g.groupFull
	r.HashIDs = make([]int64, 0, blocks)
	for k := range g.groupFull {
		r.HashIDs = append(r.HashIDs, first+k)
	}
	r.HashIDs = append(r.HashIDs, g.ids.next((blocks-int(g.groupFull))*s.BlockTokens, s.BlockTokens)...)
	return r
}
