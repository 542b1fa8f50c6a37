// Package broadcasttest proves broadcast subscriptions across processes:
// Run starts three child processes (the test binary, re-executed), each
// with a broadcast subscription on one topic, publishes a numbered
// stream, SIGKILLs one child in the middle of it, checks that the live
// children got every message, and waits for the dead child's group to
// be gone, in the bus's inspection and in the broker's own view, within
// the bound docs/semantics.md states: 1.5 times the expiry.
//
// A package using it calls RunChild from its TestMain when IsChild
// reports true.
package broadcasttest

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/eventbus-go/bus"
)

// The child's configuration, from its parent.
const (
	envURL    = "BUS_BROADCASTTEST_URL"
	envTopic  = "BUS_BROADCASTTEST_TOPIC"
	envExpiry = "BUS_BROADCASTTEST_EXPIRY"
	// envHold, when set, is how many messages the child handles before
	// its handlers block until it is killed, holding their deliveries.
	envHold = "BUS_BROADCASTTEST_HOLD"
)

// Lines a child prints.
const (
	lineReady  = "READY"  // READY <group>: subscribed
	lineGot    = "GOT"    // GOT <id>: handled
	lineHeld   = "HELD"   // HELD <id>: its handler blocks until the kill
	lineFailed = "FAILED" // FAILED <error>: the subscription ended
	lineClosed = "CLOSED" // CLOSED <error or "ok">: Close returned
)

// Children and messages of Run.
const (
	children = 3
	messages = 60
	// killAfter is how many messages are published before the victim is
	// killed; the rest follow the kill.
	killAfter = 20
	// sweepSlack is what Run allows beyond the documented bound for the
	// sweep's own round trips and the scheduling of a loaded machine.
	sweepSlack = 3 * time.Second
	// waitFor bounds each wait for the children.
	waitFor = 30 * time.Second
)

// IsChild reports whether the process is a child Run started.
func IsChild() bool { return os.Getenv(envURL) != "" }

