package kafkatest

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/eventbus-go/bus/internal/testkit/serverproc"
)

// Version is the Apache Kafka version scripts/setup.sh fetches.
const Version = "4.4.0"

// startTimeout bounds how long a node may go without answering and
// without writing to its log: a JVM that a loaded machine starves starts
// slowly but keeps logging, and is waited for up to startCap; one starts in
// about three seconds on a quiet machine.
const startTimeout = 90 * time.Second

// startCap bounds a node's start however it progresses.
const startCap = 5 * time.Minute

// The controller quorum's timeouts: long enough that a node whose JVM a
// loaded machine starves for seconds keeps its leader, short enough that
// a killed leader is replaced within the tests' failover bounds.
const (
	quorumFetchTimeoutMs    = 8000
	quorumElectionTimeoutMs = 3000
)

// stopTimeout bounds a graceful stop before the node is killed.
const stopTimeout = 15 * time.Second

// Node is one private Kafka node (broker and controller) owned by a test.
// Its methods are safe for concurrent use.
type Node struct {
	t    testing.TB
	c    *Cluster
	id   int
	dir  string
	port int // client listener
	ctrl int // controller listener
	proc serverproc.Proc
}

// Cluster is a set of nodes that form one Kafka cluster.
type Cluster struct {
	Nodes []*Node
	id    string
}

// Start starts one node and waits until it answers metadata requests; it
// is stopped, and its directory removed, when the test ends.
func Start(t testing.TB) *Node {
	t.Helper()
	return StartCluster(t, 1).Nodes[0]
}

// StartCluster starts n nodes as one cluster, each a broker and a voter of
// the controller quorum, and waits until every broker is in the cluster's
// metadata. Topics are replicated to min(n, 3) nodes and take a write
// (acks=all) once min(n, 2) of them have it, so that a node killed does
// not take what it alone had acknowledged.
func StartCluster(t testing.TB, n int) *Cluster {
	t.Helper()
	libs := libDir(t)
	c := &Cluster{id: clusterID(t)}
	for i := range n {
		dir, err := os.MkdirTemp("", "kafkatest-")
		if err != nil {
			t.Fatalf("kafkatest: %v", err)
		}
		t.Cleanup(func() { _ = os.RemoveAll(dir) })
		nd := &Node{t: t, c: c, id: i + 1, dir: dir, port: serverproc.FreePort(t), ctrl: serverproc.FreePort(t)}
		nd.proc = serverproc.Proc{Group: true, StopTimeout: stopTimeout}
		c.Nodes = append(c.Nodes, nd)
	}
	// The nodes stop together: one stopped after the others lost the
	// controller quorum would wait for it until its stop timeout.
	t.Cleanup(func() { c.each(func(nd *Node) error { nd.stop(); return nil }) })
	if err := c.each(func(nd *Node) error {
		if err := nd.writeConfig(); err != nil {
			return err
		}
		return nd.format(libs)
	}); err != nil {
		t.Fatalf("kafkatest: %v", err)
	}
	// A cluster that fails to start (a node's port taken between its
	// choice and its bind) is stopped and started once more on new ports.
	var err error
	for attempt := range 2 {
		if attempt > 0 {
			t.Logf("kafkatest: cluster start failed, once more on new ports: %v", err)
			err = c.each(func(nd *Node) error {
				nd.stop()
				nd.port, nd.ctrl = serverproc.FreePort(t), serverproc.FreePort(t)
				return nil
			})
			if err == nil {
				err = c.each(func(nd *Node) error { return nd.writeConfig() })
			}
			if err != nil {
				break
			}
		}
		if err = c.each(func(nd *Node) error { return nd.launch(libs) }); err != nil {
			c.logTails(t)
			continue
		}
		if err = waitStarted("kafka cluster", nil, c.Nodes, c.allBrokers); err == nil {
			return c
		}
		c.logTails(t)
	}
	t.Fatalf("kafkatest: %v", err)
	return nil
}

// logTails logs the last lines of every node's log, for a start that
// failed.
func (c *Cluster) logTails(t testing.TB) {
	t.Helper()
	for _, nd := range c.Nodes {
		t.Logf("kafkatest: the last lines of node %d's log (%s):\n%s", nd.id, nd.logPath(), lastLines(nd.logPath(), logTailLines))
	}
}

// logTailLines is how many lines of each node's log a failed start shows.
const logTailLines = 40

// lastLines returns the last n lines of the file at path.
func lastLines(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Sprintf("(no log: %v)", err)
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// each runs f on every node at once and returns the first error.
func (c *Cluster) each(f func(*Node) error) error {
	var wg sync.WaitGroup
	errs := make([]error, len(c.Nodes))
	for i, nd := range c.Nodes {
		wg.Go(func() { errs[i] = f(nd) })
	}
	wg.Wait()
	return errors.Join(errs...)
}

// Addrs returns every node's client host:port.
func (c *Cluster) Addrs() []string {
	out := make([]string, len(c.Nodes))
	for i, nd := range c.Nodes {
		out[i] = nd.Addr()
	}
	return out
}

// URL returns a kafka:// URL that names every node.
func (c *Cluster) URL() string { return "kafka://" + strings.Join(c.Addrs(), ",") }

// Addr returns the node's client host:port.
func (n *Node) Addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(n.port)) }

