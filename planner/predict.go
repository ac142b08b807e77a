package planner

import (
	"fmt"
	"math"
	"sort"
)

// Predictor forecasts the next value of a series sampled once per planning interval: the
// requests of the next interval, or their mean ISL or OSL (docs/reference.md §27.3). A
// Planner keeps one instance per series. Predictors are pure: no clock, no randomness;
// not safe for concurrent use.
//
// A predictor built by Registry.New is guarded: Add ignores NaN and ±Inf, and Predict is
// never negative (0 before the first sample; the last sample if the model's forecast is
// not finite).
type Predictor interface {
	// Add appends one sample (finite; the guard drops others).
	Add(v float64)
	// Predict forecasts the next sample.
	Predict() float64
}

// PredictorOptions tunes the built-in predictors; a zero field takes its default
// (defaults.go), a negative or out-of-range one is an error naming the option.
type PredictorOptions struct {
	// Window: samples a "moving-average" averages (≥ 1).
	Window int
	// Alpha and Beta: "holt"'s level and trend smoothing, each in (0, 1].
	Alpha, Beta float64
	// Order (p ≥ 1) and FitWindow (samples, ≥ 2p+2): "arima" fits AR(p) with drift to the
	// first differences of the last FitWindow samples.
	Order, FitWindow int
	// LevelNoise and TrendNoise: "kalman"'s process noise variances per interval, as
	// multiples of the measurement noise variance (> 0). Larger follows faster.
	LevelNoise, TrendNoise float64
}

// withDefaults fills zero options from the defaults.
func (o PredictorOptions) withDefaults() PredictorOptions {
	fill := func(v *float64, d float64) {
		if *v == 0 {
			*v = d
		}
	}
	if o.Window == 0 {
		o.Window = DefaultMovingAverageWindow
	}
	if o.Order == 0 {
		o.Order = DefaultARIMAOrder
	}
	if o.FitWindow == 0 {
		o.FitWindow = max(DefaultARIMAFitWindow, 2*o.Order+2)
	}
	fill(&o.Alpha, DefaultHoltAlpha)
	fill(&o.Beta, DefaultHoltBeta)
	fill(&o.LevelNoise, DefaultKalmanLevelNoise)
	fill(&o.TrendNoise, DefaultKalmanTrendNoise)
	return o
}

// validate checks every option, whichever predictor uses it.
func (o PredictorOptions) validate() error {
	unit := func(name string, v float64) error {
		if !(v > 0 && v <= 1) {
			return fmt.Errorf("%w: PredictorOptions.%s %v, want (0, 1]", ErrInvalidConfig, name, v)
		}
		return nil
	}
	pos := func(name string, v float64) error {
		if !(v > 0) || math.IsInf(v, 0) {
			return fmt.Errorf("%w: PredictorOptions.%s %v, want finite and > 0", ErrInvalidConfig, name, v)
		}
		return nil
	}
	switch {
	case o.Window < 1:
		return fmt.Errorf("%w: PredictorOptions.Window %d, want ≥ 1", ErrInvalidConfig, o.Window)
	case o.Order < 1 || o.Order > 8:
		return fmt.Errorf("%w: PredictorOptions.Order %d, want 1..8", ErrInvalidConfig, o.Order)
	case o.FitWindow < 2*o.Order+2 || o.FitWindow > 1024:
		return fmt.Errorf("%w: PredictorOptions.FitWindow %d, want %d..1024 (2·Order+2 at least)", ErrInvalidConfig, o.FitWindow, 2*o.Order+2)
	}
	for _, err := range []error{unit("Alpha", o.Alpha), unit("Beta", o.Beta), pos("LevelNoise", o.LevelNoise), pos("TrendNoise", o.TrendNoise)} {
		if err != nil {
			return err
		}
	}
	return nil
}

// PredictorFactory builds a fresh predictor from options already defaulted and checked.
type PredictorFactory func(PredictorOptions) (Predictor, error)

// Names of the built-in predictors.
const (
	PredictorConstant      = "constant"
	PredictorMovingAverage = "moving-average"
	PredictorHolt          = "holt"
	PredictorARIMA         = "arima"
	PredictorKalman        = "kalman"
)

// Registry maps predictor names to factories. It is a plain value: build one with
// NewRegistry or DefaultPredictors, register more, hand it to a Planner (Config.
// Predictors). Registering a name twice is an error (ErrDuplicatePredictor).
type Registry struct {
	factories map[string]PredictorFactory
}

// NewRegistry returns an empty registry.
func NewRegistry() *Registry { return &Registry{factories: map[string]PredictorFactory{}} }

