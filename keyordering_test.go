package bus_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/eventbus-go/bus"
	"github.com/eventbus-go/bus/inmemory"
)

// orderLog records the payloads a handler saw, with their attempts.
type orderLog struct {
	mu  sync.Mutex
	got []string
}

func (l *orderLog) add(d *bus.Delivery) {
	l.mu.Lock()
	l.got = append(l.got, fmt.Sprintf("%s#%d", d.Payload, d.Attempt))
	l.mu.Unlock()
}

func (l *orderLog) len() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.got)
}

func (l *orderLog) list() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.got...)
}

func keyedMsgs(key string, n int) []*bus.Message {
	msgs := make([]*bus.Message, n)
	for i := range msgs {
		msgs[i] = &bus.Message{Key: key, Payload: fmt.Appendf(nil, "%s/%d", key, i)}
	}
	return msgs
}

func newMemBus(t *testing.T) *bus.Bus {
	t.Helper()
	be, err := inmemory.New(nil)
	require.NoError(t, err)
	return bus.New(be)
}

func closeBus(t *testing.T, b *bus.Bus) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	require.NoError(t, b.Close(ctx))
}

// Deliveries waiting behind a running head keep their leases alive: a
// head that runs five ack timeouts does not get its followers redelivered
// (they run once each, attempt 1, in order).
func TestKeyOrderingKeepsWaitingLeasesAlive(t *testing.T) {
	b := newMemBus(t)
	defer closeBus(t, b)
	const lease = 200 * time.Millisecond
	log := &orderLog{}
	_, err := b.Subscribe(context.Background(), "orders", func(ctx context.Context, d *bus.Delivery) error {
		if string(d.Payload) == "k/0" {
			select {
			case <-time.After(5 * lease):
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		log.add(d)
		return nil
	}, bus.WithKeyOrdering(), bus.WithAckTimeout(lease), bus.WithMaxInFlight(8))
	require.NoError(t, err)
	require.NoError(t, b.Publish(context.Background(), "orders", keyedMsgs("k", 4)...))
	require.Eventually(t, func() bool { return log.len() >= 4 }, 10*time.Second, 5*time.Millisecond)
	require.Never(t, func() bool { return log.len() > 4 }, 2*lease, 10*time.Millisecond, "nothing came back after its lease")
	assert.Equal(t, []string{"k/0#1", "k/1#1", "k/2#1", "k/3#1"}, log.list())
}

// In AckManual, a Nack of a key's head retries it with Attempt+1 before
// the rest of the key.
func TestKeyOrderingManualNackRetriesTheHeadFirst(t *testing.T) {
	b := newMemBus(t)
	defer closeBus(t, b)
	log := &orderLog{}
	_, err := b.Subscribe(context.Background(), "orders", func(ctx context.Context, d *bus.Delivery) error {
		log.add(d)
		if string(d.Payload) == "k/0" && d.Attempt < 3 {
			return d.Nack(ctx, 5*time.Millisecond)
		}
		return d.Ack(ctx)
	}, bus.WithKeyOrdering(), bus.WithAckMode(bus.AckManual), bus.WithMaxInFlight(8))
	require.NoError(t, err)
	require.NoError(t, b.Publish(context.Background(), "orders", keyedMsgs("k", 3)...))
	require.Eventually(t, func() bool { return log.len() >= 5 }, 10*time.Second, 5*time.Millisecond)
	assert.Equal(t, []string{"k/0#1", "k/0#2", "k/0#3", "k/1#1", "k/2#1"}, log.list())
}

// Close hands a key on in order: the rest of a key whose head is running
// goes back to the group after the head (or is handled by the closing
// member while it drains), and a head waiting for its retry goes back at
// once, first, with the rest of its key behind it.
func TestKeyOrderingCloseHandsTheRestOfTheKeyOnInOrder(t *testing.T) {
	b := newMemBus(t)
	defer closeBus(t, b)
	log := &orderLog{}
	started, finish := make(chan struct{}), make(chan struct{})
	var once sync.Once
	sub, err := b.Subscribe(context.Background(), "orders", func(ctx context.Context, d *bus.Delivery) error {
		switch string(d.Payload) {
		case "a/0":
			once.Do(func() { close(started) })
			<-finish
		case "b/0":
			log.add(d)
			return errors.New("retry me later")
		}
		log.add(d)
		return nil
	}, bus.WithGroup("g"), bus.WithKeyOrdering(), bus.WithMaxInFlight(16),
		bus.WithRetryBackoff(func() backoff.BackOff { return backoff.NewConstantBackOff(time.Hour) }))
	require.NoError(t, err)
	msgs := append(keyedMsgs("a", 4), keyedMsgs("b", 3)...)
	require.NoError(t, b.Publish(context.Background(), "orders", msgs...))
	<-started
	require.Eventually(t, func() bool { return log.len() >= 1 }, 5*time.Second, 5*time.Millisecond, "b/0 failed once")

	closed := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		closed <- sub.Close(ctx)
	}()
	close(finish)
	select {
	case err := <-closed:
		require.NoError(t, err)
	case <-time.After(10 * time.Second):
		t.Fatal("Close did not return")
	}

	_, err = b.Subscribe(context.Background(), "orders", func(ctx context.Context, d *bus.Delivery) error {
		log.add(d)
		return nil
	}, bus.WithGroup("g"), bus.WithKeyOrdering(), bus.WithMaxInFlight(16))
	require.NoError(t, err)
	require.Eventually(t, func() bool { return log.len() >= 8 }, 10*time.Second, 5*time.Millisecond, "handled: %v", log)
	var a, bs []string
	for _, s := range log.list() {
		if s[0] == 'a' {
			a = append(a, s)
		} else {
			bs = append(bs, s)
		}
	}
	assert.Equal(t, []string{"a/0#1", "a/1#1", "a/2#1", "a/3#1"}, a, "a in order, whichever member handled it")
	assert.Equal(t, []string{"b/0#1", "b/0#2", "b/1#1", "b/2#1"}, bs, "b/0's retry comes first, without waiting its hour")
}

// A Nack from inside an AckManual handler does not start the retry while
// that handler still runs: one at a time per key, also then.
func TestKeyOrderingRetryWaitsForTheNackingHandler(t *testing.T) {
	b := newMemBus(t)
	defer closeBus(t, b)
	var mu sync.Mutex
	running, overlaps := 0, 0
	log := &orderLog{}
	_, err := b.Subscribe(context.Background(), "orders", func(ctx context.Context, d *bus.Delivery) error {
		mu.Lock()
		if running++; running > 1 {
			overlaps++
		}
		mu.Unlock()
		defer func() {
			mu.Lock()
			running--
			mu.Unlock()
		}()
		log.add(d)
		if d.Attempt == 1 && string(d.Payload) == "k/0" {
			if err := d.Nack(ctx, 0); err != nil {
				return err
			}
			time.Sleep(50 * time.Millisecond) // still running after the nack
			return nil
		}
		return d.Ack(ctx)
	}, bus.WithKeyOrdering(), bus.WithAckMode(bus.AckManual), bus.WithMaxInFlight(8))
	require.NoError(t, err)
	require.NoError(t, b.Publish(context.Background(), "orders", keyedMsgs("k", 2)...))
	require.Eventually(t, func() bool { return log.len() >= 3 }, 10*time.Second, 5*time.Millisecond)
	assert.Equal(t, []string{"k/0#1", "k/0#2", "k/1#1"}, log.list())
	mu.Lock()
	defer mu.Unlock()
	assert.Zero(t, overlaps, "the retry started while the nacking handler still ran")
}

// A member that takes the group lock over from one that let it lapse (a
// crashed member) waits one ack timeout before it fetches, so that what
// the lapsed member left unsettled is back with the group first.
func TestKeyOrderingTakeoverWaitsOneAckTimeout(t *testing.T) {
	be, err := inmemory.New(nil)
	require.NoError(t, err)
	b := bus.New(be)
	defer closeBus(t, b)
	const ghostTTL, lease = 200 * time.Millisecond, 400 * time.Millisecond
	held, _, err := be.LockGroup(context.Background(), "orders", "g", "crashed-member", ghostTTL)
	require.NoError(t, err)
	require.True(t, held)
	start := time.Now()
	handled := make(chan time.Duration, 4)
	_, err = b.Subscribe(context.Background(), "orders", func(ctx context.Context, d *bus.Delivery) error {
		select {
		case handled <- time.Since(start):
		default:
		}
		return nil
	}, bus.WithGroup("g"), bus.WithKeyOrdering(), bus.WithAckTimeout(lease))
	require.NoError(t, err)
	require.NoError(t, b.Publish(context.Background(), "orders", keyedMsgs("k", 1)...))
	select {
	case at := <-handled:
		assert.GreaterOrEqual(t, at, ghostTTL+lease, "fetched before the lapsed lock's ttl plus one ack timeout")
	case <-time.After(10 * time.Second):
		t.Fatal("the member never took the lapsed lock over")
	}
}
