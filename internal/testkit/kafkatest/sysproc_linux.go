package kafkatest

import "syscall"

// procAttr puts the broker in a process group of its own (so that Pause,
// Kill and stop reach the JVM too) and kills it when the test
// binary dies, so a crashed test leaves no node behind.
func procAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
