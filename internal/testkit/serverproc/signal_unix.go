//go:build unix

package serverproc

import "syscall"

func (p *Proc) signalLocked(sig syscall.Signal) error {
	if p.Group {
		if err := syscall.Kill(-p.cmd.Process.Pid, sig); err == nil {
			return nil
		}
		// The server leads no group (its command did not set Setpgid) or
		// the group has gone: signal the server alone.
	}
	return p.cmd.Process.Signal(sig)
}

func (p *Proc) freezeLocked(stop bool) error {
	if stop {
		if err := p.signalLocked(syscall.SIGSTOP); err != nil {
			return err
		}
		return p.waitFrozen()
	}
	return p.signalLocked(syscall.SIGCONT)
}

// CanFreeze reports whether Pause can freeze a server on this system.
const CanFreeze = true
