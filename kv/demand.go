package kv

import (
	"math"
	"slices"
	"time"
)

// Defaults of the prefix demand (docs/reference.md §3.6, "The replica credit").
const (
	// DemandHalfLife: a request counts toward its prefix's demand with weight
	// 2^(−age/DemandHalfLife); at a steady λ requests/s the demand tends to
	// λ·DemandHalfLife/ln 2.
	DemandHalfLife = 10 * time.Second
	// demandMax: past it, a sweep drops the weakest half of the prefixes tracked; sweeps
	// come as the table doubles, so it holds at most about 2·demandMax.
	demandMax = 1 << 16
	// demandFloor: a prefix whose decayed count falls below it is forgotten.
	demandFloor = 0.05
)

// prefixDemand counts, per prefix, the requests routed recently whose longest prefix
// hit ended at that prefix's last block (keyed by its sequence hash), each count decaying
// with DemandHalfLife: how many requests draw on a copy of the prefix, as opposed to the
// requests in flight on it. A conversation's turns each end their hit at a different
// block (the history grows), so each counts once; the requests on a shared system prompt
// all end theirs at its last block. Time comes in as durations on the router's clock;
// not safe for concurrent use.
type prefixDemand struct {
	m     map[uint64]demandCount
	swept int // len(m) after the last sweep
}

type demandCount struct {
	n  float64       // the decayed count at at
	at time.Duration // when n was last brought up to date
}

// decay is 2^(−d/DemandHalfLife), 1 for d ≤ 0.
func decay(d time.Duration) float64 {
	if d <= 0 {
		return 1
	}
	return math.Exp2(-float64(d) / float64(DemandHalfLife))
}

// note returns the decayed count of the requests on prefix key before now (0 for a
// prefix not seen recently), and with count counts one more at now. A clock that
// stepped back restarts the decay from now.
func (p *prefixDemand) note(key uint64, now time.Duration, count bool) float64 {
	c, ok := p.m[key]
	before := c.n * decay(now-c.at)
	if !count {
		return before
	}
	if p.m == nil {
		p.m = make(map[uint64]demandCount)
	}
	p.m[key] = demandCount{n: before + 1, at: now}
	if !ok && len(p.m) > max(2*p.swept, 1024) {
		p.sweep(now)
	}
	return before
}

// sweep forgets the prefixes whose count has decayed below demandFloor, then, past
// demandMax, the weakest half.
func (p *prefixDemand) sweep(now time.Duration) {
	for k, c := range p.m {
		if c.n*decay(now-c.at) < demandFloor {
			delete(p.m, k)
		}
	}
	if len(p.m) > demandMax {
		// The weakest go first: a threshold at the median of a sample.
		var sample [257]float64
		i := 0
		for _, c := range p.m {
			if i == len(sample) {
				break
			}
			sample[i] = c.n * decay(now-c.at)
			i++
		}
		s := sample[:i]
		slices.Sort(s)
		med := s[len(s)/2]
		for k, c := range p.m {
			if c.n*decay(now-c.at) <= med {
				delete(p.m, k)
			}
		}
	}
	p.swept = len(p.m)
}
