package planner

import "time"

// Defaults of the planner core, in one place (docs/reference.md §27.2, §27.3). Flags,
// the Planner grain and the docs read them from here; New fills a Config's zero fields
// from DefaultConfig.
const (
	// DefaultMode: load mode needs no profile, so it is what a planner does when asked
	// for nothing else.
	DefaultMode = ModeLoad
	// DefaultTTFTTargetMs and DefaultITLTargetMs: the p90 targets (the reference's).
	DefaultTTFTTargetMs = 500.0
	DefaultITLTargetMs  = 50.0
	// DefaultGPUBudget bounds the GPUs of all pools together (the reference's 8).
	DefaultGPUBudget = 8
	// DefaultMinWorkers is the least each pool in use keeps (the reference's 1).
	DefaultMinWorkers = 1
	// DefaultInterval is the SLA mode's adjustment interval. The reference planner uses
	// 180 s, sized for real engines that take minutes to load their weights. A mock
	// engine is ready in about a second and a real engine on a warm node in tens of
	// seconds, and the load ramps this project replays swing several-fold within minutes:
	// a 180 s interval would spend each swing at the old size. 30 s still holds hundreds
	// of requests at a few requests per second, enough for a stable p90, and lets three
	// intervals of stabilisation fit in a minute and a half.
	DefaultInterval = 30 * time.Second
	// DefaultLoadInterval is the load mode's period: one step at most per pool per period.
	DefaultLoadInterval = 5 * time.Second
	// DefaultStabilizationIntervals: the scale-down stabilisation window is this many of
	// the mode's periods (Interval in SLA mode, LoadInterval in load mode) when
	// Config.Stabilization is zero. Three decisions must agree before a pool shrinks.
	DefaultStabilizationIntervals = 3
	// DefaultStepTimeout: a pool whose scale step (workers starting or stopping) has not
	// finished after this long is no longer held for it, so a stuck start cannot pin the
	// pool (a stuck scale-up would otherwise block every later scale-down). Real engines
	// load weights in minutes; ten is ample.
	DefaultStepTimeout = 10 * time.Minute
	// DefaultPredictor is the load predictor of a Planner: the Kalman filter. On the
	// Azure conversation trace's arrivals in 30 s intervals it forecasts as well as the
	// last value (mean error 16.3 against 16.6 requests), on the same arrivals swung
	// 1×–6× (the planner benchmark's ramp) better (72 against 77) and it under-forecasts
	// the peaks least; it is exact on a ramp, where the last value lags a step, and
	// smooths noise (docs/reference.md §27.3, TestPredictorsOnAzureTrace).
	DefaultPredictor = PredictorKalman
	// DefaultCorrectionMin and DefaultCorrectionMax bound the correction factors
	// (observed / expected TTFT and ITL): a factor outside them says more about a broken
	// measurement than about the engine.
	DefaultCorrectionMin = 0.25
	DefaultCorrectionMax = 4.0
	// DefaultKVUsageTarget: load mode adds a decode (or aggregated) worker when every
	// ready one uses at least this fraction of its KV cache.
	DefaultKVUsageTarget = 0.8
	// DefaultScaleDownRatio: load mode removes a worker only when the pool's whole load
	// spread over one worker fewer stays under this fraction of its thresholds; SLA mode
	// shrinks a pool only to a size its load fills to at most this fraction (hysteresis
	// against flapping at a boundary).
	DefaultScaleDownRatio = 0.8
	// DefaultPrefillTokensPerSec is the prefill rate of one engine (tokens/s) that load
	// mode assumes without a profile: the reference mock engine (docs/reference.md §7)
	// prefills 2,048-token steps at about 41,000 tokens/s and 8,192-token ones at about
	// 48,000; the lower figure errs towards more prefill workers.
	DefaultPrefillTokensPerSec = 40000.0
	// DefaultMinPrefillUtilisation and DefaultMaxPrefillUtilisation bound the
	// utilisation the SLA mode sizes prefill to (1 − TTFT(ISL)/target, §27.2): the lower
	// bound when the target is out of reach, the upper one leaves room for bursts when
	// the target is far above a prompt's own TTFT.
	DefaultMinPrefillUtilisation = 0.25
	DefaultMaxPrefillUtilisation = 0.9

	// Built-in predictors' options (PredictorOptions).
	DefaultMovingAverageWindow = 4
	DefaultHoltAlpha           = 0.5
	DefaultHoltBeta            = 0.3
	DefaultARIMAOrder          = 2
	DefaultARIMAFitWindow      = 12
	DefaultKalmanLevelNoise    = 1.0  // chosen on the Azure trace; 0.5–2 do within 3 %
	DefaultKalmanTrendNoise    = 0.01 // likewise 0.005–0.01
)

// DefaultConfig returns the configuration New fills zero fields from: load mode,
// aggregated serving, one GPU per engine, the targets and periods above, no profile.
func DefaultConfig() Config {
	return Config{
		Mode:                DefaultMode,
		Interval:            DefaultInterval,
		LoadInterval:        DefaultLoadInterval,
		TTFTTargetMs:        DefaultTTFTTargetMs,
		ITLTargetMs:         DefaultITLTargetMs,
		GPUBudget:           DefaultGPUBudget,
		MinWorkers:          DefaultMinWorkers,
		GPUsPerEngine:       map[Pool]int{PoolAggregated: 1, PoolPrefill: 1, PoolDecode: 1},
		Predictor:           DefaultPredictor,
		StepTimeout:         DefaultStepTimeout,
		CorrectionMin:       DefaultCorrectionMin,
		CorrectionMax:       DefaultCorrectionMax,
		KVUsageTarget:       DefaultKVUsageTarget,
		ScaleDownRatio:      DefaultScaleDownRatio,
		PrefillTokensPerSec: DefaultPrefillTokensPerSec,
	}
}
