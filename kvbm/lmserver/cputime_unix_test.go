//go:build unix

package lmserver

import (
	"syscall"
	"time"
)

// processCPU is the CPU time (user + system) the process has used; ok false when unknown.
func processCPU() (time.Duration, bool) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0, false
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), true
}
