package consultest

import "syscall"

// procAttr puts the agent in its own process group (so that Stop reaches all of it) and
// has the kernel kill it when the test process dies.
func procAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
