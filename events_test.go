package bus_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/eventbus-go/bus"
	"github.com/eventbus-go/bus/backend"
	"github.com/eventbus-go/bus/inmemory"
	"github.com/eventbus-go/bus/internal/lifecycle"
	"github.com/eventbus-go/bus/observer"
)

const eventsTopic = "bus.events"

// eventsBus is a bus over a fresh in-memory backend with lifecycle events
// on and opts, and the backend's Inspector to read them.
func eventsBus(t *testing.T, opts ...bus.Option) (*bus.Bus, backend.Inspector) {
	t.Helper()
	be, err := inmemory.New(nil)
	require.NoError(t, err)
	b := bus.New(be, append([]bus.Option{bus.WithEvents(eventsTopic), bus.WithObserver(observer.Nop())}, opts...)...)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		assert.NoError(t, b.Close(ctx), "close")
	})
	return b, be
}

// failsUntil is a handler that fails for good until ok is set.
func failsUntil(ok *atomic.Bool) bus.Handler {
	return func(ctx context.Context, d *bus.Delivery) error {
		if !ok.Load() {
			return bus.Reject(errors.New("bad order"))
		}
		return nil
	}
}

// waitKinds waits until the history of id has the kinds want, in order,
// and returns it.
func waitKinds(t *testing.T, in backend.Inspector, id string, want ...lifecycle.Kind) lifecycle.History {
	t.Helper()
	var h lifecycle.History
	var got []lifecycle.Kind
	require.Eventually(t, func() bool {
		var err error
		h, err = lifecycle.Read(context.Background(), in, eventsTopic, lifecycle.Query{ID: id})
		require.NoError(t, err)
		got = got[:0]
		for _, e := range h.Entries {
			got = append(got, e.Kind)
		}
		return len(got) >= len(want)
	}, 10*time.Second, 5*time.Millisecond, "the events of %s", id)
	require.Equal(t, want, got, "the history of %s", id)
	return h
}

func TestEventsOfASuccess(t *testing.T) {
	defer watchdog(t, time.Minute, t.Name())()
	b, in := eventsBus(t)
	ctx := context.Background()
	_, err := b.Subscribe(ctx, "orders", func(ctx context.Context, d *bus.Delivery) error { return nil }, bus.WithGroup("billing"))
	require.NoError(t, err)
	require.NoError(t, b.Publish(ctx, "orders", &bus.Message{ID: "o-1", Key: "c-1", Payload: []byte("x")}))
	h := waitKinds(t, in, "o-1", lifecycle.Received, lifecycle.Succeeded)
	for _, e := range h.Entries {
		assert.Equal(t, "o-1", e.MessageID)
		assert.Equal(t, "c-1", e.Key)
		assert.Equal(t, "orders", e.Topic)
		assert.Equal(t, "billing", e.Group)
		assert.NotEmpty(t, e.Member, "the member is named")
		assert.Equal(t, 1, e.Attempt)
		assert.False(t, e.Time.IsZero(), "the time is set")
		assert.Equal(t, eventsTopic, e.Source)
	}
	assert.Positive(t, h.Entries[1].Duration, "the handler duration is recorded")
	byKey, err := lifecycle.Read(ctx, in, eventsTopic, lifecycle.Query{Key: "c-1"})
	require.NoError(t, err)
	assert.Len(t, byKey.Entries, 2, "found by key too")
}

func TestEventsOfAFailureAndItsRetry(t *testing.T) {
	defer watchdog(t, time.Minute, t.Name())()
	b, in := eventsBus(t)
	ctx := context.Background()
	_, err := b.Subscribe(ctx, "orders", func(ctx context.Context, d *bus.Delivery) error {
		if d.Attempt == 1 {
			return bus.Nack(errors.New("db down"), 10*time.Millisecond)
		}
		return nil
	})
	require.NoError(t, err)
	require.NoError(t, b.Publish(ctx, "orders", &bus.Message{ID: "o-1"}))
	h := waitKinds(t, in, "o-1", lifecycle.Received, lifecycle.Failed, lifecycle.RetryScheduled, lifecycle.Received, lifecycle.Succeeded)
	assert.Equal(t, "db down", h.Entries[1].Error, "the error text")
	assert.Equal(t, 10*time.Millisecond, h.Entries[2].Delay, "the retry delay")
	assert.Equal(t, 2, h.Entries[3].Attempt, "the retry is attempt 2")
}

