//go:build linux

// Package threadcpu reads the CPU time of the calling OS thread, for benchmarks that
// report CPU time per operation besides wall time: on a machine shared with other work,
// time spent waiting for a core does not count in it.
package threadcpu

import (
	"runtime"
	"syscall"
	"time"
)

// Used returns the CPU time (user + system) the calling OS thread has used, and true;
// false where it cannot be read. Lock the goroutine to its thread first (Lock).
func Used() (time.Duration, bool) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(1 /* RUSAGE_THREAD */, &ru); err != nil {
		return 0, false
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), true
}

// Lock pins the calling goroutine to its OS thread, for Used; call the returned function
// to unpin it.
func Lock() func() {
	runtime.LockOSThread()
	return runtime.UnlockOSThread
}
