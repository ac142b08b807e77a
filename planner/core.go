package planner

import (
	"errors"
	"time"
)

// Config configures a Planner. Defaults (DefaultConfig) follow docs/reference.md §27.2.
type Config struct {
	Mode Mode
	// Interval is the SLA mode's adjustment interval; LoadInterval the load mode's period.
	Interval, LoadInterval time.Duration
	// Targets: TTFT and ITL p90 in ms.
	TTFTTargetMs, ITLTargetMs float64
	// GPUBudget bounds the GPUs of all pools together (replicas × GPUsPerEngine).
	GPUBudget int
	// MinWorkers is the least each pool in use keeps (at least 1).
	MinWorkers int
	// Disaggregated: the pools are prefill and decode; otherwise the aggregated pool.
	Disaggregated bool
	// GPUsPerEngine is each pool's tensor-parallel size (GPUs per worker, ≥ 1; a mock
	// worker without a GPU counts 1).
	GPUsPerEngine map[Pool]int
	// Predictor names the load predictor (PredictorNames).
	Predictor string
	// Stabilization: a scale-down happens only when every decision within this window
	// wanted at most the new size.
	Stabilization time.Duration
	// Profile is the engine profile (required in SLA mode); BlockSize comes from it.
	Profile *Profile
}

// Planner is the planner's state for one model: past observations, the predictor, the
// recent decisions. Not safe for concurrent use.
type Planner struct {
	cfg  Config
	last Decision
}

// New checks cfg and returns a planner. Errors name the field.
func New(cfg Config) (*Planner, error) {
	if cfg.Mode != ModeLoad && cfg.Mode != ModeSLA {
		return nil, errors.New("planner: mode must be load or sla")
	}
	return &Planner{cfg: cfg}, nil
}

// Config returns the planner's configuration (targets as last set).
func (p *Planner) Config() Config { return p.cfg }

// Observe records one window of the frontends' measurements (SLA mode; load mode keeps
// them for the explanation).
func (p *Planner) Observe(o Observation) {}

// Decide plans at now for the fleet as it is, with the workers' loads (load mode).
func (p *Planner) Decide(now time.Time, fleet Fleet, loads []WorkerLoad) Decision {
	d := Decision{At: now, Mode: p.cfg.Mode, Held: true, Reason: "not implemented", Target: map[Pool]int{}}
	for pool, n := range fleet.Ready {
		d.Target[pool] = n + fleet.Starting[pool]
	}
	p.last = d
	return d
}

// Last is the latest decision (zero before the first).
func (p *Planner) Last() Decision { return p.last }

// SetTargets changes the targets and the GPU budget at run time; a zero argument keeps
// its value. Errors: a negative or non-finite value.
func (p *Planner) SetTargets(ttftMs, itlMs float64, gpuBudget int) error {
	if ttftMs > 0 {
		p.cfg.TTFTTargetMs = ttftMs
	}
	if itlMs > 0 {
		p.cfg.ITLTargetMs = itlMs
	}
	if gpuBudget > 0 {
		p.cfg.GPUBudget = gpuBudget
	}
	return nil
}