// URL returns the kafka:// URL of the node.
func (n *Node) URL() string { return "kafka://" + n.Addr() }

// ID returns the node's broker ID.
func (n *Node) ID() int { return n.id }

// Kill stops the node as a crash does (SIGKILL) and waits until it is
// gone; its data stays for Restart.
func (n *Node) Kill() { n.proc.Stop(syscall.SIGKILL) }

// Restart starts the node again with its data, killing it first if it is
// still running, and waits until it answers.
func (n *Node) Restart() {
	n.t.Helper()
	n.Kill()
	if err := n.launch(libDir(n.t)); err != nil {
		n.t.Fatalf("kafkatest: restart: %v", err)
	}
}

// Pause freezes the node (SIGSTOP to its process group): it keeps its
// connections and listening sockets but answers nothing until Resume.
// Pausing a node that is not running does nothing.
func (n *Node) Pause() {
	if err := n.proc.Pause(); err != nil && !errors.Is(err, serverproc.ErrNotRunning) {
		n.t.Errorf("kafkatest: pause: %v", err)
	}
}

// Resume lets a paused node run again. Resuming a node that is not paused
// does nothing.
func (n *Node) Resume() { n.proc.Resume() }

func (n *Node) stop() { n.proc.Stop(syscall.SIGTERM) }

func (n *Node) logPath() string { return filepath.Join(n.dir, "server.log") }

func (n *Node) writeConfig() error {
	var voters []string
	for _, o := range n.c.Nodes {
		voters = append(voters, fmt.Sprintf("%d@127.0.0.1:%d", o.id, o.ctrl))
	}
	repl := min(len(n.c.Nodes), 3)
	conf := strings.Join([]string{
		"process.roles=broker,controller",
		"node.id=" + strconv.Itoa(n.id),
		"controller.quorum.voters=" + strings.Join(voters, ","),
		fmt.Sprintf("listeners=PLAINTEXT://127.0.0.1:%d,CONTROLLER://127.0.0.1:%d", n.port, n.ctrl),
		fmt.Sprintf("advertised.listeners=PLAINTEXT://127.0.0.1:%d", n.port),
		"controller.listener.names=CONTROLLER",
		// A JVM starved on a loaded machine misses the quorum's default
		// 2 s fetch timeout: its leader resigns and the voters elect again
		// and again, and the brokers, which open their listeners only
		// once a controller registered them, answer nothing meanwhile.
		"controller.quorum.fetch.timeout.ms=" + strconv.Itoa(quorumFetchTimeoutMs),
		"controller.quorum.election.timeout.ms=" + strconv.Itoa(quorumElectionTimeoutMs),
		"listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
		"inter.broker.listener.name=PLAINTEXT",
		"log.dirs=" + filepath.Join(n.dir, "data"),
		"num.partitions=1",
		"default.replication.factor=" + strconv.Itoa(repl),
		"min.insync.replicas=" + strconv.Itoa(min(len(n.c.Nodes), 2)),
		"offsets.topic.replication.factor=" + strconv.Itoa(repl),
		"offsets.topic.num.partitions=4",
		"offset.metadata.max.bytes=65536",
		"transaction.state.log.replication.factor=" + strconv.Itoa(repl),
		"transaction.state.log.min.isr=1",
		"share.coordinator.state.topic.replication.factor=" + strconv.Itoa(repl),
		"share.coordinator.state.topic.min.isr=1",
		"group.initial.rebalance.delay.ms=0",
		"group.consumer.heartbeat.interval.ms=500",
		"group.consumer.min.heartbeat.interval.ms=500",
		"group.consumer.session.timeout.ms=6000",
		"group.consumer.min.session.timeout.ms=6000",
		"group.min.session.timeout.ms=1000",
		"auto.create.topics.enable=false",
		"delete.topic.enable=true",
		"log.segment.bytes=16777216",
		"log.flush.interval.messages=1",
		"num.network.threads=2",
		"num.io.threads=2",
		"background.threads=2",
		"log.cleaner.enable=false",
		"log.retention.check.interval.ms=1000",
	}, "\n") + "\n"
	if err := os.WriteFile(filepath.Join(n.dir, "server.properties"), []byte(conf), 0o600); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(n.dir, "log4j2.properties"), []byte(log4jConfig), 0o600)
}

// log4jConfig sends the broker's log, at INFO, to its standard output,
// which is the node's server.log.
const log4jConfig = `status = warn
appender.out.type = Console
appender.out.name = out
appender.out.layout.type = PatternLayout
appender.out.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = info
rootLogger.appenderRef.out.ref = out
logger.request.name = kafka.request.logger
logger.request.level = warn
`

