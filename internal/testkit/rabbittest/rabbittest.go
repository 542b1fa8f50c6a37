package rabbittest

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/eventbus-go/bus/internal/testkit/serverproc"
)

// startTimeout bounds how long a node may take to accept AMQP
// connections; a node boots in about ten seconds on a quiet machine.
const startTimeout = 90 * time.Second

// stopTimeout bounds a graceful stop before the node is killed.
const stopTimeout = 15 * time.Second

// Node is a private RabbitMQ node owned by one test. Its methods are safe
// for concurrent use.
type Node struct {
	t    testing.TB
	dir  string
	name string
	amqp int
	dist int
	epmd int
	mgmt int // the management API's port; 0: the plugin is off

	// ownsEpmd: the node starts and stops its epmd; the other nodes of
	// a cluster register with the first node's.
	ownsEpmd bool

	proc     serverproc.Proc
	epmdProc serverproc.Proc // when ownsEpmd
}

var seq atomic.Int64

// Option configures a node that Start starts.
type Option func(*Node)

// WithManagement turns the rabbitmq_management plugin on, its API on a
// free 127.0.0.1 port (see Node.ManagementURL). The plugin makes the
// node's start longer: only tests that inspect the node turn it on.
func WithManagement() Option {
	return func(n *Node) { n.mgmt = serverproc.FreePort(n.t) }
}

// Start starts a node and waits until it accepts AMQP connections (and,
// WithManagement, connections to its management API); it is stopped, and
// its directory removed, when the test ends.
func Start(t testing.TB, opts ...Option) *Node {
	t.Helper()
	n := newNode(t, serverproc.FreePort(t), true, "", opts...)
	if err := n.launchNew(); err != nil {
		t.Fatalf("rabbittest: %v", err)
	}
	return n
}

// StartCluster starts size nodes, which register with one epmd and share
// an Erlang cookie, and joins the others to the first, so that they form
// one cluster; it returns once every node accepts AMQP connections and
// is a running member. Quorum queues declared on it have a member on
// every node. The nodes are stopped when the test ends.
func StartCluster(t testing.TB, size int) []*Node {
	t.Helper()
	epmd := serverproc.FreePort(t)
	cookie := fmt.Sprintf("BUSTEST%dC%d", os.Getpid(), seq.Add(1))
	nodes := make([]*Node, size)
	for i := range nodes {
		nodes[i] = newNode(t, epmd, i == 0, cookie)
	}
	if err := nodes[0].startEpmd(); err != nil {
		t.Fatalf("rabbittest: %v", err)
	}
	errs := make([]error, size)
	var wg sync.WaitGroup
	for i, n := range nodes {
		wg.Go(func() { errs[i] = n.launchNew() })
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatalf("rabbittest: cluster: %v", err)
		}
	}
	for _, n := range nodes[1:] {
		for _, args := range [][]string{{"stop_app"}, {"join_cluster", nodes[0].name}, {"start_app"}} {
			if out, err := n.Ctl(args...); err != nil {
				t.Fatalf("rabbittest: cluster: %s on %s: %v: %s", args[0], n.name, err, out)
			}
		}
	}
	for _, n := range nodes {
		if err := serverproc.WaitReady("rabbitmq on "+n.Addr(), startTimeout, n.proc.Done(), filepath.Join(n.dir, "server.log"), n.ready); err != nil {
			t.Fatalf("rabbittest: cluster: %v", err)
		}
	}
	return nodes
}

// newNode prepares a node in a new temporary directory, registering with
// the epmd on port epmd (started by the node when ownsEpmd), with cookie
// as its Erlang cookie when it is not empty.
func newNode(t testing.TB, epmd int, ownsEpmd bool, cookie string, opts ...Option) *Node {
	t.Helper()
	dir, err := os.MkdirTemp("", "rabbittest-")
	if err != nil {
		t.Fatalf("rabbittest: %v", err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	n := &Node{
		t: t, dir: dir,
		name: fmt.Sprintf("bustest%d_%d@localhost", os.Getpid(), seq.Add(1)),
		amqp: serverproc.FreePort(t), dist: serverproc.FreePort(t), epmd: epmd, ownsEpmd: ownsEpmd,
		// The group: helpers of the VM (erl_child_setup) are frozen and
		// stopped with it.
		proc: serverproc.Proc{Group: true, StopTimeout: stopTimeout},
	}
	for _, o := range opts {
		o(n)
	}
	if err := n.writeConfig(); err != nil {
		t.Fatalf("rabbittest: %v", err)
	}
	if cookie != "" {
		if err := os.WriteFile(filepath.Join(dir, "home", ".erlang.cookie"), []byte(cookie), 0o400); err != nil {
			t.Fatalf("rabbittest: %v", err)
		}
	}
	t.Cleanup(n.stop)
	return n
}

// URL returns the amqp:// URL of the node's default virtual host, as the
// user guest.
func (n *Node) URL() string { return "amqp://guest:guest@" + n.Addr() + "/" }

// ManagementURL returns the base URL of the node's management API (the
// rabbitmq_management plugin, on a free 127.0.0.1 port), of a node
// started WithManagement.
func (n *Node) ManagementURL() string {
	return "http://" + net.JoinHostPort("127.0.0.1", strconv.Itoa(n.mgmt))
}

// InspectURL returns URL with the management parameter that lets the
// backend inspect the node (backend.Inspector), of a node started
// WithManagement.
func (n *Node) InspectURL() string { return n.URL() + "?management=" + n.ManagementURL() }

// Addr returns the node's AMQP host:port.
func (n *Node) Addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(n.amqp)) }

