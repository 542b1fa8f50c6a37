//go:build unix && !linux

package serverproc

// waitFrozen returns at once where the state of a process's threads
// cannot be read: Pause then returns once SIGSTOP is sent.
func (p *Proc) waitFrozen() error { return nil }
