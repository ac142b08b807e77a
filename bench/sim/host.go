package sim

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/turbine-llm/turbine/bench"
	"github.com/turbine-llm/turbine/engines/mocker"
)

// The host model: what a real run on a machine adds to the timing model of its engines
// (docs/reference.md §7, "What the host adds"). Config holds its four figures:
//
//   - TimerResolution: a real engine loop sleeps until each step's modelled end, and its
//     timer fires on the next multiple of this resolution (TimerWait);
//   - StepOverhead: wall time added to every step after that (the loop's own work
//     between steps, and a busy machine's scheduling delay);
//   - RequestOverhead and RequestTokenOverhead: the host's time on every request's way
//     through the service (HTTP, JSON, the actors of gateway, router and worker), fixed
//     and per prompt token, added to its TTFT and its end-to-end latency.
//
// FitHost fits the last three to measurements of requests sent one at a time to a real
// service (`turbine bench --calibrate`); the resolution is the platform's.

// MaxTokenOverhead bounds Config.RequestTokenOverhead: a millisecond per prompt token
// (a 100,000-token prompt then costs 100 s).
const MaxTokenOverhead = time.Millisecond

// TimerWait is how long a loop that sleeps d on a timer of resolution res waits: d
// rounded up to a multiple of res; d itself when res is 0 (an exact timer) or d is not
// positive.
//
// Go's runtime on Linux puts an idle process to sleep in epoll_wait, whose timeout is in
// whole milliseconds: a timer due in 0.3 ms fires after 1 ms, one due in 1.2 ms after
// 2 ms (a little later still, the kernel's slack, which StepOverhead holds). A mock
// engine whose step is shorter than a millisecond therefore steps once a millisecond.
func TimerWait(d, res time.Duration) time.Duration {
	if res <= 0 || d <= 0 {
		return d
	}
	if r := d % res; r != 0 {
		d += res - r
	}
	return d
}

// stepWall is the virtual time a step of modelled duration d takes:
// TimerWait(d, TimerResolution) + StepOverhead.
func (c *Config) stepWall(d time.Duration) time.Duration {
	return TimerWait(d, c.TimerResolution) + c.StepOverhead
}

// requestCost is the host's time on a request of promptTokens tokens:
// RequestOverhead + promptTokens × RequestTokenOverhead.
func (c *Config) requestCost(promptTokens int) time.Duration {
	return c.RequestOverhead + time.Duration(max(promptTokens, 0))*c.RequestTokenOverhead
}

// addRequestCosts adds each request's host cost to the latencies its client saw: its
// first token and its end reach the client that much later. The engines' schedule is
// the one simulated: the cost is counted on the way back, where it changes no batch.
// A client that gave up (bench.ErrTimeout; its deadline came the cost early, sim.go's
// arrive) did so at RequestTimeout: that is its E2E.
func (s *simulator) addRequestCosts() {
	if s.cfg.RequestOverhead == 0 && s.cfg.RequestTokenOverhead == 0 {
		return
	}
	for i := range s.results {
		r := &s.results[i]
		c := s.cfg.requestCost(s.reqs[i].InputLength)
		if r.TTFT > 0 {
			r.TTFT += c
		}
		switch {
		case r.Error == bench.ErrTimeout:
			r.E2E = s.cfg.RequestTimeout
		case r.E2E > 0:
			r.E2E += c
		}
	}
}

// HostSample is one request of a calibration, sent alone to an idle engine of a real
// service: a prompt that no cache holds and at least two output tokens.
type HostSample struct {
	PromptTokens int
	OutputTokens int
	// TTFT and E2E are the client's, from the send to the first and to the last token.
	TTFT, E2E time.Duration
}

// Host is the host model's figures (Config's fields of the same names).
type Host struct {
	TimerResolution      time.Duration
	StepOverhead         time.Duration
	RequestOverhead      time.Duration
	RequestTokenOverhead time.Duration
}

// Apply sets c's host figures to h's.
func (h Host) Apply(c *Config) {
	c.TimerResolution, c.StepOverhead = h.TimerResolution, h.StepOverhead
	c.RequestOverhead, c.RequestTokenOverhead = h.RequestOverhead, h.RequestTokenOverhead
}

