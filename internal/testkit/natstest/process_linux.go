package natstest

import "syscall"

// sysProcAttr kills the server when the test binary dies, so a crashed
// test leaves no nats-server behind.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