// RunChild is the child's body: it opens the bus of its URL (the test
// binary registers the backend), subscribes in broadcast to the topic
// with the expiry, prints READY <group> and GOT <id> for every message
// it handles, and closes the subscription once its stdin ends. The
// victim (envHold set) blocks in its handlers after that many messages,
// printing HELD <id>, so that it dies holding unsettled deliveries. It
// exits the process.
func RunChild() {
	fail := func(err error) {
		fmt.Fprintln(os.Stderr, "broadcasttest child:", err)
		os.Exit(2)
	}
	expiry, err := time.ParseDuration(os.Getenv(envExpiry))
	if err != nil {
		fail(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	b, err := bus.Open(ctx, os.Getenv(envURL))
	if err != nil {
		fail(err)
	}
	hold := -1
	if h := os.Getenv(envHold); h != "" {
		if hold, err = strconv.Atoi(h); err != nil {
			fail(err)
		}
	}
	var mu sync.Mutex
	handled := 0
	block := make(chan struct{}) // never closed: the victim is killed
	out := bufio.NewWriter(os.Stdout)
	println := func(format string, args ...any) {
		mu.Lock()
		fmt.Fprintf(out, format+"\n", args...)
		_ = out.Flush()
		mu.Unlock()
	}
	// The subscription runs until Close: its ctx never ends.
	sub, err := b.Subscribe(context.Background(), os.Getenv(envTopic), func(_ context.Context, d *bus.Delivery) error {
		mu.Lock()
		held := hold >= 0 && handled >= hold
		handled++
		mu.Unlock()
		if held {
			println("%s %s", lineHeld, d.ID)
			<-block
		}
		println("%s %s", lineGot, d.ID)
		return nil
	}, bus.WithBroadcast(), bus.WithBroadcastExpiry(expiry))
	if err != nil {
		fail(err)
	}
	cancel()
	println("%s %s", lineReady, sub.Group())
	go func() {
		<-sub.Done()
		if err := sub.Err(); err != nil {
			println("%s %v", lineFailed, err)
		}
	}()
	_, _ = io.Copy(io.Discard, os.Stdin)
	ctx, cancel = context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	result := "ok"
	if err := b.Close(ctx); err != nil {
		result = err.Error()
	}
	println("%s %s", lineClosed, result)
	os.Exit(0)
}

// Config is what Run needs of a backend.
type Config struct {
	// URL opens the backend, in the test and in the children.
	URL string
	// Topic is the topic the children subscribe to; no other test uses it.
	Topic string
	// Expiry is the children's WithBroadcastExpiry.
	Expiry time.Duration
	// Leftovers lists what the broker itself still holds of group on
	// topic (its consumer group, consumers, pending entries or delivery
	// rows, its lease), read with the broker's own inspection rather
	// than the backend's Inspector; empty once the group is gone.
	Leftovers func(ctx context.Context, topic, group string) ([]string, error)
}

// Result is what Run measured.
type Result struct {
	// Gone is the time from the SIGKILL to the dead child's group gone
	// from both the bus's inspection and the broker's own view.
	Gone time.Duration
	// Bound is the documented bound: 1.5 times the expiry.
	Bound time.Duration
	// Duplicates is how many messages a live child handled more than once.
	Duplicates int
}

// Run starts the children, publishes, kills one and checks that the live
// ones got every message and that the dead one's group is gone within
// the bound (plus sweepSlack).
func Run(t *testing.T, c Config) Result {
	t.Helper()
	require.NotNil(t, c.Leftovers, "Config.Leftovers")
	ctx, cancel := context.WithTimeout(context.Background(), 2*waitFor)
	defer cancel()
	pub, err := bus.Open(ctx, c.URL)
	require.NoError(t, err, "open the publisher's bus")
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), waitFor)
		defer cancel()
		_ = pub.Close(ctx)
	})

	kids := make([]*child, children)
	for i := range kids {
		hold := ""
		if i == 0 {
			hold = strconv.Itoa(killAfter / 2)
		}
		kids[i] = start(t, c, hold)
	}
	groups := make([]string, children)
	for i, k := range kids {
		k.waitFor(t, lineReady, 1)
		groups[i] = k.with(lineReady)[0]
		require.True(t, strings.HasPrefix(groups[i], "_broadcast."), "child %d's group %q", i, groups[i])
	}
	victim, live := kids[0], kids[1:]
	dead := groups[0]

	ids := make([]string, 0, messages)
	publish := func(from, to int) {
		for i := from; i < to; i++ {
			m := &bus.Message{ID: fmt.Sprintf("bc-%03d", i), Payload: fmt.Appendf(nil, "%d", i)}
			require.NoError(t, pub.Publish(ctx, c.Topic, m), "publish %d", i)
			ids = append(ids, m.ID)
		}
	}
	publish(0, killAfter)
	// Mid-stream: the victim handles part of the stream and dies in the
	// middle of its next handlers, their deliveries unsettled.
	victim.waitFor(t, lineGot, killAfter/2)
	victim.waitFor(t, lineHeld, 1)
	before, err := c.Leftovers(ctx, c.Topic, dead)
	require.NoError(t, err)
	assert.NotEmpty(t, before, "the broker's view shows the victim's group")
	require.NoError(t, victim.cmd.Process.Signal(syscall.SIGKILL), "kill the victim")
	killedAt := time.Now()
	victim.wait(t)
	t.Logf("killed child 0 (group %s) after it handled %d of %d messages, in %d handlers; the broker's view of its group then: %v",
		dead, len(victim.with(lineGot)), killAfter, len(victim.with(lineHeld)), strings.Join(before, "; "))
	publish(killAfter, messages)

	res := Result{Bound: c.Expiry * 3 / 2}
	for i, k := range live {
		k.waitForIDs(t, ids)
		got := k.with(lineGot)
		res.Duplicates += len(got) - len(distinct(got))
		assert.Empty(t, k.with(lineFailed), "child %d's subscription ended", i+1)
	}

	// The dead child's group is gone from the bus's inspection and from
	// the broker's own view; the live children's groups stay.
	var left []string
	gone := func() bool {
		left = left[:0]
		gs, err := pub.Groups(ctx, c.Topic)
		if err != nil {
			left = append(left, "Groups: "+err.Error())
			return false
		}
		for _, g := range gs {
			if g.Name == dead {
				left = append(left, fmt.Sprintf("Groups lists %s (consumers %v, pending %v)", g.Name, g.Consumers, g.Pending))
			}
		}
		more, err := c.Leftovers(ctx, c.Topic, dead)
		if err != nil {
			more = []string{"Leftovers: " + err.Error()}
		}
		left = append(left, more...)
		return len(left) == 0
	}
	deadline := killedAt.Add(res.Bound + sweepSlack)
	for !gone() {
		require.True(t, time.Now().Before(deadline), "%v after the kill (bound %v + %v), the dead child's group is left: %v",
			time.Since(killedAt).Round(time.Millisecond), res.Bound, sweepSlack, left)
		time.Sleep(20 * time.Millisecond) // polling the broker, not synchronising
	}
	res.Gone = time.Since(killedAt)
	gs, err := pub.Groups(ctx, c.Topic)
	require.NoError(t, err)
	names := make([]string, 0, len(gs))
	for _, g := range gs {
		names = append(names, g.Name)
	}
	assert.Subset(t, names, groups[1:], "the live children's groups stay")
	for _, g := range groups[1:] {
		more, err := c.Leftovers(ctx, c.Topic, g)
		require.NoError(t, err)
		assert.NotEmpty(t, more, "the broker's view shows the live group %s", g)
		t.Logf("the broker's view of live group %s: %s", g, strings.Join(more, "; "))
	}

	// Closing the live children deletes their groups: nothing is left.
	for _, k := range live {
		k.close(t)
	}
	gs, err = pub.Groups(ctx, c.Topic)
	require.NoError(t, err)
	assert.Empty(t, gs, "groups left after every child closed or died")
	for _, g := range groups {
		more, err := c.Leftovers(ctx, c.Topic, g)
		require.NoError(t, err)
		assert.Empty(t, more, "the broker still holds of %s", g)
	}
	t.Logf("dead child's group gone %v after the SIGKILL (bound %v); %d messages to each of %d live children, %d duplicates",
		res.Gone.Round(time.Millisecond), res.Bound, messages, len(live), res.Duplicates)
	return res
}

