package bus_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/eventbus-go/bus"
	"github.com/eventbus-go/bus/backend"
	"github.com/eventbus-go/bus/inmemory"
	"github.com/eventbus-go/bus/observer"
)

// extendTrap is a backend whose lease extensions stay at the broker until
// a nack arrives or their ctx ends, and which records the order in which
// extensions and nacks reach it.
type extendTrap struct {
	*inmemory.Backend
	extending chan struct{} // a value once an extension is under way
	nacked    chan struct{} // closed by the first nack
	once      sync.Once
	mu        sync.Mutex
	events    []string
}

func (b *extendTrap) Subscribe(ctx context.Context, topic string, cfg backend.SubscribeConfig) (backend.Subscription, error) {
	sub, err := b.Backend.Subscribe(ctx, topic, cfg)
	if err != nil {
		return nil, err
	}
	return &extendTrapSub{Subscription: sub.(*inmemory.Subscription), b: b}, nil
}

func (b *extendTrap) record(e string) {
	b.mu.Lock()
	b.events = append(b.events, e)
	b.mu.Unlock()
}

func (b *extendTrap) recorded() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]string(nil), b.events...)
}

type extendTrapSub struct {
	*inmemory.Subscription
	b *extendTrap
}

func (s *extendTrapSub) Extend(ctx context.Context, id backend.AckID) error {
	s.b.record("extend")
	select {
	case s.b.extending <- struct{}{}:
	default:
	}
	select {
	case <-s.b.nacked:
	case <-ctx.Done():
	}
	s.b.record("extended")
	return ctx.Err()
}

func (s *extendTrapSub) Nack(ctx context.Context, id backend.AckID, delay time.Duration) error {
	s.b.record("nack")
	s.b.once.Do(func() { close(s.b.nacked) })
	return s.Subscription.Nack(ctx, id, delay)
}

// A delivery given back while an extension of its lease is under way
// reaches the broker after the extension: an extension that came after
// the nack could hide the message from the group for a whole lease.
func TestGiveBackWaitsForTheLeaseExtensionUnderWay(t *testing.T) {
	raw, err := inmemory.New(nil)
	require.NoError(t, err)
	defer raw.Close()
	trap := &extendTrap{Backend: raw, extending: make(chan struct{}, 1), nacked: make(chan struct{})}
	b := bus.New(trap, bus.WithObserver(observer.Nop()))
	defer closeBus(t, b)
	ctx := context.Background()
	_, err = b.Subscribe(ctx, "orders", func(context.Context, *bus.Delivery) error {
		select {
		case <-trap.extending: // fail once the keeper extends the lease
		case <-time.After(10 * time.Second):
		}
		return errors.New("failed")
	}, bus.WithGroup("g"), bus.WithAckTimeout(400*time.Millisecond))
	require.NoError(t, err)
	require.NoError(t, b.Publish(ctx, "orders", &bus.Message{ID: "o-1"}))
	require.Eventually(t, func() bool {
		for _, e := range trap.recorded() {
			if e == "nack" {
				return true
			}
		}
		return false
	}, 10*time.Second, 5*time.Millisecond, "the failed delivery is nacked")
	assert.Equal(t, []string{"extend", "extended", "nack"}, trap.recorded()[:3], "the nack waits for the extension under way, and no extension follows it")
}