// Kill stops the node as a crash does (SIGKILL) and waits until it is
// gone; its data stays for Restart.
func (n *Node) Kill() { n.proc.Stop(syscall.SIGKILL) }

// SaveRaftMeta makes the node write the Raft state of its quorum queues
// kept in dets tables to disk now: their metadata (term and vote, which
// RabbitMQ saves every five seconds) and the directory of Raft servers
// (ra_directory_reverse, which dets saves only every three minutes). A
// node killed before a new quorum queue's server is in the saved
// directory brings the queue back empty, as a follower of term 0 that
// never starts an election (RabbitMQ 3.10): its publishes wait for a
// leader that never comes. It also writes out Mnesia's transaction log
// (latest_log, a disk_log that holds writes back up to two seconds),
// where the node keeps its queues, exchanges and bindings: a node killed
// before a new binding is written comes back without it, and confirms
// the messages published to the exchange as routed nowhere. A test that
// kills the node to see how clients recover, not to see that, calls
// SaveRaftMeta first.
func (n *Node) SaveRaftMeta() error {
	out, err := n.Ctl("eval", "[ok = dets:sync(T) || T <- dets:all()], ok = disk_log:sync(latest_log), ok.")
	if err != nil {
		return fmt.Errorf("rabbittest: save the raft metadata: %w: %s", err, out)
	}
	return nil
}

// Restart starts the node again with its data, killing it first if it is
// still running, and waits until it accepts connections.
func (n *Node) Restart() {
	n.t.Helper()
	n.Kill()
	if err := n.launch(); err != nil {
		n.t.Fatalf("rabbittest: restart: %v", err)
	}
}

// Pause freezes the node (SIGSTOP to its process group): it keeps its
// connections and listening socket but answers nothing until Resume.
// Pausing a node that is not running does nothing.
func (n *Node) Pause() {
	if err := n.proc.Pause(); err != nil && !errors.Is(err, serverproc.ErrNotRunning) {
		n.t.Errorf("rabbittest: pause: %v", err)
	}
}

// Resume lets a paused node run again. Resuming a node that is not paused
// does nothing.
func (n *Node) Resume() { n.proc.Resume() }

// Ctl runs rabbitmqctl with args against the node and returns its
// combined output.
func (n *Node) Ctl(args ...string) (string, error) {
	cmd := exec.Command(n.sbin("rabbitmqctl"), append([]string{"-n", n.name}, args...)...)
	cmd.Dir = n.dir // where a crash dump of the tool lands
	cmd.Env = n.env()
	out, err := cmd.CombinedOutput()
	return string(out), err
}

func (n *Node) stop() {
	n.proc.Stop(syscall.SIGTERM)
	n.epmdProc.Stop(syscall.SIGKILL)
}

// writeConfig writes the node's configuration: its ports, its plugins.
func (n *Node) writeConfig() error {
	for _, d := range []string{"mnesia", "log", "home"} {
		if err := os.MkdirAll(filepath.Join(n.dir, d), 0o700); err != nil {
			return err
		}
	}
	plugins, mgmt := "[].", ""
	if n.mgmt != 0 {
		plugins = "[rabbitmq_management]."
		mgmt = fmt.Sprintf("management.tcp.ip = 127.0.0.1\nmanagement.tcp.port = %d\n", n.mgmt)
	}
	conf := mgmt + fmt.Sprintf("listeners.tcp.default = 127.0.0.1:%d\n"+
		"loopback_users = none\n"+
		"disk_free_limit.absolute = 1MB\n"+
		"vm_memory_high_watermark.relative = 0.8\n"+
		"log.console = false\n"+
		"log.file.level = warning\n"+
		"collect_statistics_interval = 500\n", n.amqp)
	if err := os.WriteFile(filepath.Join(n.dir, "enabled_plugins"), []byte(plugins+"\n"), 0o600); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(n.dir, "rabbitmq.conf"), []byte(conf), 0o600)
}