// javaArgs is the command line of a JVM running class main with args,
// logging as the log4j2.properties of its working directory says.
func javaArgs(libs, main string, args ...string) []string {
	return append([]string{
		"-Xms64m", "-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
		"-Djava.awt.headless=true", "-Dlog4j2.configurationFile=log4j2.properties",
		"-cp", filepath.Join(libs, "*"), main,
	}, args...)
}

// format formats the node's storage directory for the cluster.
func (n *Node) format(libs string) error {
	// The quorum's voters are static (controller.quorum.voters), so the
	// format takes no controller flags.
	args := []string{"format", "-t", n.c.id, "-c", filepath.Join(n.dir, "server.properties"), "--ignore-formatted"}
	cmd := exec.Command(java(), javaArgs(libs, "kafka.tools.StorageTool", args...)...)
	cmd.Dir = n.dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("format the storage of node %d: %v: %s", n.id, err, out)
	}
	return nil
}

func (n *Node) launch(libs string) error {
	logf, err := os.OpenFile(n.logPath(), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	defer logf.Close()
	cmd := exec.Command(java(), javaArgs(libs, "kafka.Kafka", filepath.Join(n.dir, "server.properties"))...)
	cmd.Dir = n.dir
	cmd.SysProcAttr = procAttr()
	cmd.Stdout, cmd.Stderr = logf, logf
	done, err := n.proc.Start(cmd)
	if err != nil {
		return fmt.Errorf("start kafka: %w", err)
	}
	return waitStarted("kafka on "+n.Addr(), done, []*Node{n}, n.ready)
}

// waitStarted waits until ready returns nil, as serverproc.WaitReady
// does, but its startTimeout runs from the last time one of nodes' logs
// grew, within startCap: a start that progresses is not given up.
func waitStarted(name string, done <-chan struct{}, nodes []*Node, ready func() error) error {
	start := time.Now()
	var size int64
	progressed := start
	logPath := nodes[0].logPath()
	for {
		err := ready()
		if err == nil {
			return nil
		}
		select {
		case <-done:
			return fmt.Errorf("%s exited at start: %s", name, serverproc.LogTail(logPath))
		default:
		}
		var total int64
		for _, nd := range nodes {
			if fi, err := os.Stat(nd.logPath()); err == nil {
				total += fi.Size()
			}
		}
		now := time.Now()
		if total != size {
			size, progressed = total, now
		}
		if now.Sub(progressed) > startTimeout || now.Sub(start) > startCap {
			return fmt.Errorf("%s did not answer within %v (its logs last grew %v ago) (%v): %s",
				name, now.Sub(start).Round(time.Second), now.Sub(progressed).Round(time.Second), err, serverproc.LogTail(logPath))
		}
		time.Sleep(20 * time.Millisecond) // polling a process we cannot be notified by
	}
}

// ready reports whether the node answers a metadata request.
func (n *Node) ready() error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_, err := metadata(ctx, []string{n.Addr()})
	return err
}

// allBrokers reports whether every node is a broker of the cluster's
// metadata.
func (c *Cluster) allBrokers() error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	m, err := metadata(ctx, c.Addrs())
	if err != nil {
		return err
	}
	if len(m.Brokers) < len(c.Nodes) {
		return fmt.Errorf("%d of %d brokers registered", len(m.Brokers), len(c.Nodes))
	}
	return nil
}

func metadata(ctx context.Context, seeds []string) (kadm.Metadata, error) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.DialTimeout(time.Second), kgo.RequestRetries(0))
	if err != nil {
		return kadm.Metadata{}, err
	}
	defer cl.Close()
	return kadm.NewClient(cl).BrokerMetadata(ctx)
}

// libDir returns the directory of the broker's jars, failing the test
// when it is missing.
func libDir(t testing.TB) string {
	t.Helper()
	dir := os.Getenv("BUS_KAFKA_LIBS")
	if dir == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			t.Fatalf("kafkatest: %v", err)
		}
		dir = filepath.Join(home, ".m2", "bus-kafka", Version, "libs")
	}
	if _, err := os.Stat(filepath.Join(dir, "kafka_2.13-"+Version+".jar")); err != nil {
		t.Fatalf("kafkatest: the Kafka %s jars are not in %s; run scripts/setup.sh (or `make test`), which fetches them once with Maven", Version, dir)
	}
	return dir
}

// java returns the java binary of JAVA_HOME, or the one on PATH.
func java() string {
	if h := os.Getenv("JAVA_HOME"); h != "" {
		if p := filepath.Join(h, "bin", "java"); fileExists(p) {
			return p
		}
	}
	return "java"
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// clusterID returns a fresh Kafka cluster ID: 16 random bytes in URL-safe
// base64 without padding, not starting with '-' (which the storage tool
// would read as an option).
func clusterID(t testing.TB) string {
	for {
		var b [16]byte
		if _, err := rand.Read(b[:]); err != nil {
			t.Fatalf("kafkatest: %v", err)
		}
		if id := base64.RawURLEncoding.EncodeToString(b[:]); id[0] != '-' {
			return id
		}
	}
}
