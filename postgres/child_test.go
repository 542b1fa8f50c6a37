package postgres_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/eventbus-go/bus"
	"github.com/eventbus-go/bus/postgres"
)

// The crash tests re-execute the test binary as a publisher or a consumer
// that the parent kills with SIGKILL. These variables configure it.
const (
	childEnv        = "PGBUS_TEST_CHILD" // "publisher" or "consumer"
	childURLEnv     = "PGBUS_TEST_CHILD_URL"
	childTopicEnv   = "PGBUS_TEST_CHILD_TOPIC"
	childGroupEnv   = "PGBUS_TEST_CHILD_GROUP"
	childAckTimeout = time.Second
)

func runChild(role string) {
	fail := func(err error) {
		fmt.Fprintln(os.Stderr, "child:", err)
		os.Exit(2)
	}
	ctx := context.Background()
	url, topic := os.Getenv(childURLEnv), os.Getenv(childTopicEnv)
	switch role {
	case "publisher":
		if err := childPublish(ctx, url, topic); err != nil {
			fail(err)
		}
	case "consumer":
		if err := childConsume(ctx, url, topic, os.Getenv(childGroupEnv)); err != nil {
			fail(err)
		}
	default:
		fail(fmt.Errorf("unknown role %q", role))
	}
}

// childPublish publishes through PublishTx until it is killed: keyed
// messages in committed transactions (printing "COMMITTED <id>" once the
// commit returned) and in rolled-back ones ("ROLLEDBACK <id>").
func childPublish(ctx context.Context, url, topic string) error {
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return err
	}
	for i := 0; ; i++ {
		tx, err := conn.Begin(ctx)
		if err != nil {
			return err
		}
		m := &bus.Message{ID: fmt.Sprintf("tx-%d", i), Key: fmt.Sprintf("k%d", i%4), Payload: []byte("x")}
		if err := postgres.PublishTx(ctx, tx, topic, m); err != nil {
			return err
		}
		if i%3 == 2 {
			if err := tx.Rollback(ctx); err != nil {
				return err
			}
			fmt.Printf("ROLLEDBACK %s\n", m.ID)
			continue
		}
		if err := tx.Commit(ctx); err != nil {
			return err
		}
		fmt.Printf("COMMITTED %s\n", m.ID)
	}
}

// childConsume consumes the topic, printing "GOT <id>" for each message
// its handler finishes; after 20 every handler blocks, printing "STUCK
// <id>", until the parent kills the process.
func childConsume(ctx context.Context, url, topic, group string) error {
	b, err := bus.Open(ctx, url)
	if err != nil {
		return err
	}
	var mu sync.Mutex
	done := 0
	block := make(chan struct{}) // never closed: the process is killed
	_, err = b.Subscribe(ctx, topic, func(_ context.Context, d *bus.Delivery) error {
		mu.Lock()
		if done >= 20 {
			fmt.Printf("STUCK %s\n", d.ID)
			mu.Unlock()
			<-block
		}
		done++
		fmt.Printf("GOT %s\n", d.ID)
		mu.Unlock()
		return nil
	}, bus.WithGroup(group), bus.WithAckTimeout(childAckTimeout), bus.WithMaxInFlight(4), bus.WithStartFrom(bus.StartOldest))
	if err != nil {
		return err
	}
	<-block
	return nil
}

// child is a running child process and the lines it printed.
type child struct {
	cmd   *exec.Cmd
	mu    sync.Mutex
	lines []string
	done  chan struct{}
}

// startChild starts the test binary as role; it is killed when the test
// ends if it still runs.
func startChild(t *testing.T, role, url, topic, group string) *child {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"="+role, childURLEnv+"="+url, childTopicEnv+"="+topic, childGroupEnv+"="+group)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start(), "start the %s child", role)
	c := &child{cmd: cmd, done: make(chan struct{})}
	go c.read(out)
	t.Cleanup(func() { c.kill(t) })
	return c
}

func (c *child) read(r io.Reader) {
	defer close(c.done)
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		c.mu.Lock()
		c.lines = append(c.lines, sc.Text())
		c.mu.Unlock()
	}
}

// waitFor waits until the child printed n lines starting with prefix.
func (c *child) waitFor(t *testing.T, prefix string, n int, within time.Duration) {
	t.Helper()
	require.Eventually(t, func() bool { return len(c.with(prefix)) >= n }, within, 5*time.Millisecond,
		"the child printed %d %q lines", n, prefix)
}

// with returns the IDs of the lines starting with prefix.
func (c *child) with(prefix string) []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var ids []string
	for _, l := range c.lines {
		if rest, ok := strings.CutPrefix(l, prefix+" "); ok {
			ids = append(ids, rest)
		}
	}
	return ids
}

// kill SIGKILLs the child and waits for it and its output.
func (c *child) kill(t *testing.T) {
	if c.cmd.ProcessState != nil {
		return
	}
	_ = c.cmd.Process.Kill()
	_ = c.cmd.Wait()
	select {
	case <-c.done:
	case <-time.After(5 * time.Second):
		t.Error("the child's output did not end after it was killed")
	}
}
