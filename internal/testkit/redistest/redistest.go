package redistest

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/eventbus-go/bus/internal/testkit/serverproc"
	"github.com/redis/go-redis/v9"
)

// EnvURL names the environment variable that points tests at an existing
// Redis server instead of a private one.
const EnvURL = "BUS_REDIS_URL"

var errNilReply = errors.New("nil reply")

// startTimeout bounds how long a server may take to answer PING.
const startTimeout = 15 * time.Second

// Server is a private redis-server process owned by one test.
// Its methods are safe for concurrent use.
type Server struct {
	t    testing.TB
	bin  string
	port int
	dir  string
	args []string
	proc serverproc.Proc
}

// Start launches a private redis-server on a free loopback port, waits until
// it answers PING and stops it when the test ends. args are extra
// redis-server options such as "--appendonly", "yes"; they override the
// defaults (--save "" --appendonly no).
func Start(t testing.TB, args ...string) *Server {
	t.Helper()
	bin := lookBinary(t, "redis-server")
	s := &Server{t: t, bin: bin, port: serverproc.FreePort(t), dir: t.TempDir(), args: args}
	t.Cleanup(s.stop)
	if err := s.launch(); err != nil {
		t.Fatalf("redistest: %v", err)
	}
	return s
}

// URL returns $BUS_REDIS_URL when it is set, otherwise the URL of a private
// server started for t.
func URL(t testing.TB) string {
	t.Helper()
	if u := os.Getenv(EnvURL); u != "" {
		return u
	}
	return Start(t).URL()
}

// Options returns the go-redis options for URL(t).
func Options(t testing.TB) *redis.Options {
	t.Helper()
	u := URL(t)
	opts, err := redis.ParseURL(u)
	if err != nil {
		t.Fatalf("redistest: parse %s: %v", u, err)
	}
	return opts
}

// Addr returns the server's host:port.
func (s *Server) Addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port)) }

// URL returns a redis:// URL for the server.
func (s *Server) URL() string { return "redis://" + s.Addr() }

// Kill stops the server with SIGKILL and waits until the process is gone.
func (s *Server) Kill() { s.proc.Stop(syscall.SIGKILL) }

// Pause freezes the server (SIGSTOP): it keeps its connections but
// answers nothing until Resume. The test is skipped where processes
// cannot be frozen.
func (s *Server) Pause() {
	s.t.Helper()
	if !serverproc.CanFreeze {
		s.t.Skip("redistest: pause: processes cannot be frozen on this system")
	}
	if err := s.proc.Pause(); err != nil {
		s.t.Fatalf("redistest: pause: %v", err)
	}
}

// Resume lets a paused server run again (SIGCONT).
func (s *Server) Resume() { s.proc.Resume() }

// Restart starts the server again on the same port and directory, killing it
// first if it is still running, and waits until it answers PING.
func (s *Server) Restart() {
	s.t.Helper()
	s.Kill()
	if err := s.launch(); err != nil {
		s.t.Fatalf("redistest: restart: %v", err)
	}
}

func (s *Server) stop() { s.proc.Stop(syscall.SIGKILL) }

func (s *Server) launch() error {
	argv := []string{
		"--port", strconv.Itoa(s.port),
		"--bind", "127.0.0.1",
		"--dir", s.dir,
		"--logfile", filepath.Join(s.dir, "redis.log"),
		"--daemonize", "no",
	}
	if !hasOption(s.args, "save") {
		argv = append(argv, "--save", "")
	}
	if !hasOption(s.args, "appendonly") {
		argv = append(argv, "--appendonly", "no")
	}
	argv = append(argv, s.args...)

	cmd := exec.Command(s.bin, argv...)
	cmd.Dir = s.dir
	cmd.SysProcAttr = sysProcAttr()
	done, err := s.proc.Start(cmd)
	if err != nil {
		return fmt.Errorf("start redis-server: %w", err)
	}

	return serverproc.WaitReady("redis-server on "+s.Addr(), startTimeout, done, filepath.Join(s.dir, "redis.log"), func() error {
		reply, err := command(s.Addr(), "PING")
		if err == nil && reply == "PONG" || err != nil && strings.HasPrefix(err.Error(), "NOAUTH") {
			return nil // up (NOAUTH: up, and the test set a password)
		}
		if err == nil {
			err = fmt.Errorf("PING answered %q", reply)
		}
		return err
	})
}