// FitHost fits the host model to samples measured on engines of configuration eng whose
// timers have resolution res, inverting the timing model of a request alone on its
// engine: ceil(prompt / MaxNumBatchedTokens) prefill steps to the first token, then one decode step per further token at the KV usage of the
// sequence's own blocks (docs/reference.md §7), each of them TimerWait long.
//
//   - StepOverhead is the median over the samples of the time between the first and the
//     last token beyond the modelled decode steps, per step;
//   - the rest of each TTFT, beyond its prefill steps and their StepOverhead, is the
//     request's host cost: RequestOverhead and RequestTokenOverhead are the least-squares
//     line of its median per prompt length against that length (one length: its median
//     and no per-token cost). A negative slope or intercept is refitted without it, so
//     that both figures are at least 0.
//
// An engine keeps to its timing model or is late, never early: samples whose first or
// last tokens came well before the model lets them (the median over the samples of
// TTFT, or E2E, divided by its steps' modelled time without rounding or overhead is
// below MinModelShare) were measured on engines faster than eng (another SpeedupRatio,
// more tokens per prefill step, fewer KV blocks in use), which no host figure mends:
// FitHost refuses them with a *FasterError instead of fitting figures of 0.
//
// Errors: no sample, a sample with fewer than 2 output tokens, no prompt, a prompt that
// does not fit eng.MaxModelLen, or latencies that are not positive and ordered; an
// invalid eng or res; a *FasterError. Figures below 1 ns per token round to 0.
func FitHost(eng mocker.Config, res time.Duration, samples []HostSample) (Host, error) {
	if !(eng.SpeedupRatio >= MinSpeedupRatio && eng.SpeedupRatio <= MaxSpeedupRatio) {
		return Host{}, fmt.Errorf("sim: FitHost: SpeedupRatio %v: want %g to %g", eng.SpeedupRatio, float64(MinSpeedupRatio), float64(MaxSpeedupRatio))
	}
	if err := eng.Validate(); err != nil {
		return Host{}, fmt.Errorf("sim: FitHost: %w", err)
	}
	if res < 0 || res > MaxEventDelay {
		return Host{}, fmt.Errorf("sim: FitHost: timer resolution %v: want 0 to %v", res, MaxEventDelay)
	}
	if len(samples) == 0 {
		return Host{}, errors.New("sim: FitHost: no sample")
	}
	step := func(prefill int, decode bool, blocks int) time.Duration {
		u := float64(blocks) / float64(eng.NumGPUBlocks)
		return mocker.StepDuration(prefill, decode, u, eng.SpeedupRatio)
	}
	blocksOf := func(tokens int) int { return (tokens + eng.BlockSize - 1) / eng.BlockSize }
	perStep := make([]float64, len(samples))
	prefill := make([]time.Duration, len(samples)) // modelled prefill steps of each sample
	chunks := make([]int, len(samples))
	// Each sample's TTFT and E2E over the least time the model gives them (exact steps).
	ttftShare, e2eShare := make([]float64, len(samples)), make([]float64, len(samples))
	var ttfts, e2es, leastTTFT, leastE2E []float64
	for i, s := range samples {
		switch {
		case s.PromptTokens < 1 || s.OutputTokens < 2:
			return Host{}, fmt.Errorf("sim: FitHost: sample %d: %d prompt and %d output tokens: want at least 1 and 2", i, s.PromptTokens, s.OutputTokens)
		case s.PromptTokens+s.OutputTokens > eng.MaxModelLen:
			return Host{}, fmt.Errorf("sim: FitHost: sample %d: %d prompt + %d output tokens exceed MaxModelLen %d", i, s.PromptTokens, s.OutputTokens, eng.MaxModelLen)
		case s.TTFT <= 0 || s.E2E < s.TTFT:
			return Host{}, fmt.Errorf("sim: FitHost: sample %d: TTFT %v, E2E %v: want 0 < TTFT <= E2E", i, s.TTFT, s.E2E)
		}
		var exactPrefill, exactDecode time.Duration
		for done := 0; done < s.PromptTokens; done += eng.MaxNumBatchedTokens {
			n := min(eng.MaxNumBatchedTokens, s.PromptTokens-done)
			d := step(n, false, blocksOf(done+n))
			exactPrefill += d
			prefill[i] += TimerWait(d, res)
			chunks[i]++
		}
		var decode time.Duration
		for j := 1; j < s.OutputTokens; j++ {
			d := step(0, true, blocksOf(s.PromptTokens+j))
			exactDecode += d
			decode += TimerWait(d, res)
		}
		perStep[i] = float64(s.E2E-s.TTFT-decode) / float64(s.OutputTokens-1)
		ttftShare[i] = float64(s.TTFT) / float64(max(exactPrefill, 1))
		e2eShare[i] = float64(s.E2E) / float64(max(exactPrefill+exactDecode, 1))
		ttfts, leastTTFT = append(ttfts, float64(s.TTFT)), append(leastTTFT, float64(exactPrefill))
		e2es, leastE2E = append(e2es, float64(s.E2E)), append(leastE2E, float64(exactPrefill+exactDecode))
	}
	if st, se := median(ttftShare), median(e2eShare); min(st, se) < MinModelShare {
		e := &FasterError{Phase: "first tokens", Share: st, Measured: time.Duration(median(ttfts)), Modelled: time.Duration(median(leastTTFT)),
			SpeedupRatio: eng.SpeedupRatio}
		if se < st {
			e = &FasterError{Phase: "last tokens", Share: se, Measured: time.Duration(median(e2es)), Modelled: time.Duration(median(leastE2E)),
				SpeedupRatio: eng.SpeedupRatio}
		}
		return Host{}, e
	}
	h := Host{TimerResolution: res, StepOverhead: time.Duration(math.Max(0, median(perStep)))}

	// The request cost: the median residual per prompt length, then a line through them.
	byLen := map[int][]float64{}
	for i, s := range samples {
		byLen[s.PromptTokens] = append(byLen[s.PromptTokens], float64(s.TTFT-prefill[i]-time.Duration(chunks[i])*h.StepOverhead))
	}
	var xs, ys []float64
	for l, r := range byLen {
		xs, ys = append(xs, float64(l)), append(ys, median(r))
	}
	a, b := fitLine(xs, ys)
	h.RequestOverhead, h.RequestTokenOverhead = time.Duration(a), time.Duration(b)
	return h, nil
}