func TestEventsOfASnooze(t *testing.T) {
	defer watchdog(t, time.Minute, t.Name())()
	b, in := eventsBus(t)
	ctx := context.Background()
	var snoozed atomic.Bool
	_, err := b.Subscribe(ctx, "orders", func(ctx context.Context, d *bus.Delivery) error {
		if snoozed.CompareAndSwap(false, true) {
			return bus.Snooze(10 * time.Millisecond)
		}
		return nil
	})
	require.NoError(t, err)
	require.NoError(t, b.Publish(ctx, "orders", &bus.Message{ID: "o-1"}))
	h := waitKinds(t, in, "o-1", lifecycle.Received, lifecycle.Snoozed, lifecycle.Received, lifecycle.Succeeded)
	assert.Equal(t, 10*time.Millisecond, h.Entries[1].Delay, "the snooze delay")
}

func TestEventsOfADeadLetterAndItsReplay(t *testing.T) {
	defer watchdog(t, time.Minute, t.Name())()
	b, in := eventsBus(t)
	ctx := context.Background()
	var ok atomic.Bool
	_, err := b.Subscribe(ctx, "orders", failsUntil(&ok), bus.WithGroup("billing"))
	require.NoError(t, err)
	require.NoError(t, b.Publish(ctx, "orders", &bus.Message{ID: "o-1", Key: "c-1"}))
	h := waitKinds(t, in, "o-1", lifecycle.Received, lifecycle.Failed, lifecycle.DeadLettered)
	dl := h.Entries[2]
	assert.Equal(t, string(bus.CodeRejected), dl.Code, "the dead-letter code")
	assert.Equal(t, "orders.dlq", dl.DeadLetter, "the dead-letter topic")
	assert.True(t, dl.Held, "the dead letter is still held")

	ok.Store(true)
	n, err := b.ReplayDeadLetters(ctx, "orders.dlq", "o-1")
	require.NoError(t, err)
	require.Equal(t, 1, n)
	h = waitKinds(t, in, "o-1", lifecycle.Received, lifecycle.Failed, lifecycle.DeadLettered, lifecycle.Replayed, lifecycle.Received, lifecycle.Succeeded)
	assert.False(t, h.Entries[2].Held, "replayed: no longer held")
	assert.Equal(t, "orders.dlq", h.Entries[3].DeadLetter, "replayed from the dead-letter topic")
	assert.Equal(t, "orders", h.Entries[3].Topic, "replayed to its topic")
}

// TestEventsOfADeadLetterReplayedAtOnceStayInOrder replays a dead letter
// from the observer, as soon as it is on its dead-letter topic: its
// dead_lettered event still comes before its replayed event, because it is
// stamped before the move.
func TestEventsOfADeadLetterReplayedAtOnceStayInOrder(t *testing.T) {
	defer watchdog(t, time.Minute, t.Name())()
	ctx := context.Background()
	var b *bus.Bus
	var ok atomic.Bool
	replayed := make(chan error, 1)
	obs := observer.Func(func(ctx context.Context, e observer.Event) {
		if e.Scope == observer.ScopeDeadLetter && !ok.Swap(true) {
			n, err := b.ReplayDeadLetters(ctx, "orders.dlq", e.MessageID)
			if err == nil && n != 1 {
				err = fmt.Errorf("replayed %d dead letters, want 1", n)
			}
			replayed <- err
		}
	})
	b, in := eventsBus(t, bus.WithObserver(obs))
	_, err := b.Subscribe(ctx, "orders", failsUntil(&ok), bus.WithGroup("billing"))
	require.NoError(t, err)
	require.NoError(t, b.Publish(ctx, "orders", &bus.Message{ID: "o-2"}))
	require.NoError(t, recv(t, replayed), "the replay from the observer")
	waitKinds(t, in, "o-2", lifecycle.Received, lifecycle.Failed, lifecycle.DeadLettered, lifecycle.Replayed, lifecycle.Received, lifecycle.Succeeded)
}

func TestEventsOfAnExpiry(t *testing.T) {
	defer watchdog(t, time.Minute, t.Name())()
	b, in := eventsBus(t)
	ctx := context.Background()
	_, err := b.Subscribe(ctx, "orders", func(ctx context.Context, d *bus.Delivery) error {
		return bus.Snooze(time.Hour) // past its expiry
	})
	require.NoError(t, err)
	require.NoError(t, b.Publish(ctx, "orders", &bus.Message{ID: "o-1", ExpiresAt: time.Now().Add(time.Minute)}))
	h := waitKinds(t, in, "o-1", lifecycle.Received, lifecycle.Expired, lifecycle.DeadLettered)
	assert.Equal(t, string(bus.CodeExpired), h.Entries[1].Code)
	assert.Equal(t, string(bus.CodeExpired), h.Entries[2].Code)
}

