package kv

import (
	"runtime"
	"syscall"
	"time"
)

// threadCPU returns the CPU time (user + system) the calling OS thread has used, and
// true. Benchmarks lock their goroutine to its thread (lockThread) and report CPU time
// per operation besides wall time: on a machine shared with other work, time spent
// waiting for a core does not count in it.
func threadCPU() (time.Duration, bool) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(1 /* RUSAGE_THREAD */, &ru); err != nil {
		return 0, false
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), true
}

// lockThread pins the calling goroutine to its OS thread, for threadCPU; call the
// returned function to unpin it.
func lockThread() func() {
	runtime.LockOSThread()
	return runtime.UnlockOSThread
}
