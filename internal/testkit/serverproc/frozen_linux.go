package serverproc

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// frozenTimeout bounds how long Pause waits for the server to stop.
const frozenTimeout = 10 * time.Second

// waitFrozen waits until every thread of the server, and with Group of
// every process in its group, is stopped. kill(2) only makes SIGSTOP
// pending: a process stops once one of its threads is scheduled and acts
// on the signal, which on a loaded machine can take tens of
// milliseconds, and meanwhile its other threads run and answer requests.
func (p *Proc) waitFrozen() error {
	deadline := time.Now().Add(frozenTimeout)
	for {
		running := p.runningTask()
		if running == "" {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%w within %v after SIGSTOP: %s", errNotStopped, frozenTimeout, running)
		}
		time.Sleep(time.Millisecond) // polling /proc, which notifies nothing
	}
}

// runningTask names a thread of the server (or of its group) that is not
// stopped, or returns "" when every one is.
func (p *Proc) runningTask() string {
	pid := p.cmd.Process.Pid
	pids := []int{pid}
	if p.Group {
		pids = groupMembers(pid)
	}
	for _, pr := range pids {
		tasks, err := os.ReadDir(filepath.Join("/proc", strconv.Itoa(pr), "task"))
		if err != nil {
			continue // gone
		}
		for _, tk := range tasks {
			st := procState(filepath.Join("/proc", strconv.Itoa(pr), "task", tk.Name(), "stat"))
			switch st {
			case "", "T", "t", "Z", "X", "x":
			default:
				return fmt.Sprintf("process %d thread %s is in state %s", pr, tk.Name(), st)
			}
		}
	}
	return ""
}

// groupMembers returns the processes of process group pgid, pgid first.
func groupMembers(pgid int) []int {
	out := []int{pgid}
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return out
	}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == pgid {
			continue
		}
		if f := statFields(filepath.Join("/proc", e.Name(), "stat")); len(f) > 2 && f[2] == strconv.Itoa(pgid) {
			out = append(out, pid)
		}
	}
	return out
}

// procState returns the state letter in the stat file at path, or ""
// when it cannot be read.
func procState(path string) string {
	if f := statFields(path); len(f) > 0 {
		return f[0]
	}
	return ""
}

// statFields returns the fields of the stat file at path after the
// command name: state, ppid, pgrp...
func statFields(path string) []string {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil
	}
	s := string(b)
	return strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
}
