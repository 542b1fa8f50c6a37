package natstest

import (
	"os"
	"syscall"
)

// sysProcAttr kills the server when the test binary dies, so a crashed
// test leaves no nats-server behind.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}

// The signals that freeze and resume a process.
var stopSignal, contSignal os.Signal = syscall.SIGSTOP, syscall.SIGCONT
