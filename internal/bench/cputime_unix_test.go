//go:build unix

package bench

import (
	"syscall"
	"time"
)

// processCPU returns the user plus system CPU time the process has used.
// Comparing CPU per message, not only wall time, keeps a ratio honest on a
// machine where other work competes for the cores.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
