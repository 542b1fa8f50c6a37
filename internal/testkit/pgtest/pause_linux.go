package pgtest

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
)

// canFreeze reports whether processes can be frozen here.
const canFreeze = true

// freezeTree stops root (SIGSTOP) and then every process descending from
// it, and returns the pids it stopped, root first. A PostgreSQL child
// makes itself a session leader (setsid), so the postmaster's process
// group does not hold its backends: they are found by their parent in
// /proc. The postmaster is stopped first, so it forks no child the walk
// could miss; the walk repeats until it finds no process it has not
// stopped.
func freezeTree(root int) ([]int, error) {
	if err := syscall.Kill(root, syscall.SIGSTOP); err != nil {
		return nil, err
	}
	stopped := []int{root}
	seen := map[int]bool{root: true}
	for {
		parents, err := parentsByPid()
		if err != nil {
			return stopped, err
		}
		found := false
		for pid, ppid := range parents {
			if seen[pid] || !seen[ppid] {
				continue
			}
			seen[pid] = true
			found = true
			if err := syscall.Kill(pid, syscall.SIGSTOP); err == nil {
				stopped = append(stopped, pid)
			} // else it exited meanwhile
		}
		if !found {
			return stopped, nil
		}
	}
}

// thaw continues pids (SIGCONT), last first, so the postmaster runs
// again after its children.
func thaw(pids []int) {
	for i := len(pids) - 1; i >= 0; i-- {
		_ = syscall.Kill(pids[i], syscall.SIGCONT)
	}
}

// parentsByPid maps every process in /proc to its parent.
func parentsByPid() (map[int]int, error) {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil, err
	}
	parents := make(map[int]int, len(entries))
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue // exited
		}
		// pid (comm) state ppid ...: comm may hold spaces and parentheses,
		// so the fields start after the last ')'.
		i := bytes.LastIndexByte(stat, ')')
		if i < 0 {
			continue
		}
		fields := bytes.Fields(stat[i+1:])
		if len(fields) < 2 {
			continue
		}
		ppid, err := strconv.Atoi(string(fields[1]))
		if err != nil {
			continue
		}
		parents[pid] = ppid
	}
	return parents, nil
}
