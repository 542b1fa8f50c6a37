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
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	bus "github.com/eventbus-go/bus"
	"github.com/eventbus-go/bus/internal/natstest"
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
	}, bus.WithGroup("workers"), bus.WithStartFrom(bus.StartOldest), bus.WithMaxInFlight(4), bus.WithAckTimeout(faultAckTimeout))
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
		bus.WithGroup("workers"), bus.WithStartFrom(bus.StartOldest), bus.WithAckTimeout(faultAckTimeout))
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

// TestFaultServerRestartMidRun stops the server while a publisher and a
// consumer run, then starts it again on the same port and store:
// publishers see errors meanwhile, the consumer resumes by itself, and
// every message whose Publish returned nil is delivered.
func TestFaultServerRestartMidRun(t *testing.T) {
	srv := natstest.Start(t)
	o := isolated(t, srv.URL(), busnats.Options{ReconnectWait: 50 * time.Millisecond, PublishTimeout: 2 * time.Second})
	events := &eventCounter{}
	b := bus.New(connect(t, srv.URL(), o), bus.WithObserver(events))
	t.Cleanup(func() { _ = b.Close(context.Background()) })
	topic := "fault.restart"
	l := newLedger()
	require.NoError(t, b.Publish(context.Background(), topic, &bus.Message{Payload: []byte("create")}))
	_, err := b.Subscribe(context.Background(), topic, recordingHandler(l),
		bus.WithGroup("workers"), bus.WithAckTimeout(faultAckTimeout))
	require.NoError(t, err)

	stop := make(chan struct{})
	pubDone := make(chan struct{})
	var seq atomic.Int64
	go func() {
		defer close(pubDone)
		for {
			select {
			case <-stop:
				return
			default:
			}
			m := &bus.Message{Payload: fmt.Appendf(nil, "m-%d", seq.Add(1))}
			ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
			err := b.Publish(ctx, topic, m)
			cancel()
			l.publish(m.ID, err)
			if err != nil {
				// Do not spin while the server is down.
				select {
				case <-stop:
					return
				case <-time.After(20 * time.Millisecond):
				}
			}
		}
	}()
	require.Eventually(t, func() bool { return l.summary().Acked >= 50 }, 30*time.Second, 10*time.Millisecond, "consumption starts")
	srv.Shutdown()
	require.Eventually(t, func() bool { return l.summary().PublishErrors >= 5 }, 30*time.Second, 10*time.Millisecond, "publishers see errors while the server is down")
	srv.Restart()
	before := l.summary().Published
	require.Eventually(t, func() bool { return l.summary().Published >= before+50 }, 30*time.Second, 10*time.Millisecond, "publishing resumes after the restart")
	close(stop)
	<-pubDone
	waitNoLoss(t, l, 30*time.Second)
	c := l.log(t, "server-restart")
	assert.Zero(t, c.Lost, "lost")
	assert.Positive(t, c.PublishErrors, "publish errors while the server was down")
	assert.Positive(t, events.count(observer.ScopeConnection), "the observer hears about the disconnect and the reconnect")
	t.Logf("observer events: connection=%d receive=%d reclaim=%d", events.count(observer.ScopeConnection), events.count(observer.ScopeReceive), events.count(observer.ScopeReclaim))
}

