//go:build !linux

package rabbittest

import "syscall"

// procAttr puts the node in a process group of its own.
func procAttr() *syscall.SysProcAttr { return &syscall.SysProcAttr{Setpgid: true} }