// hasOption reports whether args contain --name.
func hasOption(args []string, name string) bool {
	for _, a := range args {
		if strings.EqualFold(a, "--"+name) {
			return true
		}
	}
	return false
}

func lookBinary(t testing.TB, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		t.Fatalf("redistest: %s not found on PATH (%v); run `make test`, which installs it", name, err)
	}
	return p
}

// command sends one inline command and returns a simple-string or bulk-string
// reply. Error replies are returned as errors.
func command(addr, cmd string) (string, error) {
	conn, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return "", err
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(2 * time.Second))
	if _, err := conn.Write([]byte(cmd + "\r\n")); err != nil {
		return "", err
	}
	r := bufio.NewReader(conn)
	line, err := r.ReadString('\n')
	if err != nil {
		return "", err
	}
	line = strings.TrimRight(line, "\r\n")
	if line == "" {
		return "", errors.New("empty reply")
	}
	switch line[0] {
	case '+':
		return line[1:], nil
	case '-':
		return "", errors.New(line[1:])
	case '$':
		n, err := strconv.Atoi(line[1:])
		if n == -1 {
			return "", errNilReply
		}
		if err != nil || n < 0 {
			return "", fmt.Errorf("bad bulk reply %q", line)
		}
		buf := make([]byte, n+2)
		if _, err := io.ReadFull(r, buf); err != nil {
			return "", err
		}
		return string(buf[:n]), nil
	default:
		return line, nil
	}
}

// Cluster is a private Redis Cluster of master-only nodes.
type Cluster struct {
	Nodes []*Server
}

// StartCluster starts masters cluster-enabled servers (at least 3), joins
// them with redis-cli --cluster create and waits until every node reports
// cluster_state:ok. The nodes stop when the test ends.
func StartCluster(t testing.TB, masters int) *Cluster {
	t.Helper()
	if masters < 3 {
		t.Fatalf("redistest: a cluster needs at least 3 masters, got %d", masters)
	}
	cli := lookBinary(t, "redis-cli")
	c := &Cluster{}
	for range masters {
		c.Nodes = append(c.Nodes, Start(t,
			"--cluster-enabled", "yes",
			"--cluster-config-file", "nodes.conf",
			"--cluster-node-timeout", "5000",
			// A free port of its own for the cluster bus, which is the
			// node's port + 10000 otherwise: a port nobody checked.
			"--cluster-port", strconv.Itoa(serverproc.FreePort(t)),
		))
	}
	argv := []string{"--cluster", "create"}
	argv = append(argv, c.Addrs()...)
	argv = append(argv, "--cluster-replicas", "0", "--cluster-yes")
	var out bytes.Buffer
	cmd := exec.Command(cli, argv...)
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		t.Fatalf("redistest: redis-cli --cluster create: %v: %s", err, out.String())
	}
	deadline := time.Now().Add(30 * time.Second)
	for _, n := range c.Nodes {
		for {
			info, err := command(n.Addr(), "CLUSTER INFO")
			if err == nil && strings.Contains(info, "cluster_state:ok") {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("redistest: cluster node %s not ok within 30s: %v %s", n.Addr(), err, info)
			}
			time.Sleep(50 * time.Millisecond) // polling cluster convergence
		}
	}
	return c
}

// Addrs returns the host:port of every node.
func (c *Cluster) Addrs() []string {
	addrs := make([]string, len(c.Nodes))
	for i, n := range c.Nodes {
		addrs[i] = n.Addr()
	}
	return addrs
}

// URL returns a redis:// URL naming the first node, with the other nodes as
// addr query parameters and cluster=true, the form the redisstream backend
// opens as a cluster client.
func (c *Cluster) URL() string {
	var b strings.Builder
	b.WriteString("redis://" + c.Nodes[0].Addr() + "?cluster=true")
	for _, n := range c.Nodes[1:] {
		b.WriteString("&addr=" + n.Addr())
	}
	return b.String()
}
