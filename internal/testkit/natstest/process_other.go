//go:build !linux

package natstest

import (
	"os"
	"syscall"
)

func sysProcAttr() *syscall.SysProcAttr { return nil }

// Processes are frozen on Linux only.
var stopSignal, contSignal os.Signal
