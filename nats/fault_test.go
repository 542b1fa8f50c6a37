package nats_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	bus "github.com/eventbus-go/bus"
	"github.com/eventbus-go/bus/backend"
	"github.com/eventbus-go/bus/internal/testkit/natstest"
	busnats "github.com/eventbus-go/bus/nats"
	"github.com/eventbus-go/bus/observer"
)

// Environment of the child process of TestFaultKilledConsumerIsRedelivered.
const (
	envChild         = "BUS_NATS_FAULT_CHILD"
	envChildURL      = "BUS_NATS_FAULT_URL"
	envChildPrefix   = "BUS_NATS_FAULT_PREFIX"
	envChildStream   = "BUS_NATS_FAULT_STREAM"
	envChildTopic    = "BUS_NATS_FAULT_TOPIC"
	childHandlingTag = "HANDLING "
)

const faultAckTimeout = 2 * time.Second

// track records the delivery in l, and its settlement when it happens.
func track(l *ledger, d *bus.Delivery) {
	l.deliver(d.ID, d.Attempt)
	d.OnSettle(func(o bus.Outcome, err error) {
		switch {
		case err != nil:
		case o == bus.OutcomeAcked:
			l.ack(d.ID)
		case o == bus.OutcomeDeadLettered:
			l.deadLetter(d.ID)
		}
	})
}

// recordingHandler records every delivery in l and acks it.
func recordingHandler(l *ledger) bus.Handler {
	return func(ctx context.Context, d *bus.Delivery) error {
		track(l, d)
		return nil
	}
}

func publishAll(t *testing.T, b *bus.Bus, l *ledger, topic string, n int) {
	t.Helper()
	for i := range n {
		m := &bus.Message{Payload: fmt.Appendf(nil, "m-%d", i)}
		err := b.Publish(context.Background(), topic, m)
		require.NoError(t, err, "publish %d", i)
		l.publish(m.ID, nil)
	}
}

func waitNoLoss(t *testing.T, l *ledger, within time.Duration) {
	t.Helper()
	require.Eventually(t, func() bool { return l.summary().Lost == 0 }, within, 20*time.Millisecond,
		"every published message must be acked or dead-lettered; still missing: %v", l.lost())
}

// runFaultChild is the consumer process that the parent kills: it joins
// the group, prints the ID of each message it starts handling, and never
// finishes a handler.
func runFaultChild(t *testing.T) {
	o := busnats.Options{SubjectPrefix: os.Getenv(envChildPrefix), StreamPrefix: os.Getenv(envChildStream)}
	be := connect(t, os.Getenv(envChildURL), o)
	b := bus.New(be)
	out := bufio.NewWriter(os.Stdout)
	var mu sync.Mutex
	_, err := b.Subscribe(context.Background(), os.Getenv(envChildTopic), func(ctx context.Context, d *bus.Delivery) error {
		mu.Lock()
		fmt.Fprintf(out, "%s%s %d\n", childHandlingTag, d.ID, d.Attempt)
		out.Flush()
		mu.Unlock()
		<-ctx.Done() // hang until killed
		return ctx.Err()
	}, bus.WithGroup("workers"), bus.WithStartFrom(backend.StartOldest), bus.WithMaxInFlight(4), bus.WithAckTimeout(faultAckTimeout))
	require.NoError(t, err)
	select {} // the parent kills this process
}

