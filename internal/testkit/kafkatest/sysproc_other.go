//go:build !linux

package kafkatest

import "syscall"

// procAttr puts the broker in a process group of its own.
func procAttr() *syscall.SysProcAttr { return &syscall.SysProcAttr{Setpgid: true} }
