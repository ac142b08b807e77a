package frontend

import "time"

// Predicted against delivered prefix-cache hits (docs/reference.md §3.2). For every leg
// that finishes normally, the router's prediction — the overlap its KV index gave the
// worker it chose, in tokens — is compared with the cached tokens the worker's engine
// reports on the leg's last chunk (usage prompt_tokens_details.cached_tokens). A
// sustained shortfall means the router believes in blocks the engine does not hold: its
// index drifted, KV events were lost, or the router hashes other tokens than the engine
// caches (a chat template or tokenizer mismatch). hitGapDetector decides, per model and
// worker, when such a gap opens and closes; it is pure (time is an argument) and the
// Backend's recorder turns its changes into a log line and a gauge.

// Defaults of hitGapConfig.
const (
	// DefaultHitGapWindow is how many of a worker's latest requests the window holds.
	DefaultHitGapWindow = 64
	// DefaultHitGapMaxAge is how long a request stays in the window.
	DefaultHitGapMaxAge = 60 * time.Second
	// DefaultHitGapTolerance: a gap is open while the window's delivered tokens are below
	// (1 − tolerance) × its predicted tokens.
	DefaultHitGapTolerance = 0.2
	// DefaultHitGapMinPredicted is the predicted tokens a window needs before it is
	// judged: a few short prompts say nothing.
	DefaultHitGapMinPredicted = 4096
	// DefaultHitGapMinRequests is the requests a window needs before it is judged: one
	// request can miss what the router predicted for a reason of its own (it was scheduled
	// in the same engine step as the request that computes the shared prefix).
	DefaultHitGapMinRequests = 8
)

// hitGapConfig are the detector's knobs; zero fields take the defaults above.
type hitGapConfig struct {
	Window       int           // requests per worker
	MaxAge       time.Duration // a request older than this leaves the window
	Tolerance    float64       // 0..1
	MinPredicted int64         // tokens
	MinRequests  int           // requests in the window
}

func (c hitGapConfig) withDefaults() hitGapConfig {
	if c.Window <= 0 {
		c.Window = DefaultHitGapWindow
	}
	if c.MaxAge <= 0 {
		c.MaxAge = DefaultHitGapMaxAge
	}
	if c.Tolerance <= 0 || c.Tolerance >= 1 {
		c.Tolerance = DefaultHitGapTolerance
	}
	if c.MinPredicted <= 0 {
		c.MinPredicted = DefaultHitGapMinPredicted
	}
	if c.MinRequests <= 0 {
		c.MinRequests = DefaultHitGapMinRequests
	}
	return c
}

// hitGapDetector keeps, per (model, worker), a sliding window of the latest requests'
// predicted and delivered cached tokens: at most Window requests, none older than
// MaxAge. A window is judged once its predicted tokens reach MinPredicted: the gap
// opens when delivered < (1 − Tolerance) × predicted, and closes when that no longer
// holds; a window with too few predicted tokens keeps its state. Each request's
// delivered tokens count up to its prediction only, so an engine that found more than
// the router knew of (events in flight) does not hide another request's shortfall.
// Not safe for concurrent use.
type hitGapDetector struct {
	cfg     hitGapConfig
	windows map[hitGapKey]*hitGapWindow
}

type hitGapKey struct{ model, worker string }

type hitGapObs struct {
	at                   time.Time
	predicted, delivered int64
}

// hitGapWindow is one worker's window: obs[head:] oldest first, and their sums.
type hitGapWindow struct {
	obs                  []hitGapObs
	head                 int
	predicted, delivered int64
	open                 bool
}

// hitGapChange is what one observation did to its worker's window.
type hitGapChange struct {
	// Opened: the gap opened with this request; Closed: it closed.
	Opened, Closed bool
	// Open: the gap is open after this request.
	Open bool
	// The window after this request: requests, predicted and delivered tokens (each
	// request's delivered counted up to its prediction).
	Requests             int
	Predicted, Delivered int64
}

func newHitGapDetector(cfg hitGapConfig) *hitGapDetector {
	return &hitGapDetector{cfg: cfg.withDefaults(), windows: map[hitGapKey]*hitGapWindow{}}
}

// observe adds one request of model served by worker at now: predicted and delivered
// cached tokens (negative values count as 0). now should not go backwards; if it does,
// requests only leave the window later.
func (d *hitGapDetector) observe(now time.Time, model, worker string, predicted, delivered int64) hitGapChange {
	predicted = max(predicted, 0)
	delivered = min(max(delivered, 0), predicted)
	k := hitGapKey{model, worker}
	w := d.windows[k]
	if w == nil {
		w = &hitGapWindow{}
		d.windows[k] = w
	}
	w.obs = append(w.obs, hitGapObs{at: now, predicted: predicted, delivered: delivered})
	w.predicted += predicted
	w.delivered += delivered
	for len(w.obs)-w.head > d.cfg.Window || now.Sub(w.obs[w.head].at) > d.cfg.MaxAge {
		o := w.obs[w.head]
		w.obs[w.head] = hitGapObs{}
		w.head++
		w.predicted -= o.predicted
		w.delivered -= o.delivered
	}
	if w.head > d.cfg.Window { // compact: the slice stays within twice the window
		w.obs = append(w.obs[:0], w.obs[w.head:]...)
		w.head = 0
	}
	ch := hitGapChange{Requests: len(w.obs) - w.head, Predicted: w.predicted, Delivered: w.delivered}
	if w.predicted >= d.cfg.MinPredicted && ch.Requests >= d.cfg.MinRequests {
		gap := float64(w.delivered) < (1-d.cfg.Tolerance)*float64(w.predicted)
		ch.Opened, ch.Closed = gap && !w.open, !gap && w.open
		w.open = gap
	}
	ch.Open = w.open
	return ch
}