// TestFaultKilledConsumerIsRedelivered kills (SIGKILL) a consumer process
// in the middle of its handlers; the server redelivers what it held after
// AckWait to the other member of the group.
func TestFaultKilledConsumerIsRedelivered(t *testing.T) {
	if os.Getenv(envChild) == "1" {
		runFaultChild(t)
		return
	}
	srv := natstest.Start(t)
	o := isolated(t, srv.URL(), busnats.Options{})
	b := bus.New(connect(t, srv.URL(), o))
	t.Cleanup(func() { _ = b.Close(context.Background()) })
	topic := "fault.kill"
	l := newLedger()
	const n = 20
	publishAll(t, b, l, topic, n)

	cmd := exec.Command(os.Args[0], "-test.run=^TestFaultKilledConsumerIsRedelivered$", "-test.count=1")
	cmd.Env = append(os.Environ(), envChild+"=1", envChildURL+"="+srv.URL(),
		envChildPrefix+"="+o.SubjectPrefix, envChildStream+"="+o.StreamPrefix, envChildTopic+"="+topic)
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	cmd.Stderr = os.Stderr
	require.NoError(t, cmd.Start(), "start the consumer process")
	killed := false
	t.Cleanup(func() {
		if !killed {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
	})

	// Wait until the child is inside 4 handlers (its max in flight).
	held := map[string]bool{}
	lines := make(chan string)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	timeout := time.After(30 * time.Second)
	for len(held) < 4 {
		select {
		case line, ok := <-lines:
			require.True(t, ok, "the child exited before handling 4 messages")
			if rest, ok := strings.CutPrefix(line, childHandlingTag); ok {
				id := strings.Fields(rest)[0]
				held[id] = true
				l.deliver(id, 1) // a delivery to the process about to die
			}
		case <-timeout:
			t.Fatalf("the child handled %d messages in 30s, want 4", len(held))
		}
	}
	require.NoError(t, cmd.Process.Signal(syscall.SIGKILL), "kill the consumer")
	killed = true
	err = cmd.Wait()
	var exitErr *exec.ExitError
	require.True(t, errors.As(err, &exitErr), "the child must die by the signal, got %v", err)
	go func() { _, _ = io.Copy(io.Discard, stdout) }()

	// The surviving member: gets the 16 the child never took at once and
	// the 4 it held after AckWait.
	start := time.Now()
	_, err = b.Subscribe(context.Background(), topic, recordingHandler(l),
		bus.WithGroup("workers"), bus.WithStartFrom(backend.StartOldest), bus.WithAckTimeout(faultAckTimeout))
	require.NoError(t, err)
	waitNoLoss(t, l, 30*time.Second)
	c := l.log(t, "sigkill")
	assert.Equal(t, n, c.Published)
	assert.Zero(t, c.Lost, "lost")
	assert.Zero(t, c.Duplicate, "duplicate")
	assert.Equal(t, n, c.Acked, "acked")
	assert.Equal(t, n+len(held), c.Delivered, "every message once, plus the ones the killed process held")
	for id := range held {
		l.mu.Lock()
		attempt := l.redeliveredIDs[id]
		l.mu.Unlock()
		assert.GreaterOrEqual(t, attempt, 2, "message %s held by the killed process must come back as a redelivery", id)
	}
	assert.GreaterOrEqual(t, time.Since(start), faultAckTimeout/2, "held messages come back only after AckWait")
}

// TestFaultMemoryStreamLostOnRestartIsRecreated: a memory stream and its
// consumer vanish with a server restart (Persistent is false for memory
// storage); the subscription re-creates both by itself and goes on with
// what is published afterwards.
func TestFaultMemoryStreamLostOnRestartIsRecreated(t *testing.T) {
	srv := natstest.Start(t)
	o := isolated(t, srv.URL(), busnats.Options{Storage: busnats.StorageMemory, ReconnectWait: 50 * time.Millisecond})
	events := &eventCounter{}
	b := bus.New(connect(t, srv.URL(), o), bus.WithObserver(events))
	t.Cleanup(func() { _ = b.Close(context.Background()) })
	assert.False(t, b.Capabilities().Persistent, "memory storage is not persistent")
	topic := "fault.memory"
	l := newLedger()
	_, err := b.Subscribe(context.Background(), topic, recordingHandler(l), bus.WithGroup("g"), bus.WithAckTimeout(faultAckTimeout))
	require.NoError(t, err)
	publishAll(t, b, l, topic, 5)
	waitNoLoss(t, l, 10*time.Second)

	srv.Restart()
	require.Eventually(t, func() bool { return events.count(observer.ScopeReclaim) > 0 }, 30*time.Second, 20*time.Millisecond,
		"the subscription re-creates the lost stream and consumer and says so")
	// Publishing finds the stream again too.
	require.Eventually(t, func() bool {
		m := &bus.Message{Payload: []byte("after")}
		err := b.Publish(context.Background(), topic, m)
		l.publish(m.ID, err)
		return err == nil
	}, 30*time.Second, 50*time.Millisecond, "publish after the restart")
	waitNoLoss(t, l, 30*time.Second)
	c := l.log(t, "memory-restart")
	assert.Zero(t, c.Lost, "messages published after the re-creation are delivered")
}
