//go:build !linux

package threadcpu

import (
	"runtime"
	"time"
)

// Used is not available here: benchmarks report wall time only.
func Used() (time.Duration, bool) { return 0, false }

// Lock pins the calling goroutine to its OS thread; call the returned function to unpin it.
func Lock() func() {
	runtime.LockOSThread()
	return runtime.UnlockOSThread
}
