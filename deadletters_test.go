package bus_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/eventbus-go/bus"
	"github.com/eventbus-go/bus/backend"
	"github.com/eventbus-go/bus/inmemory"
	"github.com/eventbus-go/bus/observer"
)

func TestDeadLetterListReplayPurgeRoundTrip(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	b, err := bus.Open(ctx, "mem://")
	require.NoError(t, err)
	defer b.Close(ctx)

	var fail atomic.Bool
	fail.Store(true)
	handled := make(chan *bus.Delivery, 10)
	_, err = b.Subscribe(ctx, "orders", func(ctx context.Context, d *bus.Delivery) error {
		if fail.Load() {
			return bus.Reject(errors.New("bad order"))
		}
		handled <- d
		return nil
	}, bus.WithGroup("billing"))
	require.NoError(t, err)

	msgs := []*bus.Message{
		{ID: "o-1", Key: "c-1", Headers: map[string]string{"tenant": "a"}, Payload: []byte("one")},
		{ID: "o-2", Payload: []byte("two")},
		{ID: "o-3", Payload: []byte("three")},
	}
	require.NoError(t, b.Publish(ctx, "orders", msgs...))

	var dls []bus.DeadLetter
	require.Eventually(t, func() bool {
		dls, err = b.DeadLetters(ctx, "orders.dlq", 0)
		return err == nil && len(dls) == 3
	}, 10*time.Second, 5*time.Millisecond, "three dead letters listed (last err %v)", err)
	byID := map[string]bus.DeadLetter{}
	for _, d := range dls {
		byID[d.ID] = d
	}
	one := byID["o-1"]
	assert.Equal(t, "c-1", one.Key)
	assert.Equal(t, map[string]string{"tenant": "a"}, one.Headers, "user headers only, bus-dlq-* removed")
	assert.Equal(t, []byte("one"), one.Payload)
	assert.Equal(t, "orders", one.Topic)
	assert.Equal(t, "billing", one.Group)
	assert.Equal(t, 1, one.Attempt)
	assert.Equal(t, bus.CodeRejected, one.Code, "the reason code says why")
	assert.Contains(t, one.Reason, "bad order")
	assert.False(t, one.Time.IsZero(), "the dead-letter time is recorded")

	limited, err := b.DeadLetters(ctx, "orders.dlq", 2)
	require.NoError(t, err)
	assert.Len(t, limited, 2, "the limit is honoured")

	fail.Store(false)
	n, err := b.ReplayDeadLetters(ctx, "orders.dlq", "o-1", "missing")
	require.ErrorIs(t, err, bus.ErrNotFound, "an unknown ID is an error")
	assert.Contains(t, err.Error(), "missing", "the error names the unknown ID")
	assert.Equal(t, 1, n, "the known ID is replayed all the same")
	select {
	case d := <-handled:
		assert.Equal(t, "o-1", d.ID, "the original ID is kept")
		assert.Equal(t, "c-1", d.Key)
		assert.Equal(t, []byte("one"), d.Payload)
		assert.Equal(t, 1, d.Attempt, "a replay starts again at attempt 1")
		assert.Equal(t, "a", d.Headers["tenant"])
		for k := range d.Headers {
			assert.NotContains(t, k, "bus-dlq-", "no dead-letter header survives the replay")
		}
	case <-ctx.Done():
		t.Fatal("the replayed message did not arrive on its original topic")
	}
	dls, err = b.DeadLetters(ctx, "orders.dlq", 0)
	require.NoError(t, err)
	assert.Len(t, dls, 2, "the replayed message left the dead-letter topic")

	n, err = b.PurgeDeadLetters(ctx, "orders.dlq", "o-2")
	require.NoError(t, err)
	assert.Equal(t, 1, n)
	n, err = b.PurgeDeadLetters(ctx, "orders.dlq", "typo")
	require.ErrorIs(t, err, bus.ErrNotFound, "purging an unknown ID is an error")
	assert.Zero(t, n, "nothing purged for an unknown ID")
	n, err = b.PurgeDeadLetters(ctx, "orders.dlq")
	require.NoError(t, err)
	assert.Equal(t, 1, n, "purge without IDs removes the rest")
	dls, err = b.DeadLetters(ctx, "orders.dlq", 0)
	require.NoError(t, err)
	assert.Empty(t, dls)
}

