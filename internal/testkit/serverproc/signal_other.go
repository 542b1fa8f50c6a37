//go:build !unix

package serverproc

import (
	"errors"
	"fmt"
	"syscall"
)

func (p *Proc) signalLocked(syscall.Signal) error { return p.cmd.Process.Kill() }

func (p *Proc) freezeLocked(bool) error {
	return fmt.Errorf("processes cannot be frozen on this system: %w", errors.ErrUnsupported)
}

// CanFreeze reports whether Pause can freeze a server on this system.
const CanFreeze = false