// TestFaultSlowHandlerExtendsWithoutDuplicates runs handlers for three
// times the ack timeout, extending the lease as they go: no message is
// redelivered.
func TestFaultSlowHandlerExtendsWithoutDuplicates(t *testing.T) {
	srv := natstest.Start(t)
	o := isolated(t, srv.URL(), busnats.Options{})
	b := bus.New(connect(t, srv.URL(), o))
	t.Cleanup(func() { _ = b.Close(context.Background()) })
	const ackTimeout = time.Second
	topic := "fault.slow"
	l := newLedger()
	record := recordingHandler(l)
	_, err := b.Subscribe(context.Background(), topic, func(ctx context.Context, d *bus.Delivery) error {
		if err := record(ctx, d); err != nil {
			return err
		}
		// Work for 3x the ack timeout in steps, extending the lease.
		for range 10 {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(3 * ackTimeout / 10):
			}
			if err := d.Extend(ctx); err != nil {
				return err
			}
		}
		return nil
	}, bus.WithGroup("slow"), bus.WithAckTimeout(ackTimeout), bus.WithMaxInFlight(8))
	require.NoError(t, err)
	const n = 5
	publishAll(t, b, l, topic, n)
	waitNoLoss(t, l, 30*time.Second)
	// A redelivery would come one ack timeout after the last extension.
	require.Never(t, func() bool { return l.summary().Delivered > n }, 2*ackTimeout, 50*time.Millisecond, "no redelivery of extended messages")
	c := l.log(t, "slow-extend")
	assert.Equal(t, n, c.Delivered, "each message handled once")
	assert.Zero(t, c.Duplicate, "duplicate")
	assert.Zero(t, c.Lost, "lost")
}

// TestFaultCloseWithHandlersInFlight closes a subscription while its
// handlers run. When they finish within the close deadline their acks are
// flushed; when the deadline cancels them they are handed back. Either
// way the next member of the group gets exactly the rest.
func TestFaultCloseWithHandlersInFlight(t *testing.T) {
	tests := []struct {
		name       string
		closeAfter time.Duration // close ctx deadline
		finish     bool          // handlers finish on their own before the deadline
	}{
		{name: "HandlersFinish", closeAfter: 20 * time.Second, finish: true},
		{name: "DeadlineCancelsHandlers", closeAfter: 300 * time.Millisecond, finish: false},
	}
	srv := natstest.Start(t)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := isolated(t, srv.URL(), busnats.Options{})
			b := bus.New(connect(t, srv.URL(), o))
			t.Cleanup(func() { _ = b.Close(context.Background()) })
			topic := "fault.close"
			l := newLedger()
			const n, inFlight = 20, 8
			publishAll(t, b, l, topic, n)

			release := make(chan struct{})
			var running atomic.Int32
			sub, err := b.Subscribe(context.Background(), topic, func(ctx context.Context, d *bus.Delivery) error {
				running.Add(1)
				defer running.Add(-1)
				track(l, d)
				select {
				case <-release:
					return nil
				case <-ctx.Done():
					return ctx.Err() // cancelled by Close: handed back for another member
				}
			}, bus.WithGroup("workers"), bus.WithStartFrom(bus.StartOldest), bus.WithMaxInFlight(inFlight), bus.WithAckTimeout(30*time.Second))
			require.NoError(t, err)
			require.Eventually(t, func() bool { return running.Load() == inFlight }, 10*time.Second, 5*time.Millisecond, "%d handlers in flight", inFlight)

			ctx, cancel := context.WithTimeout(context.Background(), tt.closeAfter)
			defer cancel()
			closed := make(chan error, 1)
			go func() { closed <- sub.Close(ctx) }()
			if tt.finish {
				select {
				case err := <-closed:
					t.Fatalf("Close returned (%v) while handlers were running", err)
				case <-time.After(100 * time.Millisecond):
				}
				close(release)
				require.NoError(t, <-closed, "close after the handlers finished")
				assert.Equal(t, inFlight, l.summary().Acked, "the in-flight handlers' acks are flushed")
			} else {
				err := <-closed
				require.Error(t, err, "close past its deadline reports the cancelled handlers")
				assert.Zero(t, running.Load(), "no handler runs after Close returns")
				close(release)
			}

			// The next member of the group gets exactly what is left.
			_, err = b.Subscribe(context.Background(), topic, recordingHandler(l),
				bus.WithGroup("workers"), bus.WithAckTimeout(30*time.Second))
			require.NoError(t, err)
			waitNoLoss(t, l, 30*time.Second)
			c := l.log(t, "close-in-flight/"+tt.name)
			assert.Equal(t, n, c.Acked, "acked")
			if !tt.finish {
				assert.Equal(t, n+inFlight, c.Delivered, "the cancelled in-flight messages are delivered again")
			}
			assert.Zero(t, c.Duplicate, "duplicate")
			assert.Zero(t, c.Lost, "lost")
		})
	}
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
