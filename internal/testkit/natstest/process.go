package natstest

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	natsgo "github.com/nats-io/nats.go"

	"github.com/eventbus-go/bus/internal/testkit/serverproc"
)

// EnvServerBinary names a nats-server binary for StartProcess; without
// it, StartProcess runs nats-server from PATH, or /usr/sbin/nats-server.
const EnvServerBinary = "BUS_NATS_SERVER_BIN"

// Process is a nats-server binary with JetStream run as a child process,
// for tests that freeze the server (SIGSTOP), which an embedded server
// cannot be. Its methods are safe for concurrent use.
type Process struct {
	tb   testing.TB
	port int
	dir  string
	proc serverproc.Proc
}

// StartProcess runs a nats-server binary (see EnvServerBinary) with
// JetStream on a free 127.0.0.1 port, its store in a temporary directory,
// waits until it answers JetStream requests and stops it when the test
// ends. The test is skipped when no binary is found or processes cannot
// be frozen on this system.
func StartProcess(tb testing.TB) *Process {
	tb.Helper()
	if !serverproc.CanFreeze {
		tb.Skip("natstest: processes cannot be frozen on this system")
	}
	bin := serverBinary()
	if bin == "" {
		tb.Skipf("natstest: no nats-server binary (set %s)", EnvServerBinary)
	}
	p := &Process{tb: tb, port: freePorts(tb, 1)[0], dir: tb.TempDir()}
	logPath := filepath.Join(p.dir, "nats.log")
	cmd := exec.Command(bin, "-a", "127.0.0.1", "-p", strconv.Itoa(p.port), "-js", "-sd", filepath.Join(p.dir, "js"), "-l", logPath)
	cmd.SysProcAttr = sysProcAttr()
	done, err := p.proc.Start(cmd)
	if err != nil {
		tb.Fatalf("natstest: start %s: %v", bin, err)
	}
	tb.Cleanup(p.stop)
	err = serverproc.WaitReady("nats-server on "+p.URL(), readyTimeout, done, logPath, func() error {
		nc, err := natsgo.Connect(p.URL(), natsgo.Timeout(time.Second))
		if err != nil {
			return err
		}
		defer nc.Close()
		_, err = nc.Request("$JS.API.INFO", nil, time.Second)
		return err
	})
	if err != nil {
		tb.Fatalf("natstest: %v", err)
	}
	return p
}

func serverBinary() string {
	if b := os.Getenv(EnvServerBinary); b != "" {
		return b
	}
	if b, err := exec.LookPath("nats-server"); err == nil {
		return b
	}
	if _, err := os.Stat("/usr/sbin/nats-server"); err == nil {
		return "/usr/sbin/nats-server"
	}
	return ""
}

// URL returns the server's client URL, nats://127.0.0.1:<port>.
func (p *Process) URL() string { return fmt.Sprintf("nats://127.0.0.1:%d", p.port) }

// Pause freezes the server (SIGSTOP): it keeps its connections but
// answers nothing until Resume.
func (p *Process) Pause() {
	p.tb.Helper()
	if err := p.proc.Pause(); err != nil {
		p.tb.Fatalf("natstest: pause: %v", err)
	}
}

// Resume lets a paused server run again (SIGCONT).
func (p *Process) Resume() { p.proc.Resume() }

func (p *Process) stop() { p.proc.Stop(syscall.SIGKILL) }
