package frontend

import (
	"time"

	"github.com/turbine-llm/turbine/flow"
)

// clock makes the timers a stream's flow sets: the stall timeout (Config.StallTimeout),
// the wait for a cancelled prefill leg's last chunk (Config.PrefillReleaseWait) and the
// grace after a worker's termination notice (flow.DefaultTerminatedGrace).
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

// timerPurpose names what a timer of a clock bounds.
type timerPurpose string

const (
	timerStall           timerPurpose = "stall"            // a stream's wait for its leg's next chunk
	timerPrefillRelease  timerPurpose = "prefill_release"  // a cancelled prefill leg's last chunk
	timerTerminatedGrace timerPurpose = "terminated_grace" // chunks trailing a worker's termination notice
)

// purposeOf is the purpose of a flow's timer of kind k.
func purposeOf(k flow.TimerKind) timerPurpose {
	switch k {
	case flow.TimerStall:
		return timerStall
	case flow.TimerPrefillRelease:
		return timerPrefillRelease
	case flow.TimerTerminatedGrace:
		return timerTerminatedGrace
	}
	return timerPurpose("flow_timer")
}

// wallClock is the clock of time: real timers.
type wallClock struct{}

func (wallClock) newTimer(_ timerPurpose, d time.Duration) (<-chan time.Time, func() bool) {
	t := time.NewTimer(d)
	return t.C, t.Stop
}

func (wallClock) afterFunc(_ timerPurpose, d time.Duration, f func()) func() bool {
	return time.AfterFunc(d, f).Stop
}