// child is a running child and the lines it printed.
type child struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	done  chan struct{} // closed once its stdout ended
	mu    sync.Mutex
	lines []string
}

// start starts a child; hold is its envHold ("" for none).
func start(t *testing.T, c Config, hold string) *child {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), envURL+"="+c.URL, envTopic+"="+c.Topic, envExpiry+"="+c.Expiry.String(), envHold+"="+hold)
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	require.NoError(t, err)
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start(), "start a child")
	k := &child{cmd: cmd, stdin: stdin, done: make(chan struct{})}
	go k.read(out)
	t.Cleanup(func() {
		if k.cmd.ProcessState == nil {
			_ = k.cmd.Process.Kill()
			k.wait(t)
		}
	})
	return k
}

func (k *child) read(r io.Reader) {
	defer close(k.done)
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		k.mu.Lock()
		k.lines = append(k.lines, sc.Text())
		k.mu.Unlock()
	}
}

// with returns what follows prefix on the lines starting with it.
func (k *child) with(prefix string) []string {
	k.mu.Lock()
	defer k.mu.Unlock()
	var rest []string
	for _, l := range k.lines {
		if r, ok := strings.CutPrefix(l, prefix+" "); ok {
			rest = append(rest, r)
		}
	}
	return rest
}

// all returns the child's lines.
func (k *child) all() []string {
	k.mu.Lock()
	defer k.mu.Unlock()
	return slices.Clone(k.lines)
}

// waitFor waits until the child printed n lines starting with prefix.
func (k *child) waitFor(t *testing.T, prefix string, n int) {
	t.Helper()
	require.Eventually(t, func() bool { return len(k.with(prefix)) >= n }, waitFor, 10*time.Millisecond,
		"the child printed %d %s lines; it printed %v", n, prefix, k.all())
}

// waitForIDs waits until the child handled every one of ids.
func (k *child) waitForIDs(t *testing.T, ids []string) {
	t.Helper()
	missing := func() []string {
		got := distinct(k.with(lineGot))
		var m []string
		for _, id := range ids {
			if _, ok := got[id]; !ok {
				m = append(m, id)
			}
		}
		return m
	}
	require.Eventually(t, func() bool { return len(missing()) == 0 }, waitFor, 10*time.Millisecond,
		"a live child must get every message; missing %v", missing())
}

// wait waits for the child to exit and its output to end.
func (k *child) wait(t *testing.T) {
	t.Helper()
	_ = k.cmd.Wait()
	select {
	case <-k.done:
	case <-time.After(waitFor):
		t.Error("a child's output did not end after it exited")
	}
}

// close ends the child's stdin, so that it closes its subscription, and
// waits for it to exit.
func (k *child) close(t *testing.T) {
	t.Helper()
	require.NoError(t, k.stdin.Close())
	k.waitFor(t, lineClosed, 1)
	k.wait(t)
	assert.Equal(t, []string{"ok"}, k.with(lineClosed), "the child's Close")
	assert.Equal(t, 0, k.cmd.ProcessState.ExitCode(), "the child's exit code")
}

func distinct(ids []string) map[string]struct{} {
	m := make(map[string]struct{}, len(ids))
	for _, id := range ids {
		m[id] = struct{}{}
	}
	return m
}
