package frontend

import (
	"time"

	"github.com/turbine-llm/turbine/flow"
)

// clock makes the timers a stream's flow sets: the stall timeout (Config.StallTimeout),
// the wait for a leg's acknowledgement (Config.AcceptTimeout), the wait for a cancelled
// prefill leg's last chunk (Config.PrefillReleaseWait) and the grace after a worker's
// termination notice (flow.DefaultTerminatedGrace).
// Config.clock, when nil, is wallClock; the tests fire the timers themselves, so that
// what they check does not depend on how fast the machine runs.
type clock interface {
	// newTimer is time.NewTimer: c receives once d has passed; stop is Timer.Stop
	// (false when the timer already fired or was stopped). what names the timer.
	newTimer(what timerPurpose, d time.Duration) (c <-chan time.Time, stop func() bool)
	// afterFunc is time.AfterFunc: f runs in its own goroutine once d has passed, unless
	// stop ran first (stop is Timer.Stop).
	afterFunc(what timerPurpose, d time.Duration, f func()) (stop func() bool)
}

// timerPurpose names what a timer of a clock bounds: the flow's timer kinds.
type timerPurpose = flow.TimerKind

const (
	timerStall           = flow.TimerStall           // a stream's wait for its leg's next chunk
	timerPrefillRelease  = flow.TimerPrefillRelease  // a cancelled prefill leg's last chunk
	timerTerminatedGrace = flow.TimerTerminatedGrace // chunks trailing a worker's termination notice
	timerAccept          = flow.TimerAccept          // a leg's wait for its worker's acknowledgement
)

// wallClock is the clock of time: real timers.
type wallClock struct{}

func (wallClock) newTimer(_ timerPurpose, d time.Duration) (<-chan time.Time, func() bool) {
	t := time.NewTimer(d)
	return t.C, t.Stop
}

func (wallClock) afterFunc(_ timerPurpose, d time.Duration, f func()) func() bool {
	return time.AfterFunc(d, f).Stop
}
