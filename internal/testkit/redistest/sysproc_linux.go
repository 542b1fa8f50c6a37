package redistest

import "syscall"

// sysProcAttr kills the server when the test binary dies, so a crashed test
// leaves no redis-server behind.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