// DefaultPredictors returns a new registry holding the built-in predictors: "constant"
// (the last sample), "moving-average" (mean of the last Window), "holt" (double
// exponential smoothing), "arima" (AR(p) with drift on first differences, least squares)
// and "kalman" (local linear trend Kalman filter).
func DefaultPredictors() *Registry {
	r := NewRegistry()
	for name, f := range map[string]PredictorFactory{
		PredictorConstant:      func(PredictorOptions) (Predictor, error) { return &constantPredictor{}, nil },
		PredictorMovingAverage: func(o PredictorOptions) (Predictor, error) { return &movingAverage{window: o.Window}, nil },
		PredictorHolt:          func(o PredictorOptions) (Predictor, error) { return &holt{alpha: o.Alpha, beta: o.Beta}, nil },
		PredictorARIMA:         func(o PredictorOptions) (Predictor, error) { return &arima{order: o.Order, fit: o.FitWindow}, nil },
		PredictorKalman:        func(o PredictorOptions) (Predictor, error) { return newKalman(o.LevelNoise, o.TrendNoise), nil },
	} {
		if err := r.Register(name, f); err != nil {
			panic(err)
		}
	}
	return r
}

// PredictorNames lists the built-in predictors' names, sorted.
func PredictorNames() []string { return DefaultPredictors().Names() }

// Register adds a factory under name. Errors: an empty name or nil factory
// (ErrInvalidConfig), a name already registered (ErrDuplicatePredictor).
func (r *Registry) Register(name string, f PredictorFactory) error {
	if name == "" || f == nil {
		return fmt.Errorf("%w: predictor name %q or factory missing", ErrInvalidConfig, name)
	}
	if _, ok := r.factories[name]; ok {
		return fmt.Errorf("%w: %q", ErrDuplicatePredictor, name)
	}
	r.factories[name] = f
	return nil
}

// New builds the predictor registered under name with opts (zero fields defaulted),
// guarded (see Predictor). Errors: ErrUnknownPredictor (listing the names registered),
// ErrInvalidConfig for a bad option.
func (r *Registry) New(name string, opts PredictorOptions) (Predictor, error) {
	f, ok := r.factories[name]
	if !ok {
		return nil, fmt.Errorf("%w: Predictor %q (registered: %v)", ErrUnknownPredictor, name, r.Names())
	}
	opts = opts.withDefaults()
	if err := opts.validate(); err != nil {
		return nil, err
	}
	p, err := f(opts)
	if err != nil {
		return nil, fmt.Errorf("planner: predictor %q: %w", name, err)
	}
	return &guarded{p: p}, nil
}