// MinModelShare is the least share of the timing model's time (exact steps, no host
// cost) that FitHost accepts for the median sample's TTFT and E2E. An engine is never
// early, so the share of a sample measured on the engines given is at least 1; the 10 %
// below allow for the clocks of client and engine.
const MinModelShare = 0.9

// FasterError is FitHost's error for samples that came before the timing model of its
// engine configuration lets them: the engines measured run faster than it (another
// speedup ratio, more tokens per prefill step, fewer KV blocks in use).
type FasterError struct {
	// Phase is "first tokens" (TTFT against the prefill steps) or "last tokens" (E2E
	// against every step), whichever came earlier against the model.
	Phase string
	// Share is the median over the samples of the measured time over the modelled one
	// (below MinModelShare); Measured and Modelled are the medians of each.
	Share              float64
	Measured, Modelled time.Duration
	// SpeedupRatio is the configuration's.
	SpeedupRatio float64
}

func (e *FasterError) Error() string {
	return fmt.Sprintf("sim: FitHost: the %s came before the timing model lets them: median %v measured, at least %v modelled (%.0f %%) at SpeedupRatio %g: the engines measured are faster than the configuration given",
		e.Phase, e.Measured.Round(time.Microsecond), e.Modelled.Round(time.Microsecond), 100*e.Share, e.SpeedupRatio)
}

// fitLine is the least-squares line y = a + b·x through the points with a, b >= 0: when
// the free fit has b < 0 it is the mean (b = 0), when it has a < 0 the line through the
// origin (a = 0); both 0 when nothing is positive.
func fitLine(xs, ys []float64) (a, b float64) {
	n := float64(len(xs))
	var mx, my float64
	for i := range xs {
		mx += xs[i] / n
		my += ys[i] / n
	}
	var sxy, sxx, oxy, oxx float64
	for i := range xs {
		sxy += (xs[i] - mx) * (ys[i] - my)
		sxx += (xs[i] - mx) * (xs[i] - mx)
		oxy += xs[i] * ys[i]
		oxx += xs[i] * xs[i]
	}
	if sxx > 0 {
		b = sxy / sxx
	}
	a = my - b*mx
	switch {
	case b < 0:
		a, b = my, 0
	case a < 0 && oxx > 0:
		a, b = 0, oxy/oxx
	}
	return math.Max(a, 0), math.Max(b, 0)
}

// median of xs (not empty); xs is sorted in place.
func median(xs []float64) float64 {
	slices.Sort(xs)
	n := len(xs)
	if n%2 == 1 {
		return xs[n/2]
	}
	return (xs[n/2-1] + xs[n/2]) / 2
}
