//go:build !linux

package cluster

import "syscall"

// childProcAttr: outside Linux there is no parent-death signal; children end when their
// standard input closes.
func childProcAttr() *syscall.SysProcAttr { return &syscall.SysProcAttr{} }
