//go:build !unix

package lmserver

import "time"

func processCPU() (time.Duration, bool) { return 0, false }