func TestEventsTopicMakesNoEventsOfItsOwn(t *testing.T) {
	defer watchdog(t, time.Minute, t.Name())()
	b, in := eventsBus(t)
	ctx := context.Background()
	tailed := make(chan string, 16)
	_, err := b.Subscribe(ctx, eventsTopic, func(ctx context.Context, d *bus.Delivery) error {
		assert.Equal(t, "application/x-ndjson", d.Headers["content-type"], "the payload is JSON Lines")
		for _, line := range strings.Split(strings.TrimSuffix(string(d.Payload), "\n"), "\n") {
			e, err := lifecycle.DecodeIn([]byte(line), d.Headers)
			assert.NoError(t, err, "each line is an event")
			assert.Equal(t, "orders", e.Topic, "the topic, from the line or the message's headers")
			tailed <- e.MessageID
		}
		return nil
	}, bus.WithStartFrom(bus.StartOldest))
	require.NoError(t, err)
	_, err = b.Subscribe(ctx, "orders", func(ctx context.Context, d *bus.Delivery) error { return nil })
	require.NoError(t, err)
	require.NoError(t, b.Publish(ctx, "orders", &bus.Message{ID: "o-1"}))
	for range 2 {
		select {
		case id := <-tailed:
			assert.Equal(t, "o-1", id, "a subscription to the events topic reads them")
		case <-time.After(10 * time.Second):
			t.Fatal("the events topic was not delivered")
		}
	}
	h := waitKinds(t, in, "o-1", lifecycle.Received, lifecycle.Succeeded)
	assert.Equal(t, 2, h.Scanned, "the events of the events topic's own deliveries are not written")
}

func TestWithEventsRefusesAnInvalidTopicBeforeIO(t *testing.T) {
	be, err := inmemory.New(nil)
	require.NoError(t, err)
	b := bus.New(be, bus.WithEvents("bad topic\n"))
	defer b.Close(context.Background())
	err = b.Publish(context.Background(), "orders", &bus.Message{Payload: []byte("x")})
	require.ErrorIs(t, err, bus.ErrInvalidOption, "an invalid events topic makes the bus refuse calls")
	assert.True(t, strings.Contains(err.Error(), "events topic"), "the error names the option: %v", err)
}

// blockedEvents is a backend whose publishes to the events topic wait
// until unblocked or their ctx ends.
type blockedEvents struct {
	bus.Backend
	unblock chan struct{}
}

