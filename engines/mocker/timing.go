package mocker

import (
	"math"
	"time"
)

// PrefillMillis is the reference mock engine's prefill time, in milliseconds, of a step
// computing t new (uncached) tokens (docs/reference.md §7):
// 4.209989e-7·t² + 1.518344e-2·t + 16.50142. It is 0 for t <= 0.
func PrefillMillis(t int) float64 {
	if t <= 0 {
		return 0
	}
	x := float64(t)
	return 4.209989e-7*x*x + 1.518344e-2*x + 16.50142
}

// DecodeMillis is the reference mock engine's time, in milliseconds, of one decode step
// with KV cache usage fraction u in [0, 1] (docs/reference.md §7):
// max(1, -25.74·u² + 54.01·u + 5.74).
func DecodeMillis(u float64) float64 {
	u = math.Max(0, math.Min(1, u))
	return math.Max(1, -25.74*u*u+54.01*u+5.74)
}

// StepDuration is the duration of a step that computes prefillTokens new prompt tokens
// and, when decode is true, one decode token for each running sequence, at KV usage u,
// divided by speedup: the prefill and decode times add up (a mixed batch pays both).
func StepDuration(prefillTokens int, decode bool, u, speedup float64) time.Duration {
	ms := PrefillMillis(prefillTokens)
	if decode {
		ms += DecodeMillis(u)
	}
	return time.Duration(ms / speedup * float64(time.Millisecond))
}

// Timing is a step timing model other than the reference one: a profile of a real or
// simulated engine (planner.EngineProfile.Timing). Times are in milliseconds before the
// speedup ratio divides them.
type Timing interface {
	// PrefillMillis is the time of a step computing t new prompt tokens (0 for t <= 0).
	PrefillMillis(t int) float64
	// DecodeMillis is the time of one decode step at KV usage u in [0, 1] whose running
	// sequences hold context tokens each on average.
	DecodeMillis(u, context float64) float64
}
