package planner

import (
	"fmt"
	"time"
)

// Pool is one pool of workers the planner sizes.
type Pool int

const (
	PoolAggregated Pool = iota // workers that prefill and decode
	PoolPrefill                // prefill workers of xPyD
	PoolDecode                 // decode workers of xPyD
)

// Pools lists every pool, in this order.
var Pools = []Pool{PoolAggregated, PoolPrefill, PoolDecode}

// String is the pool's name, the worker role it holds: "aggregated", "prefill", "decode".
func (p Pool) String() string {
	switch p {
	case PoolAggregated:
		return "aggregated"
	case PoolPrefill:
		return "prefill"
	case PoolDecode:
		return "decode"
	}
	return fmt.Sprintf("Pool(%d)", int(p))
}

// ParsePool reads a pool (worker role) name.
func ParsePool(s string) (Pool, error) {
	for _, p := range Pools {
		if p.String() == s {
			return p, nil
		}
	}
	return 0, fmt.Errorf("planner: pool %q, want aggregated, prefill or decode", s)
}

// Mode is how the planner decides.
type Mode int

const (
	// ModeLoad scales from the workers' own load (KV usage, queued prefill tokens), every
	// few seconds, one step at a time; no profile needed.
	ModeLoad Mode = iota + 1
	// ModeSLA sizes the pools every interval from the observed load, its prediction and
	// the profile, so that TTFT and ITL meet their targets.
	ModeSLA
)

// String is "load" or "sla".
func (m Mode) String() string {
	switch m {
	case ModeLoad:
		return "load"
	case ModeSLA:
		return "sla"
	}
	return fmt.Sprintf("Mode(%d)", int(m))
}

// ParseMode reads "load" or "sla".
func ParseMode(s string) (Mode, error) {
	switch s {
	case "load":
		return ModeLoad, nil
	case "sla":
		return ModeSLA, nil
	}
	return 0, fmt.Errorf("planner: mode %q, want load or sla", s)
}

// Observation is what the frontends measured over one window (their reports merged).
type Observation struct {
	Start    time.Time
	Duration time.Duration
	// Frontends is the number of frontends whose reports were merged; 0 means no data
	// came (missing metrics: the planner holds the current size).
	Frontends  int
	Requests   int     // requests that ended in the window
	ISLMean    float64 // mean prompt tokens of those requests
	OSLMean    float64 // mean output tokens
	TTFTP90Ms  float64 // p90 time to first token, ms (0 with no request)
	ITLP90Ms   float64 // p90 inter-token latency, ms
	QueueP90Ms float64 // p90 time a request waited before its engine started it, ms
}

// WorkerLoad is one worker's load as the Router grain tracks it (load mode).
type WorkerLoad struct {
	WorkerID            string
	Pool                Pool
	Ready               bool
	KVUsage             float64 // engine KV usage, [0, 1]
	ActivePrefillTokens int     // prompt tokens routed and not yet prefilled
	Running, Waiting    int     // the engine's sequences
}

// Fleet is the pools as the connector sees them now.
type Fleet struct {
	Ready    map[Pool]int // serving
	Starting map[Pool]int // asked for and not ready yet
	Stopping map[Pool]int // draining or stopping
}

// Term is one named figure of a decision's formula.
type Term struct {
	Name  string // e.g. "prefill_throughput_per_gpu"
	Value float64
	Unit  string // e.g. "tokens/s"
}

// Decision is one planning step, explained: the figures it started from, the
// prediction, the formula's terms, what the formula wanted per pool and what was asked
// after the clamps (each clamp said in words).
type Decision struct {
	At          time.Time
	Mode        Mode
	Observation Observation
	// Predicted load of the next interval: requests in it, mean ISL and OSL.
	PredictedRequests, PredictedISL, PredictedOSL float64
	// Correction factors against the profile: observed / expected TTFT (p) and ITL (d)
	// that the SLA mode's formula used (1 until a window with requests measured them);
	// 0 in load mode, which uses none.
	CorrectionPrefill, CorrectionDecode float64
	Terms                               []Term
	Wanted                              map[Pool]int // the formula's replicas, before clamps
	Target                              map[Pool]int // what the connector is asked for
	Clamps                              []string     // e.g. "decode: 5 → 4: GPU budget 8"
	// Held is true when no pool changes and at least one is held at its current size
	// (missing data, a step in progress, stabilisation); Reason then starts "held: ".
	Held bool
	// Reason says, for every pool in use, what the decision does and why, pools joined
	// by "; ": "aggregated 2 → 3: every worker at or over its queued-prefill threshold
	// (20000 tokens)", "decode stays at 2: the load needs 1.73 engines", or for a held
	// pool "prefill: stabilisation: …", "decode: a step in progress (…)",
	// "aggregated: missing data (…)". The why is the rule's, or that of the last clamp
	// that changed the pool's target (Clamps lists them all).
	Reason string
}