func TestInspectorFiguresOnMem(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	b, err := bus.Open(ctx, "mem://")
	require.NoError(t, err)
	defer b.Close(ctx)

	block := make(chan struct{})
	started := make(chan struct{}, 10)
	sub, err := b.Subscribe(ctx, "jobs", func(ctx context.Context, d *bus.Delivery) error {
		started <- struct{}{}
		<-block
		return nil
	}, bus.WithGroup("workers"), bus.WithMaxInFlight(3))
	require.NoError(t, err)
	for i := range 10 {
		require.NoError(t, b.Publish(ctx, "jobs", &bus.Message{Payload: []byte{byte(i)}}), "publish %d", i)
	}
	for range 3 {
		select {
		case <-started:
		case <-ctx.Done():
			t.Fatal("three handlers did not start")
		}
	}
	gs, err := b.Groups(ctx, "jobs")
	require.NoError(t, err)
	require.Len(t, gs, 1)
	assert.Equal(t, "workers", gs[0].Name)
	assert.Equal(t, bus.Figure(1), gs[0].Consumers)
	assert.Equal(t, bus.Figure(3), gs[0].Pending, "three received and unsettled")
	assert.Equal(t, bus.Figure(7), gs[0].Lag, "seven not delivered yet")
	assert.False(t, gs[0].OldestPending.IsZero())

	ts, err := b.Topics(ctx)
	require.NoError(t, err)
	require.Len(t, ts, 1)
	assert.Equal(t, "jobs", ts[0].Name)
	assert.Equal(t, bus.Figure(10), ts[0].Messages)
	close(block)
	require.NoError(t, sub.Close(ctx))
}

func TestDeadLetterTopicsAreFoundByTheirHeadersNotTheirNames(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	b, err := bus.Open(ctx, "mem://", bus.WithObserver(observer.Nop()))
	require.NoError(t, err)
	defer b.Close(ctx)
	dead := make(chan struct{}, 1)
	_, err = b.Subscribe(ctx, "pay-failures", func(context.Context, *bus.Delivery) error {
		dead <- struct{}{}
		return nil
	}, bus.WithGroup("ops"))
	require.NoError(t, err)
	_, err = b.Subscribe(ctx, "payments", func(context.Context, *bus.Delivery) error {
		return bus.Reject(errors.New("declined"))
	}, bus.WithDeadLetter("pay-failures"))
	require.NoError(t, err)
	require.NoError(t, b.Publish(ctx, "payments", &bus.Message{ID: "p-1"}))
	require.NoError(t, b.Publish(ctx, "not-dead.dlq", &bus.Message{ID: "x"}), "an ordinary topic named like a dead-letter topic")
	<-dead
	ts, err := b.Topics(ctx)
	require.NoError(t, err)
	var names []string
	for _, tp := range ts {
		if tp.DeadLetters {
			names = append(names, tp.Name)
		}
	}
	assert.Equal(t, []string{"pay-failures"}, names, "the topic WithDeadLetter named is found; a .dlq name alone is not enough")
	n, err := b.PurgeDeadLetters(ctx, "not-dead.dlq")
	require.NoError(t, err)
	assert.Zero(t, n, "a message without the dead-letter headers is never purged")
	err = b.DeleteTopic(ctx, "not-dead.dlq")
	require.ErrorIs(t, err, bus.ErrUnsupported, "mem has no backend.TopicDeleter (conformance DeleteTopic covers the backends that do)")
	require.ErrorIs(t, b.DeleteTopic(ctx, "bad topic"), bus.ErrInvalidTopic, "the topic is checked before anything else")
}

// Dead letters stored with the codes' earlier spellings list, as the bus
// command shows them, with today's codes, and replay like any other.
func TestDeadLettersReadTheCodesEarlierVersionsStored(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	be, err := inmemory.New(nil)
	require.NoError(t, err)
	b := bus.New(be, bus.WithObserver(observer.Nop()))
	defer b.Close(ctx)
	stored := map[string]bus.DeadLetterCode{
		"max-deliveries": bus.CodeMaxDeliveries,
		"lease-lost":     bus.CodeLeaseLost,
		"permanent":      bus.CodeRejected,
		"expired":        bus.CodeExpired,
	}
	var copies []*backend.Message
	for old := range stored {
		copies = append(copies, backend.NewDeadLetter(&backend.Message{ID: old, Payload: []byte(old)},
			backend.DeadLetterInfo{Topic: "orders", Group: "billing", Attempt: 2, Code: backend.DeadLetterCode(old), Reason: "stored earlier"}))
	}
	require.NoError(t, be.Publish(ctx, "orders.dlq", copies), "the copies stored as an earlier version wrote them")

	dls, err := b.DeadLetters(ctx, "orders.dlq", 0)
	require.NoError(t, err)
	require.Len(t, dls, len(stored), "every stored copy is listed")
	for _, d := range dls {
		assert.Equal(t, stored[d.ID], d.Code, "the code stored as %q", d.ID)
	}

	handled := make(chan string, len(stored))
	_, err = b.Subscribe(ctx, "orders", func(_ context.Context, d *bus.Delivery) error {
		handled <- d.ID
		return nil
	}, bus.WithGroup("billing"), bus.WithStartFrom(bus.StartOldest))
	require.NoError(t, err)
	n, err := b.ReplayDeadLetters(ctx, "orders.dlq", "max-deliveries", "permanent")
	require.NoError(t, err)
	assert.Equal(t, 2, n, "both named copies replayed")
	got := map[string]bool{}
	for len(got) < 2 {
		select {
		case id := <-handled:
			got[id] = true
		case <-ctx.Done():
			require.FailNow(t, "the replayed messages were not handled", "got %v", got)
		}
	}
	assert.Equal(t, map[string]bool{"max-deliveries": true, "permanent": true}, got)
}
