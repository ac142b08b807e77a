package cluster

import (
	"math/rand/v2"
	"time"
)

// backoff is a capped exponential backoff with jitter: the n-th delay after a reset is
// drawn uniformly from [base/2, base], base = min·2ⁿ capped at max. Not safe for
// concurrent use; the random source is an input.
type backoff struct {
	min, max time.Duration
	base     time.Duration // next base; 0 after reset
	rnd      *rand.Rand
}

func newBackoff(min, max time.Duration, rnd *rand.Rand) *backoff {
	return &backoff{min: min, max: max, rnd: rnd}
}

// next returns the delay before the next attempt and doubles the base.
func (b *backoff) next() time.Duration {
	if b.base == 0 {
		b.base = b.min
	}
	d := b.base/2 + time.Duration(b.rnd.Int64N(int64(b.base/2)+1))
	b.base = min(2*b.base, b.max)
	return d
}

// reset starts the sequence again from min (after a success).
func (b *backoff) reset() { b.base = 0 }

// failureLog decides when a retried operation's failures are worth a log line: the first
// failure, then once every `every` while it lasts, and the recovery. It never asks for a
// line per attempt.
type failureLog struct {
	every    time.Duration
	failing  bool
	since    time.Time // first failure of the current run
	lastLog  time.Time
	attempts int // failed attempts in the current run
}

// fail records a failed attempt at now; log is true when this failure should be logged.
func (f *failureLog) fail(now time.Time) (log bool) {
	f.attempts++
	if !f.failing {
		f.failing, f.since, f.lastLog = true, now, now
		return true
	}
	if now.Sub(f.lastLog) >= f.every {
		f.lastLog = now
		return true
	}
	return false
}

// ok records a success at now. recovered is true when it ends a run of failures, which
// lasted `down` over `attempts` failed attempts.
func (f *failureLog) ok(now time.Time) (recovered bool, attempts int, down time.Duration) {
	if !f.failing {
		return false, 0, 0
	}
	recovered, attempts, down = true, f.attempts, now.Sub(f.since)
	f.failing, f.attempts = false, 0
	return recovered, attempts, down
}
