package serverproc_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/eventbus-go/bus/internal/testkit/serverproc"
)

// state returns the state letter of process pid (R, S, T, Z...), or ""
// when it is gone.
func state(pid int) string {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return ""
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	return f[0]
}

// waitState waits until process pid is in one of the states want ("" for
// gone), within ten seconds.
func waitState(t *testing.T, pid int, want ...string) {
	t.Helper()
	require.Eventually(t, func() bool {
		got := state(pid)
		for _, w := range want {
			if got == w || w == "" && got == "Z" {
				return true
			}
		}
		return false
	}, 10*time.Second, 5*time.Millisecond, "process %d in state %q, want %q", pid, state(pid), want)
}

// startGroup starts a shell that leads its own process group, runs a
// child and, with ignoreTerm, ignores SIGTERM; it returns the child's pid.
func startGroup(t *testing.T, p *serverproc.Proc, ignoreTerm bool) (shell, child int) {
	t.Helper()
	pidFile := filepath.Join(t.TempDir(), "child.pid")
	script := "sleep 600 & echo $! > " + pidFile + "; wait"
	if ignoreTerm {
		script = "trap '' TERM; " + script
	}
	cmd := exec.Command("sh", "-c", script)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	_, err := p.Start(cmd)
	require.NoError(t, err)
	t.Cleanup(func() { p.Stop(syscall.SIGKILL) })
	require.Eventually(t, func() bool {
		b, err := os.ReadFile(pidFile)
		if err != nil {
			return false
		}
		child, err = strconv.Atoi(strings.TrimSpace(string(b)))
		return err == nil
	}, 10*time.Second, 5*time.Millisecond, "the child's pid is written")
	return cmd.Process.Pid, child
}

func TestProcFreezesResumesAndStopsTheWholeGroup(t *testing.T) {
	p := &serverproc.Proc{Group: true}
	shell, child := startGroup(t, p, false)
	_, err := p.Start(exec.Command("true"))
	require.Error(t, err, "a running server is not started twice")

	require.NoError(t, p.Pause())
	require.NoError(t, p.Pause(), "pausing a paused server does nothing")
	waitState(t, shell, "T")
	waitState(t, child, "T")
	p.Resume()
	waitState(t, child, "S", "R")

	require.NoError(t, p.Pause())
	p.Stop(syscall.SIGTERM) // resumes first, or the group would ignore SIGTERM
	waitState(t, child, "")
	assert.Equal(t, "", state(shell), "the server has exited")
	assert.Nil(t, p.Done(), "no server runs after Stop")
	assert.ErrorIs(t, p.Pause(), serverproc.ErrNotRunning)
	p.Stop(syscall.SIGTERM) // stopping a stopped server does nothing
}

func TestProcKillsAServerThatIgnoresItsStopSignal(t *testing.T) {
	p := &serverproc.Proc{Group: true, StopTimeout: 50 * time.Millisecond}
	shell, child := startGroup(t, p, true)
	done := p.Done()
	p.Stop(syscall.SIGTERM)
	select {
	case <-done:
	default:
		t.Fatal("Stop returned before the server exited")
	}
	waitState(t, shell, "")
	waitState(t, child, "")

	cmd := exec.Command("sleep", "600") // no group of its own: signalled alone
	_, err := p.Start(cmd)
	require.NoError(t, err, "a stopped server starts again")
	p.Stop(syscall.SIGTERM)
	waitState(t, cmd.Process.Pid, "")
}

// TestProcPauseReturnsOnceEveryProcessStopped: kill(2) only makes SIGSTOP
// pending, so a process may run on after it returned; Pause returns only
// once every process of the group is stopped.
func TestProcPauseReturnsOnceEveryProcessStopped(t *testing.T) {
	p := &serverproc.Proc{Group: true}
	pidFile := filepath.Join(t.TempDir(), "pids")
	cmd := exec.Command("sh", "-c", "for i in 1 2 3 4 5 6; do sleep 600 & echo $! >> "+pidFile+"; done; wait")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	_, err := p.Start(cmd)
	require.NoError(t, err)
	t.Cleanup(func() { p.Stop(syscall.SIGKILL) })
	var pids []int
	require.Eventually(t, func() bool {
		b, err := os.ReadFile(pidFile)
		if err != nil {
			return false
		}
		pids = pids[:0]
		for _, f := range strings.Fields(string(b)) {
			pid, err := strconv.Atoi(f)
			if err != nil {
				return false
			}
			pids = append(pids, pid)
		}
		return len(pids) == 6
	}, 10*time.Second, 5*time.Millisecond, "the children's pids are written")
	pids = append(pids, cmd.Process.Pid)
	for round := range 30 {
		require.NoError(t, p.Pause())
		for _, pid := range pids {
			require.Equal(t, "T", state(pid), "round %d: process %d when Pause returned", round, pid)
		}
		p.Resume()
		for _, pid := range pids {
			waitState(t, pid, "S", "R")
		}
	}
}
