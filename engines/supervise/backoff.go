// Package supervise runs engine subprocesses: starting them in their own process group
// (killed with their parent), stopping them with SIGTERM then SIGKILL, and the capped
// exponential restart backoff (protoactor's own "exponential" backoff is linear and
// uncapped, docs/actor-library.md §11).
package supervise

import "time"

// Backoff is a capped exponential restart policy. The delay before restart n (n = 1 for
// the first restart after a failure) is Initial·Factor^(n-1), capped at Max. A process
// that stayed up for at least Reset before failing starts again from n = 1.
// Pure: the caller passes how long the process ran.
type Backoff struct {
	Initial time.Duration // default 250 ms
	Max     time.Duration // default 30 s
	Factor  float64       // default 2
	Reset   time.Duration // default 60 s
	n       int
}

// Next returns the delay before the next restart, given how long the process that just
// exited had been running.
func (b *Backoff) Next(ran time.Duration) time.Duration {
	initial, max, factor, reset := b.Initial, b.Max, b.Factor, b.Reset
	if initial <= 0 {
		initial = 250 * time.Millisecond
	}
	if max <= 0 {
		max = 30 * time.Second
	}
	if factor < 1 {
		factor = 2
	}
	if reset <= 0 {
		reset = 60 * time.Second
	}
	if ran >= reset {
		b.n = 0
	}
	d := float64(initial)
	for i := 0; i < b.n && d < float64(max); i++ {
		d *= factor
	}
	b.n++
	if d > float64(max) {
		return max
	}
	return time.Duration(d)
}

// Restarts is how many restarts in a row the policy has counted.
func (b *Backoff) Restarts() int { return b.n }
