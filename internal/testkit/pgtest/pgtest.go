package pgtest

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/eventbus-go/bus/internal/testkit/serverproc"
	"github.com/jackc/pgx/v5/pgconn"
)

// startTimeout bounds initdb and how long a server may take to accept a
// connection.
const startTimeout = 30 * time.Second

// Server is a private PostgreSQL server owned by one test. Its methods are
// safe for concurrent use.
type Server struct {
	t    testing.TB
	bin  string // directory of initdb and postgres
	port int
	dir  string // owns data/, the socket and postgres.log
	attr *syscall.SysProcAttr

	mu     sync.Mutex
	cmd    *exec.Cmd
	done   <-chan struct{} // closed when cmd has exited
	frozen []int           // the processes Pause stopped, postmaster first
}

// Start creates a database cluster in a temporary directory, starts
// postgres on a free loopback port, waits until it accepts connections and
// stops it (and removes the directory) when the test ends.
func Start(t testing.TB) *Server {
	t.Helper()
	bin := binDir(t)
	dir, err := os.MkdirTemp("", "pgtest-")
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	attr, err := procAttr(dir)
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	s := &Server{t: t, bin: bin, port: serverproc.FreePort(t), dir: dir, attr: attr}
	if err := s.initdb(); err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	t.Cleanup(s.stop)
	if err := s.launch(); err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	return s
}

// URL returns a postgres:// URL for the server's database postgres, as
// its superuser postgres.
func (s *Server) URL() string {
	return "postgres://postgres@" + s.Addr() + "/postgres?sslmode=disable"
}

// Addr returns the server's host:port.
func (s *Server) Addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port)) }

// Kill stops the server as a crash would (an immediate shutdown: every
// connection is dropped, nothing is checkpointed) and waits until it is
// gone.
func (s *Server) Kill() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.signalLocked(syscall.SIGQUIT)
}

// Restart starts the server again on the same port and data directory,
// killing it first if it is still running, and waits until it accepts
// connections.
func (s *Server) Restart() {
	s.t.Helper()
	s.Kill()
	if err := s.launch(); err != nil {
		s.t.Fatalf("pgtest: restart: %v", err)
	}
}

// Pause freezes the server (SIGSTOP to the postmaster and every backend
// and auxiliary process under it): it keeps its connections and its
// listening socket but answers nothing, and starts no new backend, until
// Resume. The test is skipped where processes cannot be frozen. Pause may
// be called from any goroutine; it reports a failure with t.Errorf.
func (s *Server) Pause() {
	if !canFreeze {
		s.t.Skip("pgtest: pause: processes cannot be frozen on this system")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		s.t.Errorf("pgtest: pause: the server is not running")
		return
	}
	if s.frozen != nil {
		return
	}
	pids, err := freezeTree(s.cmd.Process.Pid)
	s.frozen = pids
	if err != nil {
		s.t.Errorf("pgtest: pause: %v", err)
	}
}

// Resume lets a paused server run again (SIGCONT to every process Pause
// stopped). Resuming a server that is not paused does nothing.
func (s *Server) Resume() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.thawLocked()
}

func (s *Server) thawLocked() {
	thaw(s.frozen)
	s.frozen = nil
}

func (s *Server) stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.signalLocked(syscall.SIGINT) // fast shutdown
}

// signalLocked sends sig and waits for the server to exit, killing it
// when it has not within ten seconds.
func (s *Server) signalLocked(sig syscall.Signal) {
	if s.cmd == nil {
		return
	}
	s.thawLocked() // a frozen process acts on no signal but SIGKILL until it runs
	_ = s.cmd.Process.Signal(sig)
	select {
	case <-s.done:
	case <-time.After(10 * time.Second):
		_ = s.cmd.Process.Kill()
		<-s.done
	}
	s.cmd = nil
}

func (s *Server) initdb() error {
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(s.bin, "initdb"),
		"-D", filepath.Join(s.dir, "data"), "-U", "postgres", "-A", "trust",
		"-E", "UTF8", "--no-locale", "--no-sync", "--no-instructions")
	cmd.Dir = s.dir
	cmd.SysProcAttr = s.attr
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("initdb: %w: %s", err, out)
	}
	return nil
}

func (s *Server) launch() error {
	logf, err := os.OpenFile(filepath.Join(s.dir, "postgres.log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	defer logf.Close()
	cmd := exec.Command(filepath.Join(s.bin, "postgres"),
		"-D", filepath.Join(s.dir, "data"), "-p", strconv.Itoa(s.port), "-k", s.dir,
		"-c", "listen_addresses=127.0.0.1", "-c", "fsync=off", "-c", "full_page_writes=off",
		"-c", "max_connections=60", "-c", "shared_buffers=32MB")
	cmd.Dir = s.dir
	cmd.SysProcAttr = s.attr
	cmd.Stdout, cmd.Stderr = logf, logf
	done, err := serverproc.Start(cmd)
	if err != nil {
		return fmt.Errorf("start postgres: %w", err)
	}
	s.mu.Lock()
	s.cmd, s.done = cmd, done
	s.mu.Unlock()
	return s.waitReady(done)
}

// waitReady polls until the server accepts a connection.
func (s *Server) waitReady(done <-chan struct{}) error {
	return serverproc.WaitReady("postgres on "+s.Addr(), startTimeout, done, filepath.Join(s.dir, "postgres.log"), func() error {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		conn, err := pgconn.Connect(ctx, s.URL())
		if err == nil {
			_ = conn.Close(context.Background())
		}
		return err
	})
}

// binDir finds the directory of initdb and postgres.
func binDir(t testing.TB) string {
	t.Helper()
	var candidates []string
	if out, err := exec.Command("pg_config", "--bindir").Output(); err == nil {
		candidates = append(candidates, strings.TrimSpace(string(out)))
	}
	globbed, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	sort.Sort(sort.Reverse(sort.StringSlice(globbed))) // newest major first (one or two digits: 15 > 9.6 holds lexically too)
	candidates = append(candidates, globbed...)
	if p, err := exec.LookPath("initdb"); err == nil {
		candidates = append(candidates, filepath.Dir(p))
	}
	for _, dir := range candidates {
		if isExec(filepath.Join(dir, "initdb")) && isExec(filepath.Join(dir, "postgres")) {
			return dir
		}
	}
	t.Fatalf("pgtest: initdb and postgres not found (pg_config --bindir, /usr/lib/postgresql/*/bin, PATH); run `make test`, which installs them")
	return ""
}

func isExec(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && !fi.IsDir() && fi.Mode()&0o111 != 0
}
