//go:build !linux

package worker

import (
	"runtime"
	"time"
)

// threadCPU is not available here: benchmarks report wall time only.
func threadCPU() (time.Duration, bool) { return 0, false }

func lockThread() func() {
	runtime.LockOSThread()
	return runtime.UnlockOSThread
}