func (b *blockedEvents) Publish(ctx context.Context, topic string, msgs []*backend.Message) error {
	if topic == eventsTopic {
		select {
		case <-b.unblock:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return b.Backend.Publish(ctx, topic, msgs)
}

func TestEventsDroppedWhenTheBackendBlocksAreCountedAndReportedOnce(t *testing.T) {
	defer watchdog(t, time.Minute, t.Name())()
	mem, err := inmemory.New(&inmemory.Options{MaxBacklog: 100_000})
	require.NoError(t, err)
	be := &blockedEvents{Backend: mem, unblock: make(chan struct{})}
	var reports atomic.Int32
	var first atomic.Value
	b := bus.New(be, bus.WithEvents(eventsTopic), bus.WithObserver(observer.Func(func(_ context.Context, e observer.Event) {
		if e.Scope == observer.ScopePublish && strings.Contains(e.Err.Error(), "dropped") {
			if reports.Add(1) == 1 {
				first.Store(e.Err.Error())
			}
		}
	})))
	ctx := context.Background()
	const n = 40_000 // 80,000 events, more than the buffer holds
	handled := make(chan struct{}, n)
	_, err = b.Subscribe(ctx, "orders", func(ctx context.Context, d *bus.Delivery) error {
		handled <- struct{}{}
		return nil
	}, bus.WithMaxInFlight(256))
	require.NoError(t, err)
	msgs := make([]*bus.Message, 0, 500)
	for i := range n {
		msgs = append(msgs, &bus.Message{Payload: []byte("x")})
		if len(msgs) == cap(msgs) || i == n-1 {
			require.NoError(t, b.Publish(ctx, "orders", msgs...))
			msgs = msgs[:0]
		}
	}
	for range n {
		select {
		case <-handled:
		case <-time.After(30 * time.Second):
			t.Fatal("handlers were held up by the blocked events topic")
		}
	}
	require.Eventually(t, func() bool { return reports.Load() >= 1 }, 10*time.Second, 5*time.Millisecond, "the drops are reported")
	assert.Contains(t, first.Load(), "buffer of 65536 was full", "the report says why")
	closeCtx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	err = b.Close(closeCtx)
	require.Error(t, err, "events still blocked when Close's ctx ends are an error")
	assert.Contains(t, err.Error(), "lifecycle events", "the error names the events")
	close(be.unblock)
	assert.Equal(t, int32(1), reports.Load(), "drops are reported once")
}

func TestEventsOnAPartitionedEventsTopicAreReadAcrossPartitions(t *testing.T) {
	defer watchdog(t, time.Minute, t.Name())()
	b, in := eventsBus(t)
	ctx := context.Background()
	require.NoError(t, b.CreateTopic(ctx, eventsTopic, 4), "a partitioned events topic")
	_, err := b.Subscribe(ctx, "orders", func(ctx context.Context, d *bus.Delivery) error { return nil })
	require.NoError(t, err)
	for _, id := range []string{"o-1", "o-2", "o-3", "o-4", "o-5"} {
		// One at a time: the events of each go out in messages of their
		// own, spread over the partitions.
		require.NoError(t, b.Publish(ctx, "orders", &bus.Message{ID: id}))
		waitKinds(t, in, id, lifecycle.Received, lifecycle.Succeeded)
	}
	h, err := lifecycle.Read(ctx, in, eventsTopic, lifecycle.Query{Key: "o-1"})
	require.NoError(t, err)
	assert.Equal(t, 10, h.Scanned, "the events of the five messages are all read, on whichever partitions they are")
}

func TestEventsReceivedIsVisibleWhileASlowHandlerRuns(t *testing.T) {
	defer watchdog(t, time.Minute, t.Name())()
	b, in := eventsBus(t)
	ctx := context.Background()
	release := make(chan struct{})
	_, err := b.Subscribe(ctx, "orders", func(ctx context.Context, d *bus.Delivery) error {
		if d.ID == "slow" {
			select {
			case <-release:
			case <-ctx.Done():
			}
		}
		return nil
	}, bus.WithGroup("billing"), bus.WithMaxInFlight(1))
	require.NoError(t, err)
	// Quick handlers first: the worker's stage then holds their events
	// for a group, and must still not hold back a long handler's
	// received event until it returns.
	quick := make([]*bus.Message, 200)
	for i := range quick {
		quick[i] = &bus.Message{ID: "q-" + strings.Repeat("x", i%3) + string(rune('a'+i%26)) + time.Duration(i).String(), Payload: []byte("x")}
	}
	require.NoError(t, b.Publish(ctx, "orders", quick...))
	waitKinds(t, in, quick[len(quick)-1].ID, lifecycle.Received, lifecycle.Succeeded)
	require.NoError(t, b.Publish(ctx, "orders", &bus.Message{ID: "slow", Payload: []byte("x")}))
	waitKinds(t, in, "slow", lifecycle.Received)
	close(release)
	h := waitKinds(t, in, "slow", lifecycle.Received, lifecycle.Succeeded)
	received, succeeded := h.Entries[0], h.Entries[1]
	assert.True(t, succeeded.Time.After(received.Time), "succeeded is stamped when the handler returned, after received (%v, %v)", received.Time, succeeded.Time)
	assert.WithinDuration(t, received.Time.Add(succeeded.Duration), succeeded.Time, time.Millisecond,
		"the two stamps are the handler's duration apart")
}

func TestEventsOfAnUndecodableMessage(t *testing.T) {
	defer watchdog(t, time.Minute, t.Name())()
	b, in := eventsBus(t)
	ctx := context.Background()
	topic := bus.NewTopic[map[string]int]("orders")
	_, err := topic.Subscribe(ctx, b, func(context.Context, map[string]int, *bus.Delivery) error {
		t.Error("an undecodable message reached the handler")
		return nil
	})
	require.NoError(t, err)
	require.NoError(t, b.Publish(ctx, "orders", &bus.Message{ID: "o-1", Payload: []byte("[1, 2")}))
	h := waitKinds(t, in, "o-1", lifecycle.DeadLettered)
	assert.Equal(t, string(bus.CodeUndecodable), h.Entries[0].Code, "the dead-letter code")
	assert.Contains(t, h.Entries[0].Error, "unexpected end of JSON input", "the decode error")
}
