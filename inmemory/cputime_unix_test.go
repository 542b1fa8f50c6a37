//go:build unix

package inmemory_test

import (
	"syscall"
	"time"
)

// processCPU returns the user and system CPU time the process has used,
// garbage collection included. Benchmarks report it per message because
// wall time is unreliable on a shared machine.
func processCPU() (time.Duration, bool) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0, false
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), true
}