// Names lists the registered names, sorted.
func (r *Registry) Names() []string {
	names := make([]string, 0, len(r.factories))
	for n := range r.factories {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

func isFinite(v float64) bool { return !math.IsNaN(v) && !math.IsInf(v, 0) }

// guarded enforces the Predictor contract around any implementation.
type guarded struct {
	p    Predictor
	last float64
	n    int
}

func (g *guarded) Add(v float64) {
	if !isFinite(v) {
		return
	}
	g.p.Add(v)
	g.last, g.n = v, g.n+1
}

func (g *guarded) Predict() float64 {
	if g.n == 0 {
		return 0
	}
	v := g.p.Predict()
	if !isFinite(v) {
		v = g.last
	}
	return math.Max(0, v)
}

// constantPredictor forecasts the last sample.
type constantPredictor struct{ last float64 }

func (c *constantPredictor) Add(v float64)    { c.last = v }
func (c *constantPredictor) Predict() float64 { return c.last }

// movingAverage forecasts the mean of the last window samples (fewer at first).
type movingAverage struct {
	window int
	buf    []float64 // ring of the last window samples
	next   int
}

func (m *movingAverage) Add(v float64) {
	if len(m.buf) < m.window {
		m.buf = append(m.buf, v)
		return
	}
	m.buf[m.next] = v
	m.next = (m.next + 1) % m.window
}

func (m *movingAverage) Predict() float64 {
	if len(m.buf) == 0 {
		return 0
	}
	s := 0.0
	for _, v := range m.buf {
		s += v
	}
	return s / float64(len(m.buf))
}

// holt is Holt's linear (double exponential) smoothing: a level and a trend, each
// smoothed; the forecast is level + trend. The first sample sets the level, the second
// the trend.
type holt struct {
	alpha, beta  float64
	level, trend float64
	n            int
}

func (h *holt) Add(v float64) {
	switch h.n {
	case 0:
		h.level = v
	case 1:
		h.trend, h.level = v-h.level, v
	default:
		prev := h.level
		h.level = h.alpha*v + (1-h.alpha)*(h.level+h.trend)
		h.trend = h.beta*(h.level-prev) + (1-h.beta)*h.trend
	}
	h.n++
}

func (h *holt) Predict() float64 { return h.level + h.trend }

// arima is an ARIMA(p,1,0) model with drift refitted at every forecast: over the last
// fit samples, the first differences Δ_t are regressed on a constant and Δ_{t-1} …
// Δ_{t-p} by least squares (a tiny ridge keeps a constant or linear series solvable);
// the forecast is the last sample plus the predicted difference, the latter bounded by
// the largest difference in the window so that an unstable fit cannot run away. With too
// few samples for a fit it forecasts the last sample plus the mean difference (drift).
type arima struct {
	order, fit int
	xs         []float64 // the last fit samples, oldest first
}

func (a *arima) Add(v float64) {
	a.xs = append(a.xs, v)
	if len(a.xs) > a.fit {
		a.xs = a.xs[len(a.xs)-a.fit:]
	}
}

func (a *arima) Predict() float64 {
	n := len(a.xs)
	if n == 0 {
		return 0
	}
	last := a.xs[n-1]
	if n == 1 {
		return last
	}
	d := make([]float64, n-1)
	maxAbs, mean := 0.0, 0.0
	for i := range d {
		d[i] = a.xs[i+1] - a.xs[i]
		maxAbs = math.Max(maxAbs, math.Abs(d[i]))
		mean += d[i]
	}
	mean /= float64(len(d))
	p := a.order
	rows := len(d) - p
	if rows < p+1 {
		return last + mean
	}
	// Normal equations of y_t = c + Σ φ_i Δ_{t-i}, t = p .. len(d)-1.
	k := p + 1
	ata := make([][]float64, k)
	for i := range ata {
		ata[i] = make([]float64, k)
	}
	atb := make([]float64, k)
	row := make([]float64, k)
	for t := p; t < len(d); t++ {
		row[0] = 1
		for i := 1; i <= p; i++ {
			row[i] = d[t-i]
		}
		for i := 0; i < k; i++ {
			atb[i] += row[i] * d[t]
			for j := 0; j < k; j++ {
				ata[i][j] += row[i] * row[j]
			}
		}
	}
	scale := 0.0
	for i := 0; i < k; i++ {
		scale = math.Max(scale, ata[i][i])
	}
	for i := 0; i < k; i++ {
		ata[i][i] += 1e-9 * (1 + scale)
	}
	coef, ok := solveLinear(ata, atb)
	if !ok {
		return last + mean
	}
	next := coef[0]
	for i := 1; i <= p; i++ {
		next += coef[i] * d[len(d)-i]
	}
	next = math.Max(-maxAbs, math.Min(maxAbs, next))
	return last + next
}

// solveLinear solves a·x = b for a small square system by Gaussian elimination with partial
// pivoting (a and b are overwritten); ok is false when a is singular.
func solveLinear(a [][]float64, b []float64) (x []float64, ok bool) {
	n := len(b)
	for c := 0; c < n; c++ {
		piv := c
		for r := c + 1; r < n; r++ {
			if math.Abs(a[r][c]) > math.Abs(a[piv][c]) {
				piv = r
			}
		}
		if a[piv][c] == 0 {
			return nil, false
		}
		a[c], a[piv] = a[piv], a[c]
		b[c], b[piv] = b[piv], b[c]
		for r := c + 1; r < n; r++ {
			f := a[r][c] / a[c][c]
			for j := c; j < n; j++ {
				a[r][j] -= f * a[c][j]
			}
			b[r] -= f * b[c]
		}
	}
	x = make([]float64, n)
	for r := n - 1; r >= 0; r-- {
		s := b[r]
		for j := r + 1; j < n; j++ {
			s -= a[r][j] * x[j]
		}
		x[r] = s / a[r][r]
	}
	return x, true
}

// kalman is the Kalman filter of the local linear trend model: level_{t+1} = level_t +
// trend_t + η, trend_{t+1} = trend_t + ζ, sample_t = level_t + ε, with Var η and Var ζ
// given as multiples (qLevel, qTrend) of Var ε. Only these ratios shape the gains, so
// the filter needs no knowledge of the series' scale. The first sample sets the level
// (its variance that of ε) with the trend unknown (a large variance), so the second
// sample sets the trend; from there the gains converge to the steady state, which equals
// Holt's smoothing with matching constants — the filter's edge over Holt is the optimal
// weighting of the first samples. The forecast is level + trend.
type kalman struct {
	qLevel, qTrend float64
	level, trend   float64
	p              [2][2]float64 // state covariance, in units of Var ε
	n              int
}

func newKalman(qLevel, qTrend float64) *kalman { return &kalman{qLevel: qLevel, qTrend: qTrend} }

// kalmanTrendPrior is the first trend's variance, in units of Var ε: unknown.
const kalmanTrendPrior = 1e6

func (k *kalman) Add(v float64) {
	if k.n == 0 {
		k.level, k.trend = v, 0
		k.p = [2][2]float64{{1, 0}, {0, kalmanTrendPrior}}
		k.n++
		return
	}
	// Predict: x = F x, P = F P Fᵀ + Q with F = [[1 1] [0 1]].
	l, b := k.level+k.trend, k.trend
	p := k.p
	p00 := p[0][0] + p[0][1] + p[1][0] + p[1][1] + k.qLevel
	p01 := p[0][1] + p[1][1]
	p11 := p[1][1] + k.qTrend
	// Update with H = [1 0], R = 1.
	s := p00 + 1
	k0, k1 := p00/s, p01/s
	innov := v - l
	k.level, k.trend = l+k0*innov, b+k1*innov
	k.p = [2][2]float64{
		{(1 - k0) * p00, (1 - k0) * p01},
		{(1 - k0) * p01, p11 - k1*p01},
	}
	k.n++
}

func (k *kalman) Predict() float64 { return k.level + k.trend }
