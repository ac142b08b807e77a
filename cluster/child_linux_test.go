package cluster

import "syscall"

// childProcAttr has the kernel kill a child member when the test process dies.
func childProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
