package frontend

import (
	"sync"
	"testing"
	"time"
)

// fakeClock is a clock whose timers fire only when the test fires them (fakeTimer.fire),
// or, when atOnce says so, as soon as they are armed. Nothing fires because time passed,
// so no verdict depends on how fast the machine runs.
type fakeClock struct {
	// atOnce, when set, is asked on the goroutine that arms each timer (the stream's
	// for stall timers, the receiver's for grace timers) whether the timer fires at once.
	atOnce func(what timerPurpose) bool

	mu      sync.Mutex
	timers  []*fakeTimer
	changed chan struct{} // closed (and replaced) whenever a timer is armed
}

// fakeTimer is one timer of a fakeClock.
type fakeTimer struct {
	what timerPurpose
	d    time.Duration
	c    chan time.Time // newTimer's (buffered), nil for afterFunc's
	f    func()         // afterFunc's

	mu   sync.Mutex
	done bool // fired or stopped
}

func newFakeClock() *fakeClock { return &fakeClock{changed: make(chan struct{})} }

func (c *fakeClock) newTimer(what timerPurpose, d time.Duration) (<-chan time.Time, func() bool) {
	t := &fakeTimer{what: what, d: d, c: make(chan time.Time, 1)}
	c.arm(t)
	return t.c, t.stop
}

func (c *fakeClock) afterFunc(what timerPurpose, d time.Duration, f func()) func() bool {
	t := &fakeTimer{what: what, d: d, f: f}
	c.arm(t)
	return t.stop
}

func (c *fakeClock) arm(t *fakeTimer) {
	c.mu.Lock()
	c.timers = append(c.timers, t)
	close(c.changed)
	c.changed = make(chan struct{})
	c.mu.Unlock()
	if c.atOnce != nil && c.atOnce(t.what) {
		t.fire()
	}
}

// await returns the n-th timer (from 0) armed for what, waiting for it (10 s at most:
// a bound on liveness, not a timing the test depends on).
func (c *fakeClock) await(t *testing.T, what timerPurpose, n int) *fakeTimer {
	t.Helper()
	limit := time.NewTimer(10 * time.Second)
	defer limit.Stop()
	for {
		c.mu.Lock()
		seen := 0
		for _, tm := range c.timers {
			if tm.what != what {
				continue
			}
			if seen == n {
				c.mu.Unlock()
				return tm
			}
			seen++
		}
		changed := c.changed
		c.mu.Unlock()
		select {
		case <-changed:
		case <-limit.C:
			t.Fatalf("no %s timer #%d was armed", what, n)
			return nil
		}
	}
}

// fire fires t as if its duration had passed: its channel receives, or its function runs
// on the caller's goroutine. It reports false, doing nothing, when t already fired or
// was stopped.
func (t *fakeTimer) fire() bool {
	t.mu.Lock()
	if t.done {
		t.mu.Unlock()
		return false
	}
	t.done = true
	t.mu.Unlock()
	if t.c != nil {
		t.c <- time.Time{}
	} else {
		t.f()
	}
	return true
}

func (t *fakeTimer) stop() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	was := !t.done
	t.done = true
	return was
}
