// Package serverproc starts a server process for a test
// (internal/testkit/redistest, natstest, pgtest, rabbittest, kafkatest),
// waits for it to answer, reads the end of its log for the error when it
// does not, and freezes, resumes and stops it (Proc); FreePort picks the
// port it listens on.
package serverproc

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"time"
)

// Start starts cmd and returns a channel closed when it has exited (its
// Wait has returned).
func Start(cmd *exec.Cmd) (<-chan struct{}, error) {
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	done := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(done)
	}()
	return done, nil
}

// ErrExitedAtStart is wrapped by WaitReady's error when the server exited
// before it answered: a port taken between its choice and the server's
// bind ends a server so, and a harness may start it once more on new
// ports.
var ErrExitedAtStart = errors.New("exited at start")

// WaitReady calls ready every 20 ms until it returns nil, the process
// exits (done closes) or timeout passes; name names the server in the
// error, which ends with the tail of the log at logPath.
func WaitReady(name string, timeout time.Duration, done <-chan struct{}, logPath string, ready func() error) error {
	deadline := time.Now().Add(timeout)
	for {
		err := ready()
		if err == nil {
			return nil
		}
		select {
		case <-done:
			return fmt.Errorf("%s %w: %s", name, ErrExitedAtStart, LogTail(logPath))
		default:
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s did not answer within %v (%v): %s", name, timeout, err, LogTail(logPath))
		}
		time.Sleep(20 * time.Millisecond) // polling a process we cannot be notified by
	}
}

// LogTail returns the last 2,000 bytes of the log at path.
func LogTail(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return "(no log)"
	}
	if len(b) > 2000 {
		b = b[len(b)-2000:]
	}
	return string(b)
}