// env is the environment of the node and of rabbitmqctl: everything in
// the temporary directory, nothing from the machine's configuration.
func (n *Node) env() []string {
	return append(os.Environ(),
		"HOME="+filepath.Join(n.dir, "home"),
		"RABBITMQ_NODENAME="+n.name,
		"RABBITMQ_NODE_IP_ADDRESS=127.0.0.1",
		"RABBITMQ_NODE_PORT="+strconv.Itoa(n.amqp),
		"RABBITMQ_DIST_PORT="+strconv.Itoa(n.dist),
		"ERL_EPMD_PORT="+strconv.Itoa(n.epmd),
		"ERL_EPMD_ADDRESS=127.0.0.1",
		"RABBITMQ_MNESIA_BASE="+filepath.Join(n.dir, "mnesia"),
		"RABBITMQ_LOG_BASE="+filepath.Join(n.dir, "log"),
		"RABBITMQ_ENABLED_PLUGINS_FILE="+filepath.Join(n.dir, "enabled_plugins"),
		"RABBITMQ_CONFIG_FILE="+filepath.Join(n.dir, "rabbitmq"),
		"RABBITMQ_ADVANCED_CONFIG_FILE="+filepath.Join(n.dir, "advanced.config"),
		"RABBITMQ_CONF_ENV_FILE="+filepath.Join(n.dir, "rabbitmq-env.conf"),
		"RABBITMQ_PID_FILE="+filepath.Join(n.dir, "rabbitmq.pid"),
		// exec the VM in place of the script, so that the process
		// group and the parent-death signal reach it.
		"RUNNING_UNDER_SYSTEMD=1",
	)
}

// launchNew launches a node that has not run before, and when it exits at
// start (a port taken by another process between its choice and the
// node's bind, which comes seconds into the boot), once more on new
// ports. A node that has run keeps its ports (Restart).
func (n *Node) launchNew() error {
	err := n.launch()
	if !errors.Is(err, serverproc.ErrExitedAtStart) {
		return err
	}
	n.t.Logf("rabbittest: %s: once more on new ports after: %v", n.name, err)
	n.proc.Stop(syscall.SIGKILL)
	n.amqp, n.dist = serverproc.FreePort(n.t), serverproc.FreePort(n.t)
	if n.mgmt != 0 {
		n.mgmt = serverproc.FreePort(n.t)
	}
	if err := n.writeConfig(); err != nil {
		return err
	}
	return n.launch()
}

func (n *Node) launch() error {
	if err := n.startEpmd(); err != nil {
		return err
	}
	logf, err := os.OpenFile(filepath.Join(n.dir, "server.log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	defer logf.Close()
	cmd := exec.Command(n.sbin("rabbitmq-server"))
	cmd.Dir = n.dir
	cmd.Env = n.env()
	cmd.SysProcAttr = procAttr()
	cmd.Stdout, cmd.Stderr = logf, logf
	done, err := n.proc.Start(cmd)
	if err != nil {
		return fmt.Errorf("start rabbitmq-server: %w", err)
	}
	return serverproc.WaitReady("rabbitmq on "+n.Addr(), startTimeout, done, filepath.Join(n.dir, "server.log"), n.ready)
}

// startEpmd starts the node's epmd once; it outlives restarts of the node.
func (n *Node) startEpmd() error {
	if !n.ownsEpmd || n.epmdProc.Done() != nil {
		return nil
	}
	bin, err := exec.LookPath("epmd")
	if err != nil {
		return fmt.Errorf("epmd not found on PATH (Debian package erlang-base); run `make test`, which installs rabbitmq-server: %w", err)
	}
	cmd := exec.Command(bin, "-port", strconv.Itoa(n.epmd), "-address", "127.0.0.1")
	cmd.Env = n.env()
	cmd.SysProcAttr = procAttr()
	if _, err := n.epmdProc.Start(cmd); err != nil {
		return fmt.Errorf("start epmd: %w", err)
	}
	return nil
}

// ready reports whether the node accepts an AMQP connection and, with
// the management plugin on, a connection to its management API.
func (n *Node) ready() error {
	c, err := amqp.DialConfig(n.URL(), amqp.Config{Dial: amqp.DefaultDial(time.Second)})
	if err != nil {
		return err
	}
	_ = c.Close()
	if n.mgmt == 0 {
		return nil
	}
	m, err := net.DialTimeout("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(n.mgmt)), time.Second)
	if err != nil {
		return fmt.Errorf("management API: %w", err)
	}
	_ = m.Close()
	return nil
}

// sbin finds one of RabbitMQ's scripts.
func (n *Node) sbin(name string) string {
	for _, dir := range []string{"/usr/lib/rabbitmq/bin", "/usr/local/lib/rabbitmq/bin", "/usr/local/sbin", "/usr/sbin"} {
		p := filepath.Join(dir, name)
		if fi, err := os.Stat(p); err == nil && !fi.IsDir() && fi.Mode()&0o111 != 0 {
			return p
		}
	}
	if p, err := exec.LookPath(name); err == nil {
		return p
	}
	n.t.Fatalf("rabbittest: %s not found (/usr/lib/rabbitmq/bin, PATH); run `make test`, which installs rabbitmq-server", name)
	return ""
}
