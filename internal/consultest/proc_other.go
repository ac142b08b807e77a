//go:build !linux

package consultest

import "syscall"

// procAttr puts the agent in its own process group so that Stop reaches all of it. Outside
// Linux there is no parent-death signal: an agent outlives a test process that is killed.
func procAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}
