package bus_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/eventbus-go/bus"
	"github.com/eventbus-go/bus/backend"
	"github.com/eventbus-go/bus/inmemory"
)

// gatedBackend blocks every Publish to one topic until gate is closed.
type gatedBackend struct {
	bus.Backend
	topic string
	gate  chan struct{}
}

func (g *gatedBackend) Publish(ctx context.Context, topic string, msgs []*backend.Message) error {
	if topic == g.topic {
		select {
		case <-g.gate:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return g.Backend.Publish(ctx, topic, msgs)
}

// watchdog fails the test with a message if it is still running after d.
func watchdog(t *testing.T, d time.Duration, what string) func() {
	t.Helper()
	timer := time.AfterFunc(d, func() {
		panic(fmt.Sprintf("watchdog: %s did not finish within %v", what, d))
	})
	return func() { timer.Stop() }
}

func TestSubscribeCtxCancelStopsFetchingWhilePublishBlocked(t *testing.T) {
	defer watchdog(t, 2*time.Minute, t.Name())()
	inner, err := inmemory.New(nil)
	require.NoError(t, err)
	gate := make(chan struct{})
	b := bus.New(&gatedBackend{Backend: inner, topic: "elsewhere", gate: gate})
	ctx := context.Background()
	blocked := make(chan error, 1)
	go func() { blocked <- b.Publish(ctx, "elsewhere", &bus.Message{Payload: []byte("held")}) }()

	const maxInFlight = 4
	for round := range 300 {
		// A topic per round: a round's group may handle every message
		// before the test gets to cancel it (a handler that returns at
		// once, a test goroutine that is not scheduled), and a group
		// created later does not see what every group had settled.
		topic := fmt.Sprintf("work%d", round)
		msgs := make([]*bus.Message, 50)
		for i := range msgs {
			msgs[i] = &bus.Message{Payload: []byte("m")}
		}
		require.NoError(t, b.Publish(ctx, topic, msgs...))
		sctx, cancel := context.WithCancel(ctx)
		var cancelled atomic.Bool
		var after atomic.Int64
		started := make(chan struct{}, 1)
		sub, err := b.Subscribe(sctx, topic, func(ctx context.Context, d *bus.Delivery) error {
			if cancelled.Load() {
				after.Add(1)
			}
			select {
			case started <- struct{}{}:
			default:
			}
			return nil
		}, bus.WithGroup(fmt.Sprintf("g%d", round)), bus.WithStartFrom(bus.StartOldest), bus.WithMaxInFlight(maxInFlight))
		require.NoError(t, err, "round %d", round)
		select {
		case <-started:
		case <-time.After(10 * time.Second):
			t.Fatalf("round %d: no handler started within 10s of Subscribe", round)
		}
		cancel() // cancels the fetch ctx before it returns
		cancelled.Store(true)
		select {
		case <-sub.Done():
		case <-time.After(10 * time.Second):
			t.Fatalf("round %d: subscription still running 10s after its ctx was cancelled (a blocked Publish must not hold it up)", round)
		}
		require.LessOrEqual(t, after.Load(), int64(maxInFlight), "round %d: handlers started after the cancel", round)
	}
	close(gate)
	require.NoError(t, <-blocked)
	require.NoError(t, b.Close(ctx))
}

// TestNoDeadlockPublishingFromHandlerUnderBackpressure: a handler
// publishes into a full backlog (it waits for room) while another
// subscription is set up and closed over and over; nothing may wait for a
// lock the waiting Publish holds.
func TestNoDeadlockPublishingFromHandlerUnderBackpressure(t *testing.T) {
	defer watchdog(t, 2*time.Minute, t.Name())()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	b, err := bus.Open(ctx, "mem://?max_backlog=4")
	require.NoError(t, err)
	defer b.Close(ctx)

	const n = 40
	var forwarded atomic.Int64
	drained := make(chan struct{})
	var got atomic.Int64
	// The consumer of "out" is slow, so the handlers of "in" wait for room.
	_, err = b.Subscribe(ctx, "out", func(ctx context.Context, d *bus.Delivery) error {
		time.Sleep(time.Millisecond) // a slow consumer is the scenario, not synchronisation
		if got.Add(1) == n {
			close(drained)
		}
		return nil
	}, bus.WithGroup("slow"), bus.WithMaxInFlight(1))
	require.NoError(t, err)
	_, err = b.Subscribe(ctx, "in", func(ctx context.Context, d *bus.Delivery) error {
		if err := b.Publish(ctx, "out", &bus.Message{Payload: d.Payload}); err != nil {
			return err
		}
		forwarded.Add(1)
		return nil
	}, bus.WithGroup("fwd"), bus.WithMaxInFlight(4))
	require.NoError(t, err)

	stop := make(chan struct{})
	var churn sync.WaitGroup
	churn.Add(1)
	go func() {
		defer churn.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			s, err := b.Subscribe(ctx, "other", func(context.Context, *bus.Delivery) error { return nil })
			if err != nil {
				return
			}
			_ = s.Close(ctx)
		}
	}()
	for i := range n {
		require.NoError(t, b.Publish(ctx, "in", &bus.Message{Payload: []byte{byte(i)}}), "publish %d", i)
	}
	select {
	case <-drained:
	case <-ctx.Done():
		t.Fatalf("deadlock: %d of %d forwarded, %d consumed", forwarded.Load(), n, got.Load())
	}
	close(stop)
	churn.Wait()
}
