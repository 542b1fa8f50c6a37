package serverproc

import (
	"errors"
	"os/exec"
	"sync"
	"syscall"
	"time"
)

// ErrNotRunning is returned by Pause when the server is not running.
var ErrNotRunning = errors.New("the server is not running")

// defaultStopTimeout is Proc.StopTimeout's default.
const defaultStopTimeout = 10 * time.Second

// Proc is a server process that a test starts, freezes, resumes, stops and
// starts again. Its methods are safe for concurrent use.
type Proc struct {
	// Group sends every signal to the process group the server leads (its
	// command sets SysProcAttr.Setpgid), so that a server which forks
	// helpers (a JVM, an Erlang VM) is frozen and stopped whole.
	Group bool
	// StopTimeout bounds how long Stop waits for the server to exit before
	// it kills it; zero means ten seconds.
	StopTimeout time.Duration

	mu     sync.Mutex
	cmd    *exec.Cmd
	done   <-chan struct{} // closed when cmd has exited
	paused bool
}

// Start starts cmd as the server and returns a channel closed when it has
// exited. It is an error to start a server that is running.
func (p *Proc) Start(cmd *exec.Cmd) (<-chan struct{}, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd != nil {
		return nil, errors.New("the server is already running")
	}
	done, err := Start(cmd)
	if err != nil {
		return nil, err
	}
	p.cmd, p.done, p.paused = cmd, done, false
	return done, nil
}

// Done returns the channel closed when the running server has exited, or
// nil when none runs.
func (p *Proc) Done() <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil {
		return nil
	}
	return p.done
}

// errNotStopped is returned by Pause when SIGSTOP was sent but a thread
// of the server still ran after the wait: the server counts as paused.
var errNotStopped = errors.New("the server did not stop")

// Pause freezes the server (SIGSTOP): it keeps its connections and
// listening sockets but answers nothing until Resume. On Linux Pause
// returns once every thread of the server (with Group, of its group) is
// stopped, not merely signalled. Pausing a paused server does nothing.
// Where processes cannot be frozen, the error wraps
// errors.ErrUnsupported.
func (p *Proc) Pause() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil {
		return ErrNotRunning
	}
	if p.paused {
		return nil
	}
	err := p.freezeLocked(true)
	if err != nil && !errors.Is(err, errNotStopped) {
		return err
	}
	p.paused = true
	return err
}

// Resume lets a paused server run again. Resuming a server that is not
// paused does nothing.
func (p *Proc) Resume() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.resumeLocked()
}

func (p *Proc) resumeLocked() {
	if p.cmd != nil && p.paused {
		_ = p.freezeLocked(false)
	}
	p.paused = false
}

// Stop sends sig to the server and waits until it has exited, killing it
// when it has not within StopTimeout. A paused server is resumed first:
// a frozen process acts on no signal but SIGKILL until it runs. With
// Group, what is left of the group once the server has exited is killed
// too. Stopping a server that is not running does nothing.
func (p *Proc) Stop(sig syscall.Signal) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil {
		return
	}
	p.resumeLocked()
	timeout := p.StopTimeout
	if timeout <= 0 {
		timeout = defaultStopTimeout
	}
	_ = p.signalLocked(sig)
	select {
	case <-p.done:
	case <-time.After(timeout):
		_ = p.signalLocked(syscall.SIGKILL)
		<-p.done
	}
	if p.Group {
		_ = p.signalLocked(syscall.SIGKILL) // helpers that outlived the server
	}
	p.cmd = nil
}
